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
#include "plan/machine_rates.h"
#include "core/nearest_word.h"
#include "core/text_file.h"
#include "study/study_spec_internal.h"

namespace t5scale {

using namespace study_spec_internal;

namespace {

namespace fs = std::filesystem;

const std::vector<std::string>& launch_keys() {
  static const std::vector<std::string> keys = {"nodes", "gpus_per_node", "gpus"};
  return keys;
}

const std::vector<std::string>& top_level_keys() {
  static const std::vector<std::string> keys = {"study", "description", "base_config", "base", "axes", "mode",
                                                "runs", "repeats", "slurm", "cost", "results_dir"};
  return keys;
}

const std::vector<std::string>& slurm_keys() {
  static const std::vector<std::string> keys = {
      "partition", "account", "time_limit", "constraint", "qos", "mem", "gpus_per_node", "gpu", "gpu_memory_gib",
      "interconnect", "gpu_request", "gres_type", "cpus_per_task", "launcher", "mpi", "signal_s", "extra_sbatch", "env", "modules",
      "setup"};
  return keys;
}

// Keys the study sets itself on every run.
bool set_by_study(const std::string& key) {
  return key == "run.name" || key == "run.study" || key == "run.output_dir" || key == "run.planned_world_size";
}

// The nearest of `candidates` to `word`, or "" when none is within a few edits.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  return nearest_word(word, candidates, std::max<size_t>(3, word.size() / 3));
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string best = nearest(word, candidates);
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}



// A mapping of keys (nested sections, dotted keys, or both) as flat assignments. `skip` names keys of the
// mapping that are not settings (a linked axis value's `label`).
void flatten(const YAML::Node& node, const std::string& prefix, const std::string& where,
             std::vector<SpecAssignment>& out, Problems& problems, const std::set<std::string>& skip = {}) {
  if (!node.IsMap()) {
    problems.add(node, msg(where, prefix.empty() ? "" : prefix + ": ", "expected a mapping of keys, got ",
                           yaml_node_kind(node)));
    return;
  }
  for (const auto& item : node) {
    if (!item.first.IsScalar()) {
      problems.add(item.first, msg(where, "a key must be a plain name, got ", yaml_node_kind(item.first)));
      continue;
    }
    const std::string name = item.first.Scalar();
    if (prefix.empty() && skip.count(name)) continue;
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    if (item.second.IsMap()) {
      if (is_launch_key(key) || find_config_key(key)) {
        problems.add(item.second, msg(where, key, ": expected a value, got a mapping"));
        continue;
      }
      flatten(item.second, key, where, out, problems);
      continue;
    }
    if (item.second.IsSequence()) {
      problems.add(item.second, msg(where, key, ": expected a value, got a list"));
      continue;
    }
    SpecAssignment a{key, item.second.IsNull() ? "" : item.second.Scalar(), line_of(item.first)};
    if (check_assignment(a, where, problems)) out.push_back(a);
  }
}

std::string scalar(const YAML::Node& node, const std::string& key, Problems& problems) {
  if (node.IsNull()) return "";
  if (!node.IsScalar()) {
    problems.add(node, msg(key, ": expected a value, got ", yaml_node_kind(node)));
    return "";
  }
  return node.Scalar();
}

int64_t integer(const YAML::Node& node, const std::string& key, int64_t minimum, Problems& problems) {
  const std::string text = scalar(node, key, problems);
  int64_t value = 0;
  if (!parse_int(text, value) || value < minimum) {
    problems.add(node, msg(key, ": must be an integer >= ", minimum, ", got '", text, "'"));
    return minimum;
  }
  return value;
}

double number(const YAML::Node& node, const std::string& key, double minimum, Problems& problems) {
  const std::string text = scalar(node, key, problems);
  double value = 0;
  if (!parse_double(text, value) || !(value >= minimum)) {
    problems.add(node, msg(key, ": must be a number >= ", minimum, ", got '", text, "'"));
    return minimum;
  }
  return value;
}

std::vector<std::string> string_list(const YAML::Node& node, const std::string& key, Problems& problems) {
  std::vector<std::string> out;
  if (node.IsNull()) return out;
  if (!node.IsSequence()) {
    problems.add(node, msg(key, ": expected a list, got ", yaml_node_kind(node)));
    return out;
  }
  for (const auto& item : node) out.push_back(scalar(item, key, problems));
  return out;
}

// A text as it can be shown inside one line of a message.
std::string one_line(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out;
}

// A value of `slurm:` that sbatch reads from an #SBATCH line; `token`: a one-word option.
std::string sbatch_scalar(const YAML::Node& node, const std::string& key, bool token, Problems& problems) {
  const std::string value = scalar(node, key, problems);
  const std::string problem = sbatch_value_problem(value, token);
  if (!problem.empty()) problems.add(node, msg(key, ": ", problem));
  return value;
}

// `slurm.env`: NAME: value (taken literally) or NAME: {expand: "...$OTHER..."}.
std::vector<SlurmEnvVar> parse_env(const YAML::Node& node, const std::string& key, Problems& problems) {
  std::vector<SlurmEnvVar> env;
  if (!node.IsMap()) {
    problems.add(node, msg(key, ": expected a mapping NAME: value, got ", yaml_node_kind(node)));
    return env;
  }
  std::set<std::string> seen;
  for (const auto& e : node) {
    SlurmEnvVar var;
    var.name = e.first.Scalar();
    const std::string var_key = key + "." + var.name;
    if (!is_env_name(var.name)) {
      problems.add(e.first, msg(key, ": '", var.name, "' is not an environment variable name"));
    } else if (!seen.insert(var.name).second) {
      problems.add(e.first, msg(var_key, ": duplicate variable"));
    }
    const YAML::Node& value = e.second;
    if (value.IsMap()) {
      var.expand = true;
      for (const auto& item : value) {
        if (item.first.Scalar() != "expand") {
          problems.add(item.first, msg(var_key, ": unknown key '", item.first.Scalar(),
                                       "'; a value is a string (taken literally) or {expand: \"...$NAME...\"}"));
        }
      }
      if (value["expand"]) {
        var.value = scalar(value["expand"], var_key + ".expand", problems);
      } else {
        problems.add(value, msg(var_key, ": expected {expand: \"...$NAME...\"}"));
      }
    } else {
      var.value = scalar(value, var_key, problems);
    }
    const std::string problem = env_value_problem(var.value, var.expand);
    if (!problem.empty()) problems.add(value, msg(var_key, ": ", problem));
    env.push_back(std::move(var));
  }
  return env;
}

// The mpi plugin name goes into the srun line as a word of its own.
bool is_plain_word(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

// Checks that need the whole `slurm:` section: GPU requests of CPU-only jobs.
void check_gpu_request(const YAML::Node& node, const SlurmSpec& s, Problems& problems) {
  if (!s.cpu_only()) return;
  for (const char* name : {"gpu_request", "gres_type"}) {
    if (node[name]) {
      problems.add(node[name], msg("slurm.", name, ": CPU-only jobs (slurm.gpu: ", s.gpu, ") ask for no GPUs"));
    }
  }
}

SlurmSpec parse_slurm(const YAML::Node& node, Problems& problems) {
  SlurmSpec s;
  if (node.IsNull()) return s;
  if (!node.IsMap()) {
    problems.add(node, msg("slurm: expected a mapping, got ", yaml_node_kind(node)));
    return s;
  }
  for (const auto& item : node) {
    const std::string name = item.first.Scalar();
    const std::string key = "slurm." + name;
    const YAML::Node& v = item.second;
    if (name == "partition") s.partition = sbatch_scalar(v, key, true, problems);
    else if (name == "account") s.account = sbatch_scalar(v, key, true, problems);
    else if (name == "time_limit") s.time_limit = sbatch_scalar(v, key, true, problems);
    else if (name == "constraint") s.constraint = sbatch_scalar(v, key, true, problems);
    else if (name == "qos") s.qos = sbatch_scalar(v, key, true, problems);
    else if (name == "mem") s.mem = sbatch_scalar(v, key, true, problems);
    else if (name == "gpus_per_node") s.gpus_per_node = integer(v, key, 1, problems);
    else if (name == "gpu") s.gpu = scalar(v, key, problems);
    else if (name == "gpu_memory_gib") s.gpu_memory_gib = number(v, key, 0.0, problems);
    else if (name == "interconnect") {
      s.interconnect = scalar(v, key, problems);
      std::vector<std::string> known;
      for (const auto& [interconnect, what] : published_interconnects()) known.push_back(interconnect);
      if (std::find(known.begin(), known.end(), s.interconnect) == known.end()) {
        problems.add(v, msg(key, ": '", one_line(s.interconnect), "' has no published figures (known: ", join(known, ", "),
                            "); a calibrated rates file is base.telemetry.machine_rates"));
      }
    }
    else if (name == "gpu_request") {
      const std::string request = scalar(v, key, problems);
      if (request == "gpus-per-node") s.gpu_request = SlurmSpec::GpuRequest::kGpusPerNode;
      else if (request == "gres") s.gpu_request = SlurmSpec::GpuRequest::kGres;
      else problems.add(v, msg(key, ": must be gpus-per-node or gres, got '", one_line(request), "'"));
    } else if (name == "gres_type") {
      s.gres_type = sbatch_scalar(v, key, true, problems);
      if (s.gres_type.find(':') != std::string::npos || s.gres_type.find(',') != std::string::npos) {
        problems.add(v, msg(key, ": '", s.gres_type, "' must be one GPU type name (gres.conf Type), e.g. a100"));
      }
    } else if (name == "cpus_per_task") s.cpus_per_task = integer(v, key, 0, problems);
    else if (name == "launcher") {
      s.launcher = scalar(v, key, problems);
      if (s.launcher != "srun" && s.launcher != "mpirun") {
        problems.add(v, msg(key, ": must be srun or mpirun, got '", one_line(s.launcher), "'"));
      }
    } else if (name == "mpi") {
      s.mpi = scalar(v, key, problems);
      if (!is_plain_word(s.mpi)) {
        problems.add(v, msg(key, ": '", one_line(s.mpi), "' must be an srun --mpi plugin name (pmix, pmi2, ...)"));
      }
    } else if (name == "signal_s") s.signal_s = integer(v, key, 0, problems);
    else if (name == "extra_sbatch") {
      s.extra_sbatch = string_list(v, key, problems);
      for (const auto& option : s.extra_sbatch) {
        const std::string problem = sbatch_value_problem(option, false);
        if (!problem.empty()) {
          problems.add(v, msg(key, ": ", problem));
        } else if (option.rfind("-", 0) != 0) {
          problems.add(v, msg(key, ": '", option, "' is not an sbatch option (they start with - or --)"));
        }
      }
    } else if (name == "env") {
      s.env = parse_env(v, key, problems);
    } else if (name == "modules") {
      s.modules = string_list(v, key, problems);
      for (const auto& module : s.modules) {
        if (module.empty() || std::any_of(module.begin(), module.end(),
                                          [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
          problems.add(v, msg(key, ": '", one_line(module),
                              "' must be one module name (one item per module; commands go in slurm.setup)"));
        }
      }
    } else if (name == "setup") {
      s.setup = string_list(v, key, problems);
    } else {
      problems.add(item.first, msg("unknown key '", key, "'", did_you_mean(name, slurm_keys())));
    }
  }
  check_gpu_request(node, s, problems);
  return s;
}

StudyAxis parse_axis(const std::string& name, const YAML::Node& values, Problems& problems) {
  StudyAxis axis;
  axis.name = name;
  axis.line = line_of(values);
  const std::string where = "axes." + name + ": ";
  if (!values.IsSequence() || values.size() == 0) {
    problems.add(values, msg(where, "an axis is a non-empty list of values, got ",
                             values.IsSequence() ? "an empty list" : yaml_node_kind(values)));
    return axis;
  }
  const bool plain = is_launch_key(name) || find_config_key(name).has_value();
  for (const auto& value : values) {
    AxisValue v;
    if (plain) {
      if (!value.IsScalar() && !value.IsNull()) {
        problems.add(value, msg(where, "the values of a key's axis are plain values, got ", yaml_node_kind(value)));
        continue;
      }
      SpecAssignment a{name, value.IsNull() ? "" : value.Scalar(), line_of(value)};
      if (check_assignment(a, "axes: ", problems)) v.assignments.push_back(a);
    } else if (value.IsMap()) {
      if (value["label"]) v.label = scalar(value["label"], "axes." + name + ".label", problems);
      flatten(value, "", where, v.assignments, problems, {"label"});
      if (v.assignments.empty()) problems.add(value, msg(where, "a linked axis value sets no key"));
    } else {
      // Neither a key nor a linked axis: most likely a misspelt key.
      std::vector<std::string> candidates = launch_keys();
      for (const auto& info : config_keys()) candidates.push_back(info.key);
      problems.add(values, msg("axes: unknown key '", name, "'", did_you_mean(name, candidates),
                               "; an axis is a run-config key, a launch key (nodes, gpus_per_node, gpus), or a "
                               "name whose values are mappings of keys that change together"));
      return axis;
    }
    axis.values.push_back(std::move(v));
  }
  return axis;
}

std::vector<StudyAxis> parse_axes(const YAML::Node& node, const std::string& where, Problems& problems) {
  std::vector<StudyAxis> axes;
  if (node.IsNull()) return axes;
  if (!node.IsMap()) {
    problems.add(node, msg(where, "expected a mapping of axis: [values], got ", yaml_node_kind(node)));
    return axes;
  }
  std::set<std::string> seen;
  for (const auto& item : node) {
    const std::string name = item.first.Scalar();
    if (!seen.insert(name).second) {
      problems.add(item.first, msg(where, name, ": duplicate axis"));
      continue;
    }
    axes.push_back(parse_axis(name, item.second, problems));
  }
  return axes;
}

YAML::Node load_yaml(const std::string& yaml_text, const std::string& source) {
  try {
    return YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw Error(msg(source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg));
  }
}

// Duplicate and unknown top-level keys; run-config and launch keys get a hint where they belong.
void check_top_level_keys(const YAML::Node& root, Problems& problems) {
  std::set<std::string> seen;
  for (const auto& item : root) {
    if (!item.first.IsScalar()) {
      problems.add(item.first, msg("a key must be a plain name, got ", yaml_node_kind(item.first)));
      continue;
    }
    const std::string key = item.first.Scalar();
    if (!seen.insert(key).second) problems.add(item.first, msg(key, ": duplicate key"));
    const auto& known = top_level_keys();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      const bool setting = find_config_key(key).has_value() || is_launch_key(key);
      const std::string hint = setting ? " (run-config and launch keys go under base:, axes: or runs:)"
                                       : did_you_mean(key, known);
      problems.add(item.first, msg("unknown key '", key, "'", hint));
    }
  }
}

// A study's or a run's name, which becomes part of folder names.
std::string parse_name(const YAML::Node& node, const std::string& key, Problems& problems) {
  const std::string name = scalar(node, key, problems);
  if (name.empty() || filesystem_safe(name) != name) {
    problems.add(node, msg(key, ": '", name, "' must be a non-empty name of letters, digits, . _ -"));
  }
  return name;
}

// The base config's path: inside the spec's folder (a spec travels between users, so what it names stays there);
// "" when the value is empty.
std::string parse_base_config(const YAML::Node& node, const std::string& base_dir, Problems& problems) {
  const std::string path = scalar(node, "base_config", problems);
  if (path.empty()) return "";
  const std::string problem = inside_path_problem(path);
  if (!problem.empty()) {
    problems.add(node, msg("base_config: '", printable_name(path), "' is not a path inside the spec's folder (",
                           problem, "); nothing outside it is opened. Put the config in the spec's folder or below "
                           "it, or give t5scale-study --base-config FILE"));
    return "";
  }
  return base_dir.empty() ? path : (fs::path(base_dir) / path).lexically_normal().string();
}

// The base config, when it is given: a file, or a problem at `node` (the spec's key, or its root for --base-config).
void check_base_config_is_a_file(const std::string& path, const std::string& what, const YAML::Node& node,
                                 Problems& problems) {
  std::error_code ec;
  if (!path.empty() && !fs::is_regular_file(path, ec)) {
    problems.add(node, msg(what, ": '", path, "' is not a file"));
  }
}

// One entry of `runs:` (list mode).
StudyEntry parse_run_entry(const YAML::Node& run, Problems& problems) {
  StudyEntry entry;
  entry.line = line_of(run);
  for (const auto& item : run) {
    const std::string k = item.first.Scalar();
    if (k != "name" && k != "set" && k != "axes") {
      problems.add(item.first, msg("runs: unknown key '", k, "'", did_you_mean(k, {"name", "set", "axes"}),
                                   "; a run is {name?, set: {key: value}, axes?: {key: [values]}}"));
    }
  }
  if (run["name"]) entry.name = parse_name(run["name"], "runs.name", problems);
  if (run["set"] && !run["set"].IsNull()) {
    const std::string where = entry.name.empty() ? "runs.set: " : "runs[" + entry.name + "].set: ";
    flatten(run["set"], "", where, entry.set, problems);
  }
  if (run["axes"]) entry.axes = parse_axes(run["axes"], "runs.axes: ", problems);
  return entry;
}

// `runs:` of list mode: the entries that are mappings.
std::vector<StudyEntry> parse_run_entries(const YAML::Node& root, Problems& problems) {
  std::vector<StudyEntry> entries;
  const YAML::Node runs = root["runs"];
  if (!runs || !runs.IsSequence() || runs.size() == 0) {
    problems.add(runs ? runs : root, "runs: mode list needs a non-empty list of runs ({name?, set: {...}})");
    return entries;
  }
  for (const auto& run : runs) {
    if (!run.IsMap()) {
      problems.add(run,
                   msg("runs: each run is a mapping {name?, set: {...}, axes?: {...}}, got ", yaml_node_kind(run)));
      continue;
    }
    entries.push_back(parse_run_entry(run, problems));
  }
  return entries;
}

// `mode:` and what it implies: grid mode has one implicit entry, list mode the entries of `runs:`.
void parse_mode_and_entries(const YAML::Node& root, StudySpec& spec, Problems& problems) {
  const std::string mode = root["mode"] ? scalar(root["mode"], "mode", problems) : "grid";
  if (mode == "grid") {
    spec.mode = StudySpec::Mode::kGrid;
    if (root["runs"]) problems.add(root["runs"], "runs: is for mode: list (this spec's mode is grid)");
    spec.entries.push_back(StudyEntry{});
  } else if (mode == "list") {
    spec.mode = StudySpec::Mode::kList;
    spec.entries = parse_run_entries(root, problems);
  } else {
    problems.add(root["mode"], msg("mode: must be grid or list, got '", mode, "'"));
  }
}

// `cost:` as cost.<key> assignments.
std::vector<SpecAssignment> parse_cost(const YAML::Node& cost, Problems& problems) {
  std::vector<SpecAssignment> assignments;
  if (!cost.IsMap()) {
    problems.add(cost, msg("cost: expected a mapping, got ", yaml_node_kind(cost)));
    return assignments;
  }
  for (const auto& item : cost) {
    SpecAssignment a{"cost." + item.first.Scalar(), scalar(item.second, "cost", problems), line_of(item.first)};
    if (check_assignment(a, "", problems)) assignments.push_back(a);
  }
  return assignments;
}

}  // namespace

namespace study_spec_internal {

// Checks that `a` names a launch key or a run-config key and that its value has the key's type. Returns false
// (with the problem recorded) otherwise.
bool check_assignment(const SpecAssignment& a, const std::string& where, Problems& problems) {
  if (is_launch_key(a.key)) {
    int64_t value = 0;
    if (!parse_int(a.value, value) || value < 1) {
      problems.add(a.line, msg(where, a.key, ": must be an integer >= 1, got '", a.value, "'"));
      return false;
    }
    return true;
  }
  if (set_by_study(a.key)) {
    problems.add(a.line, msg(where, a.key, ": is set by the study for every run (run names come from the axes, "
                                           "the study name from `study:`, the output folder from `results_dir:`)"));
    return false;
  }
  if (!find_config_key(a.key)) {
    // set_config_value's message carries the nearest run-config key; a launch key may be nearer.
    const std::string launch = nearest(a.key, launch_keys());
    if (!launch.empty()) {
      problems.add(a.line, msg(where, "unknown key '", a.key, "' (did you mean the launch key '", launch, "'?)"));
      return false;
    }
  }
  try {
    RunConfig scratch;
    set_config_value(scratch, a.key, a.value);
  } catch (const Error& e) {
    problems.add(a.line, where + e.what());
    return false;
  }
  return true;
}

}  // namespace study_spec_internal

bool is_launch_key(const std::string& key) {
  const auto& keys = launch_keys();
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

bool is_env_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

bool SlurmSpec::cpu_only() const { return gpu == "none" || gpu == "cpu"; }

std::string sbatch_value_problem(const std::string& value, bool token) {
  const std::string shown = "'" + one_line(value) + "' ";
  for (char c : value) {
    if (c == '\n' || c == '\r') return shown + "holds a newline, which would end the #SBATCH line";
  }
  for (char c : value) {
    if (c == '#') return shown + "holds '#', which sbatch reads as the start of a comment";
    if (std::iscntrl(static_cast<unsigned char>(c)) && c != '\t') return shown + "holds a control character";
  }
  if (!token) return "";
  for (char c : value) {
    if (std::isspace(static_cast<unsigned char>(c))) return shown + "holds whitespace, which would end the value";
    if (c == '"' || c == '\'' || c == '\\') return shown + "holds a quote or backslash, which sbatch reads as quoting";
  }
  return "";
}

std::string env_value_problem(const std::string& value, bool expand) {
  const std::string shown = "'" + one_line(value) + "' ";
  if (value.find_first_of("\n\r") != std::string::npos) {
    return shown + "holds a newline (an environment value is one line)";
  }
  if (!expand) return "";
  const std::string commands = "; commands go in slurm.setup, which can export what they compute";
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '`') return shown + "holds a backtick (a command substitution)" + commands;
    if (value[i] != '$' || i + 1 == value.size()) continue;
    if (value[i + 1] == '(') return shown + "holds '$(' (a command substitution)" + commands;
    if (value[i + 1] == '{') {
      const size_t close = value.find('}', i + 2);
      if (close == std::string::npos || !is_env_name(value.substr(i + 2, close - i - 2))) {
        return shown + "holds a '${' that is not a plain ${NAME} (only $NAME and ${NAME} are expanded)" + commands;
      }
    }
  }
  return "";
}

std::string filesystem_safe(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    out += keep ? c : '_';
  }
  return out;
}

