// cuDNN's fused attention, what needs no GPU: the shapes it takes, its graph cache's keys, the choice per call site.
#include <gtest/gtest.h>

#include <unordered_set>

#include "dist/fused_attention.h"
#include "model/t5_layers.h"

namespace t5scale {
namespace {

// T5-3B's biased self-attention at 147 tokens in bf16 on an H200: what the fused kernel is for.
FusedAttentionShape t5_3b_self_attention() {
  FusedAttentionShape s;
  s.batch = 64;
  s.heads = 32;
  s.query_length = s.key_length = 147;
  s.head_dim = 128;
  s.dtype = AttentionDtype::kBf16;
  s.bias = true;
  s.dropout = 0.1;
  s.compute_capability_major = 9;
  return s;
}

TEST(FusedAttention, TakesT5sCallsInHalfPrecision) {
  FusedAttentionShape s = t5_3b_self_attention();
  EXPECT_EQ(fused_attention_refusal(s), "");
  s.dtype = AttentionDtype::kFp16;
  s.causal = true;
  s.head_dim = 64;  // v1.1 XXL
  EXPECT_EQ(fused_attention_refusal(s), "");
  s.bias = false;
  s.causal = false;
  s.padded = true;  // cross-attention of a padded batch
  s.query_length = 26;
  s.dropout = 0.0;
  EXPECT_EQ(fused_attention_refusal(s), "");
  s.compute_capability_major = 0;  // the device not known: its rules are not applied
  EXPECT_EQ(fused_attention_refusal(s), "");
}

TEST(FusedAttention, RefusesWhatItDoesNotTakeWithTheReason) {
  FusedAttentionShape s = t5_3b_self_attention();
  s.dtype = AttentionDtype::kFp32;
  EXPECT_EQ(fused_attention_refusal(s), "fp32 (cuDNN's fused attention takes fp16 and bf16)");
  s = t5_3b_self_attention();
  s.compute_capability_major = 7;
  EXPECT_EQ(fused_attention_refusal(s), "sm7x (cuDNN's fused attention needs sm80 or newer)");
  for (const int64_t head_dim : {60, 136, 256}) {
    s = t5_3b_self_attention();
    s.head_dim = head_dim;
    EXPECT_EQ(fused_attention_refusal(s), "head dim " + std::to_string(head_dim) +
                                              " (cuDNN's fused attention is used for multiples of 8 up to 128)");
  }
  s = t5_3b_self_attention();
  s.bias = false;
  s.bias_per_row = true;
  EXPECT_NE(fused_attention_refusal(s).find("a bias that is not (1, H, Sq, Skv)"), std::string::npos)
      << fused_attention_refusal(s);
  s = t5_3b_self_attention();
  s.dropout = 1.0;
  EXPECT_EQ(fused_attention_refusal(s), "dropout 1 (cuDNN's fused attention takes 0 <= p < 1)");
  s = t5_3b_self_attention();
  s.batch = 0;
  EXPECT_EQ(fused_attention_refusal(s), "an empty batch");
}

// Every field that changes the graph changes the key; equal calls share one graph.
TEST(FusedAttention, GraphKeysDifferInEverythingThatChangesTheGraph) {
  FusedAttentionGraphKey base;
  base.shape = t5_3b_self_attention();
  const int64_t bshd[4] = {147 * 32 * 128, 128, 32 * 128, 1};
  for (int i = 0; i < 4; ++i) base.q_strides[i] = base.k_strides[i] = base.v_strides[i] = base.o_strides[i] = bshd[i];
  std::vector<FusedAttentionGraphKey> keys = {base};
  auto vary = [&](auto change) {
    FusedAttentionGraphKey key = base;
    change(key);
    keys.push_back(key);
  };
  vary([](auto& k) { k.backward = true; });
  vary([](auto& k) { k.backward = true, k.bias_gradient = true; });
  vary([](auto& k) { k.device = 1; });
  vary([](auto& k) { k.shape.batch = 32; });
  vary([](auto& k) { k.shape.heads = 16; });
  vary([](auto& k) { k.shape.query_length = 152; });
  vary([](auto& k) { k.shape.key_length = 152; });
  vary([](auto& k) { k.shape.head_dim = 64; });
  vary([](auto& k) { k.shape.dtype = AttentionDtype::kFp16; });
  vary([](auto& k) { k.shape.bias = false; });
  vary([](auto& k) { k.shape.causal = true; });
  vary([](auto& k) { k.shape.padded = true; });
  vary([](auto& k) { k.shape.dropout = 0.0; });
  vary([](auto& k) { k.q_strides[1] = 147 * 128; });
  vary([](auto& k) { k.k_strides[2] = 3 * 32 * 128; });
  vary([](auto& k) { k.v_strides[0] = 1; });
  vary([](auto& k) { k.o_strides[2] = 128; });
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t j = 0; j < keys.size(); ++j) {
      EXPECT_EQ(keys[i] == keys[j], i == j) << keys[i].text() << " against " << keys[j].text();
    }
  }
  FusedAttentionGraphKey same = base;
  EXPECT_TRUE(same == base);
  EXPECT_EQ(FusedAttentionGraphKeyHash()(same), FusedAttentionGraphKeyHash()(base));
  std::unordered_set<FusedAttentionGraphKey, FusedAttentionGraphKeyHash> cache(keys.begin(), keys.end());
  EXPECT_EQ(cache.size(), keys.size());
  EXPECT_EQ(base.text(), "forward bf16 B=64 H=32 Sq=147 Skv=147 D=128 bias p=0.1 sm9x device=0 "
                         "q(602112,128,4096,1) k(602112,128,4096,1) v(602112,128,4096,1) o(602112,128,4096,1)");
}

