#include "bench/kernel_profile.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "core/check.h"
#include "train/device_probe.h"

namespace t5scale {

namespace {

namespace profiler = torch::autograd::profiler;
using ActivityType = torch::profiler::impl::ActivityType;
using json = nlohmann::json;

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

bool contains_any(const std::string& text, std::initializer_list<const char*> parts) {
  for (const char* part : parts) {
    if (contains(text, part)) return true;
  }
  return false;
}

// Total length of the union of [start, end) intervals: the time the device had at least one kernel running, so
// that kernels overlapping on two streams count once.
uint64_t union_length_ns(std::vector<std::pair<uint64_t, uint64_t>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  uint64_t total = 0, open_start = 0, open_end = 0;
  bool open = false;
  for (const auto& [start, end] : intervals) {
    if (open && start <= open_end) {
      open_end = std::max(open_end, end);
      continue;
    }
    if (open) total += open_end - open_start;
    open_start = start;
    open_end = end;
    open = true;
  }
  if (open) total += open_end - open_start;
  return total;
}

struct Totals {
  uint64_t ns = 0;
  int64_t calls = 0;
};

std::string shortened(const std::string& name, size_t width) {
  return name.size() <= width ? name : name.substr(0, width - 3) + "...";
}

}  // namespace

std::string kernel_class(const std::string& name) {
  if (contains_any(name, {"nccl", "c10d::"})) return "communication";
  if (contains_any(name, {"Memcpy", "Memset", "aten::copy_", "aten::to", "aten::_to_copy", "copy_kernel"})) {
    return "copy";
  }
  if (contains_any(name, {"adam", "Adam", "adafactor", "multi_tensor_apply", "_foreach_"})) return "optimizer";
  if (contains_any(name, {"flash", "fmha", "attention", "sdpa", "softmax", "Softmax"})) return "attention";
  if (contains_any(name, {"gemm", "nvjet", "xmma", "cutlass", "cublas", "Gemm", "aten::mm", "aten::addmm",
                          "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm"})) {
    return "matmul";
  }
  if (contains_any(name, {"norm", "Norm", "RowwiseMoments", "GammaBeta"})) return "norm";
  if (contains_any(name, {"reduce", "Reduce", "aten::sum", "aten::mean", "aten::max", "aten::min"})) return "reduction";
  if (contains_any(name, {"elementwise", "vectorized", "dropout", "aten::", "index", "Index", "gather", "scatter"})) {
    return "elementwise";
  }
  return "other";
}

KernelProfile profile_kernels(torch::Device device, int steps, const std::function<void()>& step,
                              const std::string& trace_path, int top_kernels) {
  T5S_CHECK(steps >= 1, "a profile needs at least one step, got ", steps);
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);

  synchronize_device(device);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    step();
    synchronize_device(device);
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
  T5S_CHECK(result != nullptr, "the profiler returned no result");
  if (!trace_path.empty()) result->save(trace_path);

  // CUDA: the device's own events (kernels, copies, sets). CPU: the operators (inclusive times, so a parent and
  // its children both count: the classes then say where the host's operators spend, not a partition of it).
  const c10::DeviceType wanted = device.is_cuda() ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  std::map<std::string, Totals> by_name;
  std::vector<std::pair<uint64_t, uint64_t>> intervals;
  for (const auto& event : result->events()) {
    if (event.deviceType() != wanted || event.durationNs() == 0) continue;
    if (!device.is_cuda() && event.name().rfind("aten::", 0) != 0) continue;
    Totals& t = by_name[event.name()];
    t.ns += event.durationNs();
    t.calls += 1;
    intervals.emplace_back(event.startNs(), event.endNs());
  }
  const double busy_s = device.is_cuda() ? static_cast<double>(union_length_ns(intervals)) * 1e-9 : wall_s;

  std::vector<std::pair<std::string, Totals>> kernels(by_name.begin(), by_name.end());
  std::sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::map<std::string, Totals> by_class;
  uint64_t summed_ns = 0;
  for (const auto& [name, t] : kernels) {
    Totals& c = by_class[kernel_class(name)];
    c.ns += t.ns;
    c.calls += t.calls;
    summed_ns += t.ns;
  }
  std::vector<std::pair<std::string, Totals>> classes(by_class.begin(), by_class.end());
  std::sort(classes.begin(), classes.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });

  const double per_step = 1.0 / steps;
  KernelProfile profile;
  json& s = profile.summary;
  s["steps"] = steps;
  s["events"] = device.is_cuda() ? "CUDA device events (kernels, copies, sets)" : "CPU operators, inclusive";
  s["wall_s_per_step"] = wall_s * per_step;
  s["device_busy_s_per_step"] = busy_s * per_step;
  s["device_busy_fraction"] = wall_s > 0 ? busy_s / wall_s : 0.0;
  s["classes"] = json::array();
  for (const auto& [name, t] : classes) {
    s["classes"].push_back({{"class", name}, {"s_per_step", t.ns * 1e-9 * per_step},
                            {"calls_per_step", t.calls * per_step},
                            {"fraction", summed_ns > 0 ? static_cast<double>(t.ns) / summed_ns : 0.0}});
  }
  s["kernels"] = json::array();
  for (size_t i = 0; i < kernels.size() && static_cast<int>(i) < top_kernels; ++i) {
    const auto& [name, t] = kernels[i];
    s["kernels"].push_back({{"name", name}, {"class", kernel_class(name)}, {"s_per_step", t.ns * 1e-9 * per_step},
                            {"calls_per_step", t.calls * per_step},
                            {"fraction", summed_ns > 0 ? static_cast<double>(t.ns) / summed_ns : 0.0}});
  }

  char line[512];
  std::snprintf(line, sizeof(line),
                "profile: %d steps, %.2f ms per step by the host clock, device busy %.2f ms (%.0f%%)%s\n", steps, wall_s * per_step * 1e3, busy_s * per_step * 1e3, wall_s > 0 ? 100.0 * busy_s / wall_s : 0.0,
                device.is_cuda() ? "" : " (CPU: operators, inclusive)");
  profile.table = line;
  profile.table += "  class          ms/step  calls/step  share\n";
  for (const auto& entry : s["classes"]) {
    std::snprintf(line, sizeof(line), "  %-13s %8.2f %11.1f %5.1f%%\n", entry["class"].get<std::string>().c_str(),
                  entry["s_per_step"].get<double>() * 1e3, entry["calls_per_step"].get<double>(),
                  100.0 * entry["fraction"].get<double>());
    profile.table += line;
  }
  profile.table += "  top kernels    ms/step  calls/step  share  class        name\n";
  for (const auto& entry : s["kernels"]) {
    std::snprintf(line, sizeof(line), "  %22.3f %11.1f %5.1f%%  %-12s %s\n", entry["s_per_step"].get<double>() * 1e3,
                  entry["calls_per_step"].get<double>(), 100.0 * entry["fraction"].get<double>(),
                  entry["class"].get<std::string>().c_str(), shortened(entry["name"].get<std::string>(), 150).c_str());
    profile.table += line;
  }
  return profile;
}

}  // namespace t5scale
