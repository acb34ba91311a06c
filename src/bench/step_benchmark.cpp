#include "bench/step_benchmark.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>  // gethostname

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "bench/kernel_profile.h"
#include "config/config_registry.h"
#include "config/hf_config.h"
#include "core/check.h"
#include "core/nearest_word.h"
#include "core/units.h"
#include "core/utc_time.h"
#include "dist/cuda_backend.h"
#include "dist/local_shard_communicator.h"
#include "dist/process_grid.h"
#include "plan/cost_model.h"
#include "telemetry/cost.h"
#include "telemetry/nvml.h"
#include "telemetry/probes.h"
#include "train/collate.h"
#include "train/cpu_memory_tracker.h"
#include "train/device_probe.h"

namespace t5scale {

using json = nlohmann::json;

ModelConfig benchmark_model_config(const std::string& name, int64_t tiny_vocab_size, double dropout_rate) {
  ModelConfig config;
  if (name == "tiny") {
    T5S_CHECK(tiny_vocab_size >= 4, "--vocab-size: the tiny model needs at least 4 tokens, got ", tiny_vocab_size);
    config = tiny_model_config(tiny_vocab_size);
  } else {
    std::vector<std::string> names = named_model_names();
    try {
      config = named_model_config(name);
    } catch (const Error&) {
      names.insert(names.begin(), "tiny");
      const std::string nearest = nearest_word(name, names, std::max<size_t>(3, name.size() / 3));
      throw Error(msg("--model: unknown model '", name, "'", nearest.empty() ? "" : " (did you mean '" + nearest + "'?)",
                      "; known: ", join(names, ", ")));
    }
  }
  if (dropout_rate >= 0.0) config.dropout_rate = dropout_rate;
  check_valid(config, "--model " + name);
  return config;
}

Precision parse_precision(const std::string& text) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    if (enum_name(p) == text) return p;
  }
  throw Error(msg("--precision: '", text, "' is not fp32, bf16 or fp16"));
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median_of(std::vector<double> values) {
  T5S_CHECK(!values.empty(), "the median of no values");
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// The CPU's model name from /proc/cpuinfo ("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"), "cpu" if unreadable.
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
  }
  return "cpu";
}

std::string device_name(torch::Device device) {
  return device.is_cuda() ? cuda_device_name(device) : cpu_model_name();
}

// The run one benchmark step is a step of, as t5scale-train would be given it: the model, one DP replica of tp_shard
// ranks (this process is one of them), a global batch of one micro-batch padded to the given lengths.
RunConfig benchmark_run_config(const StepBenchmarkOptions& o) {
  RunConfig c;
  c.model.name = o.model;
  c.model.dropout_rate = o.dropout_rate;
  c.precision = o.precision;
  c.train.global_batch = o.micro_batch;
  c.train.max_steps = o.warmup_steps + o.steps;
  c.train.max_grad_norm = o.max_grad_norm;
  c.data.max_source_length = o.source_length;
  c.data.max_target_length = o.target_length;
  c.data.pad_to_multiple_of = 1;  // the batch has exactly the given lengths
  c.parallel.tp = o.tp_shard;
  c.parallel.sequence_parallel = o.sequence_parallel;
  c.parallel.offload_optimizer = o.offload_optimizer;
  using Checkpointing = ParallelSettings::ActivationCheckpointing;
  if (o.selective_recomputation) {
    c.parallel.activation_checkpointing = Checkpointing::kSelective;
  } else if (o.checkpoint_every_blocks == kChooseCheckpointing) {
    c.parallel.activation_checkpointing = Checkpointing::kAuto;
  } else if (o.checkpoint_every_blocks > 0) {
    c.parallel.activation_checkpointing = Checkpointing::kOn;
    c.parallel.checkpoint_every_blocks = o.checkpoint_every_blocks;
  }
  const bool adafactor = o.optimizer == OptimizerKind::kAdafactor;
  c.optimizer.name = adafactor ? OptimizerSettings::Name::kAdafactor : OptimizerSettings::Name::kAdamw;
  c.optimizer.weight_decay = adafactor ? 0.0 : o.weight_decay;  // Adafactor without decay: T5's recipe
  c.optimizer.lr = o.learning_rate;
  return c;
}

