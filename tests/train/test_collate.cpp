// Collation: padding, masks and labels against tensors written out by hand, and the T5 loss of a padded batch
// against the per-example losses.
#include <gtest/gtest.h>

#include <cmath>

#include "config/model_config.h"
#include "model/t5_model.h"
#include "model/vocab_parallel_cross_entropy.h"
#include "support/test_support.h"
#include "train/collate.h"

namespace t5scale {
namespace {

using testing::error_of;

TokenSequences example(std::vector<int32_t> source, std::vector<int32_t> target) {
  return TokenSequences{std::move(source), std::move(target)};
}

torch::Tensor int64_tensor(std::vector<std::vector<int64_t>> rows) {
  std::vector<torch::Tensor> tensors;
  for (const auto& row : rows) tensors.push_back(torch::tensor(row, torch::kInt64));
  return torch::stack(tensors);
}

void expect_int64_cpu(const torch::Tensor& t, const char* name) {
  EXPECT_EQ(t.scalar_type(), torch::kInt64) << name;
  EXPECT_TRUE(t.device().is_cpu()) << name;
  EXPECT_TRUE(t.is_contiguous()) << name;
}

TEST(Collate, PadsToTheLongestSequenceOfTheBatch) {
  const std::vector<TokenSequences> examples = {
      {{5, 6, 7, 1}, {9, 1}},
      {{8, 1}, {4, 5, 6, 1}},
      {{3, 4, 5, 6, 7, 1}, {1}},
  };
  const Seq2SeqBatch batch = collate(examples);
  const torch::Tensor input_ids = int64_tensor({{5, 6, 7, 1, 0, 0}, {8, 1, 0, 0, 0, 0}, {3, 4, 5, 6, 7, 1}});
  const torch::Tensor attention_mask = int64_tensor({{1, 1, 1, 1, 0, 0}, {1, 1, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}});
  const torch::Tensor labels = int64_tensor({{9, 1, -100, -100}, {4, 5, 6, 1}, {1, -100, -100, -100}});
  EXPECT_TRUE(torch::equal(batch.input_ids, input_ids)) << batch.input_ids;
  EXPECT_TRUE(torch::equal(batch.attention_mask, attention_mask)) << batch.attention_mask;
  EXPECT_TRUE(torch::equal(batch.labels, labels)) << batch.labels;
  expect_int64_cpu(batch.input_ids, "input_ids");
  expect_int64_cpu(batch.attention_mask, "attention_mask");
  expect_int64_cpu(batch.labels, "labels");
  EXPECT_EQ(kIgnoreIndex, -100);
}

TEST(Collate, PadsToAMultipleOfEight) {
  CollateOptions options;
  options.pad_to_multiple_of = 8;
  // Source maximum 9 -> 16; target maximum 8 is already a multiple and stays 8.
  const std::vector<TokenSequences> examples = {
      {{3, 4, 5, 6, 7, 8, 9, 10, 1}, {2, 3, 4, 5, 6, 7, 8, 1}},
      {{11, 1}, {12, 1}},
  };
  const Seq2SeqBatch batch = collate(examples, options);
  const torch::Tensor input_ids = int64_tensor({{3, 4, 5, 6, 7, 8, 9, 10, 1, 0, 0, 0, 0, 0, 0, 0},
                                                {11, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}});
  const torch::Tensor attention_mask = int64_tensor({{1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0},
                                                     {1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}});
  const torch::Tensor labels =
      int64_tensor({{2, 3, 4, 5, 6, 7, 8, 1}, {12, 1, -100, -100, -100, -100, -100, -100}});
  EXPECT_TRUE(torch::equal(batch.input_ids, input_ids)) << batch.input_ids;
  EXPECT_TRUE(torch::equal(batch.attention_mask, attention_mask)) << batch.attention_mask;
  EXPECT_TRUE(torch::equal(batch.labels, labels)) << batch.labels;

  // A one-token target rounds up to a full multiple; pad_to_multiple_of 1 leaves the maximum as it is.
  EXPECT_EQ(collate({example({5, 1}, {1})}, options).labels.sizes(), torch::IntArrayRef({1, 8}));
  options.pad_to_multiple_of = 1;
  EXPECT_EQ(collate(examples, options).input_ids.sizes(), torch::IntArrayRef({2, 9}));
}

TEST(Collate, MaskComesFromLengthsAndPadIdIsAnOption) {
  CollateOptions options;
  options.pad_id = 7;
  // A pad-valued id (0) inside a source is a token: the mask covers it; padding uses the chosen pad id.
  const Seq2SeqBatch batch = collate({example({4, 0, 1}, {0, 1}), example({5, 1}, {6, 0, 1})}, options);
  EXPECT_TRUE(torch::equal(batch.input_ids, int64_tensor({{4, 0, 1}, {5, 1, 7}}))) << batch.input_ids;
  EXPECT_TRUE(torch::equal(batch.attention_mask, int64_tensor({{1, 1, 1}, {1, 1, 0}}))) << batch.attention_mask;
  EXPECT_TRUE(torch::equal(batch.labels, int64_tensor({{0, 1, -100}, {6, 0, 1}}))) << batch.labels;
}

TEST(Collate, BadInputIsAnErrorNamingTheProblem) {
  EXPECT_NE(error_of([] { collate(std::vector<TokenSequences>{}); }).find("the batch has no examples"), std::string::npos);
  EXPECT_NE(error_of([] { collate({example({4, 1}, {1}), example({}, {1})}); }).find("example at row 1 of the batch has an empty source"),
            std::string::npos);
  EXPECT_NE(error_of([] { collate({example({4, 1}, {})}); }).find("example at row 0 of the batch has an empty target"),
            std::string::npos);
  EXPECT_NE(error_of([] { collate({example({4, -3, 1}, {1})}); }).find("negative token id -3 in its source"),
            std::string::npos);
  CollateOptions options;
  options.pad_to_multiple_of = -8;
  EXPECT_NE(error_of([&] { collate({example({4, 1}, {1})}, options); }).find("pad_to_multiple_of must be >= 0, got -8"),
            std::string::npos);
}

// The loss of a padded batch is the mean over every target token of the batch, i.e. the per-example losses
// weighted by their target token counts: padding (to the batch maximum and beyond, to a multiple of 8) changes
// nothing. Parameters in fp64, but the model computes RMS-norm variances and attention softmaxes in fp32, as T5
// does; differently shaped batches round differently there, so results agree to fp32 rounding: relative 1e-6,
// the bound invariant 2 of docs/ARCHITECTURE.md sets for fp32 on CPU. A real padding leak (a padded key attended, a padded
// label counted) moves the loss by far more, and the plain mean of the example losses is far off.
TEST(Collate, PaddedBatchLossIsTheTokenWeightedMeanOfExampleLosses) {
  torch::manual_seed(0);
  ModelConfig config = tiny_model_config(40);
  config.dropout_rate = 0.0;
  T5Model model(config, std::make_shared<SoloCommunicator>("tp"), torch::kFloat64);
  model->initialize_weights(11);
  model->eval();
  torch::NoGradGuard no_grad;

  const std::vector<TokenSequences> examples = {
      {{5, 9, 12, 30, 7, 1}, {6, 10, 1}},
      {{3, 1}, {4, 5, 6, 7, 8, 9, 1}},
      {{20, 21, 22, 1}, {1}},
      {{8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 1}, {9, 9, 1}},
  };
  CollateOptions options;
  options.pad_to_multiple_of = 8;
  const Seq2SeqBatch batch = collate(examples, options);
  ASSERT_EQ(batch.input_ids.sizes(), torch::IntArrayRef({4, 16}));
  ASSERT_EQ(batch.labels.sizes(), torch::IntArrayRef({4, 8}));
  const double batch_loss = model->loss(batch).item<double>();
  ASSERT_TRUE(std::isfinite(batch_loss));

  // Token by token: each row's losses are its example's own (computed with no padding at all), and zero on
  // the padding.
  const torch::Tensor batch_token_losses =
      model->token_losses(model->forward(batch.input_ids, batch.attention_mask, model->shift_right(batch.labels)),
                          batch.labels);  // (4, 8)
  double weighted_sum = 0.0, plain_mean = 0.0;
  int64_t target_tokens = 0;
  for (size_t row = 0; row < examples.size(); ++row) {
    const Seq2SeqBatch alone = collate({examples[row]});
    const int64_t tokens = static_cast<int64_t>(examples[row].target.size());
    const torch::Tensor own = model->token_losses(
        model->forward(alone.input_ids, alone.attention_mask, model->shift_right(alone.labels)), alone.labels);
    const torch::Tensor padded_row = batch_token_losses[static_cast<int64_t>(row)];
    EXPECT_TRUE(testing::tensors_close("token losses of row " + std::to_string(row), padded_row.narrow(0, 0, tokens),
                                       own[0], 1e-6));
    EXPECT_TRUE(torch::equal(padded_row.narrow(0, tokens, 8 - tokens), torch::zeros({8 - tokens}, torch::kFloat64)))
        << "row " << row << ": " << padded_row;

    const double example_loss = model->loss(alone).item<double>();
    weighted_sum += example_loss * static_cast<double>(tokens);
    target_tokens += tokens;
    plain_mean += example_loss / static_cast<double>(examples.size());
  }
  const double expected = weighted_sum / static_cast<double>(target_tokens);
  EXPECT_NEAR(batch_loss, expected, 1e-6 * std::abs(expected)) << "batch " << batch_loss << " vs " << expected;
  EXPECT_GT(std::abs(batch_loss - plain_mean), 1e-3 * std::abs(expected)) << batch_loss << " vs " << plain_mean;
  // The control: a mask that lets the encoder attend to the padding is caught by far more than the tolerance.
  Seq2SeqBatch leaky = batch;
  leaky.attention_mask = torch::ones_like(batch.attention_mask);
  const double leaky_loss = model->loss(leaky).item<double>();
  EXPECT_GT(std::abs(leaky_loss - expected), 1e-3 * std::abs(expected)) << leaky_loss << " vs " << expected;
}

}  // namespace
}  // namespace t5scale
