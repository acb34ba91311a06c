// The run configuration of t5scale-train and t5scale-study: plain structs, one per section of the YAML file, and
// the functions that load, override, check, print and document it.
//
// Every key is declared once, in the key registry (config_registry.cpp: key path, type, default, one-line doc,
// allowed values, the struct member). YAML loading, `--set a.b=c`, to_yaml(), the per-key range checks of
// validate() and the Markdown reference (jobs/CONFIG_REFERENCE.md) all come from that table, so a key cannot be
// loadable but undocumented, or documented but unchecked. The defaults below are the registry's defaults.
//
// Life of a config: load_run_config(path) (types checked, unknown keys refused) -> apply_overrides(--set ...) ->
// validate() (every error at once, each starting with its key; no files touched, so a study can plan runs
// whose data does not exist yet) -> at start-up validate_for_world(world) and check_files().
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "config/model_config.h"

namespace t5scale {

struct RunSettings {
  std::string name = "run";  // run file <output_dir>/<name>.h5, checkpoints <output_dir>/<name>.ckpt/
  std::string study;
  std::string output_dir = "results";
  int64_t seed = 1234;
  // The world size (processes) the run was planned for; 0 = any. t5scale-study sets it in the configs it renders,
  // and the job refuses another world, whose batch split, LR and cost would differ from the plan.
  int64_t planned_world_size = 0;
};

struct ModelSettings {
  // The attention kernel (model/t5_layers.h AttentionKernel): auto (sdpa on GPUs, explicit on CPUs), sdpa, explicit,
  // or cudnn (cuDNN's fused attention, sdpa where it does not take a call).
  enum class Attention { kAuto, kSdpa, kExplicit, kCudnn };
  std::string name = "tiny";   // "tiny" or a named shape (named_model_names())
  std::string init_from;       // Hugging Face T5 folder or model name; "" = initialise from the seed
  double dropout_rate = -1.0;  // -1 = the model's own
  // The shape's dimensions, as Hugging Face's T5Config names them; 0 = the shape's own. num_layers alone sets both
  // stacks (as T5Config's num_decoder_layers defaults to num_layers). Not with init_from (its config.json rules).
  int64_t d_model = 0;
  int64_t d_kv = 0;
  int64_t d_ff = 0;
  int64_t num_heads = 0;
  int64_t num_layers = 0;
  int64_t num_decoder_layers = 0;
  int64_t vocab_size = 0;  // embedding rows (and the LM head's); 0 = the shape's own (tiny: the data's)
  Attention attention = Attention::kAuto;
};

struct DataSettings {
  enum class Sampling { kRandom, kSortish, kSequential };
  std::string dataset = "synthetic";  // a t5scale-prep HDF5 file, or "synthetic"
  std::string tokenizer;
  std::string train_split = "train";
  std::string eval_split = "validation";
  int64_t max_source_length = 512;  // 0 = the dataset's own lengths
  int64_t max_target_length = 128;
  Sampling sampling = Sampling::kRandom;
  int64_t sortish_factor = 50;
  int64_t max_tokens_per_micro_batch = 0;  // 0 = off
  int64_t pad_to_multiple_of = 8;
  bool drop_last = true;
  int64_t synthetic_vocab_size = 64;
  int64_t synthetic_examples = 4096;
};

struct ParallelSettings {
  enum class Backend { kAuto, kMpi, kNccl };
  // false: keep every activation; true: recompute every checkpoint_every_blocks-th block in backward; selective:
  // recompute every attention core; auto: the least recomputation whose predicted memory fits the device
  // (choose_activation_checkpointing).
  enum class ActivationCheckpointing { kOff, kOn, kAuto, kSelective };
  int64_t tp = 1;
  bool zero1 = false;
  bool zero2 = false;  // needs zero1
  // The fp32 master weights, the optimizer's moments and a copy of the reduced gradients in host memory, the update
  // on the CPU cores (ZeRO-Offload; train/distributed_optimizer.h).
  bool offload_optimizer = false;
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::kOff;
  int64_t checkpoint_every_blocks = 1;
  bool sequence_parallel = false;  // the residual stream split over the TP group (no effect at tp 1)
  double device_memory_gib = 0.0;  // what auto plans for; 0: the device's own memory
  double bucket_mib = 25.0;
  double collective_timeout_s = 600.0;
  Backend backend = Backend::kAuto;
};

struct TrainSettings {
  enum class BatchMode { kFixedGlobal, kFixedMicro };
  int64_t max_steps = 0;  // exactly one of max_steps / epochs is > 0
  double epochs = 0.0;
  int64_t global_batch = 16;  // sequences per optimizer step over all DP replicas (fixed_global)
  int64_t micro_batch = 0;    // sequences per micro-batch and replica (fixed_micro; 0 = derived)
  int64_t grad_accumulation = 1;
  BatchMode batch_mode = BatchMode::kFixedGlobal;
  double max_grad_norm = 1.0;  // 0 = no clipping
  int64_t log_every = 10;
  double log_every_s = 30.0;  // also a step line when this long has passed since the last one (0: steps only)
  bool freeze_embeddings = false;
  bool freeze_encoder = false;
  std::string freeze_pattern;  // ECMAScript regex over parameter names; "" = none
};

struct OptimizerSettings {
  enum class Name { kAdamw, kAdafactor };
  enum class Fused { kAuto, kOn, kOff };
  Name name = Name::kAdamw;
  double lr = 3.0e-4;  // the base LR, before lr_scaling
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1.0e-8;
  Fused fused = Fused::kAuto;
  bool adafactor_relative_step = false;
  bool adafactor_scale_parameter = false;
  bool adafactor_warmup_init = false;
  double adafactor_decay_rate = -0.8;
  double adafactor_clip_threshold = 1.0;
  double adafactor_beta1 = 0.0;  // 0 = no first moment
  double adafactor_eps1 = 1.0e-30;
  double adafactor_eps2 = 1.0e-3;
};

struct LrScheduleSettings {
  enum class Decay { kConstant, kLinear, kCosine, kInverseSqrt };
  int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;
  Decay decay = Decay::kConstant;
  double min_lr_ratio = 0.0;
};

struct LrScalingSettings {
  enum class Rule { kNone, kLinear, kSqrt };
  Rule rule = Rule::kNone;
  int64_t reference_global_batch = 16;
  bool scale_warmup = false;
};

struct EvalSettings {
  int64_t every_steps = 0;  // 0 = only at the end (if at_end)
  double every_epochs = 0.0;  // or every this many epochs (rounded to steps); 0 = off; not with every_steps
  bool at_end = true;
  int64_t max_examples = 0;  // 0 = the whole split
  int64_t batch_size = 16;
  bool generate = true;
  int64_t max_new_tokens = 64;
  std::string metrics = "loss";  // comma list of loss, rouge, squad, classification
  bool write_generations = true;
  bool only = false;  // evaluation-only mode
};

struct EarlyStoppingSettings {
  enum class Mode { kAuto, kMin, kMax };
  std::string metric;  // "" = off
  Mode mode = Mode::kAuto;
  int64_t patience = 3;
  double min_delta = 0.0;
};

struct CheckpointSettings {
  enum class Resume { kAuto, kNever };
  std::string dir;  // "" = <output_dir>/<name>.ckpt
  int64_t every_steps = 0;
  double every_minutes = 0.0;
  int64_t keep_last = 2;
  Resume resume = Resume::kAuto;
  bool at_end = true;
  // Resuming with a config that differs from the checkpoint's in a key that changes the data order or the meaning
  // of the record (config_change_needs_permission) is refused unless this is true; every change is recorded.
  bool allow_config_change = false;
};

struct ExportSettings {
  std::string hf_dir;  // "" = no export
};

struct TelemetrySettings {
  enum class GpuEnergy { kAuto, kNvml, kNone };
  enum class CpuEnergy { kAuto, kRapl, kNone };
  int64_t flush_every_steps = 10;
  GpuEnergy gpu_energy = GpuEnergy::kAuto;
  CpuEnergy cpu_energy = CpuEnergy::kAuto;
  std::string powercap_root = "/sys/class/powercap";
  double peak_flops_per_device = 0.0;  // 0 = from the table of peaks by device name
  std::string machine_rates;           // rates file for the step-time model; "" = the device's published figures
};

struct CostSettings {
  double price_per_node_hour_usd = 0.0;  // 0 = not set; charged by the share of each node the job holds
  double price_per_gpu_hour_usd = 0.0;   // 0 = not set; charged by the GPUs the job holds (not with the above)
  double low_priority_price_per_node_hour_usd = 0.0;
  double carbon_intensity_g_per_kwh = 475.0;
  double pue = 1.0;
  int64_t gpus_per_node = 0;  // 0 = from the launch
  int64_t node_gpus = 0;      // GPUs one node has, for the node share; 0 = counted on the node (NVML)
};

struct RunConfig {
  // kAuto: bf16 on a GPU that has it, fp16 (with loss scaling) on one that has not, fp32 on the CPU; the job
  // resolves it on its device (resolve_precision) and records what it chose.
  enum class Precision { kFp32, kBf16, kFp16, kAuto };
  RunSettings run;
  ModelSettings model;
  DataSettings data;
  ParallelSettings parallel;
  Precision precision = Precision::kAuto;
  TrainSettings train;
  OptimizerSettings optimizer;
  LrScheduleSettings lr_schedule;
  LrScalingSettings lr_scaling;
  EvalSettings eval;
  EarlyStoppingSettings early_stopping;
  CheckpointSettings checkpoint;
  ExportSettings export_;  // YAML section "export" (a C++ keyword)
  TelemetrySettings telemetry;
  CostSettings cost;
};

// The checkpointing the parallel settings ask for: 0 none, k every k-th block, -1 the planner's choice
// (kChooseCheckpointing of plan/cost_model.h, which resolves it).
inline int64_t requested_checkpoint_every_blocks(const ParallelSettings& p) {
  switch (p.activation_checkpointing) {
    case ParallelSettings::ActivationCheckpointing::kOff: return 0;
    case ParallelSettings::ActivationCheckpointing::kOn: return p.checkpoint_every_blocks;
    case ParallelSettings::ActivationCheckpointing::kAuto: return -1;
    case ParallelSettings::ActivationCheckpointing::kSelective: return 0;
  }
  return 0;
}

// True when the parallel settings ask for selective recomputation itself (auto may choose it too).
inline bool requested_selective_recomputation(const ParallelSettings& p) {
  return p.activation_checkpointing == ParallelSettings::ActivationCheckpointing::kSelective;
}

// The multiple that batch lengths are padded up to: data.pad_to_multiple_of, and with parallel.sequence_parallel at
// tp > 1 also a multiple of tp (their least common multiple), since every sequence is then split over the TP group.
inline int64_t padded_length_multiple(const RunConfig& c) {
  const int64_t multiple = std::max<int64_t>(c.data.pad_to_multiple_of, 1);
  if (!c.parallel.sequence_parallel || c.parallel.tp <= 1) return multiple;
  return std::lcm(multiple, c.parallel.tp);
}

// The parameters train.freeze_* selects.
inline FreezeOptions freeze_options(const TrainSettings& t) {
  return FreezeOptions{t.freeze_embeddings, t.freeze_encoder, t.freeze_pattern};
}

// Key by key, through the registry; doubles compare exactly (a YAML round trip keeps every bit).
bool operator==(const RunConfig& a, const RunConfig& b);
inline bool operator!=(const RunConfig& a, const RunConfig& b) { return !(a == b); }

// The names as written in YAML ("fixed_global", "inverse_sqrt", ...).
std::string enum_name(ModelSettings::Attention value);
std::string enum_name(DataSettings::Sampling value);
std::string enum_name(ParallelSettings::Backend value);
std::string enum_name(ParallelSettings::ActivationCheckpointing value);
std::string enum_name(RunConfig::Precision value);
std::string enum_name(TrainSettings::BatchMode value);
std::string enum_name(OptimizerSettings::Name value);
std::string enum_name(OptimizerSettings::Fused value);
std::string enum_name(LrScheduleSettings::Decay value);
std::string enum_name(LrScalingSettings::Rule value);
std::string enum_name(EarlyStoppingSettings::Mode value);
std::string enum_name(CheckpointSettings::Resume value);
std::string enum_name(TelemetrySettings::GpuEnergy value);
std::string enum_name(TelemetrySettings::CpuEnergy value);

// ---- Loading and overrides (types and key names; ranges are validate()'s) ----

// One problem of a config: the key and why.
struct ConfigError {
  std::string key;      // "train.max_steps"; for checks across keys, the key to change first
  std::string message;  // the reason, without the key
  std::string text() const { return key + ": " + message; }
};


// Reads a YAML file; keys not in it keep their defaults. Throws t5scale::Error listing every problem, each as
// "<file>:<line>: <key>: <reason>": an unknown key (with the nearest known key), a value of the wrong type (the
// value and the expected type), a value that is not one of an enum's names, a duplicate key, a YAML syntax
// error (line and column), or a file that cannot be read.
RunConfig load_run_config(const std::string& path);
// The same from text; `source` names it in messages.
RunConfig parse_run_config(const std::string& yaml_text, const std::string& source = "<config>");
// One "--set section.key=value": the value is read as the key's type, as in YAML (quotes optional). Throws an
// Error starting with "--set <assignment>: ".
void apply_override(RunConfig& config, const std::string& assignment);
// All of them, reporting every bad one at once.
void apply_overrides(RunConfig& config, const std::vector<std::string>& assignments);
// A program's config: the file at `path` (empty: every default) with `overrides` applied, then `complete` (the
// program's own defaults, such as a step count when nothing sets one), then validate() and the program's
// `more_checks` (t5scale-train: the world's and the files'; a problem both report is listed once). Throws one
// Error with every problem at once: what did not load (types, names, keys) and every check, per key and across
// keys, on what did (a check that concerns a key that did not load is left out: that key holds its default, not
// what was written).
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides,
                          const std::function<void(RunConfig&)>& complete = {},
                          const std::function<std::vector<ConfigError>(const RunConfig&)>& more_checks = {});