// The device's allocated bytes now (CUDA) or this process's resident set (CPU).
int64_t memory_now_bytes(torch::Device device) {
  if (const auto stats = cuda_allocator_stats(device)) return stats->allocated_bytes;
  return read_host_memory().rss_bytes;
}

// Bytes of live tensors on the device now, and their peak since the start (CUDA: the caching allocator's
// figures; CPU: the tracking allocator's); -1 when they cannot be known.
int64_t tensor_bytes_now(torch::Device device) {
  if (const auto stats = cuda_allocator_stats(device)) return stats->allocated_bytes;
  return CpuMemoryTracker::installed() ? CpuMemoryTracker::live_bytes() : -1;
}
int64_t tensor_peak_bytes(torch::Device device) {
  if (const auto stats = cuda_allocator_stats(device)) return stats->peak_allocated_bytes;
  return CpuMemoryTracker::installed() ? CpuMemoryTracker::peak_bytes() : -1;
}

struct PeakMemory {
  std::string measured;  // what peak_bytes is
  int64_t peak_bytes = 0;
  int64_t reserved_peak_bytes = -1;  // CUDA only
};

PeakMemory peak_memory(torch::Device device) {
  if (const auto stats = cuda_allocator_stats(device)) {
    return {"cuda_allocator_peak_allocated", stats->peak_allocated_bytes, stats->peak_reserved_bytes};
  }
  return {"peak_rss", peak_resident_set_bytes(), -1};
}

// Device, library and host identity; versions are null where they cannot be known (no GPU, no NVML).
json identity(torch::Device device) {
  json id;
  id["device"] = device_name(device);
  id["device_type"] = device.is_cuda() ? "cuda" : "cpu";
  id["torch_version"] = TORCH_VERSION;
  id["cuda_runtime_version"] = nullptr;
  id["driver_version"] = nullptr;
  if (device.is_cuda()) {
    const std::string runtime = required_cuda_backend("a GPU's identity").runtime_version();
    if (!runtime.empty()) id["cuda_runtime_version"] = runtime;
    try {
      id["driver_version"] = NvmlLibrary::load()->driver_version();
    } catch (const std::exception&) {
      // No NVML on this node: the driver version stays unknown.
    }
  }
  id["threads"] = at::get_num_threads();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  id["host"] = host;
  id["date"] = utc_iso_time();
  return id;
}

json nullable(double value) { return std::isfinite(value) ? json(value) : json(nullptr); }

// The phase fields of a step, in table order; "other" is the step's time outside the four phases (counting the
// batch's target tokens, zeroing the gradient buckets, the host's work between phases).
const std::vector<std::string>& phase_keys() {
  static const std::vector<std::string> keys = {"forward_s", "backward_s", "comm_exposed_s", "optimizer_s",
                                                "other_s",   "total_s"};
  return keys;
}

}  // namespace

double measure_matmul_flops(torch::Device device, torch::ScalarType dtype, int64_t n, int repeats) {
  T5S_CHECK(n > 0 && repeats > 0, "a matmul measurement needs n > 0 and repeats > 0, got ", n, " and ", repeats);
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  const torch::Tensor a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
  torch::Tensor c = torch::mm(a, b);  // untimed: library selection, workspace
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) {
    synchronize_device(device);
    const auto start = std::chrono::steady_clock::now();
    torch::mm_out(c, a, b);
    synchronize_device(device);
    seconds.push_back(seconds_since(start));
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / median_of(seconds);
}

