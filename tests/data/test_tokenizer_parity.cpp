// The tokenizer against Hugging Face's T5Tokenizer(extra_ids=100): ids, decodes, sentinel ids and the model's
// hash from $T5SCALE_PREP_TOKENIZER_DIR/reference.json (test_tokenizer_reference.py make). Also trains a model with
// t5scale's trainer on the same corpus and writes its ids, which test_tokenizer_reference.py check then compares
// with T5Tokenizer on that model (ctest runs the three steps in order).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "data_prep/tokenizer_training.h"

namespace t5scale {
namespace {

std::string fixture_dir() {
  const char* dir = std::getenv("T5SCALE_PREP_TOKENIZER_DIR");
  if (dir == nullptr) {
    throw std::runtime_error(
        "T5SCALE_PREP_TOKENIZER_DIR is not set: run through ctest (unit.prep_tokenizer_parity), "
        "which makes the reference with tests/data/test_tokenizer_reference.py");
  }
  return dir;
}

nlohmann::json reference() {
  std::ifstream in(fixture_dir() + "/reference.json");
  if (!in) throw std::runtime_error("no " + fixture_dir() + "/reference.json");
  return nlohmann::json::parse(in);
}

std::vector<std::string> strings(const nlohmann::json& array) { return array.get<std::vector<std::string>>(); }

Tokenizer reference_tokenizer(const nlohmann::json& ref) {
  std::vector<std::string> special = strings(ref["user_symbols"]);
  for (const std::string& token : strings(ref["added_tokens"])) special.push_back(token);
  return Tokenizer::load(fixture_dir() + "/reference.model", special);
}

TEST(PrepTokenizerParity, IdsMatchT5Tokenizer) {
  const nlohmann::json ref = reference();
  const Tokenizer tokenizer = reference_tokenizer(ref);
  ASSERT_GE(ref["cases"].size(), 20u);
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tokenizer.encode(text), c["ids"].get<std::vector<int32_t>>()) << "text: '" << text << "'";
  }
}

TEST(PrepTokenizerParity, TruncationMatchesT5Tokenizer) {
  const nlohmann::json ref = reference();
  const Tokenizer tokenizer = reference_tokenizer(ref);
  int long_texts = 0;
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"];
    long_texts += text.size() > 2000;
    for (const auto& [length, ids] : c["truncated"].items()) {
      std::vector<int32_t> got;
      const bool cut = tokenizer.encode_truncated(text, std::stoll(length), &got);
      EXPECT_EQ(got, ids.get<std::vector<int32_t>>()) << "max_length " << length << ", text: '" << text << "'";
      EXPECT_EQ(cut, got.size() < c["ids"].size()) << "max_length " << length << ", text: '" << text << "'";
    }
  }
  EXPECT_GE(long_texts, 3);
}

TEST(PrepTokenizerParity, VocabularyAndSentinelsMatchT5Tokenizer) {
  const nlohmann::json ref = reference();
  const Tokenizer tokenizer = reference_tokenizer(ref);
  EXPECT_EQ(tokenizer.piece_count(), ref["pieces"].get<int64_t>());
  EXPECT_EQ(tokenizer.vocab_size(), ref["vocab_size"].get<int64_t>());
  EXPECT_EQ(tokenizer.added_tokens(), strings(ref["added_tokens"]));
  for (int k = 0; k < Tokenizer::kNumSentinels; ++k) {
    EXPECT_EQ(tokenizer.sentinel_id(k), ref["sentinel_ids"][std::to_string(k)].get<int32_t>())
        << "<extra_id_" << k << ">";
  }
}

TEST(PrepTokenizerParity, Sha256MatchesHashlib) {
  const nlohmann::json ref = reference();
  EXPECT_EQ(reference_tokenizer(ref).sha256(), ref["model_sha256"].get<std::string>());
  EXPECT_EQ(sha256_file_hex(fixture_dir() + "/reference.model"), ref["model_sha256"].get<std::string>());
}

TEST(PrepTokenizerParity, DecodesLikeT5Tokenizer) {
  const nlohmann::json ref = reference();
  const Tokenizer tokenizer = reference_tokenizer(ref);
  int compared = 0;
  for (const auto& c : ref["cases"]) {
    if (!c["decode_comparable"].get<bool>()) continue;
    ++compared;
    EXPECT_EQ(tokenizer.decode(c["ids"].get<std::vector<int32_t>>()), c["decode"].get<std::string>())
        << "text: '" << c["text"].get<std::string>() << "'";
  }
  EXPECT_GE(compared, 15);
}

TEST(PrepTokenizerParity, TextToIdsToTextRoundTrips) {
  const nlohmann::json ref = reference();
  const Tokenizer tokenizer = reference_tokenizer(ref);
  int compared = 0;
  for (const auto& c : ref["cases"]) {
    if (!c["round_trip"].get<bool>()) continue;
    ++compared;
    const std::string text = c["text"];
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
  }
  EXPECT_GE(compared, 7);
}

// Writes cpp_trained.model and cpp_trained_ids.json for test_tokenizer_reference.py check.
TEST(PrepTokenizerParity, TrainsAModelForThePythonCheck) {
  const nlohmann::json ref = reference();
  TokenizerTrainOptions options;
  options.vocab_size = ref["pieces"].get<int64_t>();
  options.user_symbols = strings(ref["user_symbols"]);
  const std::string model = fixture_dir() + "/cpp_trained.model";
  train_tokenizer(fixture_dir() + "/corpus.txt", model, options);
  std::vector<std::string> special = strings(ref["user_symbols"]);
  for (const std::string& token : strings(ref["added_tokens"])) special.push_back(token);
  const Tokenizer tokenizer = Tokenizer::load(model, special);
  EXPECT_EQ(tokenizer.piece_count(), options.vocab_size);
  nlohmann::json out;
  out["vocab_size"] = tokenizer.vocab_size();
  out["cases"] = nlohmann::json::array();
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"];
    out["cases"].push_back({{"text", text}, {"ids", tokenizer.encode(text)}});
  }
  std::ofstream(fixture_dir() + "/cpp_trained_ids.json") << out.dump(1);
}

}  // namespace
}  // namespace t5scale
