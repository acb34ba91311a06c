// AdamW's two paths, the fused ATen kernel (which takes the clipping and loss-scale factor as its grad_scale) and
// whole-bucket tensor operations, against LibTorch's own torch::optim::AdamW given the same gradients (clipped by
// torch::nn::utils::clip_grad_norm_ where ours clips), with weight decay on (and off for norms and biases).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <tuple>

#include "core/check.h"
#include "support/test_support.h"
#include "train/distributed_adamw.h"
#include "train/optimizer_harness.h"

namespace t5scale {
namespace {

constexpr int kSteps = 6;
constexpr double kLearningRate = 1e-2;
constexpr double kWeightDecay = 0.1;

std::vector<std::pair<std::string, torch::Tensor>> initial_parameters(torch::ScalarType dtype) {
  torch::manual_seed(11);
  return {{"encoder.blocks.0.self_attn.q.weight", torch::randn({12, 8}, dtype)},
          {"encoder.blocks.0.self_attn_norm.weight", 1.0 + 0.1 * torch::randn({8}, dtype)},
          {"encoder.relative_attention_bias.weight", torch::randn({6, 4}, dtype)},
          {"lm_head.weight", torch::randn({30, 8}, dtype)}};
}

std::vector<std::vector<torch::Tensor>> gradients_per_step(const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  torch::manual_seed(12);
  std::vector<std::vector<torch::Tensor>> out(kSteps);
  for (int s = 0; s < kSteps; ++s) {
    const double scale = std::pow(10.0, s % 3 - 1);  // 0.1, 1, 10: the second moment sees different scales
    for (const auto& entry : params) out[s].push_back(scale * torch::randn_like(entry.second));
  }
  return out;
}

// The parameters after kSteps steps of ours, with the fused kernel on or off. grad_scale != 1 checks that the
// scale reaches both paths the same way (the clipping and loss-scale factor).
std::vector<torch::Tensor> ours(torch::ScalarType dtype, FusedMode fused, double loss_scale, double max_grad_norm) {
  const auto params = initial_parameters(dtype);
  const auto grads = gradients_per_step(params);
  testing::OptimizerHarness harness(params, 512);  // several buckets
  AdamWOptions options;
  options.weight_decay = kWeightDecay;
  options.fused = fused;
  DistributedAdamW optimizer(*harness.gradients, harness.grid, options);
  EXPECT_EQ(optimizer.fused(), fused == FusedMode::kOn);
  for (int s = 0; s < kSteps; ++s) {
    std::vector<torch::Tensor> scaled;
    for (const auto& g : grads[s]) scaled.push_back(g * loss_scale);
    harness.set_gradients(scaled);
    GradientScaling scaling;
    scaling.loss_scale = loss_scale;
    scaling.max_grad_norm = max_grad_norm;
    optimizer.step(kLearningRate, scaling);
  }
  return harness.params;
}

// torch::optim::AdamW, after torch::nn::utils::clip_grad_norm_ where max_grad_norm > 0.
std::vector<torch::Tensor> libtorch_adamw(torch::ScalarType dtype, double max_grad_norm) {
  const auto params = initial_parameters(dtype);
  const auto grads = gradients_per_step(params);
  std::vector<torch::Tensor> tensors, decay, no_decay;
  for (const auto& [name, value] : params) {
    tensors.push_back(value.clone().set_requires_grad(true));
    (weight_decay_applies(name) ? decay : no_decay).push_back(tensors.back());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(kLearningRate).weight_decay(kWeightDecay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(kLearningRate).weight_decay(0.0)));
  torch::optim::AdamW reference(std::move(groups), torch::optim::AdamWOptions(kLearningRate));
  for (int s = 0; s < kSteps; ++s) {
    for (size_t k = 0; k < tensors.size(); ++k) tensors[k].mutable_grad() = grads[s][k].clone();
    if (max_grad_norm > 0.0) torch::nn::utils::clip_grad_norm_(tensors, max_grad_norm);
    reference.step();
  }
  return tensors;
}

TEST(FusedAdamW, FusedAndUnfusedEqualLibTorchAdamW) {
  ASSERT_TRUE(fused_adamw_supported(torch::kCPU, torch::kFloat32));
  ASSERT_TRUE(fused_adamw_supported(torch::kCPU, torch::kFloat64));
  const auto names = initial_parameters(torch::kFloat32);
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    // fp64: the same function, rounding ~1e-16 per operation. The parameters' change over the steps (about
    // kSteps x lr) is compared, so that an error in the update cannot hide behind the size of the weights.
    // fp32: every path rounds each stored parameter once per step (half an ulp, 2^-24 relative) besides its
    // update's own rounding (relative 1e-7 of a change 100 times smaller than the weight), so two paths stay within
    // 2 x kSteps x 2^-24 of each other, norm-wise, on the parameters.
    const double tolerance = dtype == torch::kFloat64 ? 1e-12 : 2.0 * kSteps * std::ldexp(1.0, -24);
    const auto initial = initial_parameters(dtype);
    // Clipped to a norm of 3: the gradients' norms here are about 2, 19 and 190 (368 elements drawn at 0.1, 1 and
    // 10), so two steps in three clip; checked below by the clipped run's distance from the unclipped one.
    const double clip = 3.0;
    const std::vector<std::tuple<std::string, std::vector<torch::Tensor>, double>> runs = {
        {"fused", ours(dtype, FusedMode::kOn, 1.0, 0.0), 0.0},
        {"unfused", ours(dtype, FusedMode::kOff, 1.0, 0.0), 0.0},
        {"fused, loss scale 1024", ours(dtype, FusedMode::kOn, 1024.0, 0.0), 0.0},
        {"unfused, loss scale 1024", ours(dtype, FusedMode::kOff, 1024.0, 0.0), 0.0},
        {"fused, clipped, loss scale 1024", ours(dtype, FusedMode::kOn, 1024.0, clip), clip},
        {"unfused, clipped, loss scale 1024", ours(dtype, FusedMode::kOff, 1024.0, clip), clip}};
    for (const auto& [run, result, max_grad_norm] : runs) {
      const auto reference = libtorch_adamw(dtype, max_grad_norm);
      double worst = 0.0;
      for (size_t k = 0; k < reference.size(); ++k) {
        const std::string what = msg(c10::toString(dtype), " ", run, ": ", names[k].first);
        if (dtype == torch::kFloat64) {
          EXPECT_TRUE(testing::tensors_close(what + " (change)", result[k] - initial[k].second,
                                             reference[k].detach() - initial[k].second, tolerance));
        } else {
          EXPECT_TRUE(testing::tensors_close(what, result[k], reference[k].detach(), tolerance));
        }
        worst = std::max(worst, dtype == torch::kFloat64
                                    ? testing::compare(result[k] - initial[k].second,
                                                       reference[k].detach() - initial[k].second).norm_rel_error
                                    : testing::compare(result[k], reference[k].detach()).norm_rel_error);
      }
      std::cout << c10::toString(dtype) << " " << run << " vs torch::optim::AdamW: worst norm rel error " << worst
                << " (tolerance " << tolerance << ")\n";
    }
    const auto& unclipped = std::get<1>(runs[2]);
    const auto& clipped = std::get<1>(runs[4]);
    EXPECT_GT(testing::compare(clipped[3], unclipped[3]).norm_rel_error, 100.0 * tolerance)
        << "clipping changed nothing: the clipped runs test no clipping";
  }
}

TEST(FusedAdamW, AutoUsesTheKernelOnTheCpu) {
  testing::OptimizerHarness harness({{"w", torch::ones({4, 4})}}, 1024);
  EXPECT_TRUE(DistributedAdamW(*harness.gradients, harness.grid, AdamWOptions{}).fused());
  AdamWOptions off;
  off.fused = FusedMode::kOff;
  EXPECT_FALSE(DistributedAdamW(*harness.gradients, harness.grid, off).fused());
}

}  // namespace
}  // namespace t5scale
