// t5scale-bench-run-file: what the run file costs a training step, world size 8.
//
//   t5scale-bench-run-file [rows (default 20000)] [flush_every (default 10)] [folder (default $TMPDIR or /tmp)]
//
// Prints the time of append_step (a row buffered), of flush() (10 rows extended, written and flushed to the
// operating system; HDF5 does not fsync), of a step with the automatic flush every N rows, and that step's share
// of a 100 ms training step. Records are built before timing: building them is the trainer's cost.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "telemetry/run_file.h"

namespace {

using Clock = std::chrono::steady_clock;
using t5scale::RunFile;

constexpr int kWorld = 8;

t5scale::RunDescription attributes() {
  t5scale::RunDescription d;
  d.run_id = "bench";
  d.nodes = d.tp = 1;
  d.world_size = d.dp = d.gpus_per_node = kWorld;
  d.energy_source_gpu = d.energy_source_cpu = "none";
  return d;
}

t5scale::StepRecord record() {
  t5scale::StepRecord r;
  r.epoch = r.wall_time_s = r.loss = r.lr = r.grad_norm = r.loss_scale = 1.0;
  r.step_time_s = r.data_time_s = r.forward_time_s = r.backward_time_s = r.optimizer_time_s = 0.1;
  r.comm_exposed_time_s = r.tokens_per_s = r.samples_per_s = r.model_flops = r.mfu = 0.5;
  for (auto* column : {&r.memory_allocated_bytes, &r.memory_reserved_bytes, &r.memory_peak_bytes,
                       &r.host_memory_bytes, &r.gpu_power_w, &r.gpu_energy_j, &r.cpu_energy_j}) {
    column->assign(kWorld, 123456789.0);
  }
  return r;
}

double us_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 20000;
  const int64_t flush_every = argc > 2 ? std::atoll(argv[2]) : 10;
  const char* tmp = std::getenv("TMPDIR");
  const std::filesystem::path folder = argc > 3 ? argv[3] : (tmp != nullptr ? tmp : "/tmp");
  const std::string path = (folder / ("t5scale-bench-run-file-" + std::to_string(getpid()) + ".h5")).string();
  try {
    t5scale::StepRecord row = record();

    // append_step alone: no flush during the loop.
    double append_us = 0;
    {
      RunFile file = RunFile::create(path, attributes(), {rows + 1});
      const auto start = Clock::now();
      for (int64_t s = 0; s < rows; ++s) {
        row.step = s;
        file.append_step(row);
      }
      append_us = us_since(start) / static_cast<double>(rows);
    }

    // flush() of flush_every rows at a time.
    std::vector<double> flush_us;
    {
      RunFile file = RunFile::create(path, attributes(), {rows + 1});
      for (int64_t s = 0; s < rows; ++s) {
        row.step = s;
        file.append_step(row);
        if ((s + 1) % flush_every == 0) {
          const auto start = Clock::now();
          file.flush();
          flush_us.push_back(us_since(start));
        }
      }
    }
    std::sort(flush_us.begin(), flush_us.end());
    double flush_mean_us = 0;
    for (double us : flush_us) flush_mean_us += us;
    flush_mean_us /= static_cast<double>(flush_us.size());

    // What the trainer sees: append_step with the automatic flush every flush_every rows, then finish().
    double step_us = 0, finish_ms = 0;
    {
      RunFile file = RunFile::create(path, attributes(), {flush_every});
      const auto start = Clock::now();
      for (int64_t s = 0; s < rows; ++s) {
        row.step = s;
        file.append_step(row);
      }
      step_us = us_since(start) / static_cast<double>(rows);
      const auto finish_start = Clock::now();
      file.finish({}, "completed");
      finish_ms = us_since(finish_start) / 1000.0;
    }
    std::filesystem::remove(path);

    std::printf("run file benchmark: world size %d, %lld rows, flush every %lld rows, file in %s\n", kWorld,
                static_cast<long long>(rows), static_cast<long long>(flush_every), folder.string().c_str());
    std::printf("append_step:               %8.3f us per row\n", append_us);
    std::printf("flush (%lld rows):          %8.1f us mean, %8.1f us median, %8.1f us p99, %8.1f us max\n",
                static_cast<long long>(flush_every), flush_mean_us, flush_us[flush_us.size() / 2],
                flush_us[flush_us.size() * 99 / 100], flush_us.back());
    std::printf("step with automatic flush: %8.3f us per step\n", step_us);
    std::printf("share of a 100 ms step:    %8.5f %%\n", step_us / 100000.0 * 100.0);
    std::printf("finish (summary of %lld rows): %.1f ms\n", static_cast<long long>(rows), finish_ms);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "t5scale-bench-run-file: error: %s\n", e.what());
    std::filesystem::remove(path);
    return 1;
  }
}
