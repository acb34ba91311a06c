// A study spec expanded into its runs: the axes' combinations (or the listed runs), each run's config, name and
// launch shape.
#include "study/study_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/config_registry.h"
#include "config/yaml_node.h"
#include "core/check.h"
#include "core/file_names.h"
#include "core/text_file.h"
#include "study/study_spec_internal.h"

namespace t5scale {

using namespace study_spec_internal;
namespace fs = std::filesystem;

std::string run_name_label(const std::string& key, const std::string& value) {
  static const std::map<std::string, std::string> numeric = {
      {"nodes", "n"},
      {"gpus_per_node", "g"},
      {"gpus", "gpu"},
      {"parallel.tp", "tp"},
      {"train.global_batch", "gb"},
      {"train.micro_batch", "mb"},
      {"train.grad_accumulation", "ga"},
      {"train.max_steps", "steps"},
      {"train.epochs", "ep"},
      {"optimizer.lr", "lr"},
      {"optimizer.weight_decay", "wd"},
      {"lr_scaling.reference_global_batch", "ref"},
      {"lr_schedule.warmup_steps", "wu"},
      {"data.synthetic_examples", "ex"},
      {"data.max_source_length", "src"},
      {"data.max_target_length", "tgt"},
      {"data.sortish_factor", "sf"},
      {"data.max_tokens_per_micro_batch", "tok"},
      {"parallel.checkpoint_every_blocks", "ckpt"},
      {"run.seed", "seed"},
      {"cost.price_per_node_hour_usd", "price"},
      {"cost.low_priority_price_per_node_hour_usd", "lpprice"},
  };
  static const std::map<std::string, std::string> flags = {
      {"parallel.activation_checkpointing", "ac"}, {"parallel.zero1", "zero1"}, {"parallel.zero2", "zero2"},
      {"parallel.sequence_parallel", "sp"},
      {"train.freeze_embeddings", "frzemb"},       {"train.freeze_encoder", "frzenc"},
      {"lr_scaling.scale_warmup", "scalewu"},      {"data.drop_last", "droplast"},
  };
  // Paths: the file or folder name without its extension.
  static const std::set<std::string> paths = {"data.dataset", "data.tokenizer", "model.init_from"};
  if (auto it = numeric.find(key); it != numeric.end()) return it->second + value;
  const auto info = find_config_key(key);
  const std::string last = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
  auto initials = [&] {
    std::string out;
    bool start = true;
    for (char c : last) {
      if (c == '_') start = true;
      else if (start) out += c, start = false;
    }
    return out;
  };
  if (flags.count(key) || (info && info->type == ConfigValueType::kBool)) {
    const std::string name = flags.count(key) ? flags.at(key) : initials();
    if (value == "auto") return name + "auto";  // parallel.activation_checkpointing: auto
    const bool on = value == "true" || value == "True" || value == "yes" || value == "on";
    return on ? name : "no" + name;
  }
  if (paths.count(key)) return fs::path(value).stem().string();
  if (info && (info->type == ConfigValueType::kInt || info->type == ConfigValueType::kFloat)) {
    return initials() + value;
  }
  return value;  // enums and strings speak for themselves: sqrt, bf16, adafactor, sortish
}

namespace {

struct Launch {
  int64_t nodes = 1;
  int64_t gpus_per_node = 1;
};

// Applies one assignment to a run being built; errors in the run's own values go to `errors`.
void apply_assignment(const SpecAssignment& a, const SlurmSpec& slurm, RunConfig& config, Launch& launch,
                      std::vector<std::string>& errors) {
  if (!is_launch_key(a.key)) {
    set_config_value(config, a.key, a.value);  // key and type were checked when the spec was loaded
    return;
  }
  int64_t value = 0;
  if (!parse_int(a.value, value) || value < 1) {
    errors.push_back(msg(a.key, ": must be an integer >= 1, got '", a.value, "'"));
    return;
  }
  if (a.key == "nodes") {
    launch.nodes = value;
  } else if (a.key == "gpus_per_node") {
    launch.gpus_per_node = value;
  } else {
    // gpus: as many full nodes of slurm.gpus_per_node as it takes, or part of one node.
    if (value <= slurm.gpus_per_node) {
      launch.nodes = 1;
      launch.gpus_per_node = value;
    } else if (value % slurm.gpus_per_node == 0) {
      launch.nodes = value / slurm.gpus_per_node;
      launch.gpus_per_node = slurm.gpus_per_node;
    } else {
      errors.push_back(msg("gpus: ", value, " GPUs do not fill whole nodes of slurm.gpus_per_node ",
                           slurm.gpus_per_node, "; use nodes and gpus_per_node"));
    }
  }
}

// One part of a run's name: an assignment of the spec, or a linked axis value.
struct NamePart {
  std::string id;     // what is compared across runs: the key, or "axis:<name>"
  std::string value;  // what is compared
  std::string label;
};

struct PendingRun {
  const StudyEntry* entry = nullptr;
  std::vector<const AxisValue*> values;  // one per axis (the study's, then the entry's)
  std::vector<const StudyAxis*> axes;
  int64_t repeat = 0;
};

std::vector<NamePart> name_parts(const PendingRun& p) {
  std::vector<NamePart> parts;
  if (p.entry->name.empty()) {
    for (const auto& a : p.entry->set) parts.push_back({a.key, a.value, run_name_label(a.key, a.value)});
  }
  for (size_t i = 0; i < p.values.size(); ++i) {
    const AxisValue& v = *p.values[i];
    const StudyAxis& axis = *p.axes[i];
    if (v.assignments.size() == 1 && v.label.empty() && v.assignments[0].key == axis.name) {
      const auto& a = v.assignments[0];
      parts.push_back({a.key, a.value, run_name_label(a.key, a.value)});
      continue;
    }
    std::string label = v.label;
    std::string value;
    for (const auto& a : v.assignments) {
      if (v.label.empty()) label += (label.empty() ? "" : "-") + run_name_label(a.key, a.value);
      value += a.key + "=" + a.value + ";";
    }
    parts.push_back({"axis:" + axis.name, value, label});
  }
  return parts;
}

RunConfig load_base_config(const StudySpec& spec) {
  RunConfig base;
  if (spec.base_config.empty()) return base;
  try {
    base = load_run_config(spec.base_config);
  } catch (const Error& e) {
    throw Error(msg(spec.source, ": base_config: ", e.what()));
  }
  return base;
}

// The --set key=value overrides, checked as a spec's settings are; every problem at once.
std::vector<SpecAssignment> parse_overrides(const std::vector<std::string>& texts) {
  std::vector<SpecAssignment> overrides;
  Problems problems("--set");
  for (const auto& text : texts) {
    const size_t eq = text.find('=');
    if (eq == std::string::npos) {
      problems.add(0, msg("'", text, "': expected key=value"));
      continue;
    }
    SpecAssignment a{text.substr(0, eq), text.substr(eq + 1), 0};
    if (check_assignment(a, "", problems)) overrides.push_back(a);
  }
  problems.throw_if_any();
  return overrides;
}

// Combination `c` of the entry's axes (the study's, then its own), the last axis fastest.
PendingRun combination(const StudyEntry& entry, const std::vector<const StudyAxis*>& axes, size_t c) {
  PendingRun p;
  p.entry = &entry;
  p.axes = axes;
  p.values.resize(axes.size());
  size_t rest = c;  // mixed radix
  for (size_t i = axes.size(); i-- > 0;) {
    p.values[i] = &axes[i]->values[rest % axes[i]->values.size()];
    rest /= axes[i]->values.size();
  }
  return p;
}

// Every combination: entries in order, the first axis slowest, repeats innermost.
std::vector<PendingRun> every_combination(const StudySpec& spec) {
  std::vector<PendingRun> pending;
  for (const auto& entry : spec.entries) {
    std::vector<const StudyAxis*> axes;
    for (const auto& axis : spec.axes) axes.push_back(&axis);
    for (const auto& axis : entry.axes) axes.push_back(&axis);
    size_t combinations = 1;
    for (const StudyAxis* axis : axes) combinations *= axis->values.size();
    for (size_t c = 0; c < combinations; ++c) {
      PendingRun p = combination(entry, axes, c);
      for (int64_t r = 0; r < spec.repeats; ++r) {
        p.repeat = r;
        pending.push_back(p);
      }
    }
  }
  return pending;
}

// The values each name part takes across the study, "" for runs that leave it at the base value: a part with
// more than one value tells runs apart.
std::map<std::string, std::set<std::string>> values_by_part_id(const std::vector<std::vector<NamePart>>& parts) {
  std::map<std::string, std::set<std::string>> values_by_id;
  for (const auto& run_parts : parts) {
    for (const auto& part : run_parts) values_by_id[part.id].insert(part.value);
  }
  for (const auto& run_parts : parts) {
    for (auto& [id, values] : values_by_id) {
      const bool has = std::any_of(run_parts.begin(), run_parts.end(), [&](const NamePart& x) { return x.id == id; });
      if (!has) values.insert("");
    }
  }
  return values_by_id;
}

std::string run_name(const StudySpec& spec, const PendingRun& p, const std::vector<NamePart>& parts,
                     const std::map<std::string, std::set<std::string>>& values_by_id) {
  std::vector<std::string> labels;
  if (!p.entry->name.empty()) labels.push_back(p.entry->name);
  for (const auto& part : parts) {
    if (values_by_id.at(part.id).size() > 1 && !part.label.empty()) labels.push_back(part.label);
  }
  if (spec.repeats > 1) labels.push_back(msg("s", p.repeat));
  if (labels.empty()) labels.push_back(spec.name);
  std::string name = filesystem_safe(join(labels, "-"));
  if (name.front() == '.' || name.front() == '-') name = "r" + name;
  return name;
}

// Names: the entry's name, then the labels of what varies across the study.
std::vector<std::string> run_names(const StudySpec& spec, const std::vector<PendingRun>& pending) {
  std::vector<std::vector<NamePart>> parts;
  for (const auto& p : pending) parts.push_back(name_parts(p));
  const std::map<std::string, std::set<std::string>> values_by_id = values_by_part_id(parts);
  std::vector<std::string> names;
  for (size_t k = 0; k < pending.size(); ++k) names.push_back(run_name(spec, pending[k], parts[k], values_by_id));
  return names;
}

// The settings in the order they override each other: base, cost, the entry's, the axes', then --set.
void apply_settings(const StudySpec& spec, const PendingRun& p, const std::vector<SpecAssignment>& overrides,
                    StudyRun& run) {
  Launch launch;
  launch.gpus_per_node = spec.slurm.gpus_per_node;
  auto apply_all = [&](const std::vector<SpecAssignment>& assignments, bool record) {
    for (const auto& a : assignments) {
      apply_assignment(a, spec.slurm, run.config, launch, run.errors);
      if (record) run.varied.emplace_back(a.key, a.value);
    }
  };
  apply_all(spec.base, false);
  apply_all(spec.cost, false);
  apply_all(p.entry->set, true);
  for (const AxisValue* v : p.values) apply_all(v->assignments, true);
  apply_all(overrides, false);
  run.nodes = launch.nodes;
  run.gpus_per_node = launch.gpus_per_node;
}

StudyRun make_study_run(const StudySpec& spec, const ExpandOptions& options, const RunConfig& base,
                        const std::vector<SpecAssignment>& overrides, const PendingRun& p, const std::string& name) {
  StudyRun run;
  run.name = name;
  run.repeat = p.repeat;
  run.config = base;
  apply_settings(spec, p, overrides, run);
  run.config.run.name = run.name;
  run.config.run.study = spec.name;
  run.config.run.output_dir = options.results_dir.empty() ? spec.results_dir : options.results_dir;
  run.config.run.seed += p.repeat;
  // The rendered config carries its grid: the job refuses to run it on another number of processes.
  run.config.run.planned_world_size = run.world();
  if (run.config.cost.gpus_per_node == 0) run.config.cost.gpus_per_node = run.gpus_per_node;
  // The node's GPUs, for the share of a node's price a run on part of it is charged, in the plan and in the job
  // alike: slurm.gpus_per_node (the node the `gpus` axis packs), or the run's own where it asks for more.
  if (run.config.cost.node_gpus == 0 && !spec.slurm.cpu_only()) {
    run.config.cost.node_gpus = std::max(spec.slurm.gpus_per_node, run.gpus_per_node);
  }
  for (const auto& e : validate_for_world(run.config, run.world())) run.errors.push_back(e.text());
  return run;
}

void throw_if_names_collide(const std::vector<StudyRun>& runs, const std::string& source) {
  std::map<std::string, size_t> first_with_name;
  std::vector<std::string> collisions;
  for (size_t k = 0; k < runs.size(); ++k) {
    if (auto it = first_with_name.find(runs[k].name); it != first_with_name.end()) {
      collisions.push_back(msg("'", runs[k].name, "' (runs ", it->second + 1, " and ", k + 1, ")"));
    } else {
      first_with_name[runs[k].name] = k;
    }
  }
  if (!collisions.empty()) {
    throw Error(msg(source, ": run names collide: ", join(collisions, ", "),
                    "; give the runs of a list a name, or remove repeated axis values"));
  }
}

}  // namespace

std::vector<StudyRun> expand_study(const StudySpec& spec, const ExpandOptions& options) {
  const RunConfig base = load_base_config(spec);
  const std::vector<SpecAssignment> overrides = parse_overrides(options.overrides);
  const std::vector<PendingRun> pending = every_combination(spec);
  const std::vector<std::string> names = run_names(spec, pending);
  std::vector<StudyRun> runs;
  for (size_t k = 0; k < pending.size(); ++k) {
    runs.push_back(make_study_run(spec, options, base, overrides, pending[k], names[k]));
  }
  throw_if_names_collide(runs, spec.source);
  return runs;
}

}  // namespace t5scale
