// Each parallel layer, the vocab-parallel cross-entropy and the whole T5 model on CUDA in fp32 (over the NCCL
// grid's one-rank TP group) against the same layer on the CPU in fp64, given the same weights and inputs: output,
// input gradient and every parameter gradient.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "gpu/gpu_test_support.h"
#include "model/parallel_layers.h"
#include "model/parallel_rng.h"
#include "model/t5_layers.h"
#include "model/t5_model.h"
#include "model/vocab_parallel_cross_entropy.h"
#include "support/operator_count.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

using testing::gpu_grid;
using testing::seeded_normal;
using testing::tensors_close;

// fp32 on CUDA against fp64: a layer's output element is a sum of K <= 64 products, whose rounding error is at
// most about K x 2^-24 = 3.8e-6 relative whatever order cuBLAS sums in (typically sqrt(K) x 2^-24 ~ 5e-7), and the
// whole tiny model's fp32 error against fp64 is about 1e-6 on the CPU (tests/mpi/test_grid_training.cpp); CUDA's
// kernels round with the same unit. 1e-5 leaves a factor of 10; a wrong kernel, transposition or stream order
// is off by O(1). It holds only without TF32, which LibTorch leaves off for fp32 matmuls unless asked.
constexpr double kTolerance = 1e-5;

torch::TensorOptions on_cuda() { return torch::TensorOptions().dtype(torch::kFloat32).device(gpu_grid().device()); }
torch::TensorOptions on_cpu() { return torch::TensorOptions().dtype(torch::kFloat64); }
CommunicatorPtr cpu_tp() { return std::make_shared<SoloCommunicator>("tp"); }

// Gives `module` the reference's parameter values, converted to its dtype and device.
void copy_parameters(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  auto source = from.named_parameters();
  for (auto& entry : to.named_parameters()) entry.value().copy_(source[entry.key()]);
}

// The layer built by `make` on the CPU in fp64 (random weights) and on CUDA in fp32 (the same weights): output and
// gradients for the same input and upstream gradient. Index inputs (embeddings) get no input gradient.
template <typename Make>
void expect_cuda_matches_cpu(const std::string& what, Make make, const torch::Tensor& input, uint64_t seed) {
  ASSERT_FALSE(at::globalContext().allowTF32CuBLAS()) << "TF32 is on: the fp32 tolerance does not hold";
  auto reference = make(on_cpu(), cpu_tp());
  auto layer = make(on_cuda(), gpu_grid().tp);
  {
    torch::NoGradGuard no_grad;
    uint64_t k = seed;
    for (auto& p : reference->parameters()) p.copy_(0.3 * seeded_normal(p.sizes().vec(), ++k));
  }
  copy_parameters(*reference, *layer);
  const bool differentiable = input.is_floating_point();
  const torch::Tensor x_ref = differentiable ? input.clone().requires_grad_(true) : input;
  const torch::Tensor x = differentiable ? input.to(on_cuda()).requires_grad_(true) : input.to(gpu_grid().device());
  const torch::Tensor y_ref = reference->forward(x_ref);
  const torch::Tensor y = layer->forward(x);
  const torch::Tensor upstream = seeded_normal(y_ref.sizes().vec(), seed + 100);
  (y_ref * upstream).sum().backward();
  (y * upstream.to(on_cuda())).sum().backward();
  EXPECT_TRUE(tensors_close(what + " output", y.cpu(), y_ref, kTolerance));
  if (differentiable) EXPECT_TRUE(tensors_close(what + " input grad", x.grad().cpu(), x_ref.grad(), kTolerance));
  auto grads = reference->named_parameters();
  for (const auto& entry : layer->named_parameters()) {
    EXPECT_TRUE(tensors_close(what + " grad " + entry.key(), entry.value().grad().cpu(), grads[entry.key()].grad(),
                              kTolerance));
  }
}

TEST(CudaLayers, ColumnParallelLinear) {
  expect_cuda_matches_cpu(
      "column-parallel",
      [](torch::TensorOptions options, CommunicatorPtr tp) {
        return ColumnParallelLinear(ColumnParallelLinearOptions(48, 64).param_options(options), tp);
      },
      seeded_normal({3, 7, 48}, 1), 10);
}

TEST(CudaLayers, RowParallelLinear) {
  expect_cuda_matches_cpu(
      "row-parallel",
      [](torch::TensorOptions options, CommunicatorPtr tp) {
        return RowParallelLinear(RowParallelLinearOptions(64, 40).param_options(options), tp);
      },
      seeded_normal({3, 7, 64}, 2), 20);
}

// RMSNorm on CUDA runs ATen's fused kernel (one each way); the CPU's fp64 reference is T5's formula.
TEST(CudaLayers, RMSNorm) {
  expect_cuda_matches_cpu(
      "rms-norm",
      [](torch::TensorOptions options, CommunicatorPtr tp) { return RMSNorm(64, 1e-6, tp, options); },
      seeded_normal({3, 7, 64}, 7) * 2.0, 70);
}