namespace {

// The options' own problems, each named by its option, before anything is built.
void check_options(const StepBenchmarkOptions& o) {
  T5S_CHECK(o.micro_batch > 0, "--micro-batch must be positive, got ", o.micro_batch);
  T5S_CHECK(o.source_length > 0, "--source-length must be positive, got ", o.source_length);
  T5S_CHECK(o.target_length > 0, "--target-length must be positive, got ", o.target_length);
  T5S_CHECK(!o.sequence_parallel || (o.source_length % o.tp_shard == 0 && o.target_length % o.tp_shard == 0),
            "--sequence-parallel splits every sequence over the TP group: --source-length ", o.source_length,
            " and --target-length ", o.target_length, " must be divisible by --tp-shard ", o.tp_shard);
  T5S_CHECK(o.steps > 0, "--steps must be positive, got ", o.steps);
  T5S_CHECK(o.warmup_steps >= 0, "--warmup-steps must be at least 0, got ", o.warmup_steps);
  T5S_CHECK(o.tp_shard >= 1, "--tp-shard must be at least 1, got ", o.tp_shard);
  T5S_CHECK(o.checkpoint_every_blocks >= kChooseCheckpointing,
            "--checkpoint-every-blocks must be auto or at least 0, got ", o.checkpoint_every_blocks);
  T5S_CHECK(o.device_memory_gib >= 0.0, "--device-memory-gib must be positive, got ", o.device_memory_gib);
  T5S_CHECK(!o.selective_recomputation || o.checkpoint_every_blocks == 0,
            "--selective-recomputation is an alternative to --activation-checkpointing and --checkpoint-every-blocks "
            "(auto chooses among all of them): give one");
  T5S_CHECK(o.attention == "auto" || o.attention == "sdpa" || o.attention == "explicit" || o.attention == "cudnn",
            "--attention: '", o.attention, "' is not auto, sdpa, explicit or cudnn");
}

// The world the benchmark's run is resolved for: one shard of a TP group, the device's memory.
RunWorld benchmark_world(const StepBenchmarkOptions& o, int64_t memory_bytes) {
  RunWorld world;
  world.world_size = o.tp_shard;
  world.on_gpu = o.device.is_cuda();
  world.half_products_through_fp32 = o.device.is_cpu() && CpuMemoryTracker::half_products_through_fp32();
  world.fused_attention = o.attention != "explicit";
  world.device_share_bytes = memory_bytes;
  if (!o.machine_rates.empty()) {
    // The shard's collectives are local operations here (communication excluded): a link that costs nothing.
    world.rates = read_machine_rates(o.machine_rates);
    world.rates->links = {LinkRates{"intra_node", 0, 0, 0.0, 1e30, false, "none: --tp-shard excludes communication"}};
  }
  return world;
}

// Random ordinary tokens (ids 2 onward: neither pad nor eos), on the host as the data loader delivers them.
Seq2SeqBatch random_batch(const StepBenchmarkOptions& o, int64_t vocab) {
  auto generator = at::detail::createCPUGenerator(o.seed);
  const auto ids = torch::TensorOptions().dtype(torch::kInt64);
  Seq2SeqBatch batch;
  batch.input_ids = torch::randint(2, vocab, {o.micro_batch, o.source_length}, generator, ids);  // (B, S)
  batch.attention_mask = torch::ones({o.micro_batch, o.source_length}, ids);                    // (B, S)
  batch.labels = torch::randint(2, vocab, {o.micro_batch, o.target_length}, generator, ids);     // (B, T)
  return o.device.is_cuda() ? pinned(batch) : batch;  // page-locked, as the job's loader gives them to a GPU
}

}  // namespace

