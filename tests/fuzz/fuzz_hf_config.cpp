// libFuzzer harness of Hugging Face config.json files: any bytes as a model folder's config. A bad config may give a
// t5scale::Error; nothing else may be thrown, and a config that is accepted has every dimension inside the bounds
// validate() promises, so that the parameter and byte counts of the memory model cannot overflow.
// fuzz-sources: src/config/hf_config.cpp src/config/model_config.cpp
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/hf_config.h"
#include "config/model_config.h"
#include "core/check.h"
#include "fuzz_assert.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace t5scale;
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const nlohmann::json::exception&) {
    return 0;  // read_hf_config reports this as "not valid JSON"
  }
  ModelConfig config;
  try {
    config = hf_config_from_json(json, "config.json", "fuzz");
  } catch (const Error&) {
    return 0;
  }
  T5S_FUZZ_ASSERT(validate(config).empty());
  T5S_FUZZ_ASSERT(config.vocab_size >= 1 && config.vocab_size <= kMaxVocabSize);
  T5S_FUZZ_ASSERT(config.d_model >= 1 && config.d_model <= kMaxModelWidth);
  T5S_FUZZ_ASSERT(config.d_ff >= 1 && config.d_ff <= kMaxFeedForwardWidth);
  T5S_FUZZ_ASSERT(config.d_kv >= 1 && config.d_kv <= kMaxHeadWidth);
  T5S_FUZZ_ASSERT(config.num_heads >= 1 && config.num_heads <= kMaxHeads);
  T5S_FUZZ_ASSERT(config.num_layers >= 1 && config.num_layers <= kMaxLayers);
  T5S_FUZZ_ASSERT(config.num_decoder_layers >= 1 && config.num_decoder_layers <= kMaxLayers);
  return 0;
}
