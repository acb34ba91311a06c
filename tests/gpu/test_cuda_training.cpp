// Training on CUDA against the CPU: bf16 training steps on the GPU (NCCL grid) against fp32 steps on the CPU from
// the same weights and batches, and the fused AdamW kernel on CUDA against the same kernel on the CPU (which
// tests/train/test_fused_adamw.cpp holds to LibTorch's torch::optim::AdamW).
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>

#include "gpu/gpu_test_support.h"
#include "job/step_data_prefetcher.h"
#include "model/t5_model.h"
#include "plan/cost_model.h"
#include "support/operator_count.h"
#include "support/synthetic_task.h"
#include "support/test_support.h"
#include "train/optimizer_harness.h"
#include "train/parallel_trainer.h"

namespace t5scale {
namespace {

using testing::gpu_grid;
using testing::tensors_close;

// bf16 keeps 8 significant bits: each rounding of an activation or gradient is off by at most 2^-9 = 2e-3
// relative, about 1.1e-3 (2^-8 / sqrt(12)) on average, while matmuls accumulate in fp32. A logit of this 2 + 2
// layer model passes some 30 roundings (projections, norms, softmax, residual sums), which add like a random walk
// to ~6e-3 relative; the loss, a mean over hundreds of tokens, is no worse. Backward rounds as many times again.
// Measured with a reference: transformers' T5 of this shape, all in bf16 on the CPU, is within 6e-3 of fp32 in
// the loss, 2.6e-3 in the gradient norm and 1.8e-2 norm-wise in the gradient (five seeds); here the gradients
// gather in fp32, which can only help. The bounds leave a factor of about 3; a precision bug (an fp16 path, a lost
// scale, master weights not updated) is off by far more.
constexpr double kBf16LossTolerance = 2e-2;      // relative, per step
constexpr double kBf16GradientTolerance = 5e-2;  // norm-wise relative, the whole first-step gradient and its norm
constexpr int kSteps = 3;
constexpr int64_t kGlobalBatch = 16;

ModelConfig small_model() {
  ModelConfig c = tiny_model_config(64);
  c.d_model = 32;
  c.d_kv = 8;
  c.num_heads = 4;
  c.d_ff = 64;
  c.num_layers = 2;
  c.num_decoder_layers = 2;
  c.dropout_rate = 0.0;  // CPU and CUDA draw different masks
  c.feed_forward = FeedForwardKind::kGatedGelu;
  c.tie_word_embeddings = false;
  return c;
}

struct TrainingRun {
  std::vector<StepResult> steps;
  torch::Tensor first_gradient;  // every main gradient after step 1, concatenated, fp32 on the CPU
};

// kSteps AdamW steps of `model` on the same synthetic batches.
TrainingRun train(T5Model model, const ProcessGrid& grid, Precision precision) {
  ParallelTrainingOptions options;
  options.precision = precision;
  options.adamw.weight_decay = 0.01;
  options.max_grad_norm = 1.0;
  ParallelTrainer trainer(model, grid, options);
  SyntheticTaskOptions task_options;
  task_options.vocab_size = model->config().vocab_size;
  SyntheticTask task(task_options);
  TrainingRun run;
  for (int s = 0; s < kSteps; ++s) {
    run.steps.push_back(trainer.step(replica_micro_batches(task.next_batch(kGlobalBatch), grid, 1), 1e-3));
    if (s == 0) {
      std::vector<torch::Tensor> parts;
      for (size_t k = 0; k < trainer.gradients().slots().size(); ++k) {
        parts.push_back(trainer.gradients().gathered_grad(k).reshape({-1}).to(torch::kCPU, torch::kFloat32));
      }
      run.first_gradient = torch::cat(parts);
    }
  }
  return run;
}

TEST(CudaTraining, Bf16StepsOnCudaMatchFp32StepsOnTheCpu) {
  const ModelConfig config = small_model();
  const ProcessGrid cpu_grid = ProcessGrid::solo();
  T5Model reference(config, cpu_grid.tp, torch::kFloat32);
  reference->initialize_weights(31);
  {
    // Both start from the same bf16-representable weights, so that only the arithmetic differs.
    torch::NoGradGuard no_grad;
    for (auto& p : reference->parameters()) p.copy_(p.to(torch::kBFloat16));
  }
  T5Model model(config, gpu_grid().tp, torch::TensorOptions().dtype(torch::kBFloat16).device(gpu_grid().device()));
  {
    torch::NoGradGuard no_grad;
    auto source = reference->named_parameters();
    for (auto& entry : model->named_parameters()) entry.value().copy_(source[entry.key()]);
  }
  const TrainingRun want = train(reference, cpu_grid, Precision::kFp32);
  const TrainingRun got = train(model, gpu_grid(), Precision::kBf16);
  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s + 1));
    EXPECT_EQ(got.steps[s].target_tokens, want.steps[s].target_tokens);
    EXPECT_TRUE(tensors_close("loss", torch::tensor({got.steps[s].loss}), torch::tensor({want.steps[s].loss}),
                              kBf16LossTolerance));
  }
  EXPECT_TRUE(tensors_close("grad norm", torch::tensor({got.steps[0].grad_norm}), torch::tensor({want.steps[0].grad_norm}),
                            kBf16GradientTolerance));
  EXPECT_TRUE(tensors_close("first-step gradient", got.first_gradient, want.first_gradient, kBf16GradientTolerance));
}

