// t5scale_run_file_probe: writes run files with rows whose values are a formula of the step, for the h5py checks
// in this folder (check_run_file.py, check_sigkill.py), which compute the same formula independently.
//
//   t5scale_run_file_probe write  <path> <steps> <eval_every> <flush_every>   a whole run, finished "completed"
//   t5scale_run_file_probe run    <path> <max_steps> <flush_every> <step_ms>  appends until killed; prints
//                                                                           "flushed steps=<n> evals=<m>" after
//                                                                           every flush
//   t5scale_run_file_probe resume <path> <keep_through_step> <steps> <flush_every>
//                                                                           resumes, prints the offsets, appends
//                                                                           the rest and finishes
//   t5scale_run_file_probe finish-on-cue <path> <steps> <reader_lock_wait_s>
//                                                                           writes the steps, prints "flushed",
//                                                                           finishes when a line comes on stdin and
//                                                                           prints "finished in <s>"
//
// World size 4 on 2 nodes; evaluations every 10 steps in run/resume mode.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <thread>

#include "telemetry/run_file.h"

namespace {

using t5scale::EvalRecord;
using t5scale::RunDescription;
using t5scale::RunFile;
using t5scale::StepRecord;

constexpr int kWorld = 4;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

RunDescription probe_attributes(int64_t max_steps) {
  RunDescription d;
  d.run_id = "probe-run";
  d.study = "telemetry";
  d.git_revision = "0123abc";
  d.slurm_job_id = d.slurm_array_task_id = "";  // outside Slurm
  d.hosts = "node-a,node-b";
  d.nodes = 2;
  d.gpus_per_node = 2;
  d.world_size = kWorld;
  d.tp = 2;
  d.dp = 2;
  d.model_name = "t5-small";
  d.parameter_count = 60506624;
  d.global_batch = 16;
  d.micro_batch = 8;
  d.grad_accumulation = 1;
  d.base_lr = 3e-4;
  d.effective_lr = 6e-4;
  d.lr_scaling_rule = "linear";
  d.reference_global_batch = 8;
  d.warmup_steps = 5;
  d.max_steps = max_steps;
  d.steps_per_epoch = 8;
  d.epochs = 0.0;
  d.precision = "bf16";
  d.optimizer = "adamw";
  d.device_names = "NVIDIA H100 80GB HBM3,NVIDIA H100 80GB HBM3,NVIDIA H100 80GB HBM3,NVIDIA H100 80GB HBM3";
  d.driver_version = "550.54.15";
  d.cuda_version = "12.4";
  d.nccl_version = "2.27.3";
  d.torch_version = "2.11.0";
  d.peak_flops_per_device = 989.4e12;
  d.price_per_node_hour_usd = 12.5;
  d.price_per_gpu_hour_usd = 0.0;
  d.node_share_fraction = 0.5;  // 2 of a node's 4 GPUs
  d.node_share_basis = "2 of 4 GPUs (held: SLURM_GPUS_ON_NODE; the node's: NVML)";
  d.allocated_gpus_per_node = 2;
  d.carbon_intensity_g_per_kwh = 475.0;
  d.pue = 1.25;
  d.predicted_memory_bytes_per_device = 12345678901;
  d.predicted_host_memory_bytes_per_rank = 112097060864;
  d.predicted_flops_per_step = 1.5e12;
  d.predicted_step_time_s = 0.25;
  d.checkpoint_every_blocks = 2;
  d.recomputation = "every 2nd block";
  d.attention_kernels = "explicit";
  d.energy_source_gpu = "nvml_energy_counter";
  d.energy_source_cpu = "rapl";
  d.config_yaml = "run: {name: probé, study: telemetry}\ntrain: {max_steps: 23}\n";
  d.config_changes = "step 10: train.max_steps: 20 -> 23";
  return d;
}

// The row of step s (>= 1). check_run_file.py has the same formulas.
StepRecord step_row(int64_t s) {
  const double x = static_cast<double>(s);
  StepRecord r;
  r.step = s;
  r.epoch = x / 8.0;
  r.wall_time_s = 0.5 * x;
  r.loss = 4.0 - x / 16.0;
  r.lr = 1e-3 * x / 32.0;
  r.grad_norm = 1.0 + x / 4.0;
  r.loss_scale = s % 2 == 1 ? 65536.0 : 32768.0;
  r.skipped = s % 7 == 0;
  r.samples = 16;
  r.source_tokens = 1000 + s;
  r.target_tokens = 200 + s;
  r.step_time_s = 0.25;
  r.data_time_s = 0.03125;
  r.forward_time_s = 0.0625;
  r.backward_time_s = 0.09375;
  r.optimizer_time_s = 0.03125;
  r.comm_exposed_time_s = 0.0078125;
  r.tokens_per_s = static_cast<double>(1200 + 2 * s) / 0.25;
  r.samples_per_s = 64.0;
  r.model_flops = 1.5e12;
  r.mfu = 0.375;
  for (int rank = 0; rank < kWorld; ++rank) {
    const double k = static_cast<double>(rank);
    r.memory_allocated_bytes.push_back(1e9 + k * 1e6 + x * 1024.0);
    r.memory_reserved_bytes.push_back(2e9 + k * 1e6);
    r.memory_peak_bytes.push_back(1.5e9 + k * 1e6 + x * 4096.0);
    r.host_memory_bytes.push_back(3e9 + k);
    r.gpu_power_w.push_back(300.0 + k + x / 4.0);
    r.gpu_energy_j.push_back(100.0 * x + k);
    r.cpu_energy_j.push_back(rank == 2 ? kNaN : 50.0 * x + k / 2.0);  // rank 2: "unavailable"
  }
  return r;
}

// The evaluation at step e; `last` marks the run's final one (the only one that computes f1).
EvalRecord eval_row(int64_t e, bool last) {
  const double x = static_cast<double>(e);
  EvalRecord r;
  r.step = e;
  r.epoch = x / 8.0;
  r.wall_time_s = 0.5 * x + 0.25;
  r.loss = 3.0 - x / 64.0;
  r.rouge1 = 0.5 - std::fabs(x - 10.0) / 256.0;
  r.rouge2 = 0.125 + x / 512.0;
  r.rougeL = 0.1875 + x / 256.0;
  r.rougeLsum = 0.1875 + x / 128.0;
  r.f1 = last ? 0.75 : kNaN;
  r.num_examples = 100;
  r.eval_time_s = 2.5;
  r.generated_ids_beyond_vocab = e % 3;
  return r;
}

int64_t number(const char* text) { return std::strtoll(text, nullptr, 10); }

void report(const RunFile& file) {
  std::printf("flushed steps=%lld evals=%lld\n", static_cast<long long>(file.steps_written()),
              static_cast<long long>(file.evals_written()));
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "write" && argc == 6) {
    const int64_t steps = number(argv[3]), eval_every = number(argv[4]);
    RunFile file = RunFile::create(argv[2], probe_attributes(steps), {number(argv[5])});
    for (int64_t s = 1; s <= steps; ++s) {
      file.append_step(step_row(s));
      if (s % eval_every == 0 || s == steps) file.append_eval(eval_row(s, s == steps));
    }
    t5scale::RunSummaryInputs inputs;
    inputs.wall_time_s = 0.5 * static_cast<double>(steps) + 1.0;
    file.finish(inputs, "completed");
    return 0;
  }
  if (mode == "run" && argc == 6) {
    const int64_t max_steps = number(argv[3]);
    RunFile file = RunFile::create(argv[2], probe_attributes(max_steps), {number(argv[4])});
    const auto pause = std::chrono::milliseconds(number(argv[5]));
    for (int64_t s = 1; s <= max_steps; ++s) {
      const int64_t before = file.steps_written();
      file.append_step(step_row(s));
      if (file.steps_written() != before) report(file);
      if (s % 10 == 0) {
        file.append_eval(eval_row(s, false));
        report(file);
      }
      std::this_thread::sleep_for(pause);
    }
    return 0;
  }
  if (mode == "resume" && argc == 6) {
    const int64_t keep = number(argv[3]), steps = number(argv[4]);
    std::string warning;
    RunFile file = RunFile::resume(argv[2], probe_attributes(steps), keep, {number(argv[5])}, &warning);
    std::printf("attempt=%lld resumed_from_step=%lld last_step=%lld last_wall_time_s=%.17g", 
                static_cast<long long>(file.attempt()), static_cast<long long>(file.resumed_from_step()),
                static_cast<long long>(file.last_step()), file.last_wall_time_s());
    for (int rank = 0; rank < kWorld; ++rank) {
      std::printf(" last_gpu_energy_j_%d=%.17g last_cpu_energy_j_%d=%.17g", rank, file.last_gpu_energy_j(rank),
                  rank, file.last_cpu_energy_j(rank));
    }
    std::printf(" warning=%s\n", warning.empty() ? "none" : warning.c_str());
    std::fflush(stdout);
    for (int64_t s = keep + 1; s <= steps; ++s) {
      file.append_step(step_row(s));
      if (s % 10 == 0) file.append_eval(eval_row(s, false));
    }
    file.finish({}, "completed");
    return 0;
  }
  if (mode == "finish-on-cue" && argc == 5) {
    const int64_t steps = number(argv[3]);
    t5scale::RunFileOptions options;
    options.reader_lock_wait_s = std::stod(argv[4]);
    RunFile file = RunFile::create(argv[2], probe_attributes(steps), options);
    for (int64_t s = 1; s <= steps; ++s) file.append_step(step_row(s));
    file.flush();
    std::printf("flushed\n");
    std::fflush(stdout);
    std::string cue;
    std::getline(std::cin, cue);
    const auto start = std::chrono::steady_clock::now();
    file.finish({}, "completed");
    std::printf("finished in %.3f\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return 0;
  }
  std::fprintf(stderr,
               "usage: t5scale_run_file_probe write <path> <steps> <eval_every> <flush_every>\n"
               "       t5scale_run_file_probe run <path> <max_steps> <flush_every> <step_ms>\n"
               "       t5scale_run_file_probe resume <path> <keep_through_step> <steps> <flush_every>\n"
               "       t5scale_run_file_probe finish-on-cue <path> <steps> <reader_lock_wait_s>\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "t5scale_run_file_probe: error: %s\n", e.what());
    return 1;
  }
}
