#include "study/study_plan.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "config/placement.h"
#include "core/check.h"
#include "core/text_table.h"
#include "core/units.h"
#include "data/batch_sampler.h"
#include "data/synthetic_examples.h"
#include "data/tokenized_dataset.h"
#include "plan/machine_rates.h"
#include "plan/memory_advice.h"
#include "plan/resolved_run.h"

namespace t5scale {

namespace {

namespace fs = std::filesystem;

std::string format_number(double value, const char* format = "%.3g") {
  if (!std::isfinite(value)) return "?";
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

// What the planner knows about a dataset file: the training split's size and the vocabulary.
struct DatasetFacts {
  bool exists = false;
  std::string error;  // opening or reading it failed
  int64_t vocab_size = 0;
  std::shared_ptr<TokenizedDataset> dataset;
};

class DatasetCache {
 public:
  const DatasetFacts& get(const std::string& path) {
    auto it = cache_.find(path);
    if (it != cache_.end()) return it->second;
    DatasetFacts facts;
    std::error_code ec;
    facts.exists = fs::is_regular_file(path, ec);
    if (facts.exists) {
      try {
        facts.dataset = std::shared_ptr<TokenizedDataset>(TokenizedDataset::open(path).release());
        facts.vocab_size = facts.dataset->info().vocab_size;
      } catch (const Error& e) {
        facts.error = e.what();
      }
    }
    return cache_.emplace(path, std::move(facts)).first->second;
  }

 private:
  std::map<std::string, DatasetFacts> cache_;
};

// What the planner knows of a run's data: the synthetic task's size and vocabulary, or the dataset file's training
// split (its lengths cut as the trainer cuts them) when the file is there.
// The run's data as far as it is here; what stops the run or deserves a look goes to `errors` and `notes`.
RunData run_data(RunPlan& p, DatasetCache& datasets, std::vector<std::string>& errors,
                 std::vector<std::string>& notes) {
  const auto& d = p.run.config.data;
  RunData data;
  // Mean tokens of the examples (the step's tokens/s); until the data is read, the maximum lengths.
  auto set_mean_tokens = [&](const std::vector<int64_t>& source, const std::vector<int64_t>& target) {
    if (source.empty()) return;
    double s = 0, t = 0;
    for (size_t i = 0; i < source.size(); ++i) s += static_cast<double>(source[i]), t += static_cast<double>(target[i]);
    p.mean_source_tokens = s / static_cast<double>(source.size());
    p.mean_target_tokens = t / static_cast<double>(source.size());
  };
  const BatchShape longest = planned_micro_batch(p.run.config, BatchPlan{});
  p.mean_source_tokens = static_cast<double>(longest.source_length);
  p.mean_target_tokens = static_cast<double>(longest.target_length);
  if (p.run.config.eval.max_examples > 0) p.eval_examples = static_cast<double>(p.run.config.eval.max_examples);
  if (d.dataset == "synthetic") {
    data.train_examples = d.synthetic_examples;
    data.vocab_size = d.synthetic_vocab_size;
    // The trainer's examples for this seed and vocabulary (training_job.cpp): their lengths time the steps.
    SyntheticDatasetOptions options;
    options.task.vocab_size = d.synthetic_vocab_size;
    options.task.seed = static_cast<uint64_t>(p.run.config.run.seed);
    options.train_examples = d.synthetic_examples;
    options.validation_examples = std::max<int64_t>(d.synthetic_examples / 8, 64);
    for (const TokenSequences& example : synthetic_split(options, "train")) {
      data.source_lengths.push_back(static_cast<int64_t>(example.source.size()));
      data.target_lengths.push_back(static_cast<int64_t>(example.target.size()));
    }
    set_mean_tokens(data.source_lengths, data.target_lengths);
    const double validation = static_cast<double>(options.validation_examples);
    p.eval_examples = std::isfinite(p.eval_examples) ? std::min(p.eval_examples, validation) : validation;
    return data;
  }
  const DatasetFacts& facts = datasets.get(d.dataset);
  if (!facts.exists) {
    notes.push_back(msg("data.dataset '", d.dataset, "' does not exist here yet: steps per epoch unknown"));
  } else if (!facts.error.empty()) {
    errors.push_back(msg("data.dataset: ", facts.error));
  } else if (!facts.dataset->has_split(d.train_split)) {
    errors.push_back(msg("data.train_split: '", d.train_split, "' is not a split of ", d.dataset, " (it has ",
                         join(facts.dataset->split_names(), ", "), ")"));
  } else {
    const auto& split = facts.dataset->split(d.train_split);
    data.train_examples = split.size();
    data.vocab_size = facts.vocab_size;
    // The sampler runs over the lengths as the trainer cuts them: the steps per epoch (a token budget's packing
    // decides them) and the step time of the batches it serves.
    data.source_lengths = split.source_lengths();
    data.target_lengths = split.target_lengths();
    for (auto& n : data.source_lengths) n = d.max_source_length > 0 ? std::min(n, d.max_source_length) : n;
    for (auto& n : data.target_lengths) n = d.max_target_length > 0 ? std::min(n, d.max_target_length) : n;
    set_mean_tokens(data.source_lengths, data.target_lengths);
    if (facts.dataset->has_split(d.eval_split)) {
      const double split_size = static_cast<double>(facts.dataset->split(d.eval_split).size());
      p.eval_examples = std::isfinite(p.eval_examples) ? std::min(p.eval_examples, split_size) : split_size;
    }
  }
  return data;
}

void plan_run(RunPlan& p, const StudyPlan& study, DatasetCache& datasets) {
  const RunConfig& c = p.run.config;
  const int64_t world = p.run.world();
  const int64_t tp = c.parallel.tp;
  // The run's own parallel.device_memory_gib (what auto checkpointing plans for) before the GPU's.
  p.device_memory_gib = c.parallel.device_memory_gib > 0 ? c.parallel.device_memory_gib : study.device_memory_gib;
  const int64_t device_bytes = gib_to_bytes(p.device_memory_gib);

  // What the plan finds before resolving, in front of resolve_run's own.
  std::vector<std::string> errors = p.run.errors, notes;
  if (tp > 0 && world % tp == 0) {
    const std::vector<std::string> planned_hosts = hosts_filled_node_by_node(p.run.nodes, p.run.gpus_per_node);
    if (const auto spanning = tp_group_spanning_hosts(planned_hosts, tp)) {
      errors.push_back(msg("parallel.tp ", tp, " with ", p.run.gpus_per_node, " GPUs per node: ", *spanning,
                           "; a TP group must stay inside a node (its all-reduces need the node's NVLink): "
                           "make parallel.tp a divisor of gpus_per_node"));
    }
  }

  p.world.world_size = world;
  p.world.on_gpu = !study.spec.slurm.cpu_only();
  p.world.device_share_bytes = device_bytes;
  p.world.nodes = p.run.nodes;
  p.world.ranks_per_node = p.run.gpus_per_node;
  try {
    p.world.rates = machine_rates_for(c.telemetry.machine_rates, p.world.on_gpu, study.spec.slurm.gpu,
                                      study.spec.slurm.interconnect);
    if (!p.world.rates) {
      notes.push_back(msg("no step time predicted: no published figures for slurm.gpu '", study.spec.slurm.gpu,
                          "' (base.telemetry.machine_rates takes a calibrated rates file)"));
    }
  } catch (const Error& e) {
    errors.push_back(msg("telemetry.machine_rates: ", e.what()));
  }
  const RunData data = run_data(p, datasets, errors, notes);
  p.resolved = resolve_run(c, p.world, data);
  ResolvedRun& r = p.resolved;
  // An unknown model.name is among the run's own errors already.
  const bool model_name_reported = std::any_of(p.run.errors.begin(), p.run.errors.end(),
                                               [](const std::string& x) { return x.rfind("model.name", 0) == 0; });
  if (model_name_reported) r.errors.erase(std::remove(r.errors.begin(), r.errors.end(), r.model_error), r.errors.end());
  r.errors.insert(r.errors.begin(), errors.begin(), errors.end());
  r.notes.insert(r.notes.begin(), notes.begin(), notes.end());

  if (r.memory_inputs && c.parallel.activation_checkpointing == ParallelSettings::ActivationCheckpointing::kAuto) {
    r.notes.push_back(device_bytes > 0
                          ? "activation checkpointing auto: " + r.checkpointing.describe_against(device_bytes)
                          : std::string("activation checkpointing auto: none predicted (the device's memory is "
                                        "unknown to the plan; the job chooses from the memory it sees)"));
  }
  if (r.memory_inputs && r.memory_inputs->offload_optimizer && p.world.on_gpu) {
    // The host memory the offloaded state takes, per rank and per node, against the node's (where it is known).
    const int64_t host = r.checkpointing.memory.host_bytes;
    const double node = static_cast<double>(host) * static_cast<double>(p.run.gpus_per_node);
    const double node_memory = p.world.rates ? p.world.rates->host_memory_bytes_per_node : 0.0;
    const std::string figures =
        msg("parallel.offload_optimizer: ", gib_text(static_cast<double>(host)), " of host memory per rank, ",
            gib_text(node), " per node of ", p.run.gpus_per_node, " rank(s)",
            node_memory > 0 ? msg(" (the node has ", gib_text(node_memory), ")") : std::string(" (the node's memory "
                                                                                                  "is unknown)"));
    if (node_memory > 0 && !fits_device_memory(static_cast<int64_t>(node), static_cast<int64_t>(node_memory))) {
      r.errors.push_back("memory: " + figures + ": does not fit the host with 5% to spare");
    } else {
      r.notes.push_back(figures);
    }
  }
  if (p.device_memory_gib <= 0) {
    p.fits = "-";
  } else if (r.memory_inputs) {
    p.fits = r.checkpointing.fits ? "yes" : "NO";  // with 5% to spare
    if (p.fits == "NO" && r.model) {
      // Each setting that would lower the prediction, with the prediction it gives.
      RemedyLimits limits;
      limits.world_size = world;
      limits.ranks_per_node = p.run.gpus_per_node;
      limits.device_memory_bytes = device_bytes;
      std::vector<std::string> remedies;
      for (const MemoryRemedy& m : memory_remedies(*r.model, *r.memory_inputs, limits)) remedies.push_back(m.describe());
      const std::string why =
          msg("predicted ", gib_text(static_cast<double>(r.checkpointing.memory.total_bytes())),
              " per GPU does not fit ",
              c.parallel.device_memory_gib > 0 ? msg(p.device_memory_gib, " GiB (parallel.device_memory_gib)")
                                               : study.device_memory_basis,
              " with 5% to spare; ",
              remedies.empty() ? std::string("no setting of this world lowers it: more GPUs or a larger one")
                               : "predicted with each change: " + join(remedies, "; "));
      // Not rendered unless asked for: a job that cannot hold its step spends its queue wait and start-up to fail.
      if (study.allow_over_memory) {
        p.over_memory_allowed = true;
        r.notes.push_back(why + " (planned and rendered all the same: --allow-over-memory)");
      } else {
        r.errors.push_back("memory: " + why + "; t5scale-study --allow-over-memory renders it all the same");
      }
    }
  }
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string lr_text(const RunPlan& p) {
  if (!p.resolved.lr.has_value()) return "?";
  if (p.resolved.lr->adafactor_relative_step) return "relative step";
  std::string text = format_number(p.resolved.lr->base_lr);
  if (p.resolved.lr->rule != LrScalingSettings::Rule::kNone) text += "->" + format_number(p.resolved.lr->effective_lr);
  return text + " " + enum_name(p.resolved.lr->rule);
}

}  // namespace

const std::vector<std::pair<std::string, double>>& gpu_memory_table() {
  // Nominal memory of each model (GiB as nvidia-smi reports it, rounded).
  static const std::vector<std::pair<std::string, double>> table = {
      {"V100-16GB", 16}, {"V100", 32},      {"V100-32GB", 32}, {"T4", 16},         {"A10", 24},
      {"A10G", 24},      {"L4", 24},        {"A40", 48},       {"L40", 48},        {"L40S", 48},
      {"A6000", 48},     {"RTX-A6000", 48}, {"A100-40GB", 40}, {"A100", 80},       {"A100-80GB", 80},
      {"H100", 80},      {"H100-80GB", 80}, {"H100-SXM", 80},  {"H100-PCIE", 80},  {"H100-NVL", 94},
      {"GH200", 96},     {"H200", 141},     {"B200", 180},
  };
  return table;
}

double gpu_memory_gib(const SlurmSpec& slurm) {
  if (slurm.gpu_memory_gib > 0) return slurm.gpu_memory_gib;
  if (slurm.cpu_only()) return 0.0;
  if (slurm.gpu.empty()) return 80.0;
  const std::string wanted = normalized_gpu_name(slurm.gpu);
  std::vector<std::string> names;
  for (const auto& [name, gib] : gpu_memory_table()) {
    if (normalized_gpu_name(name) == wanted) return gib;
    names.push_back(name);
  }
  throw Error(msg("slurm.gpu: no memory size known for GPU '", slurm.gpu, "' (known: ", join(names, ", "),
                  "); set slurm.gpu_memory_gib"));
}

size_t StudyPlan::invalid_count() const {
  return static_cast<size_t>(std::count_if(runs.begin(), runs.end(), [](const RunPlan& p) { return !p.valid(); }));
}

StudyPlan plan_study(const StudySpec& spec, const PlanOptions& options) {
  StudyPlan plan;
  plan.spec = spec;
  plan.allow_over_memory = options.allow_over_memory;
  plan.device_memory_gib = gpu_memory_gib(spec.slurm);
  if (spec.slurm.gpu_memory_gib > 0) {
    plan.device_memory_basis = msg(plan.device_memory_gib, " GiB per GPU (slurm.gpu_memory_gib)");
  } else if (spec.slurm.cpu_only()) {
    plan.device_memory_basis = "none (CPU-only jobs, slurm.gpu: " + spec.slurm.gpu + ")";
  } else if (spec.slurm.gpu.empty()) {
    plan.device_memory_basis = msg(plan.device_memory_gib, " GiB per GPU (the default; set slurm.gpu)");
  } else {
    plan.device_memory_basis = msg(plan.device_memory_gib, " GiB per GPU (slurm.gpu ", spec.slurm.gpu, ")");
  }
  DatasetCache datasets;
  for (auto& run : expand_study(spec, options.expand)) {
    RunPlan p;
    p.run = std::move(run);
    plan_run(p, plan, datasets);
    plan.runs.push_back(std::move(p));
  }
  forecast_study(plan);
  return plan;
}

std::string format_flops(double flops) {
  if (!std::isfinite(flops)) return "?";
  const char* units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"};
  int unit = 0;
  while (flops >= 1000.0 && unit < 6) flops /= 1000.0, ++unit;
  return format_number(flops, "%.3g") + " " + units[unit];
}

std::string format_plan(const StudyPlan& plan) {
  const std::vector<std::string> header = {"run",    "nodes", "world",  "tp",      "dp",     "micro",
                                           "accum",  "global", "lr",    "warmup",  "steps",  "epochs",
                                           plan.spec.slurm.cpu_only() ? "mem/rank" : "mem/GPU", "fits", "FLOP/step"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : plan.runs) {
    const auto& c = p.run.config;
    // A figure of the batch or the LR plan, "?" where the plan does not know it.
    const std::optional<BatchPlan>& batch = p.resolved.batch;
    auto of_batch = [&](int64_t BatchPlan::*field) { return batch ? msg((*batch).*field) : std::string("?"); };
    std::string epochs = std::isfinite(p.resolved.epochs) ? format_number(p.resolved.epochs) : "?";
    rows.push_back({p.run.name + (p.valid() ? "" : " (INVALID)"),
                    msg(p.run.nodes, "x", p.run.gpus_per_node),
                    msg(p.run.world()),
                    msg(c.parallel.tp),
                    of_batch(&BatchPlan::dp),
                    of_batch(&BatchPlan::micro_batch),
                    of_batch(&BatchPlan::grad_accumulation),
                    of_batch(&BatchPlan::global_batch),
                    lr_text(p),
                    p.resolved.lr && p.resolved.warmup_known ? msg(p.resolved.lr->warmup_steps) : "?",
                    p.resolved.steps_known ? msg(p.resolved.total_steps) : "?",
                    epochs,
                    p.resolved.memory_inputs ? memory_text(p.resolved.checkpointing.memory.total_bytes()) : "?",
                    p.fits,
                    format_flops(p.resolved.flops_per_step)});
  }
  std::string out = msg("study ", plan.spec.name, " (", plan.spec.source, "): ", plan.runs.size(), " run(s), ",
                        plan.invalid_count(), " invalid; results in ",
                        plan.runs.empty() ? plan.spec.results_dir : plan.runs.front().run.config.run.output_dir, "\n");
  out += "memory checked against " + plan.device_memory_basis + "\n\n";
  out += text_table(header, rows, {0, 8});

  // The memory of each run by what holds it, always: what a change of settings would act on.
  std::vector<std::vector<std::string>> memory_rows;
  for (const auto& p : plan.runs) {
    if (!p.resolved.memory_inputs) continue;
    const MemoryPrediction& m = p.resolved.checkpointing.memory;
    memory_rows.push_back({p.run.name, memory_text(m.weights_bytes), memory_text(m.gradients_bytes),
                           memory_text(m.optimizer_bytes), memory_text(m.activations_bytes),
                           memory_text(m.workspace_bytes), memory_text(m.total_bytes()), p.fits,
                           p.resolved.checkpointing.describe()});
  }
  if (!memory_rows.empty()) {
    out += msg("\npredicted memory per ", plan.spec.slurm.cpu_only() ? "rank" : "GPU", ", by what holds it:\n");
    out += text_table({"run", "weights", "gradients", "optimizer", "activations", "workspace", "total", "fits",
                       "checkpointing"},
                      memory_rows, {0, 8});
  }

  out += format_forecast(plan);

  bool any_invalid = false;
  for (const auto& p : plan.runs) {
    if (p.valid()) continue;
    if (!any_invalid) out += "\ninvalid runs:\n";
    any_invalid = true;
    out += "  " + p.run.name + ":\n";
    for (const auto& e : p.resolved.errors) out += "    " + e + "\n";
  }
  // Notes, each once, with the runs it concerns.
  std::vector<std::string> note_order;
  std::map<std::string, std::vector<std::string>> runs_by_note;
  for (const auto& p : plan.runs) {
    for (const auto& n : p.resolved.notes) {
      if (!runs_by_note.count(n)) note_order.push_back(n);
      runs_by_note[n].push_back(p.run.name);
    }
  }
  if (!note_order.empty()) out += "\nnotes:\n";
  for (const auto& n : note_order) {
    const auto& runs = runs_by_note[n];
    const std::string who = runs.size() == plan.runs.size() && runs.size() > 1 ? "all runs" : join(runs, ", ");
    out += "  " + who + ": " + n + "\n";
  }
  return out;
}

namespace {

// The shortest text that reads back as the same double; "" for a figure not known (NaN).
std::string csv_number(double v) {
  if (!std::isfinite(v)) return "";
  for (const char* format : {"%.15g", "%.16g", "%.17g"}) {
    const std::string text = format_number(v, format);
    if (std::strtod(text.c_str(), nullptr) == v) return text;
  }
  return format_number(v, "%.17g");
}

// A column of runs.csv: its name and its cell for a run of the plan ("" where the plan does not know it).
struct PlanColumn {
  const char* name;
  std::function<std::string(const StudyPlan&, const RunPlan&)> cell;
};

// runs.csv's columns, in order: the one declaration of the header and the cells.
const std::vector<PlanColumn>& plan_columns() {
  using P = const StudyPlan&;
  using R = const RunPlan&;
  static const std::vector<PlanColumn> columns = {
      {"run", [](P, R p) { return p.run.name; }},
      {"study", [](P plan, R) { return plan.spec.name; }},
      {"nodes", [](P, R p) { return msg(p.run.nodes); }},
      {"gpus_per_node", [](P, R p) { return msg(p.run.gpus_per_node); }},
      {"world", [](P, R p) { return msg(p.run.world()); }},
      {"tp", [](P, R p) { return msg(p.run.config.parallel.tp); }},
      {"dp", [](P, R p) { return p.resolved.batch ? msg(p.resolved.batch->dp) : ""; }},
      {"micro_batch", [](P, R p) { return p.resolved.batch ? msg(p.resolved.batch->micro_batch) : ""; }},
      {"grad_accumulation", [](P, R p) { return p.resolved.batch ? msg(p.resolved.batch->grad_accumulation) : ""; }},
      {"global_batch", [](P, R p) { return p.resolved.batch ? msg(p.resolved.batch->global_batch) : ""; }},
      {"base_lr", [](P, R p) { return csv_number(p.run.config.optimizer.lr); }},
      {"effective_lr", [](P, R p) { return p.resolved.lr ? csv_number(p.resolved.lr->effective_lr) : ""; }},
      {"lr_scaling_rule", [](P, R p) { return std::string(enum_name(p.run.config.lr_scaling.rule)); }},
      {"warmup_steps",
       [](P, R p) { return p.resolved.lr && p.resolved.warmup_known ? msg(p.resolved.lr->warmup_steps) : ""; }},
      {"total_steps", [](P, R p) { return p.resolved.steps_known ? msg(p.resolved.total_steps) : ""; }},
      {"steps_per_epoch",
       [](P, R p) { return p.resolved.steps_per_epoch > 0 ? msg(p.resolved.steps_per_epoch) : ""; }},
      {"epochs", [](P, R p) { return csv_number(p.resolved.epochs); }},
      {"train_examples", [](P, R p) { return p.resolved.train_examples >= 0 ? msg(p.resolved.train_examples) : ""; }},
      {"model_name", [](P, R p) { return p.resolved.model ? p.model_name() : ""; }},
      {"parameter_count", [](P, R p) { return p.resolved.model ? msg(p.parameter_count()) : ""; }},
      {"checkpoint_every_blocks",
       [](P, R p) {
         return p.resolved.memory_inputs ? msg(p.resolved.checkpointing.checkpoint_every_blocks) : "";
       }},
      {"predicted_memory_bytes_per_device",
       [](P, R p) {
         return p.resolved.memory_inputs ? msg(p.resolved.checkpointing.memory.total_bytes()) : "";
       }},
      {"device_memory_gib",
       [](P plan, R) { return plan.device_memory_gib > 0 ? csv_number(plan.device_memory_gib) : ""; }},
      {"fits", [](P, R p) { return p.fits; }},
      {"predicted_flops_per_step", [](P, R p) { return csv_number(p.resolved.flops_per_step); }},
      {"predicted_step_time_s", [](P, R p) { return csv_number(p.forecast.step_time_s); }},
      {"predicted_tokens_per_s", [](P, R p) { return csv_number(p.forecast.tokens_per_s); }},
      {"predicted_mfu", [](P, R p) { return csv_number(p.forecast.mfu); }},
      {"predicted_scaling_efficiency", [](P, R p) { return csv_number(p.forecast.scaling_efficiency); }},
      {"evaluations", [](P, R p) { return msg(p.forecast.evaluations); }},
      {"predicted_run_time_s", [](P, R p) { return csv_number(p.forecast.run_time_s); }},
      {"time_limit_s", [](P, R p) { return csv_number(p.forecast.time_limit_s); }},
      {"predicted_node_hours", [](P, R p) { return csv_number(p.forecast.node_hours); }},
      {"reserved_node_hours", [](P, R p) { return csv_number(p.forecast.reserved_node_hours); }},
      {"predicted_cost_usd", [](P, R p) { return csv_number(p.forecast.cost_usd); }},
      {"predicted_energy_kwh", [](P, R p) { return csv_number(p.forecast.energy_kwh); }},
      {"checkpoint_bytes", [](P, R p) { return csv_number(p.forecast.checkpoint_bytes); }},
      {"seed", [](P, R p) { return msg(p.run.config.run.seed); }},
      {"varied",
       [](P, R p) {
         std::vector<std::string> varied;
         for (const auto& [key, value] : p.run.varied) varied.push_back(key + "=" + value);
         return join(varied, ";");
       }},
      {"valid", [](P, R p) { return std::string(p.valid() ? "true" : "false"); }},
      {"errors", [](P, R p) { return join(p.resolved.errors, "; "); }},
  };
  return columns;
}

}  // namespace

std::string plan_csv(const StudyPlan& plan) {
  std::vector<std::string> header;
  for (const PlanColumn& column : plan_columns()) header.push_back(column.name);
  std::string out = join(header, ",") + "\n";
  for (const RunPlan& run : plan.runs) {
    std::vector<std::string> cells;
    for (const PlanColumn& column : plan_columns()) cells.push_back(csv_field(column.cell(plan, run)));
    out += join(cells, ",") + "\n";
  }
  return out;
}

}  // namespace t5scale
