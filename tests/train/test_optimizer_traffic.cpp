// The passes over memory of the step's gradient and optimizer traffic, counted by operator (support/
// operator_count.h): a bf16 model's parameters are views of one flat buffer per bucket, written back with one copy per
// bucket whatever the number of parameters; fused AdamW takes the clipping and loss-scale factor in its own pass; the
// buckets are never zeroed whole (the first gradient of a step is copied in, what none reached is zeroed alone).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/check.h"
#include "support/operator_count.h"
#include "support/test_support.h"
#include "train/distributed_adamw.h"
#include "train/optimizer_harness.h"

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
