#include "bench/machine_calibration.h"

#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <thread>

#include "bench/step_benchmark.h"
#include "dist/mpi_communicator.h"
#include "dist/mpi_runtime.h"
#include "dist/process_grid.h"
#include "plan/step_time_model.h"
#include "telemetry/probes.h"
#include "train/device_probe.h"
#include "train/parallel_trainer.h"

namespace t5scale {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Median seconds of `work` over repeats that take at least `budget_s` together (at least 5, at most 200).
template <typename Work>
double timed(torch::Device device, double budget_s, Work work) {
  work();  // untimed: library selection, first-touch
  std::vector<double> seconds;
  double total = 0.0;
  while (seconds.size() < 5 || (total < budget_s && seconds.size() < 200)) {
    synchronize_device(device);
    const auto start = Clock::now();
    work();
    synchronize_device(device);
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    total += seconds.back();
  }
  return median(seconds);
}

// A product whose smallest dimension is `dim`, the other two max(dim, wide): (wide x dim) @ (dim x wide).
MatmulRate measure_matmul(torch::Device device, torch::ScalarType dtype, int64_t dim, int64_t wide) {
  const int64_t other = std::max(dim, wide);
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  const torch::Tensor a = torch::randn({other, dim}, options), b = torch::randn({dim, other}, options);
  torch::Tensor c = torch::empty({other, other}, options);
  const double s = timed(device, 0.3, [&] { torch::mm_out(c, a, b); });
  return {dim, 2.0 * static_cast<double>(other) * static_cast<double>(other) * static_cast<double>(dim) / s};
}

// Bytes read and written per second by a copy of `bytes`.
double measure_copy_bandwidth(torch::Device device, int64_t bytes) {
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  const torch::Tensor from = torch::randn({bytes / 4}, options);
  torch::Tensor to = torch::empty_like(from);
  const double s = timed(device, 0.3, [&] { to.copy_(from); });
  return 2.0 * static_cast<double>(bytes) / s;
}

// Bytes per second of a device-to-host copy of `bytes` into pinned memory, the best of five (the link one way).
double measure_host_link(torch::Device device, int64_t bytes) {
  const torch::Tensor from = torch::ones({bytes / 4}, torch::TensorOptions().device(device));
  torch::Tensor to = torch::empty({bytes / 4}, torch::TensorOptions().pinned_memory(true));
  to.copy_(from);  // untimed: first touch
  double best_s = std::numeric_limits<double>::infinity();
  for (int pass = 0; pass < 5; ++pass) {
    synchronize_device(device);
    const auto start = Clock::now();
    to.copy_(from);
    synchronize_device(device);
    best_s = std::min(best_s, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return static_cast<double>(bytes) / best_s;
}

// The tiny T5's measured step (median seconds) at `rows` x (length + length), and the step-time model's parts of it
// on `rates` that do not depend on the two figures measured from it (time per operator, compute efficiency).
struct TinyStep {
  double measured_s = 0.0;
  double kernels_s = 0.0;    // the step's matmuls and elementwise kernels at compute_efficiency 1
  double optimizer_s = 0.0;  // the optimizer's bytes at the memory bandwidth
  int64_t operators = 0;
};
TinyStep tiny_step(const CalibrationOptions& o, const MachineRates& rates, int64_t rows, int64_t length) {
  StepBenchmarkOptions b;
  b.model = "tiny";
  b.micro_batch = rows;
  b.source_length = length;
  b.target_length = length;
  b.steps = rows * length >= 1024 ? 10 : rows * length >= 128 ? 25 : 60;  // about half a second
  b.warmup_steps = 2;
  b.device = o.device;
  b.precision = o.precision;
  StepBenchmark bench(b);
  TinyStep step;
  step.measured_s = bench.run()["median"]["total_s"].get<double>();
  const ModelConfig model = benchmark_model_config("tiny", b.tiny_vocab_size, -1.0);
  StepTimeInputs in;
  in.memory.compute_bytes_per_element = compute_dtype(o.precision) == torch::kFloat32 ? 4 : 2;
  in.memory.micro_batch = BatchShape{rows, length, length};
  in.memory.on_gpu = o.device.is_cuda();
  MachineRates device_only = rates;
  device_only.op_latency_s = 0.0;
  device_only.compute_efficiency = 1.0;
  device_only.cores_per_node = 0;
  const StepTimePrediction p = predict_step_time(model, in, device_only);
  step.kernels_s = p.matmul_s + p.elementwise_s;
  step.optimizer_s = p.optimizer_s;
  step.operators = operators_per_step(model, in.memory, 1);
  return step;
}

// The time per dispatched operator and the compute efficiency, from the tiny step at sizes from dispatch alone to
// compute-bound.
// A GPU, where the host queues ahead: at one row of 2 + 2 tokens the step is dispatch alone (time per operator);
// at 64 rows of 32 + 32 the device's (the efficiency).
// A CPU, where the two add: measured - optimizer = operators x op_latency + kernels / efficiency at every size, a
// line through the origin in (operators, kernels), fitted by least squares on the relative error over six sizes, so
// that the figures hold over the range a run's micro-batches fall in and not at two ends of it only.
void measure_step_rates(const CalibrationOptions& o, MachineRates& rates) {
  if (rates.asynchronous_device) {
    const TinyStep dispatch = tiny_step(o, rates, 1, 2);
    rates.op_latency_s = dispatch.measured_s / static_cast<double>(dispatch.operators);
    const TinyStep compute = tiny_step(o, rates, 64, 32);
    rates.compute_efficiency = std::clamp(compute.kernels_s / std::max(compute.measured_s, 1e-9), 0.05, 1.5);
    return;
  }
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{1, 2}, {4, 8}, {8, 16}, {16, 16}, {32, 32}, {64, 32}};
  // Normal equations of min sum ((a x_i + b z_i - y_i) / y_i)^2, a = op latency, b = 1 / efficiency.
  double xx = 0, xz = 0, zz = 0, xy = 0, zy = 0;
  // Three passes over the sizes (unless --calibrate-passes says), each size's median of them: a CPU shared with
  // other machines' work runs at a lower speed for seconds at a time, and one size measured in such a stretch would
  // tilt the fit.
  const int pass_count = o.passes > 0 ? o.passes : 3;
  std::vector<std::vector<TinyStep>> passes(sizes.size());
  for (int pass = 0; pass < pass_count; ++pass) {
    for (size_t i = 0; i < sizes.size(); ++i) passes[i].push_back(tiny_step(o, rates, sizes[i].first, sizes[i].second));
  }
  std::vector<TinyStep> steps;
  for (std::vector<TinyStep>& of_size : passes) {
    std::sort(of_size.begin(), of_size.end(), [](const TinyStep& a, const TinyStep& b) { return a.measured_s < b.measured_s; });
    steps.push_back(of_size[of_size.size() / 2]);
  }
  for (const TinyStep& t : steps) {
    const double w = 1.0 / std::max(t.measured_s, 1e-9);
    const double x = static_cast<double>(t.operators) * w, z = t.kernels_s * w,
                 y = std::max(t.measured_s - t.optimizer_s, 0.0) * w;
    xx += x * x, xz += x * z, zz += z * z, xy += x * y, zy += z * y;
  }
  const double det = xx * zz - xz * xz;
  double latency = det > 0 ? (xy * zz - zy * xz) / det : 0.0, inverse_efficiency = det > 0 ? (xx * zy - xz * xy) / det : 0.0;
  // Out of range (a noisy machine): hold one at its bound and fit the other alone.
  if (!(inverse_efficiency >= 1.0 / 1.5 && inverse_efficiency <= 20.0)) {
    inverse_efficiency = std::clamp(inverse_efficiency, 1.0 / 1.5, 20.0);
    latency = (xy - inverse_efficiency * xz) / xx;
  }
  if (!(latency >= 0.0)) {
    latency = 0.0;
    inverse_efficiency = std::clamp(zy / zz, 1.0 / 1.5, 20.0);
  }
  rates.op_latency_s = latency;
  rates.compute_efficiency = 1.0 / inverse_efficiency;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double fitted_s = static_cast<double>(steps[i].operators) * latency + steps[i].kernels_s * inverse_efficiency +
                            steps[i].optimizer_s;
    std::printf("[calibrate] tiny T5 step, %lld rows of %lld + %lld tokens: measured %.3f ms, fitted %.3f ms\n",
                static_cast<long long>(sizes[i].first), static_cast<long long>(sizes[i].second),
                static_cast<long long>(sizes[i].second), steps[i].measured_s * 1e3, fitted_s * 1e3);
  }
}

// All-reduces of t5scale's communicator on groups of `group_size` ranks of `comm` formed by `color`, every group at
// once: 4 bytes (latency) and 4 MiB (bandwidth), fitted to the alpha-beta model of collective_seconds.
LinkRates measure_link(MPI_Comm comm, int color, int64_t group_size, const std::string& scope, int64_t ranks_per_node) {
  MPI_Comm group = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm, color, rank_in(comm), &group));
  MpiCommunicator communicator(group, scope, 120.0);
  // Back to back, as a step issues them: each rank's wait includes the others' late arrival and the communicator's
  // polling, which a barrier before each one would hide.
  const torch::Tensor a = torch::randn({96, 96});
  torch::Tensor product = torch::empty({96, 96});
  auto work = [&] { for (int i = 0; i < 20; ++i) torch::mm_out(product, a, a); };
  auto loop_seconds = [&](bool communicate, torch::Tensor& t, int repeats) {
    MPI_CHECK(MPI_Barrier(comm));
    const auto start = Clock::now();
    for (int i = 0; i < repeats; ++i) {
      work();
      if (communicate) communicator.all_reduce_sum(t);
    }
    return std::chrono::duration<double>(Clock::now() - start).count() / repeats;
  };
  auto time_all_reduce = [&](int64_t elements, int repeats) {
    torch::Tensor t = torch::ones({elements});
    for (int i = 0; i < 3; ++i) communicator.all_reduce_sum(t);
    const double with = loop_seconds(true, t, repeats), without = loop_seconds(false, t, repeats);
    double mine = std::max(with - without, 0.0), slowest = 0.0;
    MPI_CHECK(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm));
    return slowest;
  };
  const int64_t large = 1 << 20;  // floats: 4 MiB
  const double small_s = time_all_reduce(1, 200);
  const double large_s = time_all_reduce(large, 20);
  const double p = static_cast<double>(group_size);
  LinkRates link;
  link.scope = scope;
  link.ranks_per_node = ranks_per_node;
  link.group_size = group_size;
  link.latency_s = small_s / (2.0 * std::ceil(std::log2(p)));
  link.bandwidth_bytes_per_s = 2.0 * (p - 1.0) / p * 4.0 * static_cast<double>(large) / std::max(large_s - small_s, 1e-9);
  link.source = msg("t5scale-bench --calibrate: MPI all-reduce, ", group_size, " ranks of ", size_of(comm), ", ",
                    ranks_per_node, " per node, ", scope == "inter_node" ? "one per node" : "inside a node");
  return link;
}