// Both devices run at::_fused_adamw_ in fp32. Each step's update rounds some ten times at 2^-24; with
// correctly rounded sqrt and division on both (no fast math), the kernels differ by a few ulps of an update of
// size lr = 1e-2 per step: after 6 steps about 6 x 10 x 6e-8 x 1e-2 = 4e-8 relative to weights of size 1. The
// bound of 1e-6 leaves a factor of 25; a wrong bias correction, decay or step count is off by far more.
constexpr double kFusedAdamWTolerance = 1e-6;

std::vector<torch::Tensor> fused_adamw_run(torch::Device device) {
  const auto generator = [](uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); };
  const std::vector<std::pair<std::string, torch::Tensor>> initial = {
      {"decoder.blocks.0.ff.wi.weight", at::normal(0.0, 1.0, {24, 16}, generator(1)).to(device)},
      {"decoder.blocks.0.ff_norm.weight", (1.0 + 0.1 * at::normal(0.0, 1.0, {16}, generator(2))).to(device)},
      {"lm_head.weight", at::normal(0.0, 1.0, {40, 16}, generator(3)).to(device)}};
  testing::OptimizerHarness harness(initial, 1024);
  AdamWOptions options;
  options.weight_decay = 0.1;
  options.fused = FusedMode::kOn;
  DistributedAdamW optimizer(*harness.gradients, harness.grid, options);
  for (int s = 0; s < 6; ++s) {
    const double scale = std::pow(10.0, s % 3 - 1);  // the second moment sees gradients of 0.1, 1 and 10
    std::vector<torch::Tensor> grads;
    for (size_t k = 0; k < initial.size(); ++k) {
      grads.push_back((scale * at::normal(0.0, 1.0, initial[k].second.sizes(), generator(100 + 10 * s + k))).to(device));
    }
    harness.set_gradients(grads);
    optimizer.step(1e-2, GradientScaling{});
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : harness.params) out.push_back(p.detach().cpu());
  return out;
}

TEST(CudaTraining, FusedAdamWOnCudaMatchesTheCpu) {
  const auto want = fused_adamw_run(torch::kCPU);
  const auto got = fused_adamw_run(gpu_grid().device());
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_TRUE(tensors_close("parameter " + std::to_string(k), got[k], want[k], kFusedAdamWTolerance));
  }
}

// ---- Host-resident optimizer state (parallel.offload_optimizer) ----
// The same bf16 steps on the GPU with the optimizer's state on the device and on the host: the update is the same fp32
// arithmetic run by the CPU's kernels instead of CUDA's (fused AdamW: the bound of kFusedAdamWTolerance above; Adafactor:
// the same operators, a few ulps of an update of size lr apart), so the fp32 master weights agree within 1e-6
// relative after kSteps. The first step's loss is equal bit for bit (nothing was updated yet); later losses see bf16
// weights of which a few elements may round the other way (2^-8 each), within 1e-3.
struct OffloadRun {
  std::vector<StepResult> steps;
  torch::Tensor masters;  // every owned master weight, concatenated, fp32 on the CPU
  bool host_resident = false, pinned = false;
};