// Every key, resolved, in the schema's order, as YAML that load_run_config reads back to an equal config
// (floats in their shortest round-trip form; strings quoted).
std::string to_yaml(const RunConfig& config);

// ---- Validation ----

// Every problem that the config alone shows: each key's range or allowed values, and the checks across keys
// (exactly one of max_steps / epochs, the model name, tp dividing the model, adafactor with zero1, early
// stopping on a computed metric, ...). Touches no file.
std::vector<ConfigError> validate(const RunConfig& config);
// validate() plus what the world size decides: world % tp, and the batch split (resolve_batch's checks).
std::vector<ConfigError> validate_for_world(const RunConfig& config, int64_t world_size);
// The paths that must exist: data.dataset (unless "synthetic"), data.tokenizer and model.init_from if set
// (a folder with config.json, or a model name found in the Hugging Face cache: config/hf_model_folder.h).
std::vector<ConfigError> check_files(const RunConfig& config);
// model.init_from as a folder: itself, or the Hugging Face cache's snapshot of the model it names; the value as
// it is when neither is there (check_files() says why), "" when unset.
std::string init_from_folder(const RunConfig& config);
// Throws t5scale::Error with every error of `errors`, one per line, under "<source>: invalid run config:".
void throw_if_errors(const std::vector<ConfigError>& errors, const std::string& source);