StepBenchmark::StepBenchmark(StepBenchmarkOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  check_options(o);
  // Then the run as the job resolves it.
  model_config_ = benchmark_model_config(o.model, o.tiny_vocab_size, o.dropout_rate);
  const auto problems = ProcessGrid::validate(o.tp_shard, o.tp_shard, model_config_);
  if (!problems.empty()) {
    std::string text;
    for (const auto& p : problems) text += "\n  " + p;
    throw Error(msg("--tp-shard ", o.tp_shard, ": ", model_config_.name, " cannot be split so:", text));
  }
  const int64_t memory_bytes =
      o.device_memory_gib > 0.0 ? gib_to_bytes(o.device_memory_gib) : device_memory_bytes(o.device);
  T5S_CHECK(o.checkpoint_every_blocks != kChooseCheckpointing || memory_bytes > 0, "the memory of ", o.device.str(),
            " is unknown to this build: give --device-memory-gib");
  config_ = benchmark_run_config(o);
  // On the CPU every tensor from here on is counted: the step's peak is measured, not read from the resident set.
  if (o.device.is_cpu()) CpuMemoryTracker::install();
  RunData data;
  data.vocab_size = o.model == "tiny" ? o.tiny_vocab_size : 0;
  resolved_ = resolve_run(config_, benchmark_world(o, memory_bytes), data);
  if (!resolved_.errors.empty() || !resolved_.model || !resolved_.memory_inputs) {
    throw Error(msg("the benchmark's run cannot be planned: ", join(resolved_.errors, "; ")));
  }
  model_config_ = *resolved_.model;
  if (o.checkpoint_every_blocks == kChooseCheckpointing) {
    checkpointing_note_ =
        "activation checkpointing chosen by the planner: " + resolved_.checkpointing.describe_against(memory_bytes);
  }
  options_.checkpoint_every_blocks = resolved_.checkpointing.checkpoint_every_blocks;
  options_.selective_recomputation = resolved_.checkpointing.selective_recomputation;

  reset_cuda_peak_stats(o.device);
  tensor_bytes_at_start_ = tensor_bytes_now(o.device);
  start_memory_bytes_ = memory_now_bytes(o.device);
  build_trainer();
  batch_ = random_batch(o, model_config_.vocab_size);
}

void StepBenchmark::build_trainer() {
  const auto& o = options_;
  ProcessGrid grid = ProcessGrid::solo();
  if (o.tp_shard > 1) {
    grid.tp_size = o.tp_shard;
    grid.tp = std::make_shared<LocalShardCommunicator>(o.tp_shard, "tp");
    grid.world = std::make_shared<LocalShardCommunicator>(o.tp_shard, "world");
  }
  // As t5scale-train builds the model: the dropout streams, the seeded initialisation, the replicated stream.
  auto rng = std::make_shared<ParallelRng>(o.seed, grid.tp_rank, o.device);
  T5Model model(model_config_, grid.tp, torch::TensorOptions().dtype(compute_dtype(o.precision)).device(o.device),
                rng);
  model->initialize_weights(o.seed);
  if (o.attention != "auto") {
    model->set_attention_kernel(o.attention == "sdpa"    ? AttentionKernel::kSdpa
                                : o.attention == "cudnn" ? AttentionKernel::kCudnn
                                                         : AttentionKernel::kExplicit);
  }
  if (o.checkpoint_every_blocks > 0) model->set_activation_checkpointing(o.checkpoint_every_blocks);
  model->set_selective_recomputation(o.selective_recomputation);
  model->set_sequence_parallel(o.sequence_parallel);
  torch::manual_seed(o.seed);
  trainer_ = std::make_unique<ParallelTrainer>(model, grid, training_options_for(config_));
}