// Every rank's machine, by its kernel's boot id: a local cluster's nodes are network namespaces of one machine and
// share its cores; on a real cluster every node boots its own.
std::vector<std::string> ranks_machines() {
  constexpr int kIdChars = 64;
  std::array<char, kIdChars> mine{};
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!(in >> id)) id = "unknown:" + world_hosts()[static_cast<size_t>(rank_in(MPI_COMM_WORLD))];
  std::copy_n(id.begin(), std::min<size_t>(id.size(), kIdChars - 1), mine.begin());
  const int world = size_of(MPI_COMM_WORLD);
  std::vector<char> all(static_cast<size_t>(world) * kIdChars);
  MPI_CHECK(MPI_Allgather(mine.data(), kIdChars, MPI_CHAR, all.data(), kIdChars, MPI_CHAR, MPI_COMM_WORLD));
  std::vector<std::string> machines;
  for (int r = 0; r < world; ++r) machines.emplace_back(all.data() + static_cast<size_t>(r) * kIdChars);
  return machines;
}

// The busy host's slowdown with this job's ranks per machine (CPU): the tiny step at 16 rows of 16 + 16 tokens on
// rank 0 alone (the others wait asleep) and then on every rank at once, five times (or --calibrate-passes); the
// slowest rank's median at once against rank 0's alone with its share of the cores.
BusyHostSlowdown measure_busy_host(const CalibrationOptions& o, const MachineRates& rates, int64_t ranks_per_host) {
  const int rank = rank_in(MPI_COMM_WORLD);
  auto wait_asleep = [] { sleeping_barrier(MPI_COMM_WORLD, std::chrono::milliseconds(1)); };
  std::vector<double> alone_s, busy_s;
  const int pass_count = o.passes > 0 ? o.passes : 5;
  for (int pass = 0; pass < pass_count; ++pass) {
    wait_asleep();
    if (rank == 0) alone_s.push_back(tiny_step(o, rates, 16, 16).measured_s);
    wait_asleep();
    busy_s.push_back(tiny_step(o, rates, 16, 16).measured_s);
  }
  double mine = median(busy_s), slowest = 0.0, alone = rank == 0 ? median(alone_s) : 0.0;
  MPI_CHECK(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  MPI_CHECK(MPI_Bcast(&alone, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  const double share = rates.ranks_per_core(ranks_per_host);
  BusyHostSlowdown b;
  b.ranks_per_host = ranks_per_host;
  b.slowdown = std::clamp(slowest / (alone * share), 0.5, 10.0);
  b.source = msg("t5scale-bench --calibrate: the tiny T5's step, the slowest of ", ranks_per_host,
                 " ranks at once against one alone x ", share, " ranks per core");
  return b;
}

std::string host_name() {
  const auto& hosts = world_hosts();
  return hosts.empty() ? std::string("?") : hosts.front();
}

}  // namespace

double measure_host_memory_bandwidth(int64_t array_bytes, int passes) {
  T5S_CHECK(array_bytes >= 1024 && passes >= 1, "host memory bandwidth: arrays of ", array_bytes, " bytes over ",
            passes, " pass(es)");
  const int64_t n = array_bytes / static_cast<int64_t>(sizeof(double));
  const int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  // (n,) each, uninitialised: each thread first touches its own slice, so that its pages sit near its core.
  std::unique_ptr<double[]> a(new double[n]), b(new double[n]), c(new double[n]);
  auto on_every_thread = [&](auto slice_work) {
    std::vector<std::thread> workers;
    for (int64_t t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] { slice_work(n * t / threads, n * (t + 1) / threads); });
    }
    for (std::thread& w : workers) w.join();
  };
  on_every_thread([&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      a[i] = 0.0;
      b[i] = 1.0;
      c[i] = 2.0;
    }
  });
  const double scalar = 3.0;
  double best_s = std::numeric_limits<double>::infinity();
  for (int pass = 0; pass < passes; ++pass) {
    const auto start = Clock::now();
    on_every_thread([&](int64_t begin, int64_t end) {
      double* __restrict out = a.get();
      const double* __restrict x = b.get();
      const double* __restrict y = c.get();
      for (int64_t i = begin; i < end; ++i) out[i] = x[i] + scalar * y[i];
    });
    best_s = std::min(best_s, std::chrono::duration<double>(Clock::now() - start).count());
  }
  T5S_CHECK(a[n - 1] == 7.0, "host memory bandwidth: the triad computed ", a[n - 1], ", not 7");  // it ran
  return 3.0 * static_cast<double>(n * static_cast<int64_t>(sizeof(double))) / best_s;
}

