// Parameter freezing: which names each switch selects, and training with frozen parameters against a reference
// that freezes nothing in the model — LibTorch's own AdamW and clip_grad_norm_ given only the unfrozen
// parameters. Frozen parameters must stay bit for bit; the rest must follow the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/check.h"
#include "support/synthetic_task.h"
#include "support/test_support.h"
#include "train/parallel_trainer.h"

namespace t5scale {
namespace {

ModelConfig small_untied() {
  ModelConfig c = tiny_model_config(40);
  c.d_model = 32;
  c.d_kv = 8;
  c.num_heads = 4;
  c.d_ff = 48;
  c.dropout_rate = 0.0;
  c.feed_forward = FeedForwardKind::kGatedGelu;
  c.tie_word_embeddings = false;  // v1.1: an lm_head of its own, which `embeddings` leaves trainable
  return c;
}

Seq2SeqBatch task_batch(uint64_t seed) {
  SyntheticTaskOptions o;
  o.vocab_size = 40;
  o.seed = seed;
  return SyntheticTask(o).next_batch(8);
}

std::vector<std::string> model_names() {
  T5Model model(small_untied(), std::make_shared<SoloCommunicator>("tp"));
  std::vector<std::string> names;
  for (const auto& layout : model->parameter_layouts()) names.push_back(layout.name);
  return names;
}

TEST(Freezing, WhatEachSwitchSelects) {
  const auto names = model_names();
  FreezeOptions embeddings;
  embeddings.embeddings = true;
  EXPECT_EQ(frozen_parameter_names(names, embeddings), std::vector<std::string>{"shared.weight"});

  FreezeOptions encoder;
  encoder.encoder = true;
  const auto encoder_names = frozen_parameter_names(names, encoder);
  size_t expected = 0;
  for (const auto& name : names) expected += name.rfind("encoder.", 0) == 0;
  EXPECT_GT(expected, 5u);
  EXPECT_EQ(encoder_names.size(), expected);
  for (const auto& name : encoder_names) EXPECT_EQ(name.rfind("encoder.", 0), 0u) << name;

  FreezeOptions pattern;
  pattern.pattern = "ff[.]wo|lm_head";
  std::vector<std::string> wanted;
  for (const auto& name : names) {
    if (name.find(".ff.wo.") != std::string::npos || name == "lm_head.weight") wanted.push_back(name);
  }
  EXPECT_GE(wanted.size(), 3u);
  EXPECT_EQ(frozen_parameter_names(names, pattern), wanted);

  FreezeOptions bad;
  bad.pattern = "ff[";
  EXPECT_NE(testing::error_of([&] { frozen_parameter_names(names, bad); }).find("train.freeze_pattern 'ff['"),
            std::string::npos);
  FreezeOptions typo;
  typo.pattern = "encoder[.]blokcs";
  EXPECT_NE(testing::error_of([&] { frozen_parameter_names(names, typo); }).find("matches no parameter name"),
            std::string::npos);
  FreezeOptions none;
  EXPECT_TRUE(frozen_parameter_names(names, none).empty());
}

// Trains with `freeze` (and optionally activation checkpointing) and compares with the reference.
void expect_frozen_training_matches_reference(const FreezeOptions& freeze, int64_t checkpoint_every) {
  const ProcessGrid grid = ProcessGrid::solo();
  T5Model ours(small_untied(), grid.tp), theirs(small_untied(), grid.tp);
  ours->initialize_weights(3);
  theirs->initialize_weights(3);
  ours->set_activation_checkpointing(checkpoint_every);
  std::map<std::string, torch::Tensor> initial;
  for (const auto& item : ours->named_parameters()) initial[item.key()] = item.value().detach().clone();

  ParallelTrainingOptions options;
  options.adamw.weight_decay = 0.1;
  options.max_grad_norm = 0.05;  // below the gradient norm: clipping is active and its norm is compared
  options.freeze = freeze;
  ParallelTrainer trainer(ours, grid, options);
  const std::vector<std::string> frozen = trainer.frozen_parameters();
  ASSERT_FALSE(frozen.empty());
  auto is_frozen = [&](const std::string& name) { return std::find(frozen.begin(), frozen.end(), name) != frozen.end(); };

  // The reference model keeps requires_grad everywhere; its optimizer and clipping see only the unfrozen ones.
  std::vector<torch::Tensor> trained, decay, no_decay;
  for (const auto& item : theirs->named_parameters()) {
    if (is_frozen(item.key())) continue;
    trained.push_back(item.value());
    (weight_decay_applies(item.key()) ? decay : no_decay).push_back(item.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-2).weight_decay(0.1)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-2).weight_decay(0.0)));
  torch::optim::AdamW reference(std::move(groups), torch::optim::AdamWOptions(1e-2));
  theirs->train();
  for (uint64_t step = 0; step < 3; ++step) {
    const Seq2SeqBatch b = task_batch(step);
    const StepResult r = trainer.step({b}, 1e-2);
    theirs->zero_grad();
    const torch::Tensor loss = theirs->loss(b);
    loss.backward();
    const double norm = torch::nn::utils::clip_grad_norm_(trained, options.max_grad_norm);
    reference.step();
    EXPECT_TRUE(testing::tensors_close(msg("step ", step + 1, " loss"), torch::tensor({r.loss}),
                                       loss.detach().to(torch::kFloat64).reshape({1}), 1e-6));
    EXPECT_GT(norm, options.max_grad_norm);
    EXPECT_TRUE(testing::tensors_close(msg("step ", step + 1, " grad norm (unfrozen parameters only)"),
                                       torch::tensor({r.grad_norm}), torch::tensor({norm}), 1e-6));
  }
  auto expected = theirs->named_parameters();
  for (const auto& item : ours->named_parameters()) {
    if (is_frozen(item.key())) {
      EXPECT_FALSE(item.value().requires_grad()) << item.key();
      EXPECT_TRUE(torch::equal(item.value(), initial.at(item.key()))) << item.key() << " is frozen but changed";
    } else {
      EXPECT_FALSE(torch::equal(item.value(), initial.at(item.key()))) << item.key() << " did not train";
      EXPECT_TRUE(testing::tensors_close(item.key(), item.value(), expected[item.key()], 1e-6));
    }
  }
}

TEST(Freezing, EmbeddingsAndAPatternStayFixedTheRestTrainsAsTheReference) {
  FreezeOptions freeze;
  freeze.embeddings = true;
  freeze.pattern = "decoder[.]blocks[.]0[.]ff[.]";
  expect_frozen_training_matches_reference(freeze, 0);
}

TEST(Freezing, EncoderWithActivationCheckpointing) {
  FreezeOptions freeze;
  freeze.encoder = true;
  expect_frozen_training_matches_reference(freeze, 1);
}

TEST(Freezing, EverythingFrozenIsRefused) {
  const ProcessGrid grid = ProcessGrid::solo();
  T5Model model(small_untied(), grid.tp);
  ParallelTrainingOptions options;
  options.freeze.pattern = ".";
  EXPECT_NE(testing::error_of([&] { ParallelTrainer trainer(model, grid, options); }).find("every parameter is frozen"),
            std::string::npos);
}

}  // namespace
}  // namespace t5scale