json StepBenchmark::run() {
  const auto& o = options_;
  int64_t skipped = 0;
  const std::vector<json> steps = time_steps(skipped);

  json report;
  report["schema"] = "t5scale-bench/1";
  report["implementation"] = "t5scale";
  report["identity"] = identity(o.device);
  report["config"] = config_section();

  std::vector<std::string> notes = {
      "inputs: random token ids of exactly the given lengths, no padding",
      "tokens = source + target tokens per step (as t5scale-train counts them)",
  };
  if (o.tp_shard > 1) {
    notes.push_back(msg("communication excluded (tp-shard ", o.tp_shard, "): one rank's share of a TP=", o.tp_shard,
                        " model; tokens/s as if communication were free, FLOPs and MFU per rank"));
  }
  if (!checkpointing_note_.empty()) notes.push_back(checkpointing_note_);
  // After the timed steps: with --attention cudnn it names the calls cuDNN did not take.
  notes.push_back("attention: " + trainer_->model()->attention_kernels());
  if (skipped > 0) notes.push_back(msg(skipped, " of ", o.steps, " timed steps skipped (fp16 overflow)"));
  report["steps"] = steps;

  json median, minimum;
  for (const std::string& key : phase_keys()) {
    std::vector<double> values;
    for (const auto& s : steps) values.push_back(s[key].get<double>());
    median[key] = median_of(values);
    minimum[key] = *std::min_element(values.begin(), values.end());
  }
  report["median"] = median;
  report["min"] = minimum;
  const double step_s = median["total_s"].get<double>();
  if (resolved_.step_time) {
    const StepTimePrediction& p = *resolved_.step_time;
    report["predicted"] = {{"machine_rates", o.machine_rates}, {"total_s", p.total_s}, {"forward_s", p.forward_s},
                           {"backward_s", p.backward_s}, {"optimizer_s", p.optimizer_s}, {"matmul_s", p.matmul_s},
                           {"elementwise_s", p.elementwise_s}, {"host_s", p.host_s}, {"operators", p.operators}};
    notes.push_back(msg(options_.model, ": step-time model (", o.machine_rates, "): ", p.describe(), "; matmul ",
                        p.matmul_s * 1e3, " ms, elementwise ", p.elementwise_s * 1e3, " ms, host ", p.host_s * 1e3,
                        " ms for ", p.operators, " operators; measured ", step_s * 1e3, " ms"));
  }
  report["notes"] = notes;

  add_throughput(report, step_s);
  add_memory(report);
  report["profile"] = nullptr;
  if (o.profile_steps > 0) {  // after the memory figures: the profiler's own buffers stay out of them
    KernelProfile profile = profile_kernels(
        o.device, o.profile_steps, [&] { trainer_->step({batch_}, o.learning_rate); }, o.profile_trace_path);
    report["profile"] = profile.summary;
    report["profile"]["table"] = profile.table;
  }
  return report;
}

std::vector<json> StepBenchmark::time_steps(int64_t& skipped) {
  const auto& o = options_;
  std::vector<json> steps;
  for (int64_t i = 0; i < o.warmup_steps + o.steps; ++i) {
    synchronize_device(o.device);
    const auto start = std::chrono::steady_clock::now();
    const StepResult r = trainer_->step({batch_}, o.learning_rate);
    synchronize_device(o.device);
    const double total_s = seconds_since(start);
    if (i < o.warmup_steps) continue;
    const double phases_s = r.forward_time_s + r.backward_time_s + r.comm_exposed_time_s + r.optimizer_time_s;
    steps.push_back({{"forward_s", r.forward_time_s},
                     {"backward_s", r.backward_time_s},
                     {"comm_exposed_s", r.comm_exposed_time_s},
                     {"optimizer_s", r.optimizer_time_s},
                     {"other_s", std::max(total_s - phases_s, 0.0)},
                     {"total_s", total_s},
                     {"loss", nullable(r.loss)},
                     {"peak_bytes", {{"forward", r.forward_peak_bytes},
                                     {"backward", r.backward_peak_bytes},
                                     {"optimizer", r.optimizer_peak_bytes}}},
                     {"skipped", r.skipped}});
    skipped += r.skipped ? 1 : 0;
  }
  return steps;
}

