// cuDNN's fused attention (dist/fused_attention.h) through the model's cudnn kernel, on CUDA: against the
// memory-efficient SDPA kernel on the same device and against the explicit kernel on the CPU in fp64, in fp32 (where
// cuDNN does not take the call and the sdpa kernel runs, as the model says) and bf16; outputs and every gradient,
// the position bias's included; dropout's rate, and a recomputed block's mask equal to its forward's.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu/gpu_test_support.h"
#include "model/activation_checkpoint.h"
#include "model/parallel_rng.h"
#include "model/t5_layers.h"
#include "model/t5_model.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

using testing::gpu_grid;
using testing::seeded_normal;

CommunicatorPtr solo() { return std::make_shared<SoloCommunicator>("tp"); }

// ‖a − b‖ / ‖b‖ for one tensor.
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.to(torch::kCPU, torch::kFloat64), y = b.to(torch::kCPU, torch::kFloat64);
  EXPECT_TRUE(torch::isfinite(x).all().item<bool>()) << "non-finite values";
  return ((x - y).norm() / y.norm()).item<double>();
}

// The tiny model with 4 heads of 64 (T5-v1.1's head dim) and the given dropout.
ModelConfig attention_config(double dropout) {
  ModelConfig config = tiny_model_config(64);
  config.num_heads = 4;
  config.d_kv = 64;
  config.dropout_rate = dropout;
  return config;
}

// One attention core with its inputs' gradients: output, dq, dk, dv, dbias (undefined without a bias).
struct CoreRun {
  torch::Tensor output, query, key, value, bias;
};

// T5's three call sites: the encoder's padded, biased self-attention, the decoder's causal biased self-attention,
// the decoder's cross-attention over padded keys, without a bias. Batch 3, heads 4 of d_kv 64 (T5-v1.1's head dim).
struct CallSite {
  const char* name;
  int64_t query_length, key_length;
  bool bias, causal, padded;
};
const CallSite kCallSites[] = {{"encoder self-attention", 147, 147, true, false, true},
                               {"decoder self-attention", 26, 26, true, true, false},
                               {"cross-attention", 26, 147, false, false, true}};
constexpr int64_t kBatch = 3;

// A T5 attention layer whose core runs the call site's call on seeded q, k, v (laid out as the projections make
// them) and (1, H, T, S) bias, the gradient of sum(output * weights) taken.
CoreRun run_core(AttentionKernel kernel, torch::Device device, torch::ScalarType dtype, const CallSite& site) {
  const ModelConfig config = attention_config(0.0);
  auto rng = std::make_shared<ParallelRng>(1, 0, device);
  T5Attention attention(config, solo(), rng, torch::TensorOptions().dtype(dtype).device(device));
  attention->kernel = kernel;
  attention->train();  // cuDNN runs training's calls (dropout 0 here)
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  auto input = [&](int64_t length, uint64_t s) {  // (B, H, L, D) views of (B, L, H, D) tensors
    return seeded_normal({kBatch, length, 4, 64}, s).to(options).transpose(1, 2).detach().requires_grad_(true);
  };
  torch::Tensor q = input(site.query_length, 11), k = input(site.key_length, 12), v = input(site.key_length, 13);
  torch::Tensor bias;
  if (site.bias) bias = seeded_normal({1, 4, site.query_length, site.key_length}, 14).to(options).requires_grad_(true);
  AttentionMasking masking;
  masking.causal = site.causal;
  if (site.padded) {
    masking.key_lengths = torch::tensor({site.key_length, site.key_length - 40, 1}, torch::kInt32).to(device);
  }
  // The cudnn kernel takes the masks apart; the others get them in the bias, as the stack gives them.
  const torch::Tensor output =
      kernel == AttentionKernel::kCudnn
          ? attention->core_kept(q, k, v, bias, masking)
          : attention->core_kept(q, k, v, masking.any() ? bias_with_masks(bias, masking, site.query_length,
                                                                          site.key_length, dtype, device)
                                                        : bias);
  if (kernel == AttentionKernel::kCudnn && dtype != torch::kFloat32) {
    EXPECT_TRUE(attention->cudnn_refusals.empty()) << site.name << ": " << *attention->cudnn_refusals.begin();
  }
  const torch::Tensor weights = seeded_normal(output.sizes().vec(), 15).to(options);
  (output * weights).sum().backward();
  return {output.detach(), q.grad(), k.grad(), v.grad(), site.bias ? bias.grad() : torch::Tensor()};
}

