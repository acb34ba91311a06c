#include "study/study_forecast.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "config/config_registry.h"
#include "core/check.h"
#include "core/text_table.h"
#include "plan/step_time_model.h"
#include "study/study_plan.h"

namespace t5scale {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string figure(double value, const char* format = "%.3g") {
  if (!std::isfinite(value)) return "?";
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

std::string duration(double seconds) {
  if (!std::isfinite(seconds)) return "?";
  if (seconds < 1.0) return figure(seconds * 1e3, "%.3g") + " ms";
  if (seconds < 120.0) return figure(seconds, "%.3g") + " s";
  if (seconds < 7200.0) return figure(seconds / 60.0, "%.3g") + " min";
  return figure(seconds / 3600.0, "%.3g") + " h";
}

std::string bytes_text(double bytes) {
  if (!std::isfinite(bytes)) return "?";
  if (bytes < 1024.0 * 1024.0 * 1024.0) return figure(bytes / (1024.0 * 1024.0), "%.3g") + " MiB";
  return figure(bytes / (1024.0 * 1024.0 * 1024.0), "%.3g") + " GiB";
}

// Evaluations a run makes: every eval.every_steps steps (or every_epochs), and at the end unless the last step just
// evaluated.
int64_t evaluation_count(const RunPlan& p) {
  const auto& e = p.run.config.eval;
  if (!p.resolved.steps_known) return 0;
  const int64_t steps = p.resolved.total_steps;
  const int64_t every = p.resolved.eval_every_steps;
  int64_t n = every > 0 ? steps / every : 0;
  const bool last_evaluated = every > 0 && steps % every == 0;
  if (e.at_end && !last_evaluated) ++n;
  return n;
}

// Seconds of one evaluation: the loss's forward over the examples in batches of eval.batch_size, split over the DP
// replicas, and with generation max_new_tokens decoder steps of one token per batch (the key/value cache keeps a
// step to the new token).
double evaluation_seconds(const RunPlan& p, double examples) {
  const ResolvedRun& r = p.resolved;
  if (!r.step_time || !r.memory_inputs || !r.model || !p.world.rates || !std::isfinite(examples)) return kNaN;
  const auto& e = p.run.config.eval;
  const double dp = static_cast<double>(r.memory_inputs->dp);
  const double batches = std::ceil(std::ceil(examples / dp) / static_cast<double>(e.batch_size));
  StepTimeInputs in;
  in.memory = *r.memory_inputs;
  in.memory.micro_batch.rows = e.batch_size;
  in.memory.checkpoint_every_blocks = 0;
  in.memory.selective_recomputation = false;
  in.memory.dp = 1;
  in.nodes = p.run.nodes;
  in.ranks_per_node = p.run.gpus_per_node;
  double per_batch = predict_step_time(*r.model, in, *p.world.rates).forward_s;
  if (e.generate) {
    ModelConfig decoder_only = *r.model;
    decoder_only.num_layers = 0;
    StepTimeInputs step = in;
    step.memory.micro_batch.target_length = 1;
    per_batch += static_cast<double>(e.max_new_tokens) * predict_step_time(decoder_only, step, *p.world.rates).forward_s;
  }
  return batches * per_batch;
}

// Bytes of a checkpoint: fp32 weights, and AdamW's two fp32 moments (Adafactor's factored moments and its optional
// first moment are left out: a small share).
double checkpoint_bytes(const RunPlan& p) {
  if (!p.resolved.model) return kNaN;
  const double parameters = static_cast<double>(p.parameter_count());
  const bool adamw = p.run.config.optimizer.name == OptimizerSettings::Name::kAdamw;
  return parameters * (adamw ? 12.0 : 4.0);
}

// What the run will be charged for, as t5scale-train will charge it (core/charging.h): on GPUs its GPUs per node
// out of cost.node_gpus (which expansion sets to slurm.gpus_per_node); CPU-only jobs the whole node, since the plan
// does not know a node's CPUs (the job charges the CPUs Slurm gives it).
Charging charging_of(const RunPlan& p, const StudyPlan& plan) {
  const CostSettings& cost = p.run.config.cost;
  Charging charging;
  charging.price_per_node_hour_usd = cost.price_per_node_hour_usd;
  charging.price_per_gpu_hour_usd = cost.price_per_gpu_hour_usd;
  charging.nodes = p.run.nodes;
  if (plan.spec.slurm.cpu_only()) {
    charging.node_share_fraction = 1.0;
  } else {
    charging.allocated_gpus_per_node = p.run.gpus_per_node;
    if (cost.node_gpus >= p.run.gpus_per_node) {
      charging.node_share_fraction = static_cast<double>(p.run.gpus_per_node) / static_cast<double>(cost.node_gpus);
    }
  }
  return charging;
}

RunForecast forecast_run(const RunPlan& p, const StudyPlan& plan) {
  RunForecast f;
  const ResolvedRun& r = p.resolved;
  f.time_limit_s = slurm_time_seconds(plan.spec.slurm.time_limit);
  f.checkpoint_bytes = checkpoint_bytes(p);
  f.evaluations = evaluation_count(p);
  if (!r.step_time || !r.batch) return f;
  f.known = true;
  f.step_time_s = r.step_time->total_s;
  // The tokens of the step the time is for; without the data's lengths, a global batch of the mean example.
  f.tokens_per_step = std::isfinite(r.tokens_per_step)
                          ? r.tokens_per_step
                          : static_cast<double>(r.batch->global_batch) * (p.mean_source_tokens + p.mean_target_tokens);
  f.tokens_per_s = f.tokens_per_step / f.step_time_s;
  const double configured_peak = p.run.config.telemetry.peak_flops_per_device;
  const bool half_precision = r.memory_inputs && r.memory_inputs->compute_bytes_per_element == 2;
  const double peak = configured_peak > 0 ? configured_peak
                      : p.world.rates && half_precision ? p.world.rates->peak_flops_per_device
                                                  : 0.0;
  if (peak > 0) {
    f.mfu = r.flops_per_step / (f.step_time_s * peak * static_cast<double>(p.run.world()));
    if (!(f.mfu <= kHighestCredibleMfu)) {
      f.warnings.push_back(msg("the predicted step (", duration(f.step_time_s), " for ", figure(r.flops_per_step, "%.3g"),
                               " model FLOPs on ", p.run.world(), " device(s)) would be ", figure(f.mfu * 100.0, "%.0f"),
                               "% MFU, above the ", figure(kHighestCredibleMfu * 100.0, "%.0f"),
                               "% any run reaches: the step-time model is wrong here, so the plan gives no time, "
                               "throughput or cost for this run (a bug: please report it with the spec)"));
      f.step_time_s = f.tokens_per_s = f.mfu = kNaN;
    }
  }
  if (r.steps_known) f.train_time_s = static_cast<double>(r.total_steps) * f.step_time_s;
  f.eval_examples = p.eval_examples;
  f.eval_time_s = f.evaluations == 0 ? 0.0 : static_cast<double>(f.evaluations) * evaluation_seconds(p, p.eval_examples);
  f.run_time_s = f.train_time_s + f.eval_time_s;
  const double nodes = static_cast<double>(p.run.nodes);
  f.node_hours = nodes * f.run_time_s / 3600.0;
  f.reserved_node_hours = nodes * f.time_limit_s / 3600.0;
  const auto& cost = p.run.config.cost;
  f.charging = charging_of(p, plan);
  f.cost_usd = t5scale::cost_usd(f.charging, f.run_time_s);
  if (p.world.rates && p.world.rates->power_w_per_device > 0) {
    f.energy_kwh = p.world.rates->power_w_per_device * static_cast<double>(p.run.world()) * f.run_time_s * cost.pue / 3.6e6;
  }
  if (std::isfinite(f.run_time_s) && std::isfinite(f.time_limit_s)) {
    if (f.run_time_s > f.time_limit_s) {
      f.warnings.push_back(msg("predicted ", duration(f.run_time_s), " of training and evaluation does not fit slurm.time_limit ",
                               plan.spec.slurm.time_limit, ": the job is stopped at the limit (it checkpoints on the "
                               "signal and `t5scale-study submit` again resumes it), or raise the limit"));
    } else if (f.time_limit_s > 4.0 * f.run_time_s && f.time_limit_s - f.run_time_s > 3600.0) {
      f.warnings.push_back(msg("slurm.time_limit ", plan.spec.slurm.time_limit, " reserves ", figure(f.reserved_node_hours),
                               " node-hours for a predicted ", duration(f.run_time_s), " (", figure(f.node_hours, "%.3g"),
                               " node-hours): a shorter limit starts sooner on most queues"));
    }
  }
  return f;
}

// What a run computes, apart from how it is spread over devices: the config keys that change what the run means
// (config_change_needs_permission: the model, the data, the optimizer, the LR plan, the precision, the steps), but
// the seed, and the global batch as resolved (the batch keys' text differs between a fixed global batch and a
// fixed micro batch that give the same one). Runs with the same problem on more devices are its scaling series.
std::string scaling_problem(const RunPlan& p) {
  std::string key = msg("global_batch=", p.resolved.batch ? p.resolved.batch->global_batch : 0);
  for (const ConfigKeyInfo& info : config_keys()) {
    if (!config_change_needs_permission(info.key) || info.key == "run.seed" || info.key == "train.global_batch" ||
        info.key == "train.batch_mode") {
      continue;
    }
    key += "\n" + info.key + "=" + config_value_text(p.run.config, info.key);
  }
  return key;
}

}  // namespace

double slurm_time_seconds(const std::string& time) {
  int days = 0, a = -1, b = -1, c = -1;
  char tail = 0;
  if (std::sscanf(time.c_str(), "%d-%d:%d:%d%c", &days, &a, &b, &c, &tail) == 4) return ((days * 24.0 + a) * 60 + b) * 60 + c;
  if (std::sscanf(time.c_str(), "%d-%d:%d%c", &days, &a, &b, &tail) == 3) return ((days * 24.0 + a) * 60 + b) * 60;
  if (std::sscanf(time.c_str(), "%d-%d%c", &days, &a, &tail) == 2) return (days * 24.0 + a) * 3600;
  if (std::sscanf(time.c_str(), "%d:%d:%d%c", &a, &b, &c, &tail) == 3) return (a * 60.0 + b) * 60 + c;
  if (std::sscanf(time.c_str(), "%d:%d%c", &a, &b, &tail) == 2) return a * 60.0 + b;
  if (std::sscanf(time.c_str(), "%d%c", &a, &tail) == 1) return a * 60.0;
  return kNaN;
}

void forecast_study(StudyPlan& plan) {
  for (RunPlan& p : plan.runs) {
    p.forecast = forecast_run(p, plan);
    for (const std::string& w : p.forecast.warnings) p.resolved.notes.push_back(w);
  }
  // Each problem's reference: its run on the fewest devices (the fastest of them where several layouts share that
  // number). A problem run on one number of devices only has no scaling to tell.
  struct Series {
    const RunPlan* reference = nullptr;
    std::set<int64_t> worlds;
  };
  std::map<std::string, Series> series;
  for (const RunPlan& p : plan.runs) {
    if (!p.forecast.known) continue;
    Series& s = series[scaling_problem(p)];
    s.worlds.insert(p.run.world());
    const RunPlan* best = s.reference;
    if (best == nullptr || p.run.world() < best->run.world() ||
        (p.run.world() == best->run.world() && p.forecast.tokens_per_s > best->forecast.tokens_per_s)) {
      s.reference = &p;
    }
  }
  for (RunPlan& p : plan.runs) {
    if (!p.forecast.known) continue;
    const Series& s = series[scaling_problem(p)];
    if (s.worlds.size() < 2) continue;
    const RunPlan* ref = s.reference;
    const double mine = p.forecast.tokens_per_s / static_cast<double>(p.run.world());
    const double theirs = ref->forecast.tokens_per_s / static_cast<double>(ref->run.world());
    p.forecast.scaling_efficiency = mine / theirs;
    p.forecast.reference_run = ref->run.name;
  }
}

std::string format_forecast(const StudyPlan& plan) {
  std::vector<std::vector<std::string>> rows;
  double node_hours = 0, reserved = 0, cost = 0, energy = 0, run_s = 0;
  bool cost_known = true, energy_known = true, any = false;
  std::string basis;
  for (const RunPlan& p : plan.runs) {
    const RunForecast& f = p.forecast;
    if (!f.known) continue;
    any = true;
    if (p.world.rates && basis.find(p.world.rates->name) == std::string::npos) basis += (basis.empty() ? "" : "; ") + p.world.rates->name;
    rows.push_back({p.run.name, duration(f.step_time_s), figure(f.tokens_per_s, "%.4g"),
                    std::isfinite(f.mfu) ? figure(f.mfu * 100.0, "%.1f") + "%" : "?",
                    std::isfinite(f.scaling_efficiency) ? figure(f.scaling_efficiency * 100.0, "%.0f") + "%" : "-",
                    duration(f.train_time_s),
                    msg(f.evaluations, " x ", figure(f.eval_examples, "%.0f")), duration(f.eval_time_s),
                    duration(f.run_time_s) + " / " + plan.spec.slurm.time_limit, figure(f.node_hours, "%.3g") + " / " + figure(f.reserved_node_hours, "%.3g"),
                    std::isfinite(f.cost_usd) ? "$" + figure(f.cost_usd, "%.3g") : "?", figure(f.energy_kwh, "%.3g"),
                    bytes_text(f.checkpoint_bytes)});
    node_hours += f.node_hours;
    reserved += f.reserved_node_hours;
    run_s += f.run_time_s;
    cost_known = cost_known && std::isfinite(f.cost_usd);
    energy_known = energy_known && std::isfinite(f.energy_kwh);
    if (std::isfinite(f.cost_usd)) cost += f.cost_usd;
    if (std::isfinite(f.energy_kwh)) energy += f.energy_kwh;
  }
  if (!any) return "";
  std::string out = "\npredicted time and cost (step-time model on " + basis + "; eff: tokens/s per device against "
                    "the study's run of the same model, lengths, steps and global batch on the fewest devices, - "
                    "where no other number of devices runs it; tokens/s and MFU: the model FLOPs and tokens of the "
                    "step the time is for, padding not counted; cost: " +
                    (plan.spec.slurm.cpu_only() ? std::string("whole nodes, the plan does not know a node's CPUs")
                                                : std::string("the GPUs held, or their share of cost.node_gpus")) +
                    "):\n";
  out += text_table({"run", "step", "tokens/s", "MFU", "eff", "train", "evals x examples", "eval", "run / limit",
                     "node-h / reserved", "cost", "kWh", "checkpoint"},
                    rows, {0});
  out += msg("study: ", duration(run_s), " of runs, ", figure(node_hours, "%.3g"), " node-hours predicted of ",
             figure(reserved, "%.3g"), " reserved", cost_known ? ", $" + figure(cost, "%.4g") : std::string(", cost ?"),
             energy_known ? ", " + figure(energy, "%.3g") + " kWh" : std::string(", energy ?"), "\n");
  return out;
}

}  // namespace t5scale