OffloadRun offload_run(OptimizerKind kind, bool offload) {
  const ModelConfig config = small_model();
  T5Model model(config, gpu_grid().tp, torch::TensorOptions().dtype(torch::kBFloat16).device(gpu_grid().device()));
  model->initialize_weights(31);
  ParallelTrainingOptions options;
  options.precision = Precision::kBf16;
  options.optimizer = kind;
  options.adamw.weight_decay = 0.01;
  options.adafactor.weight_decay = 0.01;
  options.offload_optimizer = offload;
  ParallelTrainer trainer(model, gpu_grid(), options);
  SyntheticTaskOptions task_options;
  task_options.vocab_size = config.vocab_size;
  SyntheticTask task(task_options);
  OffloadRun run;
  for (int s = 0; s < kSteps; ++s) {
    run.steps.push_back(trainer.step(replica_micro_batches(task.next_batch(kGlobalBatch), gpu_grid(), 1), 1e-3));
  }
  std::vector<torch::Tensor> parts;
  for (size_t b = 0; b < trainer.gradients().buckets().size(); ++b) {
    parts.push_back(trainer.optimizer().master_weights(b).to(torch::kCPU));
  }
  run.masters = torch::cat(parts);
  run.host_resident = trainer.optimizer().master_weights(0).is_cpu();
  run.pinned = trainer.optimizer().master_weights(0).is_pinned();
  return run;
}

TEST(CudaTraining, OffloadedOptimizerStateGivesTheSameSteps) {
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kAdafactor}) {
    SCOPED_TRACE(kind == OptimizerKind::kAdamW ? "adamw" : "adafactor");
    const OffloadRun want = offload_run(kind, false);
    const OffloadRun got = offload_run(kind, true);
    EXPECT_FALSE(want.host_resident);
    EXPECT_TRUE(got.host_resident);
    EXPECT_TRUE(got.pinned) << "the host-resident master weights are not in pinned memory";
    EXPECT_EQ(got.steps[0].loss, want.steps[0].loss);
    for (int s = 1; s < kSteps; ++s) {
      EXPECT_TRUE(tensors_close("loss of step " + std::to_string(s + 1), torch::tensor({got.steps[s].loss}),
                                torch::tensor({want.steps[s].loss}), 1e-3));
    }
    EXPECT_TRUE(tensors_close("master weights", got.masters, want.masters, 1e-6));
  }
}

}  // namespace
}  // namespace t5scale

namespace t5scale {
namespace {

// The job's loader gives a GPU page-locked batches on the host, and the trainer copies them itself: an unpadded
// micro-batch goes without its mask (no additive mask is made: no sub_ of padding_additive_mask's 1 - mask).
TEST(CudaTraining, PinnedHostBatchesAndNoMaskWhenNothingIsPadded) {
  InMemoryExamples source("pinned", [] {
    std::vector<TokenSequences> examples;
    for (int32_t i = 0; i < 16; ++i) examples.push_back({std::vector<int32_t>(6, 5 + i), std::vector<int32_t>(4, 9 + i)});
    return examples;
  }());
  BatchSamplerOptions options;
  options.global_batch = 8;
  DistributedBatchSampler sampler(source.source_lengths(), source.target_lengths(), options);
  StepDataPrefetcher prefetcher(sampler, source, CollateOptions{}, /*pin_memory=*/true, small_model());
  const StepData data = prefetcher.next();
  ASSERT_TRUE(data.micro_batches[0].input_ids.is_pinned());
  ASSERT_TRUE(data.micro_batches[0].attention_mask.all().item<bool>()) << "equal lengths: nothing padded";
  EXPECT_EQ(data.model_flops, training_flops(small_model(), BatchShape{8, 6, 4})) << "nothing padded: the shape's";
  T5Model model(small_model(), gpu_grid().tp,
                torch::TensorOptions().dtype(torch::kBFloat16).device(gpu_grid().device()));
  model->initialize_weights(2);
  ParallelTrainingOptions training;
  training.precision = Precision::kBf16;
  ParallelTrainer trainer(model, gpu_grid(), training);
  testing::OperatorCount count;
  testing::OperatorCount::clear();
  const StepResult result = trainer.step(data.micro_batches, 1e-4);
  EXPECT_TRUE(std::isfinite(result.loss));
  EXPECT_EQ(testing::OperatorCount::of("aten::sub_"), 0) << testing::OperatorCount::listing();
}

}  // namespace
}  // namespace t5scale
