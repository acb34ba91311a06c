// Timing of training steps of one shape on the device at hand, as t5scale-bench reports it: the phases of each
// step (forward, backward, exposed communication, optimizer), throughput, model FLOP/s and MFU against the
// device's peak, and the peak memory against the planner's prediction.
//
//   StepBenchmarkOptions options;
//   options.model = "t5-v1_1-base"; options.precision = Precision::kBf16; options.device = torch::kCUDA;
//   StepBenchmark bench(options);            // builds the model and the trainer as t5scale-train does
//   nlohmann::json report = bench.run();     // warmup, timed steps, every figure (schema below)
//   std::cout << benchmark_table({report});
//
// Inputs are random token ids (seeded) of exactly the given lengths: no padding, every token counts. Tokens per
// step are counted as t5scale-train's log counts them, source tokens + target tokens (non-padding, labelled), so
// micro_batch x (source_length + target_length) here.
//
// With tp_shard N the model is built over a LocalShardCommunicator of size N: one rank's share of a TP = N model,
// its parameters and compute, with every collective a local operation of the same shape. Communication is
// excluded; tokens/s is then what the TP group would reach if communication cost nothing, and the model FLOPs
// (and MFU) are the rank's share, training_flops / N.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "model/seq2seq_batch.h"
#include "plan/resolved_run.h"
#include "train/parallel_trainer.h"

namespace t5scale {

struct StepBenchmarkOptions {
  std::string model = "t5-small";  // a named shape (named_model_names()) or "tiny"
  int64_t tiny_vocab_size = 32;    // the vocabulary of "tiny": the demo's synthetic task has 32 tokens
  double dropout_rate = -1.0;      // -1: the shape's own (named shapes 0.1, tiny 0)
  Precision precision = Precision::kFp32;
  int64_t micro_batch = 8;
  int64_t source_length = 128;
  int64_t target_length = 32;
  int64_t steps = 10;        // timed steps
  int64_t warmup_steps = 2;  // steps run before timing starts (allocator, kernels' first calls, optimizer state)
  torch::Device device = torch::kCPU;
  int64_t checkpoint_every_blocks = 0;  // activation checkpointing: 0 none, k every k-th block, -1 the planner's
                                       // choice (choose_activation_checkpointing) for the device's memory
  bool selective_recomputation = false;  // recompute every attention core in backward (not with blocks)
  double device_memory_gib = 0.0;       // > 0: the memory the planner's choice must fit (default: the GPU's, or
                                       // the host's physical memory on a CPU)
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  double learning_rate = 1e-4;  // constant: a schedule costs nothing measurable
  double weight_decay = 0.01;   // AdamW, on every parameter but the norms (as Hugging Face's Trainer)
  double max_grad_norm = 1.0;   // clipping, as t5scale-train and Hugging Face's Trainer do by default
  int tp_shard = 1;             // > 1: one rank's share of a TP = tp_shard model, communication excluded
  bool sequence_parallel = false;  // parallel.sequence_parallel (an effect with tp_shard > 1 only)
  bool offload_optimizer = false;  // parallel.offload_optimizer: master weights and moments on the host
  std::string attention = "auto";  // auto (the device's: sdpa on CUDA, explicit elsewhere), sdpa or explicit;
                                   // sdpa on the CPU holds the tensors the GPU's step holds
  double peak_flops_per_device = 0.0;  // > 0 replaces the peak table's figure
  bool measure_matmul = false;         // also time a large matrix product in the compute dtype
  std::string machine_rates;  // a rates file: the report adds the step-time model's prediction ("predicted")
  uint64_t seed = 1234;
  int profile_steps = 0;           // > 0: after the timed steps, this many more under the profiler (report "profile")
  std::string profile_trace_path;  // with profile_steps: the profiler's Chrome trace
};

// The model of `name`: a named shape or "tiny" (with tiny_vocab_size), dropout replaced when dropout_rate >= 0.
// An unknown name is refused with the known names and the nearest one ("did you mean").
ModelConfig benchmark_model_config(const std::string& name, int64_t tiny_vocab_size, double dropout_rate);

// "fp32" / "bf16" / "fp16" (enum_name gives the names); anything else throws, naming the value.
Precision parse_precision(const std::string& text);

// FLOP/s of a (n x n) @ (n x n) product in `dtype` on `device`: the median of `repeats` timed products after one
// untimed, counting 2 n^3 per product. What the device reaches on a large dense matmul, beside its datasheet peak.
double measure_matmul_flops(torch::Device device, torch::ScalarType dtype, int64_t n, int repeats);

class StepBenchmark {
 public:
  // Builds the model (weights initialised as t5scale-train does, from options.seed), the trainer and the batch.
  // Throws before allocating anything when the shape, lengths or TP size cannot work, naming the option.
  explicit StepBenchmark(StepBenchmarkOptions options);

  // Runs warmup_steps untimed, then `steps` timed ones, and returns every figure as JSON (schema
  // "t5scale-bench/1": identity, config, notes, per-step phases, median and min, throughput, FLOPs, MFU,
  // memory). identity.device and the versions are filled in; the caller adds its arguments and revision.
  nlohmann::json run();

  const ModelConfig& model_config() const { return model_config_; }
  ParallelTrainer& trainer() { return *trainer_; }
  const Seq2SeqBatch& batch() const { return batch_; }

 private:
  void build_trainer();  // the model as t5scale-train builds it, and its trainer
  std::vector<nlohmann::json> time_steps(int64_t& skipped);  // the timed steps' phases; skipped: fp16 overflows
  nlohmann::json config_section() const;
  void add_throughput(nlohmann::json& report, double step_s) const;  // tokens, FLOPs, MFU, the matmul rate
  void add_memory(nlohmann::json& report) const;  // the planner's prediction against the measured peak

  StepBenchmarkOptions options_;
  RunConfig config_;      // the run a t5scale-train job of this step would be given
  ResolvedRun resolved_;  // resolve_run's answer for it: the model, checkpointing, predicted memory and FLOPs
  ModelConfig model_config_;
  std::unique_ptr<ParallelTrainer> trainer_;
  Seq2SeqBatch batch_;
  std::string checkpointing_note_;  // how the planner chose, when it did
  int64_t start_memory_bytes_ = 0;  // resident set (CPU) or allocated bytes (CUDA) before the model was built
  int64_t tensor_bytes_at_start_ = 0;  // live tensor bytes then (CPU: counted by CpuMemoryTracker)
};

// One row per report (t5scale-bench's or bench/hf_reference.py's JSON), with the phases in milliseconds and
// their share of the step, then the notes of every report.
std::string benchmark_table(const std::vector<nlohmann::json>& reports);

}  // namespace t5scale
