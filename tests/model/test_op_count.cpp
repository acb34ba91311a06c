// The ATen operators one T5 block dispatches in a training step, forward and backward, counted on the CPU
// (support/operator_count.h: every operator, nested ones included). The counts are the hot path's size: a change that adds kernels to it fails here and has to say so by
// changing the expectation. Counted for an encoder and a decoder block of t5-v1_1's structure (gated GELU) with
// dropout, both attention kernels, fp32; the failure lists every operator by name and count. The expectations hold for
// LibTorch 2.11's decompositions.
#include <gtest/gtest.h>
#include <torch/version.h>

#include <map>
#include <sstream>

#include "core/check.h"
#include "model/parallel_rng.h"
#include "model/t5_layers.h"
#include "support/operator_count.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

using testing::OperatorCount;

struct Counted {
  int forward = 0, backward = 0;
  std::string forward_listing, backward_listing;
};

Counted count_block_step(bool decoder, AttentionKernel kernel) {
  ModelConfig config = tiny_model_config(64);
  config.feed_forward = FeedForwardKind::kGatedGelu;
  config.dropout_rate = 0.1;
  auto rng = std::make_shared<ParallelRng>(3, /*tp_rank=*/0);
  const auto options = torch::TensorOptions().dtype(torch::kFloat32);
  T5Block block(config, decoder, std::make_shared<SoloCommunicator>("tp"), rng, options);
  for (const auto& module : block->modules()) {
    if (auto* attention = module->as<T5AttentionImpl>()) attention->kernel = kernel;
  }
  block->train();
  const int64_t rows = 2, length = 6;
  const torch::Tensor hidden = torch::randn({rows, length, config.d_model}, options).requires_grad_(true);
  const torch::Tensor bias = torch::randn({1, config.num_heads, length, length}, options).requires_grad_(true);
  const torch::Tensor encoder_output = torch::randn({rows, length, config.d_model}, options).requires_grad_(true);
  const torch::Tensor cross_mask = torch::zeros({rows, 1, 1, length}, options);
  Counted counted;
  torch::Tensor output;
  {
    OperatorCount count;
    OperatorCount::counts().clear();
    output = block->forward(hidden, bias, decoder ? encoder_output : torch::Tensor(),
                            decoder ? cross_mask : torch::Tensor());
    counted.forward = OperatorCount::total();
    counted.forward_listing = OperatorCount::listing();
  }
  const torch::Tensor upstream = torch::ones_like(output);
  {
    OperatorCount count;
    OperatorCount::counts().clear();
    output.backward(upstream);
    counted.backward = OperatorCount::total();
    counted.backward_listing = OperatorCount::listing();
  }
  return counted;
}

TEST(OperatorCounts, OneBlockForwardAndBackward) {
  struct Expected {
    bool decoder;
    AttentionKernel kernel;
    int forward, backward;
  };
  // The norms count as their CPU composite here (aten::rms_norm, then _fused_rms_norm and the operators it is made
  // of); on CUDA the same call is one kernel forward and one backward.
  const Expected expected[] = {
      {false, AttentionKernel::kExplicit, 248, 344},
      {false, AttentionKernel::kSdpa, 264, 345},
      {true, AttentionKernel::kExplicit, 409, 560},
      {true, AttentionKernel::kSdpa, 441, 562},
  };
  for (const Expected& e : expected) {
    const Counted counted = count_block_step(e.decoder, e.kernel);
    const std::string which = msg(e.decoder ? "decoder" : "encoder", " block, ",
                                  e.kernel == AttentionKernel::kSdpa ? "sdpa" : "explicit", " attention (LibTorch ",
                                  TORCH_VERSION, ")");
    std::printf("%s: forward %d, backward %d operators\n", which.c_str(), counted.forward, counted.backward);
    EXPECT_EQ(counted.forward, e.forward) << which << ", forward:\n" << counted.forward_listing;
    EXPECT_EQ(counted.backward, e.backward) << which << ", backward:\n" << counted.backward_listing;
  }
}

}  // namespace
}  // namespace t5scale