bool is_spec_key(const std::string& key) {
  const std::string first = key.substr(0, key.find('.'));
  if (first == "slurm") return key.size() > first.size() + 1;
  return key == "repeats" || key == "results_dir" || key == "study" || key == "description";
}

namespace {

// Sets one `--set KEY=VALUE` of the spec's own keys in the parsed file: the mappings on the way are made where the
// file has none; one that holds something else is a problem named by the option.
void apply_spec_override(YAML::Node root, const std::string& text, Problems& problems) {
  const size_t equals = text.find('=');
  const std::string key = text.substr(0, equals);
  T5S_CHECK(equals != std::string::npos && is_spec_key(key), "apply_spec_override: '", text, "' is not a spec key");
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(equals + 1));
  } catch (const YAML::ParserException& e) {
    problems.add(0, msg("--set ", key, ": the value is not YAML: ", e.msg));
    return;
  }
  std::vector<std::string> path;
  for (size_t start = 0;;) {
    const size_t dot = key.find('.', start);
    path.push_back(key.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  YAML::Node node = root;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    YAML::Node child = node[path[i]];
    if (child.IsDefined() && !child.IsNull() && !child.IsMap()) {
      problems.add(child, msg("--set ", key, ": '", path[i], "' holds ", yaml_node_kind(child), ", not a mapping"));
      return;
    }
    if (!child.IsDefined() || child.IsNull()) node[path[i]] = YAML::Node(YAML::NodeType::Map);
    node.reset(node[path[i]]);  // reset: move to the child (operator= would overwrite this node with it)
  }
  node[path.back()] = value;
}

}  // namespace

