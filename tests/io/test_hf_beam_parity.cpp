// Beam search against transformers' generate (make_beam_fixtures.py wrote the references to $T5SCALE_BEAM_DIR):
// token for token, for 1, 3 and 4 beams and length penalties that favour short and long hypotheses, on a padded
// batch whose rows end in eos at various lengths or run to the token limit. Beside it, what transformers does not
// show: one beam is greedy decoding, and a row's result does not depend on the rows beside it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/t5_model.h"

namespace t5scale {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kPadId = 0, kEosId = 1;

// The fixture cases, the folders make_beam_fixtures.py made, listed when the test binary starts; without them one
// case "fixtures_missing" fails in SetUp.
std::vector<std::string> beam_cases() {
  const char* dir = std::getenv("T5SCALE_BEAM_DIR");
  std::error_code error;
  std::vector<std::string> names;
  if (dir != nullptr && fs::is_directory(dir, error)) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (fs::is_regular_file(entry.path() / "reference.safetensors")) names.push_back(entry.path().filename());
    }
  }
  std::sort(names.begin(), names.end());
  return names.empty() ? std::vector<std::string>{"fixtures_missing"} : names;
}

// A generation as t5scale returns it: after a row's eos (past the decoder start), pad. transformers fills with eos.
torch::Tensor padded_after_eos(torch::Tensor sequences) {
  sequences = sequences.clone();
  for (int64_t r = 0; r < sequences.size(0); ++r) {
    bool ended = false;
    for (int64_t j = 1; j < sequences.size(1); ++j) {
      if (ended) sequences[r][j] = kPadId;
      ended = ended || sequences[r][j].item<int64_t>() == kEosId;
    }
  }
  return sequences;
}

// A row's tokens after the decoder start, through its eos.
std::vector<int64_t> row_tokens(const torch::Tensor& row) {
  std::vector<int64_t> tokens;
  for (int64_t j = 1; j < row.size(0); ++j) {
    tokens.push_back(row[j].item<int64_t>());
    if (tokens.back() == kEosId) break;
  }
  return tokens;
}

class HfBeamParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_NE(GetParam(), "fixtures_missing")
        << "no beam fixtures: set T5SCALE_BEAM_DIR to the folder make_beam_fixtures.py wrote (ctest does)";
    const char* dir = std::getenv("T5SCALE_BEAM_DIR");
    const fs::path case_dir = fs::path(dir) / GetParam();
    const fs::path reference_file = case_dir / "reference.safetensors";
    reference_ = std::make_unique<SafetensorsFile>(SafetensorsFile::open(reference_file.string()));
    ASSERT_EQ(reference_->metadata().at("format_version"), "1");
    std::cout << GetParam() << ": reference from transformers " << reference_->metadata().at("transformers")
              << ", torch " << reference_->metadata().at("torch") << "\n";
    model_ = load_hf_model((case_dir / "model").string(), std::make_shared<SoloCommunicator>("tp"));
    model_->eval();
    input_ids_ = reference_->read("input_ids");
    attention_mask_ = reference_->read("attention_mask");
    max_new_tokens_ = std::stoll(reference_->metadata().at("max_new_tokens"));
  }

  std::unique_ptr<SafetensorsFile> reference_;
  T5Model model_{nullptr};
  torch::Tensor input_ids_, attention_mask_;
  int64_t max_new_tokens_ = 0;
};

TEST_P(HfBeamParity, EveryDecodingMatchesTransformersTokenForToken) {
  const auto decodings = nlohmann::json::parse(reference_->metadata().at("decodings"));
  ASSERT_GE(decodings.size(), 4u);
  for (const auto& decoding : decodings) {
    const int64_t beams = decoding[0].get<int64_t>();
    const double length_penalty = decoding[1].get<double>();
    const std::string name = decoding[2].get<std::string>();
    const torch::Tensor reference = padded_after_eos(reference_->read(name));
    const torch::Tensor ours =
        model_->generate_beam(input_ids_, attention_mask_, max_new_tokens_, beams, length_penalty);
    EXPECT_TRUE(torch::equal(ours, reference)) << GetParam() << ", " << name << "\nt5scale\n" << ours
                                               << "\ntransformers\n" << reference;
  }
}

TEST_P(HfBeamParity, OneBeamIsGreedyDecodingWhateverTheLengthPenalty) {
  const torch::Tensor greedy = model_->generate_greedy(input_ids_, attention_mask_, max_new_tokens_);
  for (double length_penalty : {1.0, 0.6, 2.0, -0.5}) {
    EXPECT_TRUE(torch::equal(model_->generate_beam(input_ids_, attention_mask_, max_new_tokens_, 1, length_penalty),
                             greedy))
        << "length penalty " << length_penalty;
  }
}

// Each row generated alone, unpadded and without a mask, gives the tokens it gets in the padded batch: the beams
// of one row never see another row's scores, and padding is masked.
TEST_P(HfBeamParity, EachRowAloneGivesItsRowOfTheBatch) {
  const int64_t beams = 4;
  const torch::Tensor batch = model_->generate_beam(input_ids_, attention_mask_, max_new_tokens_, beams, 1.0);
  for (int64_t r = 0; r < input_ids_.size(0); ++r) {
    const int64_t length = attention_mask_[r].sum().item<int64_t>();
    const torch::Tensor alone =
        model_->generate_beam(input_ids_[r].narrow(0, 0, length).unsqueeze(0), torch::Tensor(), max_new_tokens_,
                              beams, 1.0);
    EXPECT_EQ(row_tokens(alone[0]), row_tokens(batch[r])) << GetParam() << ", row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfBeamParity, ::testing::ValuesIn(beam_cases()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace t5scale
