#include "job/run_record.h"

#include <mpi.h>
#include <torch/version.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/set_aside.h"
#include "core/utc_time.h"
#include "dist/cuda_backend.h"
#include "dist/mpi_runtime.h"
#include "job/step_meter.h"
#include "telemetry/cost.h"
#include "telemetry/energy_estimate.h"
#include "telemetry/nvml.h"
#include "telemetry/resource_card.h"
#include "train/device_probe.h"
#include "t5scale_git_revision.h"  // generated at build time: T5SCALE_GIT_REVISION

namespace t5scale {
namespace {

namespace fs = std::filesystem;

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string device_name(torch::Device device) { return device.is_cuda() ? cuda_device_name(device) : "cpu"; }

}  // namespace

RunRecord::RunRecord(const RunRecordInputs& inputs, const ProcessGrid& grid)
    : in_(inputs), config_(*inputs.config), grid_(grid) {
  path_ = (fs::path(config_.run.output_dir) / (config_.run.name + ".h5")).string();
  const std::vector<std::string>& hosts = world_hosts();
  std::vector<std::string> meter_notes;
  meter_ = std::make_unique<StepMeter>(config_.telemetry, in_.device, grid_.world_rank(), hosts, &meter_notes);
  const std::set<std::string> distinct(hosts.begin(), hosts.end());
  nodes_ = static_cast<int64_t>(distinct.size());
  std::vector<std::string> unique_hosts;
  for (const auto& h : hosts) {
    if (std::find(unique_hosts.begin(), unique_hosts.end(), h) == unique_hosts.end()) unique_hosts.push_back(h);
  }
  hosts_ = join(unique_hosts, ",");
  device_names_ = join(all_gather_strings(MPI_COMM_WORLD, device_name(in_.device)), ",");
  peak_flops_per_device_ = resolve_peak_flops_per_device(config_.telemetry.peak_flops_per_device,
                                                         device_name(in_.device), enum_name(config_.precision));
  if (in_.device.is_cuda()) {
    try {
      const auto nvml = NvmlLibrary::load();
      driver_version_ = nvml->driver_version();
      cuda_version_ = nvml->cuda_driver_version();
    } catch (const std::exception&) {
      // Versions stay empty without NVML; the energy meter has already said why.
    }
  }
  for (const std::string& note : meter_notes) {
    if (grid_.world_rank() == 0) std::printf("[t5scale] telemetry: %s\n", note.c_str());
  }
  node_share_ = t5scale::node_share(node_share_inputs());
}

// What rank 0's node tells of the share the job holds of it (Slurm gives every node of a job the same GPUs and
// CPUs per node, so one node stands for all).
NodeShareInputs RunRecord::node_share_inputs() const {
  NodeShareInputs share;
  share.on_gpu = in_.device.is_cuda();
  share.ranks_on_node = in_.world_size / nodes_;
  share.slurm_gpus_on_node = environment("SLURM_GPUS_ON_NODE");
  share.cuda_visible_devices = environment("CUDA_VISIBLE_DEVICES");
  share.slurm_cpus_on_node = environment("SLURM_CPUS_ON_NODE");
  share.node_cpus = std::max<int64_t>(0, static_cast<int64_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  if (config_.cost.node_gpus > 0) {
    share.node_gpus = config_.cost.node_gpus;
    share.node_gpus_source = "cost.node_gpus";
  } else if (share.on_gpu) {
    try {
      share.node_gpus = NvmlLibrary::load()->device_count();  // NVML counts the node's GPUs, visible or not
      share.node_gpus_source = "NVML";
    } catch (const std::exception&) {
      // Unknown: the share says so and the cost stays unknown (cost.node_gpus gives it).
    }
  }
  return share;
}

RunRecord::~RunRecord() = default;

RunDescription RunRecord::description() const {
  const auto& c = config_;
  const int64_t gpus_per_node = c.cost.gpus_per_node > 0 ? c.cost.gpus_per_node : in_.world_size / nodes_;
  const std::string nccl_version =
      in_.device.is_cuda() ? required_cuda_backend("the run's NCCL version").nccl_version() : "";
  RunDescription d;
  d.run_id = c.run.name;
  d.study = c.run.study;
  d.git_revision = T5SCALE_GIT_REVISION;
  d.slurm_job_id = environment("SLURM_JOB_ID");
  d.slurm_array_task_id = environment("SLURM_ARRAY_TASK_ID");
  d.hosts = hosts_;
  d.nodes = nodes_;
  d.gpus_per_node = gpus_per_node;
  d.world_size = in_.world_size;
  d.tp = grid_.tp_size;
  d.dp = grid_.dp_size;
  d.model_name = in_.model.name;
  d.parameter_count = parameter_count(in_.model);
  d.global_batch = in_.batch.global_batch;
  d.micro_batch = in_.batch.micro_batch;
  d.grad_accumulation = in_.batch.grad_accumulation;
  d.base_lr = in_.lr_plan.base_lr;
  d.effective_lr = in_.lr_plan.effective_lr;
  d.lr_scaling_rule = enum_name(c.lr_scaling.rule);
  d.reference_global_batch = c.lr_scaling.reference_global_batch;
  d.warmup_steps = in_.lr_plan.warmup_steps;
  d.max_steps = in_.lr_plan.total_steps;
  d.steps_per_epoch = in_.steps_per_epoch;
  d.epochs = in_.lr_plan.epochs;
  d.precision = enum_name(c.precision);
  d.optimizer = enum_name(c.optimizer.name);
  d.device_names = device_names_;
  d.driver_version = driver_version_;
  d.cuda_version = cuda_version_;
  d.nccl_version = nccl_version;
  d.torch_version = TORCH_VERSION;
  d.peak_flops_per_device = peak_flops_per_device_;
  d.price_per_node_hour_usd = c.cost.price_per_node_hour_usd;
  d.price_per_gpu_hour_usd = c.cost.price_per_gpu_hour_usd;
  d.node_share_fraction = node_share_.fraction;
  d.node_share_basis = node_share_.basis;
  d.allocated_gpus_per_node = node_share_.allocated_gpus_per_node;
  d.carbon_intensity_g_per_kwh = c.cost.carbon_intensity_g_per_kwh;
  d.pue = c.cost.pue;
  d.predicted_memory_bytes_per_device = in_.predicted_memory_bytes;
  d.predicted_host_memory_bytes_per_rank = in_.predicted_host_memory_bytes;
  d.predicted_flops_per_step = in_.predicted_flops_per_step;
  d.predicted_step_time_s = in_.predicted_step_time_s;
  d.checkpoint_every_blocks = in_.checkpoint_every_blocks;
  d.recomputation = in_.recomputation;
  d.attention_kernels = in_.attention_kernels;
  d.energy_source_gpu = meter_->gpu_energy_source();
  d.energy_source_cpu = meter_->cpu_energy_source();
  d.config_yaml = to_yaml(c);
  d.config_changes = config_changes_;
  return d;
}

void RunRecord::start(int64_t resumed_from_step, const std::vector<std::string>& config_changes) {
  config_changes_ = join(config_changes, "\n");
  const int world = in_.world_size;
  gpu_energy_offset_j_.assign(static_cast<size_t>(world), 0.0);
  cpu_energy_offset_j_.assign(static_cast<size_t>(world), 0.0);
  const RunDescription description = this->description();  // collective parts are done in the constructor
  if (grid_.world_rank() == 0) {
    fs::create_directories(fs::path(path_).parent_path().empty() ? fs::path(".") : fs::path(path_).parent_path());
    RunFileOptions options;
    options.flush_every_steps = config_.telemetry.flush_every_steps;
    if (resumed_from_step < 0) {
      // A fresh start keeps an earlier run's file beside it (*.previous.<time>) instead of overwriting it.
      if (fs::exists(path_)) {
        std::printf("[t5scale] starting afresh: the earlier run file is kept as %s\n",
                    set_aside(path_, "previous").c_str());
      }
      file_.emplace(RunFile::create(path_, description, options));
    } else {
      std::string warning;
      file_.emplace(RunFile::resume(path_, description, resumed_from_step, options, &warning));
      if (!warning.empty()) std::printf("[t5scale] run file: %s\n", warning.c_str());
      // Time and energy go on from where the kept rows end; the totals of the steps count the kept rows too.
      wall_offset_s_ = std::isfinite(file_->last_wall_time_s()) ? file_->last_wall_time_s() : 0.0;
      for (int r = 0; r < world; ++r) {
        const double gpu = file_->last_gpu_energy_j(r), cpu = file_->last_cpu_energy_j(r);
        gpu_energy_offset_j_[static_cast<size_t>(r)] = std::isfinite(gpu) ? gpu : 0.0;
        cpu_energy_offset_j_[static_cast<size_t>(r)] = std::isfinite(cpu) ? cpu : 0.0;
      }
    }
  }
  last_gpu_energy_j_ = gpu_energy_offset_j_;
  last_cpu_energy_j_ = cpu_energy_offset_j_;
  attempt_start_ = std::chrono::steady_clock::now();
  if (grid_.world_rank() == 0) {
    std::error_code ignored;
    fs::remove(failure_note_path(), ignored);  // an earlier attempt's: this one starts clean
  }
  // Every rank reserves its note's space now: a disk that fills up later cannot take the failure record with it.
  note_ = std::make_unique<ReservedFailureNote>(failure_note_path(), grid_.world_rank());
  recording_ = true;
}

std::string RunRecord::failure_note_path() const {
  return (fs::path(path_).replace_extension(".failed.json")).string();
}

void RunRecord::record_failure(const std::string& error, int64_t step) {
  if (!recording_) return;
  recording_ = false;
  std::string note_error = error;
  bool in_run_file = false;
  if (grid_.world_rank() == 0) {
    try {
      file_->record_failure(error, step);
      in_run_file = true;
    } catch (const std::exception& e) {
      // The run file cannot take it (a full disk, a file gone): the note beside it says it instead.
      note_error = e.what() == error ? msg(error, " (the run file could not record this either)")
                                     : msg(error, " (the run file could not record this: ", e.what(), ")");
    }
  }
  if (!in_run_file) {
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    MPI_Get_processor_name(host, &length);
    const nlohmann::json note = {{"rank", grid_.world_rank()}, {"error", note_error}, {"step", step},
                                 {"host", std::string(host)},  {"time_utc", utc_iso_time()}};
    T5S_CHECK(note_ != nullptr, "no failure note was reserved for '", failure_note_path(), "'");
    note_->publish(note.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  // The job's failure is on record and the job is going down; ranks taken down by its abort cannot give their
  // reserved space back themselves.
  ReservedFailureNote::give_back_every_ranks_space(failure_note_path());
}

double RunRecord::wall_time_s() const {
  return wall_offset_s_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - attempt_start_).count();
}

std::vector<double> RunRecord::gather(const std::vector<double>& mine) {
  // On the job's device: NCCL carries device tensors only.
  const torch::Tensor everyone = grid_.world->all_gather(torch::tensor(mine, torch::kFloat64).to(in_.device));
  const torch::Tensor contiguous = everyone.cpu().contiguous();
  return std::vector<double>(contiguous.data_ptr<double>(), contiguous.data_ptr<double>() + contiguous.numel());
}

namespace {
// The fields RunRecord gathers from every rank: those whose last column in T5SCALE_STEP_FIELDS is replicas or
// each_rank, in the list's order. A rank's values of its own row: a replica's count where this rank counts for its
// replica (0 elsewhere, so that the sum counts each replica once), its one reading of a per-rank column.
enum class Gathered { rank0, replicas, each_rank };

#define T5SCALE_IS_GATHERED(name, type, unit, initial, gathered) +(Gathered::gathered != Gathered::rank0 ? 1 : 0)
constexpr size_t kGatheredPerRow = 0 T5SCALE_STEP_FIELDS(T5SCALE_IS_GATHERED);
#undef T5SCALE_IS_GATHERED

template <Gathered how, typename T>
void append_own_value(std::vector<double>& values, const T& value, bool counts) {
  if constexpr (how == Gathered::replicas) {
    values.push_back(counts ? static_cast<double>(value) : 0.0);
  } else if constexpr (how == Gathered::each_rank) {
    values.push_back(value.empty() ? kUnknownValue : value.front());
  }
}

// `field` of rank 0's row from the ranks' values of it (one per rank, in rank order).
template <Gathered how, typename T>
void set_gathered(T& field, std::vector<double> ranks_values) {
  if constexpr (how == Gathered::replicas) {
    double total = 0.0;
    for (double v : ranks_values) total += v;
    field = static_cast<T>(total);
  } else if constexpr (how == Gathered::each_rank) {
    field = std::move(ranks_values);
  }
}

// This rank's gathered values of its row (kGatheredPerRow of them).
std::vector<double> own_gathered_values(const StepRecord& row, bool counts) {
  std::vector<double> values;
  values.reserve(kGatheredPerRow);
#define T5SCALE_APPEND_OWN(name, type, unit, initial, gathered) \
  append_own_value<Gathered::gathered>(values, row.name, counts);
  T5SCALE_STEP_FIELDS(T5SCALE_APPEND_OWN)
#undef T5SCALE_APPEND_OWN
  return values;
}
}  // namespace

StepSummary RunRecord::observe_step(const StepRecord& step, bool gather_now) {
  // Samples, tokens and FLOPs are per replica: counted by the first TP rank of each replica only.
  const bool counts = grid_.tp_rank == 0;
  StepRecord own = step;
  own.wall_time_s = wall_time_s();
  // Between flushes the energy is the meters' newest background sample (an NVML call can take milliseconds);
  // the step that flushes the rows reads it fresh.
  meter_->measure(own, /*fresh=*/gather_now);
  const std::vector<double> values = own_gathered_values(own, counts);
  pending_values_.insert(pending_values_.end(), values.begin(), values.end());
  pending_rows_.push_back(std::move(own));
  return gather_now ? gather_buffered_steps() : StepSummary{};
}

StepSummary RunRecord::gather_buffered_steps() {
  StepSummary summary;
  const size_t rows = pending_rows_.size();
  if (rows == 0) return summary;
  const std::vector<double> all = gather(pending_values_);  // (world, rows, kGatheredPerRow)
  pending_values_.clear();
  std::vector<StepRecord> own_rows = std::move(pending_rows_);
  pending_rows_.clear();
  if (grid_.world_rank() != 0) return summary;

  for (size_t k = 0; k < rows; ++k) {
    StepRecord& row = own_rows[k];
    complete_row(row, all, rows, k);
    file_->append_step(row);
    note_newest_energy(row);
    summary = log_figures(row);
  }
  summary.mean_step_time_s = file_->mean_step_time_s();
  return summary;
}

// Completes rank 0's row of step k with the gathered values (world, rows, kGatheredPerRow): the replicas' counts
// summed, the per-rank columns as they are, energy continued across resumes, and the rates.
void RunRecord::complete_row(StepRecord& row, const std::vector<double>& all, size_t rows, size_t k) {
  const auto world = static_cast<size_t>(in_.world_size);
  size_t column = 0;  // of the gathered values
  auto ranks_values = [&]() {
    std::vector<double> values(world);
    for (size_t r = 0; r < world; ++r) values[r] = all[(r * rows + k) * kGatheredPerRow + column];
    ++column;
    return values;
  };
#define T5SCALE_SET_GATHERED(name, type, unit, initial, gathered) \
  if constexpr (Gathered::gathered != Gathered::rank0) set_gathered<Gathered::gathered>(row.name, ranks_values());
  T5SCALE_STEP_FIELDS(T5SCALE_SET_GATHERED)
#undef T5SCALE_SET_GATHERED
  row.tokens_per_s = static_cast<double>(row.source_tokens + row.target_tokens) / row.step_time_s;
  row.samples_per_s = static_cast<double>(row.samples) / row.step_time_s;
  row.mfu = model_flops_utilization(row.model_flops, row.step_time_s, peak_flops_per_device_, in_.world_size);
  for (size_t i = 0; i < world; ++i) {
    row.gpu_energy_j[i] += gpu_energy_offset_j_[i];
    row.cpu_energy_j[i] += cpu_energy_offset_j_[i];
  }
}

// Rank 0's newest cumulative energy of each rank: finish()'s value where the final reading is unknown.
void RunRecord::note_newest_energy(const StepRecord& row) {
  for (size_t i = 0; i < row.gpu_energy_j.size(); ++i) {
    if (std::isfinite(row.gpu_energy_j[i])) last_gpu_energy_j_[i] = row.gpu_energy_j[i];
    if (std::isfinite(row.cpu_energy_j[i])) last_cpu_energy_j_[i] = row.cpu_energy_j[i];
  }
}

// The log line's figures of a step.
StepSummary RunRecord::log_figures(const StepRecord& row) const {
  StepSummary summary;
  summary.tokens_per_s = row.tokens_per_s;
  summary.samples_per_s = row.samples_per_s;
  if (std::isfinite(row.mfu)) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f%%", 100.0 * row.mfu);
    summary.mfu_text = text;
  }
  summary.memory_text = std::isfinite(row.memory_peak_bytes[0]) ? gib_text(row.memory_peak_bytes[0]) + " peak"
                                                                 : gib_text(row.host_memory_bytes[0]) + " host";
  return summary;
}

void RunRecord::observe_evaluation(int64_t step, double epoch, const EvaluationResult& result) {
  if (grid_.world_rank() != 0) return;
  EvalRecord row;
  row.step = step;
  row.epoch = epoch;
  row.wall_time_s = wall_time_s();
  auto metric = [&](const char* name) {
    const auto found = result.metrics.find(name);
    return found == result.metrics.end() ? kUnknownValue : found->second;
  };
  row.loss = metric("eval_loss");
  row.rouge1 = metric("rouge1");
  row.rouge2 = metric("rouge2");
  row.rougeL = metric("rougeL");
  row.rougeLsum = metric("rougeLsum");
  row.exact_match = metric("exact_match");
  row.f1 = metric("f1");
  row.accuracy = metric("accuracy");
  row.macro_f1 = metric("macro_f1");
  row.num_examples = result.num_examples;
  row.eval_time_s = result.eval_time_s;
  row.generated_ids_beyond_vocab = result.generated_ids_beyond_vocab;
  file_->append_eval(row);
}

void RunRecord::flush() {
  gather_buffered_steps();
  if (file_) file_->flush();
}

std::string RunRecord::finish(const RunOutcome& outcome) {
  gather_buffered_steps();
  // Energy at the end, read once more on every rank (a step's reading may be up to a flush old), and the peak
  // resident set (a run without steps, evaluation alone, has no row that holds it).
  StepRecord last;
  meter_->measure(last, /*fresh=*/true);
  std::vector<double> mine = {last.gpu_energy_j.front(), last.cpu_energy_j.front(), last.host_memory_bytes.front()};
  const std::vector<double> all = gather(mine);
  recording_ = false;  // the collectives are done: a failure from here on is this rank's alone
  note_.reset();       // the reserved space is given back
  if (grid_.world_rank() != 0) return "";
  const int world = in_.world_size;
  RunSummaryInputs inputs;
  inputs.wall_time_s = wall_time_s();
  for (int r = 0; r < world; ++r) {
    const auto i = static_cast<size_t>(r);
    const double gpu = all[i * 3], cpu = all[i * 3 + 1];
    inputs.host_memory_bytes.push_back(all[i * 3 + 2]);
    inputs.gpu_energy_j.push_back(std::isfinite(gpu) ? gpu + gpu_energy_offset_j_[i] : last_gpu_energy_j_[i]);
    inputs.cpu_energy_j.push_back(std::isfinite(cpu) ? cpu + cpu_energy_offset_j_[i] : last_cpu_energy_j_[i]);
  }
  if (meter_->gpu_energy_source() == "none" && meter_->cpu_energy_source() == "none") {
    const EnergyEstimate estimate =
        estimate_unmeasured_energy(read_host_hardware(), nodes_, in_.device.is_cuda() ? world / nodes_ : 0,
                                   device_names_.substr(0, device_names_.find(',')), inputs.wall_time_s);
    inputs.estimated_energy_j = estimate.energy_j;
    inputs.energy_estimate_method = estimate.method;
  }
  ResourceCardFigures card;
  card.summary = file_->finish(inputs, outcome.status);  // every attempt and grid of the run
  card.run_name = config_.run.name;
  card.world_size = world;
  card.tp = grid_.tp_size;
  card.dp = grid_.dp_size;
  card.nodes = nodes_;
  card.on_gpu = in_.device.is_cuda();
  card.device_names = device_names_;
  card.charging.price_per_node_hour_usd = config_.cost.price_per_node_hour_usd;
  card.charging.price_per_gpu_hour_usd = config_.cost.price_per_gpu_hour_usd;
  card.charging.nodes = nodes_;
  card.charging.node_share_fraction = node_share_.fraction;
  card.charging.allocated_gpus_per_node = node_share_.allocated_gpus_per_node;
  card.node_share_basis = node_share_.basis;
  card.low_priority_price_per_node_hour_usd = config_.cost.low_priority_price_per_node_hour_usd;
  card.gpu_energy_source = meter_->gpu_energy_source();
  card.cpu_energy_source = meter_->cpu_energy_source();
  card.pue = config_.cost.pue;
  card.carbon_intensity_g_per_kwh = config_.cost.carbon_intensity_g_per_kwh;
  card.peak_flops_per_device = peak_flops_per_device_;
  card.telemetry_time_s = outcome.telemetry_time_s;
  card.run_file_path = path_;
  return resource_card(card);
}

}  // namespace t5scale
