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

namespace t5scale {

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
      "gpu_request", "gres_type", "cpus_per_task", "launcher", "mpi", "signal_s", "extra_sbatch", "env", "modules",
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

int line_of(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? 0 : mark.line + 1;
}

bool parse_int(const std::string& text, int64_t& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') return false;
  value = v;
  return true;
}

bool parse_double(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0') return false;
  value = v;
  return true;
}

// Collects the problems of one spec file, each "<source>:<line>: <text>".
class Problems {
 public:
  explicit Problems(std::string source) : source_(std::move(source)) {}
  void add(const YAML::Node& node, const std::string& text) { add(line_of(node), text); }
  void add(int line, const std::string& text) {
    problems_.push_back(line > 0 ? msg(source_, ":", line, ": ", text) : msg(source_, ": ", text));
  }
  void throw_if_any() const {
    if (problems_.empty()) return;
    throw Error(msg(source_, ": invalid study spec:\n  ", join(problems_, "\n  ")));
  }

 private:
  std::string source_;
  std::vector<std::string> problems_;
};

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

StudySpec parse_study_spec(const std::string& yaml_text, const std::string& source, const std::string& base_dir,
                           const std::string& base_config_override) {
  const YAML::Node root = load_yaml(yaml_text, source);
  Problems problems(source);
  StudySpec spec;
  spec.source = source;
  if (!root.IsMap()) {
    problems.add(root,
                 msg("a study spec is a mapping (study:, base:, axes:, slurm:, ...), got ", yaml_node_kind(root)));
    problems.throw_if_any();
  }
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

StudySpec load_study_spec(const std::string& path, const std::string& base_config_override) {
  return parse_study_spec(read_text_file(path, "the study spec"), path, fs::path(path).parent_path().string(),
                          base_config_override);
}

// ---- Expansion ----

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
