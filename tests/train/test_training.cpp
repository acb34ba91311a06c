// The training step on one rank: the optimizer against LibTorch's own AdamW, activation checkpointing with
// dropout on, fp16 loss scaling, a bf16 step, the weight-decay rule, and optimizer state saved and loaded.
// (Every grid against one rank: tests/mpi; Adafactor against transformers, fused AdamW, freezing: beside this file.)
#include <gtest/gtest.h>

#include "support/synthetic_task.h"
#include "support/test_support.h"
#include "train/parallel_trainer.h"

namespace t5scale {
namespace {

ModelConfig small(double dropout) {
  ModelConfig c = tiny_model_config(40);
  c.d_model = 32;
  c.d_kv = 8;
  c.num_heads = 4;
  c.d_ff = 48;
  c.dropout_rate = dropout;
  return c;
}

Seq2SeqBatch batch(uint64_t seed, int64_t size = 8) {
  SyntheticTaskOptions o;
  o.vocab_size = 40;
  o.seed = seed;
  return SyntheticTask(o).next_batch(size);
}

TEST(Training, DistributedAdamWMatchesLibTorchAdamW) {
  const ProcessGrid grid = ProcessGrid::solo();
  T5Model ours(small(0.0), grid.tp), theirs(small(0.0), grid.tp);
  ours->initialize_weights(3);
  theirs->initialize_weights(3);
  ParallelTrainingOptions options;
  options.adamw.weight_decay = 0.1;
  options.max_grad_norm = 0.0;  // clipping is compared in the grid tests; here the update alone
  ParallelTrainer trainer(ours, grid, options);

  // The reference: torch::optim::AdamW with norms and biases in a group without weight decay.
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& item : theirs->named_parameters()) {
    const bool excluded = item.key().find("norm") != std::string::npos || item.key().find("bias") != std::string::npos;
    (excluded ? no_decay : decay).push_back(item.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-2).weight_decay(0.1)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-2).weight_decay(0.0)));
  torch::optim::AdamW reference(std::move(groups), torch::optim::AdamWOptions(1e-2));
  ours->train();
  theirs->train();
  for (uint64_t step = 0; step < 3; ++step) {
    const Seq2SeqBatch b = batch(step);
    const StepResult r = trainer.step({b}, 1e-2);
    reference.zero_grad();
    const torch::Tensor loss = theirs->loss(b);
    loss.backward();
    reference.step();
    EXPECT_TRUE(testing::tensors_close("loss", torch::tensor({r.loss}), loss.detach().to(torch::kFloat64).reshape({1}), 1e-6));
  }
  auto expected = theirs->named_parameters();
  for (const auto& item : ours->named_parameters()) {
    EXPECT_TRUE(testing::tensors_close(item.key(), item.value(), expected[item.key()], 1e-6));
  }
}

TEST(Training, ActivationCheckpointingWithDropoutRepeatsTheMasks) {
  const ProcessGrid grid = ProcessGrid::solo();
  auto rng = std::make_shared<ParallelRng>(5, 0);
  T5Model model(small(0.2), grid.tp, torch::kFloat32, rng);
  model->initialize_weights(4);
  model->train();
  const Seq2SeqBatch b = batch(9);
  torch::manual_seed(77);
  const ParallelRng::State start = rng->get_state();

  auto gradients = [&](int64_t checkpoint_every) {
    model->set_activation_checkpointing(checkpoint_every);
    rng->set_state(start);  // both streams as at the start
    model->zero_grad();
    const torch::Tensor loss = model->loss(b);
    loss.backward();
    std::map<std::string, torch::Tensor> out;
    for (const auto& item : model->named_parameters()) out[item.key()] = item.value().grad().clone();
    out["loss"] = loss.detach().reshape({1});
    return out;
  };
  const auto plain = gradients(0), every = gradients(1), every_other = gradients(2);
  for (const auto& [name, grad] : plain) {
    // Recomputation repeats the same operations with the same masks; only the order in which the position-bias
    // gradient is summed over blocks changes (a few ulps).
    EXPECT_TRUE(testing::tensors_close("every block: " + name, every.at(name), grad, 1e-6));
    EXPECT_TRUE(testing::tensors_close("every 2nd block: " + name, every_other.at(name), grad, 1e-6));
  }
  // And dropout was really active: another mask gives another loss.
  model->set_activation_checkpointing(0);
  const double other_loss = model->loss(b).item<double>();
  EXPECT_NE(other_loss, plain.at("loss").item<double>());
}

TEST(Training, Fp16OverflowSkipsTheStepAndLowersTheScale) {
  const ProcessGrid grid = ProcessGrid::solo();
  T5Model model(small(0.0), grid.tp, torch::kHalf);
  model->initialize_weights(6);
  ParallelTrainingOptions options;
  options.precision = Precision::kFp16;
  options.initial_loss_scale = 1e12;  // gradients of the fp16 activations overflow at this scale
  ParallelTrainer trainer(model, grid, options);
  std::map<std::string, torch::Tensor> before;
  for (const auto& item : model->named_parameters()) before[item.key()] = item.value().clone();

  const StepResult overflowed = trainer.step({batch(1)}, 1e-3);
  EXPECT_TRUE(overflowed.skipped);
  EXPECT_EQ(overflowed.loss_scale, 1e12);
  for (const auto& item : model->named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), before[item.key()])) << item.key() << " changed in a skipped step";
  }
  // The scale halves after each overflow until the gradients fit; then the step is taken.
  StepResult r = overflowed;
  int steps = 0;
  while (r.skipped && steps++ < 40) r = trainer.step({batch(1)}, 1e-3);
  EXPECT_FALSE(r.skipped);
  EXPECT_LT(r.loss_scale, 1e12);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_TRUE(std::isfinite(r.grad_norm));
  bool changed = false;
  for (const auto& item : model->named_parameters()) changed = changed || !torch::equal(item.value(), before[item.key()]);
  EXPECT_TRUE(changed);
}