StudySpec parse_study_spec(const std::string& yaml_text, const std::string& source, const std::string& base_dir,
                           const std::string& base_config_override, const std::vector<std::string>& spec_overrides) {
  YAML::Node root = load_yaml(yaml_text, source);
  Problems problems(source);
  StudySpec spec;
  spec.source = source;
  if (!root.IsMap()) {
    problems.add(root,
                 msg("a study spec is a mapping (study:, base:, axes:, slurm:, ...), got ", yaml_node_kind(root)));
    problems.throw_if_any();
  }
  for (const std::string& text : spec_overrides) apply_spec_override(root, text, problems);
  check_top_level_keys(root, problems);

  if (!root["study"]) {
    problems.add(root, "study: missing (the study's name)");
  } else {
    spec.name = parse_name(root["study"], "study", problems);
  }
  if (root["description"]) spec.description = scalar(root["description"], "description", problems);
  if (!base_config_override.empty()) {
    spec.base_config = base_config_override;  // the user's own words: taken as given
    check_base_config_is_a_file(spec.base_config, "--base-config", root, problems);
  } else if (root["base_config"]) {
    spec.base_config = parse_base_config(root["base_config"], base_dir, problems);
    check_base_config_is_a_file(spec.base_config, "base_config", root["base_config"], problems);
  }
  if (root["base"] && !root["base"].IsNull()) flatten(root["base"], "", "base: ", spec.base, problems);
  if (root["axes"]) spec.axes = parse_axes(root["axes"], "axes: ", problems);
  parse_mode_and_entries(root, spec, problems);
  if (root["repeats"]) spec.repeats = integer(root["repeats"], "repeats", 1, problems);
  if (root["slurm"]) spec.slurm = parse_slurm(root["slurm"], problems);
  if (root["cost"] && !root["cost"].IsNull()) spec.cost = parse_cost(root["cost"], problems);
  if (root["results_dir"]) {
    // The jobs' logs go there: #SBATCH --output=<results_dir>/<run>.%j.log.
    spec.results_dir = scalar(root["results_dir"], "results_dir", problems);
    const std::string problem = sbatch_value_problem(spec.results_dir, true);
    if (!problem.empty()) problems.add(root["results_dir"], msg("results_dir: ", problem));
  }
  if (spec.results_dir.empty()) spec.results_dir = "results/" + spec.name;
  problems.throw_if_any();
  return spec;
}

StudySpec load_study_spec(const std::string& path, const std::string& base_config_override,
                          const std::vector<std::string>& spec_overrides) {
  return parse_study_spec(read_text_file(path, "the study spec"), path, fs::path(path).parent_path().string(),
                          base_config_override, spec_overrides);
}

}  // namespace t5scale