// The choice per call site, from the tensors a call gets: the position bias (1, H, T, S) is taken, an additive
// padding mask (B, 1, 1, S) is not (generation's cross-attention), and a process without cuDNN says why.
TEST(FusedAttention, TheCallSiteChoiceReadsTheCallsTensors) {
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
  const torch::Tensor query = torch::zeros({2, 4, 6, 64}, bf16), key = torch::zeros({2, 4, 9, 64}, bf16);
  AttentionMasking padded;
  padded.key_lengths = torch::tensor({9, 5}, torch::kInt32);
  EXPECT_EQ(cudnn_attention_refusal(query, key, torch::zeros({1, 4, 6, 9}, bf16), {}, 0.1, 9, ""), "");
  EXPECT_EQ(cudnn_attention_refusal(query, key, torch::Tensor(), padded, 0.0, 9, ""), "");
  EXPECT_NE(cudnn_attention_refusal(query, key, torch::zeros({2, 1, 1, 9}, bf16), {}, 0.0, 9, "")
                .find("a bias that is not (1, H, Sq, Skv)"),
            std::string::npos);
  EXPECT_EQ(cudnn_attention_refusal(query.to(torch::kFloat32), key.to(torch::kFloat32), torch::Tensor(), {}, 0.0, 9,
                                    ""),
            "fp32 (cuDNN's fused attention takes fp16 and bf16)");
  EXPECT_EQ(cudnn_attention_refusal(query, key, torch::Tensor(), {}, 0.0, 9, "no CUDA backend: no driver"),
            "no CUDA backend: no driver");
}

TEST(FusedAttention, TheRunFileNamesTheKernelAndWhyNot) {
  EXPECT_EQ(attention_kernel_name(AttentionKernel::kCudnn), "cudnn");
  EXPECT_EQ(attention_kernels_description(AttentionKernel::kCudnn, torch::kCPU, torch::kFloat32),
            "cudnn refused (not on a CUDA device), so sdpa: self-attention math; cross-attention math");
  EXPECT_EQ(attention_dtype(torch::kBFloat16), AttentionDtype::kBf16);
  EXPECT_EQ(attention_dtype(torch::kFloat64), AttentionDtype::kOther);
}

}  // namespace
}  // namespace t5scale