// In bf16 the fused kernel computes T5's norm in fp32 and rounds once, as on the CPU: at most one bf16 unit apart
// from the CPU's result (the fp32 sums may be added in another order).
TEST(CudaLayers, RMSNormBf16RoundsOnce) {
  RMSNorm cpu_norm(256, 1e-6, cpu_tp(), torch::TensorOptions().dtype(torch::kBFloat16));
  RMSNorm cuda_norm(256, 1e-6, cpu_tp(), torch::TensorOptions().dtype(torch::kBFloat16).device(gpu_grid().device()));
  {
    torch::NoGradGuard no_grad;  // parameters are allocated, not initialised: give the weight values of its own
    cpu_norm->weight.copy_(1.0 + 0.2 * seeded_normal({256}, 9));
  }
  copy_parameters(*cpu_norm, *cuda_norm);
  const torch::Tensor x = (seeded_normal({4, 9, 256}, 8) * 3.0).to(torch::kBFloat16);
  torch::NoGradGuard no_grad;
  const torch::Tensor on_cpu_result = cpu_norm(x).to(torch::kFloat64);
  const torch::Tensor on_cuda_result = cuda_norm(x.to(gpu_grid().device())).cpu().to(torch::kFloat64);
  const torch::Tensor apart =
      (on_cuda_result - on_cpu_result).abs() / torch::maximum(on_cpu_result.abs(), on_cuda_result.abs()).clamp_min(1e-30);
  EXPECT_LE(apart.max().item<double>(), std::ldexp(1.0, -7));
}

TEST(CudaLayers, VocabParallelEmbedding) {
  const torch::Tensor ids = torch::randint(0, 96, {4, 9}, at::make_generator<at::CPUGeneratorImpl>(3));
  expect_cuda_matches_cpu(
      "embedding",
      [](torch::TensorOptions options, CommunicatorPtr tp) {
        return VocabParallelEmbedding(VocabParallelEmbeddingOptions(96, 32).param_options(options), tp);
      },
      ids, 30);
}

TEST(CudaLayers, VocabParallelCrossEntropy) {
  const int64_t vocab = 96;
  const torch::Tensor logits = seeded_normal({4, 6, vocab}, 4) * 3.0;
  torch::Tensor labels = torch::randint(0, vocab, {4, 6}, at::make_generator<at::CPUGeneratorImpl>(5));
  labels.index_put_({1, 2}, kIgnoreIndex);
  const torch::Tensor ref_logits = logits.clone().requires_grad_(true);
  const torch::Tensor cuda_logits = logits.to(on_cuda()).requires_grad_(true);
  const torch::Tensor ref_loss = vocab_parallel_cross_entropy(ref_logits, labels, 0, *cpu_tp());
  const torch::Tensor loss = vocab_parallel_cross_entropy(cuda_logits, labels.to(gpu_grid().device()), 0,
                                                          *gpu_grid().tp);
  const torch::Tensor weights = seeded_normal({4, 6}, 6);
  (ref_loss * weights).sum().backward();
  (loss * weights.to(on_cuda())).sum().backward();
  EXPECT_TRUE(tensors_close("per-token loss", loss.cpu(), ref_loss, kTolerance));
  EXPECT_TRUE(tensors_close("logits grad", cuda_logits.grad().cpu(), ref_logits.grad(), kTolerance));
}

TEST(CudaLayers, WholeT5Model) {
  for (bool v1_1 : {false, true}) {
    ModelConfig config = tiny_model_config(64);
    config.dropout_rate = 0.0;  // CPU and CUDA draw different masks
    config.feed_forward = v1_1 ? FeedForwardKind::kGatedGelu : FeedForwardKind::kRelu;
    config.tie_word_embeddings = !v1_1;
    const std::string what = v1_1 ? "v1.1 model" : "v1.0 model";
    T5Model reference(config, cpu_tp(), on_cpu());
    reference->initialize_weights(41);
    T5Model model(config, gpu_grid().tp, on_cuda());
    copy_parameters(*reference, *model);

    const torch::Tensor ids = torch::randint(3, 64, {3, 11}, at::make_generator<at::CPUGeneratorImpl>(42));
    torch::Tensor mask = torch::ones({3, 11}, torch::kLong);
    mask.index_put_({2, torch::indexing::Slice(6, torch::indexing::None)}, 0);
    torch::Tensor labels = torch::randint(3, 64, {3, 7}, at::make_generator<at::CPUGeneratorImpl>(43));
    labels.index_put_({1, torch::indexing::Slice(5, torch::indexing::None)}, kIgnoreIndex);
    const auto device = gpu_grid().device();

    const torch::Tensor ref_logits = reference->forward(ids, mask, reference->shift_right(labels));
    const torch::Tensor ref_loss = reference->token_losses(ref_logits, labels).sum();
    const torch::Tensor logits = model->forward(ids.to(device), mask.to(device), model->shift_right(labels).to(device));
    const torch::Tensor loss = model->token_losses(logits, labels.to(device)).sum();
    EXPECT_TRUE(tensors_close(what + " logits", logits.cpu(), ref_logits, kTolerance));
    EXPECT_TRUE(tensors_close(what + " loss", loss.cpu().view({1}), ref_loss.view({1}), kTolerance));
    ref_loss.backward();
    loss.backward();
    auto grads = reference->named_parameters();
    for (const auto& entry : model->named_parameters()) {
      EXPECT_TRUE(tensors_close(what + " grad " + entry.key(), entry.value().grad().cpu(), grads[entry.key()].grad(),
                                kTolerance));
    }
  }
}

