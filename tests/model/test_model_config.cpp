#include <gtest/gtest.h>

#include <map>

#include "config/model_config.h"
#include "model/t5_model.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

// Parameter counts of the published checkpoints, as transformers 4.57 counts them for
// T5ForConditionalGeneration built from each published config.json (tied embeddings counted once).
const std::map<std::string, int64_t> kPublishedParameterCounts = {
    {"t5-small", 60506624},         {"t5-base", 222903552},         {"t5-large", 737668096},
    {"t5-3b", 2851598336},          {"t5-11b", 11307321344},        {"t5-v1_1-small", 76961152},
    {"t5-v1_1-base", 247577856},    {"t5-v1_1-large", 783150080},   {"t5-v1_1-xl", 2849757184},
    {"t5-v1_1-xxl", 11135332352},
};

TEST(ModelConfig, NamedShapesHaveThePublishedParameterCounts) {
  ASSERT_EQ(named_model_names().size(), kPublishedParameterCounts.size());
  for (const auto& [name, published] : kPublishedParameterCounts) {
    const ModelConfig config = named_model_config(name);
    // Built on the meta device: the real modules, no memory.
    T5Model model(config, std::make_shared<SoloCommunicator>("tp"), torch::TensorOptions().device(torch::kMeta));
    int64_t counted = 0;
    for (const auto& p : model->parameters()) counted += p.numel();
    EXPECT_EQ(counted, published) << name << " (model)";
    EXPECT_EQ(parameter_count(config), published) << name << " (formula)";
  }
}

TEST(ModelConfig, HubStyleNamesResolve) {
  EXPECT_EQ(named_model_config("google/t5-v1_1-xxl").d_ff, 10240);
  EXPECT_EQ(named_model_config("google-t5/t5-small").num_heads, 8);
}

TEST(ModelConfig, UnknownNameListsTheKnownOnes) {
  const std::string message = testing::error_of([] { named_model_config("t5-huge"); });
  EXPECT_NE(message.find("t5-huge"), std::string::npos) << message;
  EXPECT_NE(message.find("t5-v1_1-xxl"), std::string::npos) << message;
}

TEST(ModelConfig, ValidationListsEveryProblemWithItsKey) {
  ModelConfig config = named_model_config("t5-small");
  config.d_model = 0;
  config.dropout_rate = 1.5;
  config.eos_token_id = 40000;
  const auto errors = validate(config);
  ASSERT_EQ(errors.size(), 3u);
  const std::string message = testing::error_of([&] { check_valid(config, "run.yaml"); });
  for (const char* key : {"run.yaml", "d_model", "dropout_rate", "eos_token_id"}) {
    EXPECT_NE(message.find(key), std::string::npos) << key << " missing from: " << message;
  }
  EXPECT_TRUE(validate(named_model_config("t5-11b")).empty());
}

TEST(ModelConfig, DimensionsBeyondAnyT5AreRefusedNamingTheKeyAndTheBound) {
  // Every published shape passes (the largest: t5-11b's d_ff 65536 and 128 heads).
  for (const std::string& name : named_model_names()) EXPECT_TRUE(validate(named_model_config(name)).empty()) << name;
  ModelConfig config = named_model_config("t5-small");
  config.vocab_size = 1'000'000'000'000;
  config.d_ff = kMaxFeedForwardWidth + 1;
  config.num_layers = 100'000;
  config.num_heads = kMaxHeads + 8;
  config.relative_attention_num_buckets = 1 << 20;
  const auto errors = validate(config);
  const std::string all = testing::error_of([&] { check_valid(config, "config.json"); });
  for (const std::string expected :
       {"vocab_size: 1000000000000 is beyond any T5 (at most 8388608)", "d_ff: 1048577 is beyond any T5",
        "num_layers: 100000 is beyond any T5 (at most 1024)", "num_heads: 4104 is beyond any T5",
        "relative_attention_num_buckets: 1048576 is beyond any T5"}) {
    EXPECT_NE(all.find(expected), std::string::npos) << expected << " missing from: " << all;
  }
  // At the bound exactly: accepted.
  config = named_model_config("t5-small");
  config.vocab_size = kMaxVocabSize;
  config.num_layers = config.num_decoder_layers = kMaxLayers;
  EXPECT_TRUE(validate(config).empty());
}

}  // namespace
}  // namespace t5scale
