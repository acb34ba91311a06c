// The kernel profile behind t5scale-bench --profile: kernel names are classed as the H200 profile of a T5-3B step
// named them, and on the CPU a known sequence of operators is counted call for call and its time split into
// classes that add up to the whole (the benchmark's own profile: tests/bench/test_step_benchmark.cpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "bench/kernel_profile.h"
#include "bench/step_benchmark.h"
#include "plan/step_time_model.h"

namespace t5scale {
namespace {

TEST(KernelProfile, KernelNamesFromAnH200StepFallIntoTheirClasses) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"nvjet_sm90_tss_128x256_64x4_2x1_v_bz_coopA_NTN", "matmul"},
      {"fmha_cutlassB_bf16_aligned_128x128_k128_dropout_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<>)",
       "attention"},
      {"void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 32, 4>>", "attention"},
      {"void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata<4>>",
       "optimizer"},
      {"void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float>", "elementwise"},
      {"void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<c10::BFloat16, float>", "norm"},
      {"void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda>", "copy"},
      {"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction"},
      {"Memcpy HtoD (Pinned -> Device)", "copy"},
      {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"},
      {"aten::mm", "matmul"},
      {"aten::_fused_adamw_", "optimizer"},
      {"something_else", "other"}};
  for (const auto& [name, want] : cases) EXPECT_EQ(kernel_class(name), want) << name;
}

TEST(KernelProfile, CpuOperatorsAreCountedPerStepAndTheClassesAddUp) {
  torch::manual_seed(3);
  // Products large enough (3 x 2 x 512^3 FLOPs a step, tens of ms), and a relu and a sum over one row, too small
  // for LibTorch's intra-op threads (a parallel sum waits for pool threads, which on a loaded machine can take
  // longer than the products), so that the class order is the work's, not the machine's load.
  const torch::Tensor a = torch::randn({512, 512});
  const torch::Tensor b = torch::randn({512, 512});
  const KernelProfile profile = profile_kernels(torch::kCPU, 2, [&] {
    torch::Tensor c = torch::mm(a, b);
    c = torch::mm(c, b);
    c = torch::mm(c, b);
    (void)torch::relu(c.narrow(0, 0, 1)).sum();
  });
  const auto& s = profile.summary;
  EXPECT_EQ(s["steps"], 2);
  bool found_mm = false;
  double previous = 1e300;
  for (const auto& kernel : s["kernels"]) {
    EXPECT_LE(kernel["s_per_step"].get<double>(), previous) << "kernels sorted by time";
    previous = kernel["s_per_step"].get<double>();
    if (kernel["name"] == "aten::mm") {
      found_mm = true;
      EXPECT_DOUBLE_EQ(kernel["calls_per_step"].get<double>(), 3.0);
      EXPECT_EQ(kernel["class"], "matmul");
    }
  }
  EXPECT_TRUE(found_mm) << s.dump(1);
  double fraction = 0.0;
  for (const auto& c : s["classes"]) fraction += c["fraction"].get<double>();
  EXPECT_NEAR(fraction, 1.0, 1e-9);
  EXPECT_EQ(s["classes"][0]["class"], "matmul") << "three 512^3 products outweigh a relu and a sum";
  EXPECT_GT(s["wall_s_per_step"].get<double>(), 0.0);
  EXPECT_NE(profile.table.find("aten::mm"), std::string::npos) << profile.table;
}

// The step-time model's operator count (its host time on every device) against the operators LibTorch's profiler
// counts in a real training step on the CPU, nested calls included as the calibration counts them: the tiny T5
// (2 + 2 blocks, gated) and T5-small (6 + 6, ReLU, tied), at one row of 2 + 2 tokens.
TEST(StepTimeOperators, TheModelsCountIsTheProfiledSteps) {
  for (const std::string& name : {std::string("tiny"), std::string("t5-small")}) {
    StepBenchmarkOptions o;
    o.model = name;
    o.micro_batch = 1;
    o.source_length = 2;
    o.target_length = 2;
    o.steps = 1;
    o.warmup_steps = 1;
    o.profile_steps = 1;
    StepBenchmark bench(o);
    const nlohmann::json report = bench.run();
    double profiled = 0.0;
    for (const auto& c : report["profile"]["classes"]) profiled += c["calls_per_step"].get<double>();
    MemoryInputs in;
    in.micro_batch = BatchShape{1, 2, 2};
    const double modelled =
        static_cast<double>(operators_per_step(benchmark_model_config(name, o.tiny_vocab_size, -1.0), in, 1));
    EXPECT_NEAR(modelled / profiled, 1.0, 0.05) << name << ": modelled " << modelled << ", profiled " << profiled;
  }
}

}  // namespace
}  // namespace t5scale