// ---- Resolution ----

struct BatchPlan {
  int64_t dp = 1;                 // data-parallel replicas = world / tp
  int64_t micro_batch = 0;        // sequences per micro-batch and replica
  int64_t grad_accumulation = 1;  // micro-batches per optimizer step and replica
  int64_t global_batch = 0;       // sequences per optimizer step = micro_batch * dp * grad_accumulation
};
// fixed_global: micro_batch = global_batch / (dp * grad_accumulation), which must divide (train.micro_batch
// must be 0 or that value); fixed_micro: global_batch = micro_batch * dp * grad_accumulation (train.global_batch
// is not used). Throws an Error naming the keys and numbers when the split is impossible.
BatchPlan resolve_batch(const RunConfig& config, int64_t world_size);

// The precision a run computes in: `requested` itself, or for auto fp32 off a GPU, bf16 on a GPU with bf16 and fp16
// on one without (V100-class). `why` (optional) says how auto chose.
RunConfig::Precision resolve_precision(RunConfig::Precision requested, bool on_gpu, bool gpu_has_bf16,
                                       std::string* why = nullptr);

// parallel.tp errors for a model shape: tp must divide num_heads, d_ff and vocab_size (each with both numbers).
std::vector<ConfigError> check_tp_divides(const ModelConfig& model, int64_t tp);

