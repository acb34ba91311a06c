// t5scale-bench: times training steps of one shape on one device (see bench/step_benchmark.h) and prints a table
// and, with --json, every figure. One process, no MPI: the grid is one rank, or one rank's share of a TP group
// (--tp-shard) whose collectives are local.
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "bench/machine_calibration.h"
#include "bench/step_benchmark.h"
#include "config/config_registry.h"
#include "config/hf_config.h"
#include "core/check.h"
#include "core/command_line.h"
#include "core/end_process.h"
#include "core/nearest_word.h"
#include "plan/cost_model.h"
#include "dist/cuda_backend.h"
#include "dist/mpi_runtime.h"
#include "t5scale_git_revision.h"  // generated at build time: T5SCALE_GIT_REVISION

namespace {

using namespace t5scale;

const char* kUsage = R"(usage: t5scale-bench [--model NAME] [--precision fp32|bf16|fp16] [--micro-batch N]
                     [--source-length S] [--target-length T] [--steps N] [--warmup-steps N] [--json FILE] ...

Times training steps of a T5 shape on this device: forward, backward, exposed communication and optimizer per
step (median and min over the timed steps), tokens/s (source + target tokens, as t5scale-train counts them),
samples/s, model TFLOP/s (the planner's cost model), MFU against the device's dense peak, and peak memory against
the planner's prediction (measured_peak_bytes: on the CPU every tensor is counted by a tracking allocator; on
CUDA the caching allocator's peak). Inputs are random token ids of exactly the given lengths (no padding); weights are
initialised as t5scale-train does.

  --model NAME              tiny (the demo's model) or a named shape: t5-small ... t5-11b, t5-v1_1-small ...
                            t5-v1_1-xxl (google/ prefixes accepted)                        [t5-small]
  --precision P             fp32, or bf16 / fp16 compute with fp32 master weights and optimizer   [fp32]
  --micro-batch N           rows per step                                                  [8]
  --source-length S         encoder tokens per row                                         [128]
  --target-length T         decoder tokens per row                                         [32]
  --steps N                 timed steps                                                    [10]
  --warmup-steps N          untimed steps first                                            [2]
  --device D                cpu, cuda (this process's first GPU, or cuda:K) or auto        [auto]
  --threads N               CPU threads for LibTorch (0: LibTorch's default)               [0]
  --activation-checkpointing  recompute every block in backward
  --checkpoint-every-blocks K  recompute every K-th block instead; auto: the least recomputation that the planner
                            predicts to fit the device's memory (none, every K-th block, ..., every block)
  --selective-recomputation  recompute every attention core in backward (Megatron's selective mode)
  --device-memory-gib X     the memory auto must fit (default: the GPU's, or the host's on a CPU)
  --optimizer O             adamw (weight decay 0.01, not on norms) or adafactor           [adamw]
  --lr X                    constant learning rate                                         [1e-4]
  --dropout X               dropout probability (default: the shape's own, 0.1 named, 0 tiny)
  --vocab-size N            vocabulary of tiny                                             [32]
  --tp-shard N              one rank's share of a TP=N model on this device; communication excluded
  --sequence-parallel       with --tp-shard: the residual stream split over the TP group (parallel.sequence_parallel)
  --offload-optimizer       master weights and moments in host memory, the update on the CPU
                            (parallel.offload_optimizer)
  --attention A             auto (sdpa on CUDA, explicit elsewhere), sdpa, explicit or cudnn (cuDNN's fused
                            attention, sdpa where it does not take a call; a note names them); sdpa on the CPU
                            holds the tensors a GPU's step holds, for the memory measurement   [auto]
  --peak-flops X            the device's peak FLOP/s for MFU, instead of the table's (CPUs have none)
  --matmul-peak             also measure a large matmul's TFLOP/s here, printed beside the table's peak
  --seed N                  weights, dropout and the random tokens                         [1234]
  --profile N               after the timed steps, N more under LibTorch's profiler: the device time of each kernel
                            and of each class of kernels (matrix products, attention, norms, elementwise, optimizer,
                            copies), printed after the table and kept in the JSON ("profile")
  --profile-trace FILE      with --profile: also write the profiler's Chrome trace (chrome://tracing, Perfetto)
  --json FILE               write every figure as JSON (schema t5scale-bench/1)
  --rates FILE              also print the step-time model's prediction for this step on these machine rates
  --calibrate FILE          measure this machine's rates for the step-time model into FILE (telemetry.machine_rates):
                            alone, the device (matmuls by shape, memory bandwidth, time per operator) and the
                            host (memory bandwidth; on a GPU its link to the device; --device,
                            --precision and --threads apply); under mpirun, the collectives among the job's ranks,
                            merged into FILE. No step benchmark runs.
  --calibrate-passes N      with --calibrate: timed passes of the tiny T5's step whose median each figure keeps
                            (its six sizes on a CPU; the busy host's step under mpirun); fewer is quicker and
                            noisier                                                        [3; busy host 5]
  --print-model-config      print the shape as Hugging Face's config.json and exit
  --help                    this text
)";

struct Arguments {
  StepBenchmarkOptions options;
  std::string device = "auto";
  int threads = 0;
  std::string json_path;
  std::string calibrate_path;
  int calibrate_passes = 0;  // 0: calibrate_machine's own
  bool print_model_config = false;
};

const std::vector<std::string>& option_names() {
  static const std::vector<std::string> names = {
      "--model", "--precision", "--micro-batch", "--source-length", "--target-length", "--steps", "--warmup-steps",
      "--device", "--threads", "--activation-checkpointing", "--checkpoint-every-blocks", "--selective-recomputation",
      "--device-memory-gib", "--optimizer", "--lr", "--dropout", "--vocab-size", "--tp-shard", "--sequence-parallel",
      "--offload-optimizer",
      "--attention", "--peak-flops", "--matmul-peak", "--seed", "--json", "--rates", "--calibrate", "--calibrate-passes", "--profile", "--profile-trace",
      "--print-model-config", "--help"};
  return names;
}

Arguments parse(int argc, char** argv) {
  Arguments a;
  StepBenchmarkOptions& o = a.options;
  CommandLine line(argc, argv, kUsage);
  while (line.next()) {
    const std::string& flag = line.word();
    if (flag == "--model") {
      o.model = line.value();
    } else if (flag == "--precision") {
      o.precision = parse_precision(line.value());
    } else if (flag == "--micro-batch") {
      o.micro_batch = line.integer();
    } else if (flag == "--source-length") {
      o.source_length = line.integer();
    } else if (flag == "--target-length") {
      o.target_length = line.integer();
    } else if (flag == "--steps") {
      o.steps = line.integer();
    } else if (flag == "--warmup-steps") {
      o.warmup_steps = line.integer();
    } else if (flag == "--device") {
      a.device = line.value();
    } else if (flag == "--rates") {
      o.machine_rates = line.value();
    } else if (flag == "--calibrate") {
      a.calibrate_path = line.value();
    } else if (flag == "--calibrate-passes") {
      a.calibrate_passes = static_cast<int>(line.integer());
      T5S_CHECK(a.calibrate_passes >= 1, "--calibrate-passes must be at least 1, got ", a.calibrate_passes);
    } else if (flag == "--threads") {
      a.threads = static_cast<int>(line.integer());
      T5S_CHECK(a.threads >= 0, "--threads must be at least 0, got ", a.threads);
    } else if (flag == "--activation-checkpointing") {
      o.checkpoint_every_blocks = 1;
    } else if (flag == "--checkpoint-every-blocks") {
      const std::string every = line.value();
      o.checkpoint_every_blocks = every == "auto" ? kChooseCheckpointing : line.integer_in(every);
      T5S_CHECK(o.checkpoint_every_blocks >= kChooseCheckpointing, flag, " must be auto or at least 0, got ", every);
    } else if (flag == "--device-memory-gib") {
      o.device_memory_gib = line.number();
      T5S_CHECK(o.device_memory_gib > 0, "--device-memory-gib must be positive, got ", o.device_memory_gib);
    } else if (flag == "--optimizer") {
      const std::string name = line.value();
      T5S_CHECK(name == "adamw" || name == "adafactor", "--optimizer: '", name, "' is not adamw or adafactor");
      o.optimizer = name == "adamw" ? OptimizerKind::kAdamW : OptimizerKind::kAdafactor;
    } else if (flag == "--lr") {
      o.learning_rate = line.number();
    } else if (flag == "--dropout") {
      o.dropout_rate = line.number();
      T5S_CHECK(o.dropout_rate >= 0.0 && o.dropout_rate < 1.0, "--dropout must be in [0, 1), got ", o.dropout_rate);
    } else if (flag == "--vocab-size") {
      o.tiny_vocab_size = line.integer();
    } else if (flag == "--tp-shard") {
      o.tp_shard = static_cast<int>(line.integer());
    } else if (flag == "--attention") {
      o.attention = line.value();
    } else if (flag == "--peak-flops") {
      o.peak_flops_per_device = line.number();
      T5S_CHECK(o.peak_flops_per_device > 0, "--peak-flops must be positive, got ", o.peak_flops_per_device);
    } else if (flag == "--matmul-peak") {
      o.measure_matmul = true;
    } else if (flag == "--sequence-parallel") {
      o.sequence_parallel = true;
    } else if (flag == "--offload-optimizer") {
      o.offload_optimizer = true;
    } else if (flag == "--selective-recomputation") {
      o.selective_recomputation = true;
    } else if (flag == "--seed") {
      o.seed = static_cast<uint64_t>(line.integer());
    } else if (flag == "--profile") {
      o.profile_steps = static_cast<int>(line.integer());
      T5S_CHECK(o.profile_steps >= 1, "--profile must be at least 1 step, got ", o.profile_steps);
    } else if (flag == "--profile-trace") {
      o.profile_trace_path = line.value();
    } else if (flag == "--json") {
      a.json_path = line.value();
    } else if (flag == "--print-model-config") {
      a.print_model_config = true;
    } else {
      const std::string nearest = nearest_word(flag, option_names(), 4);
      throw Error(msg("unknown option '", flag, "'", nearest.empty() ? "" : "; did you mean '" + nearest + "'?",
                      " (see --help)"));
    }
  }
  return a;
}

torch::Device resolve_device(const std::string& text) {
  if (text == "auto") return cuda_usable() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  T5S_CHECK(text == "cpu" || text.rfind("cuda", 0) == 0, "--device: '", text, "' is not cpu, cuda, cuda:K or auto");
  torch::Device device(text == "cuda" ? std::string("cuda:0") : text);
  std::string why_not;
  T5S_CHECK(device.is_cpu() || cuda_usable(&why_not), "--device ", text, ": LibTorch cannot use a CUDA device on "
            "this machine (", why_not, ")");
  return device;
}

// Written under a temporary name and renamed: an interrupted run leaves no half-written report.
void write_json(const nlohmann::json& report, const std::string& path) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    T5S_CHECK(out.good(), "--json: cannot open ", temporary, " for writing");
    out << report.dump(2) << "\n";
    T5S_CHECK(out.good(), "--json: writing ", temporary, " failed");
  }
  std::filesystem::rename(temporary, path);
}

int run(int argc, char** argv) {
  Arguments a = parse(argc, argv);
  T5S_CHECK(a.options.profile_trace_path.empty() || a.options.profile_steps > 0,
            "--profile-trace needs --profile N (the steps to profile)");
  T5S_CHECK(a.calibrate_passes == 0 || !a.calibrate_path.empty(), "--calibrate-passes needs --calibrate FILE");
  if (a.print_model_config) {
    const StepBenchmarkOptions& o = a.options;
    std::cout << hf_config_json(benchmark_model_config(o.model, o.tiny_vocab_size, o.dropout_rate)).dump(2) << "\n";
    return 0;
  }
  if (a.threads > 0) torch::set_num_threads(a.threads);
  a.options.device = resolve_device(a.device);
  if (!a.calibrate_path.empty()) {
    const MpiRuntime mpi(&argc, &argv);
    CalibrationOptions c;
    c.path = a.calibrate_path;
    c.device = a.options.device;
    c.precision = a.options.precision;
    c.passes = a.calibrate_passes;
    const MachineRates rates = calibrate_machine(c);
    if (mpi.world_rank() == 0) {
      std::cout << machine_rates_json(rates) << "rates written to " << c.path << "\n";
      if (mpi.world_size() == 1 && !c.device.is_cuda()) {
        std::cout << "host_link_bytes_per_s: not measured, there is no GPU ("
                  << (rates.host_link_bytes_per_s > 0 ? "the file's figure kept" : "none; the planner needs one for "
                                                                                    "parallel.offload_optimizer on a GPU")
                  << ")\n";
      }
    }
    return 0;
  }
  StepBenchmark bench(a.options);
  nlohmann::json report = bench.run();
  report["identity"]["git_revision"] = T5SCALE_GIT_REVISION;
  report["identity"]["arguments"] = std::vector<std::string>(argv + 1, argv + argc);
  std::cout << benchmark_table({report});
  if (report["profile"].is_object()) std::cout << report["profile"]["table"].get<std::string>();
  std::cout << std::flush;
  if (!a.json_path.empty()) write_json(report, a.json_path);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { t5scale::end_process(t5scale::guarded_main("t5scale-bench", argc, argv, run)); }
