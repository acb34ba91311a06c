// The memory planner on a GPU: the CUDA caching allocator's peak of allocated bytes over a real step, against
// predict_memory's tensor bytes for the device (fused SDPA attention, one-byte dropout masks, the stacks' position
// bias kept), within 5% as on the CPU (tests/bench/test_memory_model.cpp). These are the terms the CPU cannot
// measure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "bench/step_benchmark.h"
#include "core/check.h"
#include "gpu/gpu_test_support.h"
#include "plan/cost_model.h"
#include "train/device_probe.h"

namespace t5scale {
namespace {

TEST(CudaMemoryModel, PredictedPeakIsWithinFivePercentOfTheAllocatorsPeak) {
  const torch::Device device = testing::gpu_grid().device();
  struct Case {
    const char* model;
    int64_t rows, source_length, target_length;
  };
  for (const Case& c : {Case{"t5-small", 8, 256, 64}, Case{"t5-v1_1-base", 8, 512, 128}}) {
    for (const Precision precision : {Precision::kBf16, Precision::kFp32}) {
      torch::cuda::synchronize();
      const auto before = cuda_allocator_stats(device);
      ASSERT_TRUE(before.has_value());
      StepBenchmarkOptions o;
      o.model = c.model;
      o.precision = precision;
      o.device = device;
      o.micro_batch = c.rows;
      o.source_length = c.source_length;
      o.target_length = c.target_length;
      StepBenchmark bench(o);
      for (const int64_t every_k : {int64_t{0}, int64_t{1}}) {
        bench.trainer().model()->set_activation_checkpointing(every_k);
        bench.trainer().step({bench.batch()}, 1e-4);  // the first step of this setting: the kernels' own buffers
        torch::cuda::synchronize();
        reset_cuda_peak_stats(device);
        bench.trainer().step({bench.batch()}, 1e-4);
        torch::cuda::synchronize();
        const double measured =
            static_cast<double>(cuda_allocator_stats(device)->peak_allocated_bytes - before->allocated_bytes);
        MemoryInputs inputs;
        inputs.compute_bytes_per_element = precision == Precision::kFp32 ? 4 : 2;
        inputs.micro_batch = BatchShape{c.rows, c.source_length, c.target_length};
        inputs.checkpoint_every_blocks = every_k;
        inputs.on_gpu = true;
        const double predicted = static_cast<double>(predict_memory(bench.model_config(), inputs).tensor_bytes());
        const std::string name =
            msg(c.model, " ", enum_name(precision), " rows ", c.rows, " ", c.source_length, "/", c.target_length,
                " checkpoint every ", every_k);
        std::printf("%-60s predicted %8.1f MiB measured %8.1f MiB ratio %.3f\n", name.c_str(), predicted / 1048576.0,
                    measured / 1048576.0, predicted / measured);
        EXPECT_NEAR(predicted / measured, 1.0, 0.05) << name;
      }
    }
  }
}

}  // namespace
}  // namespace t5scale