// The settings of the model section applied to a shape from anywhere (a named shape, an init_from config.json):
// model.dropout_rate >= 0 replaces the shape's dropout, each dimension > 0 the shape's.
void apply_model_settings(const RunConfig& config, ModelConfig& model);

// The model shape the run trains: "tiny" -> tiny_model_config(vocab_size) (vocab_size: the data's, from
// data.synthetic_vocab_size or the dataset file's vocab_size attribute); a named shape -> named_model_config, whose
// vocabulary must hold the data's ids (vocab_size <= its vocab_size); then apply_model_settings. With
// model.init_from set the shape is that folder's config.json, which io reads: this throws.
ModelConfig resolve_model_config(const RunConfig& config, int64_t vocab_size);
// Trained from scratch, a named shape keeps its own embedding rows (t5-small: 32,128) whatever the data's
// vocabulary: where the data's ids reach less than half of them (a tokenizer trained on the data), what the rows no
// id reaches cost and the model.vocab_size that would hold the data's ids (a multiple of 128, as Megatron-LM pads);
// "" otherwise (model.vocab_size set, model.init_from set, tiny, or the vocabulary unknown).
std::string unused_embedding_rows_note(const RunConfig& config, const ModelConfig& model, int64_t data_vocab_size);

// Steps between evaluations during training: eval.every_steps, or eval.every_epochs x steps_per_epoch rounded to
// the nearest step (at least 1); 0 = none during training, or every_epochs with steps_per_epoch unknown (<= 0).
int64_t evaluation_interval_steps(const EvalSettings& eval, int64_t steps_per_epoch);

// The reference of every key as Markdown (one table per section: key, type, default, allowed values, meaning,
// then the checks across keys): what `t5scale-train --config-reference` prints and jobs/CONFIG_REFERENCE.md holds.
std::string config_reference_markdown();

// Metric names that early_stopping.metric accepts (the /eval columns of the run file, loss as "eval_loss").
const std::vector<std::string>& known_eval_metric_names();

}  // namespace t5scale