// bf16: cuDNN's result against the memory-efficient kernel's on the same bf16 inputs, both against fp64 on the CPU.
// Each half-precision kernel rounds its output and gradients to bf16 (8 bits: 2^-9 = 2e-3 relative per element,
// and a few times that through the softmax's backward); the bound asks cuDNN to be as accurate as the efficient
// kernel against fp64 within 2x, or within 1e-2 (a norm-wise error some 5x bf16's rounding).
TEST(CudnnAttention, Bf16MatchesTheEfficientKernelAndFp64) {
  if (!testing::cudnn_attention_available()) GTEST_SKIP() << "cuDNN's fused attention is not available here";
  const torch::Device cuda = gpu_grid().device();
  for (const CallSite& site : kCallSites) {
    const CoreRun cudnn = run_core(AttentionKernel::kCudnn, cuda, torch::kBFloat16, site);
    const CoreRun efficient = run_core(AttentionKernel::kSdpa, cuda, torch::kBFloat16, site);
    const CoreRun exact = run_core(AttentionKernel::kExplicit, torch::kCPU, torch::kFloat64, site);
    const std::vector<std::pair<const char*, torch::Tensor CoreRun::*>> parts = {
        {"output", &CoreRun::output}, {"dq", &CoreRun::query}, {"dk", &CoreRun::key}, {"dv", &CoreRun::value},
        {"dbias", &CoreRun::bias}};
    for (const auto& [name, part] : parts) {
      if (!(exact.*part).defined()) continue;
      ASSERT_TRUE((cudnn.*part).defined()) << site.name << ": cuDNN gave no " << name;
      const double cudnn_error = relative_error(cudnn.*part, exact.*part);
      const double efficient_error = relative_error(efficient.*part, exact.*part);
      EXPECT_LE(cudnn_error, std::max(2.0 * efficient_error, 1e-2))
          << site.name << " " << name << ": cuDNN " << cudnn_error << ", efficient " << efficient_error;
    }
  }
}

// fp32: cuDNN takes no fp32 call; the sdpa kernel runs it (the sdpa kernel's result) and the model says so.
TEST(CudnnAttention, Fp32RunsTheSdpaKernelAndSaysSo) {
  const torch::Device cuda = gpu_grid().device();
  for (const CallSite& site : kCallSites) {
    const CoreRun cudnn = run_core(AttentionKernel::kCudnn, cuda, torch::kFloat32, site);
    const CoreRun sdpa = run_core(AttentionKernel::kSdpa, cuda, torch::kFloat32, site);
    // The forward bit for bit; the efficient kernel's backward may sum in another order from run to run.
    EXPECT_TRUE(torch::equal(cudnn.output, sdpa.output)) << site.name;
    EXPECT_LE(relative_error(cudnn.query, sdpa.query), 1e-6) << site.name;
    if (site.bias) EXPECT_LE(relative_error(cudnn.bias, sdpa.bias), 1e-6) << site.name;
  }
  EXPECT_EQ(attention_kernels_description(AttentionKernel::kCudnn, cuda, torch::kFloat32).rfind("cudnn refused (fp32", 0),
            0u);
}