json StepBenchmark::config_section() const {
  const auto& o = options_;
  const std::string precision = enum_name(o.precision);
  int64_t parameters = 0;
  for (const auto& p : trainer_->model()->parameters()) parameters += p.numel();
  const std::string mixed = o.precision == Precision::kFp32
                                ? "fp32 compute, fp32 AdamW"
                                : precision + " weights and compute, fp32 master weights, gradients and optimizer";
  return {
      {"model", model_config_.name},
      {"precision", precision},
      {"precision_detail", mixed},
      {"micro_batch", o.micro_batch},
      {"source_length", o.source_length},
      {"target_length", o.target_length},
      {"steps", o.steps},
      {"warmup_steps", o.warmup_steps},
      {"optimizer", o.optimizer == OptimizerKind::kAdamW ? "adamw" : "adafactor"},
      {"optimizer_detail", o.optimizer == OptimizerKind::kAdamW
                               ? msg("t5scale AdamW (", trainer_->optimizer().name(),
                                     "), fused ATen kernel where the device has one, over fp32 gradient buckets")
                               : std::string("t5scale Adafactor (factored second moments)")},
      {"activation_checkpointing", o.checkpoint_every_blocks},
      {"selective_recomputation", o.selective_recomputation},
      {"dropout_rate", model_config_.dropout_rate},
      {"tp_shard", o.tp_shard},
      {"sequence_parallel", o.sequence_parallel},
      {"offload_optimizer", o.offload_optimizer},
      {"attention", o.attention != "auto" ? o.attention
                    : default_attention_kernel(o.device) == AttentionKernel::kSdpa ? "sdpa" : "explicit"},
      {"seed", o.seed},
      {"learning_rate", o.learning_rate},
      {"weight_decay", o.optimizer == OptimizerKind::kAdamW ? o.weight_decay : 0.0},
      {"max_grad_norm", o.max_grad_norm},
      {"parameters", parameters},
      {"model_config", hf_config_json(model_config_)},
  };
}

void StepBenchmark::add_throughput(json& report, double step_s) const {
  const auto& o = options_;
  const std::string precision = enum_name(o.precision);
  const int64_t tokens = o.micro_batch * (o.source_length + o.target_length);
  const double flops = resolved_.flops_per_step / static_cast<double>(o.tp_shard);  // this rank's share
  report["tokens_per_step"] = tokens;
  report["samples_per_step"] = o.micro_batch;
  report["tokens_per_s"] = static_cast<double>(tokens) / step_s;
  report["samples_per_s"] = static_cast<double>(o.micro_batch) / step_s;
  report["model_flops_per_step"] = flops;
  report["model_tflops_per_s"] = flops / step_s / 1e12;

  const std::string name = report["identity"]["device"].get<std::string>();
  const double table_peak = peak_flops_per_device(name, precision);
  const double peak = resolve_peak_flops_per_device(o.peak_flops_per_device, name, precision);
  report["peak_flops_per_device"] = peak > 0 ? json(peak) : json(nullptr);
  report["peak_flops_source"] = o.peak_flops_per_device > 0 ? "--peak-flops" : table_peak > 0 ? "table" : "unknown";
  report["mfu"] = nullable(model_flops_utilization(flops, step_s, peak, 1));
  report["matmul"] = nullptr;
  if (o.measure_matmul) {
    // Large enough to reach the device's matmul rate, small enough to finish in seconds on a CPU.
    const int64_t n = o.device.is_cuda() ? 8192 : 1024;
    const double matmul_flops = measure_matmul_flops(o.device, compute_dtype(o.precision), n, o.device.is_cuda() ? 20 : 5);
    report["matmul"] = {{"n", n}, {"dtype", precision}, {"tflops_per_s", matmul_flops / 1e12},
                        {"fraction_of_peak", nullable(peak > 0 ? matmul_flops / peak : NAN)}};
  }
}

void StepBenchmark::add_memory(json& report) const {
  const auto& o = options_;
  const MemoryPrediction& prediction = resolved_.checkpointing.memory;
  const PeakMemory peak_memory_now = peak_memory(o.device);
  // The planner's tensors against the peak of the tensors this process made for the model, its optimizer and
  // its steps (the CPU's tracking allocator, or the CUDA caching allocator's peak of allocated bytes).
  const int64_t measured_tensor_peak = tensor_peak_bytes(o.device);
  report["predicted_peak_bytes"] = prediction.tensor_bytes();
  report["measured_peak_bytes"] =
      measured_tensor_peak >= 0 ? json(measured_tensor_peak - tensor_bytes_at_start_) : json(nullptr);
  report["measured_peak_source"] = o.device.is_cuda() ? "cuda_allocator_peak_allocated" : "cpu_tracking_allocator";
  report["memory"] = {
      {"measured", peak_memory_now.measured},
      {"peak_bytes", peak_memory_now.peak_bytes},
      {"start_bytes", start_memory_bytes_},
      {"reserved_peak_bytes", peak_memory_now.reserved_peak_bytes >= 0 ? json(peak_memory_now.reserved_peak_bytes)
                                                                         : json(nullptr)},
      {"predicted_bytes", prediction.total_bytes()},
      {"predicted", prediction.describe()},
  };
}

