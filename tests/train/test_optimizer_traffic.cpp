// The passes over memory of the step's gradient and optimizer traffic, counted by operator (support/
// operator_count.h): a bf16 model's parameters are views of one flat buffer per bucket, written back with one copy per
// bucket whatever the number of parameters; fused AdamW takes the clipping and loss-scale factor in its own pass; the
// buckets are never zeroed whole (the first gradient of a step is copied in, what none reached is zeroed alone); the
// linear layers' weight gradients are computed straight into the buckets.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/check.h"
#include "support/operator_count.h"
#include "support/synthetic_task.h"
#include "support/test_support.h"
#include "train/distributed_adamw.h"
#include "train/optimizer_harness.h"
#include "train/parallel_trainer.h"

namespace t5scale {
namespace {

using testing::OperatorCount;

// Six bf16 parameters of 64 to 320 elements, or the same elements as twelve parameters of half the size.
std::vector<std::pair<std::string, torch::Tensor>> bf16_parameters(bool halved) {
  torch::manual_seed(3);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (int k = 0; k < 6; ++k) {
    const std::string name = msg("layer", k, k % 2 ? ".weight" : "_norm.weight");
    const torch::Tensor value = torch::randn({64 * (1 + k % 5)}).to(torch::kBFloat16);
    if (!halved) {
      out.emplace_back(name, value);
      continue;
    }
    const auto halves = value.chunk(2);
    out.emplace_back(name + ".0", halves[0].clone());
    out.emplace_back(name + ".1", halves[1].clone());
  }
  return out;
}

struct CountedStep {
  std::map<std::string, int> operators;
  std::string listing;
};

// One clipped AdamW step (loss scale 4) over the parameters in buckets of bucket_bytes, its operators counted.
CountedStep count_step(const std::vector<std::pair<std::string, torch::Tensor>>& initial, int64_t bucket_bytes) {
  testing::OptimizerHarness harness(initial, bucket_bytes);
  DistributedAdamW optimizer(*harness.gradients, harness.grid, AdamWOptions{});
  EXPECT_TRUE(optimizer.fused());
  std::vector<torch::Tensor> grads;
  for (const auto& [name, value] : initial) grads.push_back(torch::randn(value.sizes()) * 10.0);
  harness.set_gradients(grads);
  GradientScaling scaling;
  scaling.loss_scale = 4.0;
  scaling.max_grad_norm = 1.0;  // the gradients' norm is about 80 after unscaling: clipped
  OperatorCount count;
  OperatorCount::clear();
  optimizer.step(1e-3, scaling);
  return {OperatorCount::counts(), OperatorCount::listing()};
}

TEST(OptimizerTraffic, Bf16ParametersAreViewsOfOneBufferPerBucketWrittenBackOnce) {
  const auto initial = bf16_parameters(false);
  testing::OptimizerHarness harness(initial, /*bucket_bytes=*/512 * 4);
  DistributedAdamW optimizer(*harness.gradients, harness.grid, AdamWOptions{});
  const auto& buckets = harness.gradients->buckets();
  ASSERT_GE(buckets.size(), 2u);
  ASSERT_GT(harness.params.size(), buckets.size());
  for (const auto& bucket : buckets) {
    std::set<const void*> storages;
    for (size_t k : bucket.slots) storages.insert(harness.gradients->slots()[k].param.storage().data());
    EXPECT_EQ(storages.size(), 1u) << "a bucket's parameters share one buffer";
  }
  for (size_t k = 0; k < initial.size(); ++k) {
    EXPECT_TRUE(torch::equal(harness.params[k], initial[k].second)) << initial[k].first << " kept its values";
  }
  std::vector<torch::Tensor> grads;
  for (const auto& [name, value] : initial) grads.push_back(torch::randn(value.sizes()));
  harness.set_gradients(grads);
  optimizer.step(1e-3);
  // The write-back reached the parameters through their views.
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (size_t k : buckets[b].slots) {
      const ParameterSlot& slot = harness.gradients->slots()[k];
      const torch::Tensor master = optimizer.master_weights(b).narrow(0, slot.offset, slot.numel);
      EXPECT_TRUE(torch::equal(harness.params[k].reshape({-1}), master.to(torch::kBFloat16))) << slot.name;
      EXPECT_FALSE(torch::equal(harness.params[k], initial[k].second)) << slot.name << " was updated";
    }
  }
}

// The same elements in one bucket as six parameters and as twelve: the step dispatches the same operators (nothing
// runs per parameter), and no multiplication pass over the gradients (the scale is the fused kernel's grad_scale).
TEST(OptimizerTraffic, AStepsPassesDoNotGrowWithTheParameters) {
  const CountedStep six = count_step(bf16_parameters(false), /*bucket_bytes=*/1 << 20);
  const CountedStep twelve = count_step(bf16_parameters(true), /*bucket_bytes=*/1 << 20);
  EXPECT_EQ(six.operators, twelve.operators) << "six parameters:\n" << six.listing << "twelve:\n" << twelve.listing;
  EXPECT_EQ(six.operators.count("aten::mul_"), 0u) << six.listing;
  EXPECT_EQ(six.operators.at("aten::_fused_adamw_"), 2) << "decayed and undecayed\n" << six.listing;
}

TEST(OptimizerTraffic, TheBucketsAreNeverZeroedWhole) {
  const std::vector<std::pair<std::string, torch::Tensor>> initial = {
      {"a.weight", torch::zeros({100})}, {"b.weight", torch::zeros({60})}, {"c.weight", torch::zeros({40})}};
  testing::OptimizerHarness harness(initial, /*bucket_bytes=*/1 << 20);
  GradientBuckets& buckets = *harness.gradients;
  ASSERT_EQ(buckets.buckets().size(), 1u);
  GradientBucket& bucket = buckets.buckets()[0];
  ASSERT_EQ(bucket.elements, 200);
  bucket.main_grad.fill_(std::nan(""));  // what an earlier step might have left behind, at its worst
  const torch::Tensor g1 = torch::randn({100}), g2 = torch::randn({100}), h = torch::randn({60});
  {
    OperatorCount count;
    OperatorCount::clear();
    buckets.begin_step();
    buckets.begin_micro_batch(false);
    buckets.accumulate(0, g1);
    buckets.accumulate(1, h);
    buckets.begin_micro_batch(true);
    buckets.accumulate(0, g2);  // c gets no gradient in this step
    buckets.finish();
    EXPECT_EQ(OperatorCount::of("aten::zero_"), 1) << "only c's range\n" << OperatorCount::listing();
    EXPECT_EQ(OperatorCount::of("aten::fill_"), 0) << OperatorCount::listing();
    EXPECT_EQ(OperatorCount::of("aten::copy_"), 2) << "a's and b's first gradients\n" << OperatorCount::listing();
    EXPECT_EQ(OperatorCount::of("aten::add_"), 1) << "a's second\n" << OperatorCount::listing();
  }
  const auto grad = [&](size_t k) {
    const ParameterSlot& slot = buckets.slots()[k];
    return bucket.main_grad.narrow(0, slot.offset, slot.numel);
  };
  EXPECT_TRUE(torch::equal(grad(0), g1 + g2)) << "copied, then added";
  EXPECT_TRUE(torch::equal(grad(1), h));
  EXPECT_TRUE(torch::equal(grad(2), torch::zeros({40}))) << "no gradient reached it: zero, not what was there";
}

}  // namespace
}  // namespace t5scale

