// Where a step's device time goes: runs a few steps under LibTorch's Kineto profiler and sums the time of each
// kernel (CUDA: the device's kernels, copies and sets, as CUPTI reports them; CPU: the operators LibTorch records,
// inclusive of the operators they call). The kernels are also grouped into classes (matrix products, attention,
// normalisation, elementwise, reductions, optimizer, copies, communication) so that a reader sees at once whether a
// step is bound by its matrix products or by everything around them.
//
//   KernelProfile profile = profile_kernels(device, 2, [&] { trainer.step(batches, lr); }, "trace.json");
//   std::cout << profile.table;          // top kernels and the classes, with their share of the device's time
//   report["profile"] = profile.summary; // the same as JSON
#pragma once

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <functional>
#include <string>

namespace t5scale {

struct KernelProfile {
  std::string table;       // printable: the classes, then the top kernels
  nlohmann::json summary;  // {steps, wall_s_per_step, device_busy_s_per_step, classes: [...], kernels: [...]}
};

// Runs `step` `steps` times under the profiler (the device synchronised before and after each), and sums the
// events. trace_path, when not empty, receives the Chrome trace (chrome://tracing, Perfetto). top_kernels rows of
// the kernel table are kept.
KernelProfile profile_kernels(torch::Device device, int steps, const std::function<void()>& step,
                              const std::string& trace_path = "", int top_kernels = 25);

// The class of a kernel or operator name: "matmul", "attention", "norm", "optimizer", "reduction", "elementwise",
// "copy", "communication" or "other". Exposed for its test.
std::string kernel_class(const std::string& name);

}  // namespace t5scale