MachineRates calibrate_machine(const CalibrationOptions& o) {
  T5S_CHECK(!o.path.empty(), "--calibrate needs the rates file to write");
  T5S_CHECK(o.passes >= 0, "calibration passes: 0 (the defaults) or more, got ", o.passes);
  const int world = size_of(MPI_COMM_WORLD), rank = rank_in(MPI_COMM_WORLD);
  MachineRates rates;
  if (world == 1) {
    const bool gpu = o.device.is_cuda();
    const torch::ScalarType dtype = compute_dtype(o.precision);
    rates.name = msg("calibrated on ", host_name(), " (", gpu ? cuda_device_name(o.device) : std::string("CPU"), ")");
    rates.asynchronous_device = gpu;
    rates.threads_per_rank = gpu ? 1 : torch::get_num_threads();
    rates.cores_per_node = gpu ? 0 : static_cast<int64_t>(std::thread::hardware_concurrency());
    const std::vector<int64_t> dims = gpu ? std::vector<int64_t>{16, 64, 256, 1024, 4096}
                                          : std::vector<int64_t>{4, 16, 64, 256, 1024};
    for (int64_t dim : dims) rates.matmul.push_back(measure_matmul(o.device, dtype, dim, gpu ? 8192 : 512));
    rates.memory_bandwidth_bytes_per_s = measure_copy_bandwidth(o.device, gpu ? (int64_t{1} << 30) : (int64_t{64} << 20));
    measure_step_rates(o, rates);
    // The host, for the offloaded optimizer: its memory bandwidth measured; its memory and cores as the system says.
    rates.host_memory_bandwidth_bytes_per_s = measure_host_memory_bandwidth(int64_t{128} << 20, 5);
    rates.host_memory_bytes_per_node = static_cast<double>(read_node_memory().total_bytes);
    rates.host_cores_per_node = static_cast<int64_t>(std::thread::hardware_concurrency());
    if (gpu) rates.host_link_bytes_per_s = measure_host_link(o.device, int64_t{256} << 20);
    rates.source = msg("t5scale-bench --calibrate, ", enum_name(o.precision), ", ", rates.threads_per_rank,
                       " thread(s) per rank, on ", host_name(), "; the host's memory bandwidth measured (triad on ",
                       rates.host_cores_per_node, " threads)",
                       gpu ? ", its link to the device measured (pinned copy from the device)" : "");
    // What mpirun with this file measured before (links, nodes per host, busy-host slowdowns) stays: the same machine's.
    // So does a host link the file gave, where there is no GPU to measure it.
    std::error_code ec;
    if (std::filesystem::exists(o.path, ec)) {
      try {
        const MachineRates before = read_machine_rates(o.path);
        rates.links = before.links;
        rates.nodes_per_host = before.nodes_per_host;
        rates.busy_host = before.busy_host;
        if (!gpu) rates.host_link_bytes_per_s = before.host_link_bytes_per_s;
      } catch (const Error&) {
      }
    }
    if (!gpu) {
      rates.source += rates.host_link_bytes_per_s > 0
                          ? "; the host link not measured (no GPU): the file's figure kept"
                          : "; the host link not measured (no GPU): none";
    }
  } else {
    T5S_CHECK(std::filesystem::exists(o.path), "--calibrate ", o.path, " under mpirun measures the links and merges "
              "them into a file that one process wrote first: run t5scale-bench --calibrate ", o.path, " alone");
    rates = read_machine_rates(o.path);
    const NodeGroup node;
    const int64_t ranks_per_node = node.local_size();
    std::vector<LinkRates> measured;
    for (int64_t p = 2; p <= ranks_per_node; p *= 2) {  // consecutive ranks inside a node, every group at once
      if (ranks_per_node % p != 0) break;
      measured.push_back(measure_link(MPI_COMM_WORLD, rank / static_cast<int>(p), p, "intra_node", ranks_per_node));
    }
    const int64_t nodes = world / ranks_per_node;
    const std::vector<std::string> machines = ranks_machines();
    if (nodes > 1) {  // one rank per node: the groups of equal node-local rank
      measured.push_back(measure_link(MPI_COMM_WORLD, node.local_rank(), nodes, "inter_node", ranks_per_node));
      const auto hosts = static_cast<int64_t>(std::set<std::string>(machines.begin(), machines.end()).size());
      rates.nodes_per_host = (nodes + hosts - 1) / hosts;
    }
    if (!o.device.is_cuda()) {
      const auto ranks_per_host = static_cast<int64_t>(std::count(machines.begin(), machines.end(), machines.front()));
      if (ranks_per_host > 1) {
        const BusyHostSlowdown busy = measure_busy_host(o, rates, ranks_per_host);
        rates.busy_host.erase(std::remove_if(rates.busy_host.begin(), rates.busy_host.end(),
                                             [&](const BusyHostSlowdown& b) { return b.ranks_per_host == ranks_per_host; }),
                              rates.busy_host.end());
        rates.busy_host.push_back(busy);
        std::sort(rates.busy_host.begin(), rates.busy_host.end(),
                  [](const BusyHostSlowdown& a, const BusyHostSlowdown& b) { return a.ranks_per_host < b.ranks_per_host; });
      }
    }
    for (const LinkRates& l : measured) {
      rates.links.erase(std::remove_if(rates.links.begin(), rates.links.end(),
                                       [&](const LinkRates& old) {
                                         return old.scope == l.scope && old.ranks_per_node == l.ranks_per_node &&
                                                old.group_size == l.group_size;
                                       }),
                        rates.links.end());
      rates.links.push_back(l);
    }
    std::sort(rates.links.begin(), rates.links.end(), [](const LinkRates& a, const LinkRates& b) {
      return std::tie(a.scope, a.ranks_per_node, a.group_size) < std::tie(b.scope, b.ranks_per_node, b.group_size);
    });
  }
  if (rank == 0) write_machine_rates(rates, o.path);
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  return rates;
}

}  // namespace t5scale