namespace t5scale {
namespace {

struct SinkStep {
  std::vector<torch::Tensor> gradients;  // every slot's reduced gradient, in slot order
  int addmm = 0;                         // aten::addmm_ dispatched by the step
};

// One step of two micro-batches on a fresh tiny model, its linear weights' gradients into the buckets or not.
SinkStep step_with(bool into_buckets, torch::ScalarType dtype) {
  ModelConfig config = tiny_model_config(32);
  config.dropout_rate = 0.0;
  ProcessGrid grid = ProcessGrid::solo();
  T5Model model(config, grid.tp, dtype);
  model->initialize_weights(5);
  ParallelTrainingOptions options;
  options.precision = dtype == torch::kFloat32 ? Precision::kFp32 : Precision::kBf16;
  options.weight_gradients_into_buckets = into_buckets;
  ParallelTrainer trainer(model, grid, options);
  SyntheticTaskOptions task_options;
  task_options.vocab_size = 32;
  SyntheticTask task(task_options);
  const std::vector<Seq2SeqBatch> micro_batches = {task.next_batch(3), task.next_batch(3)};
  SinkStep out;
  {
    OperatorCount count;
    OperatorCount::clear();
    trainer.step(micro_batches, /*learning_rate=*/0.0);
    out.addmm = OperatorCount::of("aten::addmm_");
  }
  for (size_t k = 0; k < trainer.gradients().slots().size(); ++k) {
    out.gradients.push_back(trainer.gradients().gathered_grad(k));
  }
  return out;
}

int linear_weights(const T5Model& model) {
  int n = 0;
  for (const auto& item : model->named_modules()) {
    n += item.value()->as<ColumnParallelLinearImpl>() != nullptr || item.value()->as<RowParallelLinearImpl>() != nullptr;
  }
  return n;
}

// Gradient-accumulation fusion: each linear weight's gradient is one GEMM into its bucket (written by the first
// micro-batch, added by the second: one addmm_ each), the same gradients as through .grad: in fp32 to a few ulps (the
// GEMM adds into the bucket itself), in bf16 on the CPU (no mixed-dtype GEMM here: the same two operations) exactly.
TEST(OptimizerTraffic, LinearWeightGradientsGoStraightIntoTheBuckets) {
  ModelConfig config = tiny_model_config(32);
  ProcessGrid grid = ProcessGrid::solo();
  const int linears = linear_weights(T5Model(config, grid.tp, torch::kFloat32));
  ASSERT_GT(linears, 10);
  const SinkStep fused = step_with(true, torch::kFloat32), plain = step_with(false, torch::kFloat32);
  EXPECT_EQ(fused.addmm, linears) << "one accumulating GEMM per linear weight in the second micro-batch";
  EXPECT_EQ(plain.addmm, 0);
  ASSERT_EQ(fused.gradients.size(), plain.gradients.size());
  for (size_t k = 0; k < fused.gradients.size(); ++k) {
    EXPECT_TRUE(testing::tensors_close(msg("slot ", k), fused.gradients[k], plain.gradients[k], 1e-6));
  }
  const SinkStep fused16 = step_with(true, torch::kBFloat16), plain16 = step_with(false, torch::kBFloat16);
  for (size_t k = 0; k < fused16.gradients.size(); ++k) {
    EXPECT_TRUE(torch::equal(fused16.gradients[k], plain16.gradients[k])) << "bf16 slot " << k;
  }
}

// A trainer takes its sinks out of the model when it goes: the model's own backward fills .grad again.
TEST(OptimizerTraffic, AModelOutlivesItsTrainersSinks) {
  ModelConfig config = tiny_model_config(32);
  ProcessGrid grid = ProcessGrid::solo();
  T5Model model(config, grid.tp, torch::kFloat32);
  model->initialize_weights(5);
  { ParallelTrainer trainer(model, grid, ParallelTrainingOptions{}); }
  SyntheticTaskOptions task_options;
  task_options.vocab_size = 32;
  model->loss(SyntheticTask(task_options).next_batch(2)).backward();
  for (const auto& item : model->named_parameters()) {
    EXPECT_TRUE(item.value().grad().defined()) << item.key();
  }
}

}  // namespace
}  // namespace t5scale