// Each attention call site runs the SDPA kernel it is pinned to: memory-efficient with the position bias (the
// kernel that returns the bias's gradient), flash for bf16 without a mask. (Forward counted: CUDA's backward runs
// on the autograd engine's device thread, which a thread-local count does not see; it is the forward kernel's own.)
TEST(CudaLayers, SdpaRunsThePinnedKernels) {
  ModelConfig config = tiny_model_config(64);
  config.dropout_rate = 0.1;
  const auto device = gpu_grid().device();
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(device);
  T5Attention attention(config, gpu_grid().tp, std::make_shared<ParallelRng>(1, 0, device), bf16);
  attention->kernel = AttentionKernel::kSdpa;
  attention->train();
  {
    torch::NoGradGuard no_grad;  // parameters are allocated, not initialised
    uint64_t k = 60;
    for (auto& p : attention->parameters()) p.copy_(0.2 * seeded_normal(p.sizes().vec(), ++k));
  }
  const torch::Tensor hidden = torch::randn({2, 16, config.d_model}, bf16).requires_grad_(true);
  const torch::Tensor bias = torch::randn({1, config.num_heads, 16, 16}, bf16).requires_grad_(true);
  for (const bool with_bias : {true, false}) {
    const std::string kernel = with_bias ? "aten::_scaled_dot_product_efficient_attention"
                                         : "aten::_scaled_dot_product_flash_attention";
    torch::Tensor out;
    {
      testing::OperatorCount count;
      testing::OperatorCount::clear();
      out = attention(hidden, with_bias ? bias : torch::Tensor());
      EXPECT_EQ(testing::OperatorCount::of(kernel), 1) << testing::OperatorCount::listing();
    }
    out.to(torch::kFloat32).sum().backward();
  }
  ASSERT_TRUE(bias.grad().defined()) << "no gradient for the bias";
  const double bias_grad_sum = bias.grad().to(torch::kFloat64).abs().sum().item<double>();
  EXPECT_TRUE(std::isfinite(bias_grad_sum) && bias_grad_sum > 0.0) << "the bias's gradient sums to " << bias_grad_sum;
}

// Activation checkpointing recomputes a block as its forward ran: the cross-attention mask, which does not require
// grad, does not require it in the recompute either, and each call site's SDPA kernel is pinned, so the recompute
// runs the same kernel and draws the same dropout masks. The forward is the same kernel sequence (logits and loss equal bit for bit); the
// gradients are compared to 1e-6, since SDPA's backward on CUDA may accumulate in a run-dependent order, while a
// different dropout mask moves them by O(1).
TEST(CudaLayers, CheckpointedStepWithDropoutEqualsTheStepWithout) {
  ModelConfig config = tiny_model_config(64);
  config.dropout_rate = 0.2;
  const auto device = gpu_grid().device();
  const torch::Tensor ids = torch::randint(3, 64, {3, 11}, at::make_generator<at::CPUGeneratorImpl>(52)).to(device);
  torch::Tensor mask = torch::ones({3, 11}, torch::kLong);
  mask.index_put_({2, torch::indexing::Slice(6, torch::indexing::None)}, 0);
  mask = mask.to(device);
  const torch::Tensor labels = torch::randint(3, 64, {3, 7}, at::make_generator<at::CPUGeneratorImpl>(53)).to(device);
  std::map<std::string, torch::Tensor> results[2];
  for (int every : {0, 1}) {
    torch::manual_seed(21);
    auto rng = std::make_shared<ParallelRng>(5, /*tp_rank=*/0, device);
    T5Model model(config, gpu_grid().tp, on_cuda(), rng);
    model->initialize_weights(4);
    model->set_attention_kernel(AttentionKernel::kSdpa);
    model->set_activation_checkpointing(every);
    model->train();
    const torch::Tensor logits = model->forward(ids, mask, model->shift_right(labels));
    const torch::Tensor loss = model->token_losses(logits, labels).sum();
    loss.backward();
    results[every]["logits"] = logits.detach().cpu();
    results[every]["loss"] = loss.detach().cpu().view({1});
    for (const auto& item : model->named_parameters()) results[every][item.key() + ".grad"] = item.value().grad().cpu();
  }
  EXPECT_TRUE(torch::equal(results[1].at("logits"), results[0].at("logits")));
  EXPECT_TRUE(torch::equal(results[1].at("loss"), results[0].at("loss")));
  for (const auto& [name, expected] : results[0]) {
    EXPECT_TRUE(tensors_close(name + " with checkpointing", results[1].at(name), expected, 1e-6));
  }
}

}  // namespace
}  // namespace t5scale