namespace {

std::string fixed(const json& value, const char* format, double scale = 1.0) {
  if (!value.is_number()) return "n/a";
  char text[64];
  std::snprintf(text, sizeof(text), format, value.get<double>() * scale);
  return text;
}

std::string gib(const json& value) { return fixed(value, "%.2f", 1.0 / kBytesPerGiB); }

}  // namespace

std::string benchmark_table(const std::vector<json>& reports) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "%-12s %-15s %-4s %5s %9s %3s | %-13s %-13s %-13s %-13s %-13s | %9s %9s | %9s %8s %8s %6s | %s\n",
                "impl", "model", "prec", "batch", "src/tgt", "tp", "forward ms", "backward ms", "comm ms",
                "optimizer ms", "other ms", "step ms", "min ms", "tokens/s", "samp/s", "TFLOP/s", "MFU",
                "peak GiB above start (predicted)");
  out += line;
  for (const json& r : reports) {
    const json& c = r["config"];
    const json& m = r["median"];
    const double total = m["total_s"].get<double>();
    auto phase = [&](const char* key) {
      return fixed(m[key], "%.1f", 1e3) + " (" + fixed(m[key].get<double>() / total, "%.0f%%", 100.0) + ")";
    };
    const json& memory = r["memory"];
    const json peak_above_start = memory["peak_bytes"].get<double>() - memory["start_bytes"].get<double>();
    const std::string lengths = msg(c["source_length"].get<int64_t>(), "/", c["target_length"].get<int64_t>());
    std::snprintf(line, sizeof(line),
                  "%-12s %-15s %-4s %5lld %9s %3lld | %-13s %-13s %-13s %-13s %-13s | %9s %9s | %9s %8s %8s %6s | %s (%s)\n",
                  r["implementation"].get<std::string>().c_str(), c["model"].get<std::string>().c_str(),
                  c["precision"].get<std::string>().c_str(), static_cast<long long>(c["micro_batch"].get<int64_t>()),
                  lengths.c_str(), static_cast<long long>(c["tp_shard"].get<int64_t>()), phase("forward_s").c_str(),
                  phase("backward_s").c_str(), phase("comm_exposed_s").c_str(), phase("optimizer_s").c_str(),
                  phase("other_s").c_str(), fixed(m["total_s"], "%.1f", 1e3).c_str(),
                  fixed(r["min"]["total_s"], "%.1f", 1e3).c_str(), fixed(r["tokens_per_s"], "%.0f").c_str(),
                  fixed(r["samples_per_s"], "%.1f").c_str(), fixed(r["model_tflops_per_s"], "%.3f").c_str(),
                  fixed(r["mfu"], "%.1f%%", 100.0).c_str(), gib(peak_above_start).c_str(),
                  gib(r["memory"]["predicted_bytes"]).c_str());
    out += line;
  }
  for (const json& r : reports) {
    const std::string who = r["implementation"].get<std::string>() + " " + r["config"]["model"].get<std::string>();
    const json& id = r["identity"];
    out += msg("  ", who, ": device ", id["device"].get<std::string>(), ", ", id["threads"].get<int64_t>(),
               " threads; ", r["config"]["precision_detail"].get<std::string>(), "; peak ",
               fixed(r["peak_flops_per_device"], "%.1f", 1e-12), " TFLOP/s (",
               r["peak_flops_source"].get<std::string>(), ")");
    if (r["matmul"].is_object()) {
      out += msg(", measured ", r["matmul"]["n"].get<int64_t>(), "^3 matmul ",
                 fixed(r["matmul"]["tflops_per_s"], "%.3f"), " TFLOP/s");
    }
    out += msg("; memory: ", r["memory"]["measured"].get<std::string>(), "\n");
    for (const auto& note : r["notes"]) out += "  " + who + ": " + note.get<std::string>() + "\n";
  }
  return out;
}

}  // namespace t5scale