// Dropout: cuDNN keeps each probability with probability 1 - p (T5's rate, not another) and scales by 1 / (1 - p).
// With v = the identity over the keys (S = D) and no bias, each output row is a row of the dropped, scaled
// probabilities; a kept entry is (1 / (1 - p)) x softmax > 0, a dropped one 0. Over B x H x T x S = 3 x 4 x 64 x 64
// = 49,152 entries the kept fraction's standard deviation is sqrt(0.9 x 0.1 / 49152) = 0.0014: within 0.01 of 0.9
// (7 deviations) holds by chance always, and a rate rounded to 1/16 (0.0625 or 0.125) is 0.025 away.
TEST(CudnnAttention, DropoutHasT5sRateAndRepeatsFromItsSeedAndOffset) {
  if (!testing::cudnn_attention_available()) GTEST_SKIP() << "cuDNN's fused attention is not available here";
  const torch::Device cuda = gpu_grid().device();
  const ModelConfig config = attention_config(0.1);
  auto rng = std::make_shared<ParallelRng>(3, 0, cuda);
  T5Attention attention(config, solo(), rng, torch::TensorOptions().dtype(torch::kBFloat16).device(cuda));
  attention->kernel = AttentionKernel::kCudnn;
  attention->train();
  const auto options = torch::TensorOptions().dtype(torch::kBFloat16).device(cuda);
  const torch::Tensor q = torch::zeros({3, 64, 4, 64}, options).transpose(1, 2);  // uniform probabilities 1/64
  const torch::Tensor k = torch::zeros({3, 64, 4, 64}, options).transpose(1, 2);
  const torch::Tensor v = torch::eye(64, options).expand({3, 4, 64, 64}).transpose(1, 2).contiguous().transpose(1, 2);
  const ParallelRng::State before = rng->get_state();
  const torch::Tensor first = attention->core_kept(q, k, v, torch::Tensor());
  ASSERT_TRUE(attention->cudnn_refusals.empty()) << *attention->cudnn_refusals.begin();
  const double kept = (first > 0).to(torch::kFloat64).mean().item<double>();
  EXPECT_NEAR(kept, 0.9, 0.01);
  // Each kept value is (1/64) / 0.9 in bf16.
  const double scaled = first.masked_select(first > 0).to(torch::kFloat64).mean().item<double>();
  EXPECT_NEAR(scaled, 1.0 / 64.0 / 0.9, 1.0 / 64.0 / 0.9 * 4e-3);
  // The same generator state draws the same mask (what a recomputed block does); the next call another.
  const torch::Tensor next = attention->core_kept(q, k, v, torch::Tensor());
  EXPECT_FALSE(torch::equal(next, first));
  rng->set_state(before);
  EXPECT_TRUE(torch::equal(attention->core_kept(q, k, v, torch::Tensor()), first));
}

// A checkpointed block's recomputation with dropout: the bf16 model's step with cuDNN's attention is the same bit for
// bit with activation checkpointing and with selective recomputation as without (the mask drawn again from the saved
// seed and offset, the maskings kept for the recompute).
TEST(CudnnAttention, RecomputedBlocksDrawTheSameMasks) {
  if (!testing::cudnn_attention_available()) GTEST_SKIP() << "cuDNN's fused attention is not available here";
  const torch::Device cuda = gpu_grid().device();
  const ModelConfig config = attention_config(0.1);
  const torch::Tensor ids = torch::randint(3, 64, {4, 40}, torch::TensorOptions().dtype(torch::kLong)).to(cuda);
  torch::Tensor mask = torch::ones({4, 40}, torch::TensorOptions().dtype(torch::kLong)).to(cuda);
  mask.index_put_({1, torch::indexing::Slice(25, torch::indexing::None)}, 0);
  const torch::Tensor labels = torch::randint(3, 64, {4, 16}, torch::TensorOptions().dtype(torch::kLong)).to(cuda);
  auto step = [&](int64_t every, bool selective) {
    auto rng = std::make_shared<ParallelRng>(9, 0, cuda);
    T5Model model(config, solo(), torch::TensorOptions().dtype(torch::kBFloat16).device(cuda), rng);
    model->initialize_weights(10);
    model->set_attention_kernel(AttentionKernel::kCudnn);
    model->set_activation_checkpointing(every);
    model->set_selective_recomputation(selective);
    model->train();
    torch::manual_seed(11);
    const torch::Tensor logits = model->forward(ids, mask, model->shift_right(labels));
    model->token_losses(logits, labels).sum().backward();
    EXPECT_EQ(model->attention_kernels().find("did not take"), std::string::npos) << model->attention_kernels();
    std::map<std::string, torch::Tensor> out = {{"logits", logits.detach()}};
    for (const auto& item : model->named_parameters()) out[item.key() + ".grad"] = item.value().grad();
    return out;
  };
  const auto plain = step(0, false);
  for (const auto& [every, selective] : {std::pair<int64_t, bool>{1, false}, {0, true}}) {
    const auto recomputed = step(every, selective);
    for (const auto& [name, expected] : plain) {
      EXPECT_TRUE(torch::equal(recomputed.at(name), expected))
          << name << " differs with " << (selective ? "selective recomputation" : "checkpointing");
    }
  }
}

}  // namespace
}  // namespace t5scale