TEST(Training, Bf16StepTracksTheFp32Step) {
  const ProcessGrid grid = ProcessGrid::solo();
  std::vector<double> losses[2];
  int i = 0;
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    T5Model model(small(0.0), grid.tp, dtype);
    model->initialize_weights(8);
    ParallelTrainingOptions options;
    options.precision = dtype == torch::kBFloat16 ? Precision::kBf16 : Precision::kFp32;
    ParallelTrainer trainer(model, grid, options);
    for (uint64_t s = 0; s < 5; ++s) losses[i].push_back(trainer.step({batch(s)}, 1e-3).loss);
    // Master weights stay fp32 whatever the compute dtype. In fp32 the parameters are views of them (no copy back
    // after each update); in bf16 they are separate bf16 tensors.
    EXPECT_EQ(trainer.optimizer().master_weights(0).scalar_type(), torch::kFloat32);
    for (const auto& item : model->named_parameters()) {
      bool aliased = false;
      for (size_t b = 0; b < trainer.gradients().buckets().size(); ++b) {
        aliased = aliased || item.value().is_alias_of(trainer.optimizer().master_weights(b));
      }
      EXPECT_EQ(aliased, dtype == torch::kFloat32) << item.key();
    }
    ++i;
  }
  for (size_t s = 0; s < losses[0].size(); ++s) {
    // bf16 keeps 8 significant bits (relative rounding 2^-8 ~ 4e-3 per operation); the loss of a tiny model
    // stays within a few percent of fp32 over a few steps.
    EXPECT_NEAR(losses[1][s], losses[0][s], 0.03 * losses[0][s]) << "step " << s + 1;
  }
}

TEST(Training, WeightDecaySkipsNormsAndBiases) {
  EXPECT_TRUE(weight_decay_applies("encoder.blocks.0.self_attn.q.weight"));
  EXPECT_TRUE(weight_decay_applies("shared.weight"));
  EXPECT_TRUE(weight_decay_applies("lm_head.weight"));
  EXPECT_FALSE(weight_decay_applies("encoder.blocks.0.self_attn_norm.weight"));
  EXPECT_FALSE(weight_decay_applies("decoder.final_norm.weight"));
  EXPECT_FALSE(weight_decay_applies("encoder.relative_attention_bias.weight"));
}

// Steps 1-2, state saved; a new trainer on a copy of the model loads it and runs steps 3-4: the same weights,
// bit for bit, as four uninterrupted steps. For both optimizers (Adafactor with momentum and the relative step,
// whose step count matters).
TEST(Training, OptimizerStateLoadedResumesBitForBit) {
  const ProcessGrid grid = ProcessGrid::solo();
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kAdafactor}) {
    ParallelTrainingOptions options;
    options.optimizer = kind;
    options.adamw.weight_decay = 0.1;
    options.adafactor.relative_step = true;
    options.adafactor.scale_parameter = true;
    options.adafactor.beta1 = 0.9;
    options.bucket_bytes = 16 * 1024;
    T5Model straight(small(0.0), grid.tp), resumed(small(0.0), grid.tp);
    straight->initialize_weights(5);
    resumed->initialize_weights(5);
    ParallelTrainer uninterrupted(straight, grid, options);
    for (uint64_t s = 0; s < 4; ++s) uninterrupted.step({batch(s)}, 1e-3);

    OptimizerState saved;
    {
      ParallelTrainer first(resumed, grid, options);
      for (uint64_t s = 0; s < 2; ++s) first.step({batch(s)}, 1e-3);
      for (const auto& [name, tensor] : first.optimizer().state()) saved.emplace_back(name, tensor.clone());
    }
    T5Model reloaded(small(0.0), grid.tp);
    reloaded->initialize_weights(99);  // other weights: the loaded master weights must replace them
    ParallelTrainer second(reloaded, grid, options);
    second.optimizer().load_state(saved);
    EXPECT_EQ(second.optimizer().step_count(), 2);
    for (uint64_t s = 2; s < 4; ++s) second.step({batch(s)}, 1e-3);
    auto expected = straight->named_parameters();
    for (const auto& item : reloaded->named_parameters()) {
      EXPECT_TRUE(torch::equal(item.value(), expected[item.key()]))
          << second.optimizer().name() << ": " << item.key() << " differs after resuming";
    }
    saved.pop_back();
    EXPECT_NE(testing::error_of([&] { second.optimizer().load_state(saved); }).find("state has"), std::string::npos);
  }
}

}  // namespace
}  // namespace t5scale
