// The run config's loading (YAML), --set overrides, YAML output, and the key lookup and checks built on the
// registry's entries.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "config/config_registry.h"
#include "config/config_registry_internal.h"
#include "config/yaml_node.h"
#include "core/check.h"
#include "core/nearest_word.h"
#include "core/text_file.h"

namespace t5scale {

using namespace config_internal;

namespace {

const Entry* find_entry(const std::string& key) {
  for (const Entry& e : registry()) {
    if (e.info.key == key) return &e;
  }
  return nullptr;
}

bool is_section(const std::string& name) {
  for (const auto& s : config_sections()) {
    if (s.name == name && find_entry(name) == nullptr) return true;
  }
  return false;
}

std::string unknown_key_message(const std::string& key) {
  const std::string suggestion = suggest_config_key(key);
  return msg("unknown key '", key, "'", suggestion.empty() ? "" : " (did you mean '" + suggestion + "'?)");
}

// "<source>:<line>: " for messages about a node.
std::string where(const std::string& source, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return source + ": ";
  return msg(source, ":", mark.line + 1, ": ");
}

// One key's value from YAML; appends "<source>:<line>: <key>: <reason>" on failure, with the key's line (a
// missing value has no line of its own).
void set_from_node(RunConfig& config, const Entry& entry, const YAML::Node& key, const YAML::Node& value,
                   const std::string& source, std::vector<std::string>& errors,
                   std::set<std::string>& keys_not_loaded) {
  std::string text;
  if (value.IsScalar()) {
    text = value.Scalar();
  } else if (value.IsNull() && entry.info.type == ConfigValueType::kString) {
    text = "";  // "study:" with nothing after it
  } else {
    errors.push_back(msg(where(source, key), entry.info.key, ": expected ",
                         entry.info.type == ConfigValueType::kEnum ? "one of " + entry.info.allowed
                                                                   : "a value of type " + type_name(entry.info.type),
                         ", got ", yaml_node_kind(value)));
    keys_not_loaded.insert(entry.info.key);
    return;
  }
  if (const Reason reason = entry.set(config, text)) {
    errors.push_back(msg(where(source, key), entry.info.key, ": ", *reason));
    keys_not_loaded.insert(entry.info.key);
  }
}

std::string trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

[[noreturn]] void throw_load_errors(const std::string& source, const std::vector<std::string>& errors) {
  if (errors.size() == 1) throw Error(errors[0]);
  throw Error(msg(source, ": ", errors.size(), " problems in the run config:\n  ", join(errors, "\n  ")));
}

}  // namespace

// ---- Public functions of the registry ----

const std::vector<ConfigKeyInfo>& config_keys() {
  static const std::vector<ConfigKeyInfo> keys = [] {
    std::vector<ConfigKeyInfo> out;
    for (const Entry& e : registry()) out.push_back(e.info);
    return out;
  }();
  return keys;
}

const std::vector<ConfigSectionInfo>& config_sections() {
  static const std::vector<ConfigSectionInfo> sections = {
      {"run", "Identity of the run and where its files go."},
      {"model", "Model shape and initialisation."},
      {"data", "Training and evaluation data, batching by length."},
      {"parallel", "Tensor and data parallelism, memory savers, collectives."},
      {"precision", "Numeric precision (a key of its own at the top level)."},
      {"train", "Length of the run, batch sizes, frozen parameters."},
      {"optimizer", "AdamW or Adafactor and their hyperparameters."},
      {"lr_schedule", "Learning-rate warmup and decay, step for step as Hugging Face's schedules."},
      {"lr_scaling", "Learning rate as a function of the global batch."},
      {"eval", "Evaluation during and after training, and the evaluation-only mode."},
      {"early_stopping", "Stopping when an evaluation metric stops improving."},
      {"checkpoint", "Checkpoints and resumption after preemption."},
      {"export", "Export of the final model."},
      {"telemetry", "Run file flushing, energy meters, MFU."},
      {"cost", "Inputs of the cost and carbon figures."},
  };
  return sections;
}

std::optional<ConfigKeyInfo> find_config_key(const std::string& key) {
  const Entry* e = find_entry(key);
  if (e == nullptr) return std::nullopt;
  return e->info;
}


namespace {

// The names the Hugging Face Trainer (TrainingArguments), Megatron-LM and DeepSpeed give to what a key here sets:
// what a user coming from them types first, matched by the unknown key's last part ("optimizer.learning_rate"). The
// names that are a key's own last part here (weight_decay, max_grad_norm, output_dir) need no entry.
const std::vector<std::pair<std::string, std::string>>& names_elsewhere() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"learning_rate", "optimizer.lr"},
      {"adam_beta1", "optimizer.beta1"},
      {"adam_beta2", "optimizer.beta2"},
      {"adam_epsilon", "optimizer.eps"},
      {"adam_eps", "optimizer.eps"},
      {"optim", "optimizer.name"},
      {"clip_grad", "train.max_grad_norm"},
      {"num_train_epochs", "train.epochs"},
      {"train_iters", "train.max_steps"},
      {"per_device_train_batch_size", "train.micro_batch"},
      {"micro_batch_size", "train.micro_batch"},
      {"global_batch_size", "train.global_batch"},
      {"train_batch_size", "train.global_batch"},
      {"gradient_accumulation_steps", "train.grad_accumulation"},
      {"logging_steps", "train.log_every"},
      {"lr_scheduler_type", "lr_schedule.decay"},
      {"lr_decay_style", "lr_schedule.decay"},
      {"lr_warmup_iters", "lr_schedule.warmup_steps"},
      {"eval_steps", "eval.every_steps"},
      {"eval_interval", "eval.every_steps"},
      {"per_device_eval_batch_size", "eval.batch_size"},
      {"predict_with_generate", "eval.generate"},
      {"generation_max_length", "eval.max_new_tokens"},
      {"save_steps", "checkpoint.every_steps"},
      {"save_interval", "checkpoint.every_steps"},
      {"save_total_limit", "checkpoint.keep_last"},
      {"resume_from_checkpoint", "checkpoint.resume"},
      {"run_name", "run.name"},
      {"model_name_or_path", "model.init_from"},
      {"tensor_model_parallel_size", "parallel.tp"},
      {"gradient_checkpointing", "parallel.activation_checkpointing"},
      {"recompute_granularity", "parallel.activation_checkpointing"},
      {"bf16", "precision"},
      {"fp16", "precision"},
  };
  return names;
}

}  // namespace

std::string suggest_config_key(const std::string& unknown) {
  // A known key in the wrong section ("optimizer.warmup_steps", "max_steps" at the top level) is found by its leaf.
  const std::string leaf = split_key(unknown).second;
  for (const auto& [name, key] : names_elsewhere()) {
    if (leaf == name && key != unknown) return key;
  }
  for (const Entry& e : registry()) {
    if (split_key(e.info.key).second == leaf && e.info.key != unknown) return e.info.key;
  }
  std::vector<std::string> candidates;
  for (const Entry& e : registry()) candidates.push_back(e.info.key);
  for (const auto& s : config_sections()) candidates.push_back(s.name);
  return nearest_word(unknown, candidates, std::max<size_t>(2, unknown.size() / 4));
}

std::string config_value_text(const RunConfig& config, const std::string& key) {
  const Entry* e = find_entry(key);
  if (e == nullptr) throw Error(unknown_key_message(key));
  return e->text(config);
}

void set_config_value(RunConfig& config, const std::string& key, const std::string& value_text) {
  const Entry* e = find_entry(key);
  if (e == nullptr) {
    if (is_section(key)) {
      std::vector<std::string> keys;
      for (const Entry& entry : registry()) {
        if (entry.info.section == key) keys.push_back(entry.info.key);
      }
      throw Error(msg("'", key, "' is a section; set one of its keys: ", join(keys, ", ")));
    }
    throw Error(unknown_key_message(key));
  }
  if (const Reason reason = e->set(config, value_text)) throw Error(msg(key, ": ", *reason));
}

std::vector<ConfigError> check_key_ranges(const RunConfig& config) {
  std::vector<ConfigError> errors;
  for (const Entry& e : registry()) {
    if (const Reason reason = e.check(config)) errors.push_back({e.info.key, *reason});
  }
  return errors;
}

std::vector<ConfigChange> config_changes(const RunConfig& before, const RunConfig& after) {
  std::vector<ConfigChange> changes;
  for (const ConfigKeyInfo& info : config_keys()) {
    const std::string was = config_value_text(before, info.key), now = config_value_text(after, info.key);
    if (was != now) changes.push_back({info.key, was, now, config_change_needs_permission(info.key)});
  }
  return changes;
}

bool config_change_needs_permission(const std::string& key) {
  static const std::vector<std::string> free_sections = {"parallel.", "eval.",      "early_stopping.", "checkpoint.",
                                                          "telemetry.", "cost.",     "export."};
  // train.micro_batch and grad_accumulation split the global batch over the grid: what they change in the data
  // order is the global batch, which the resuming job compares as resolved (on another grid it may stay the same).
  static const std::vector<std::string> free_keys = {"run.name",         "run.study",         "run.output_dir",
                                                      "run.planned_world_size", "train.log_every", "train.log_every_s",
                                                      "train.micro_batch",
                                                      "train.grad_accumulation"};
  for (const auto& section : free_sections) {
    if (key.rfind(section, 0) == 0) return false;
  }
  return std::find(free_keys.begin(), free_keys.end(), key) == free_keys.end();
}

bool operator==(const RunConfig& a, const RunConfig& b) {
  for (const Entry& e : registry()) {
    if (!e.equal(a, b)) return false;
  }
  return true;
}

// ---- Loading, overrides, YAML output ----

namespace {

// The YAML text's keys into `config`; every problem appended to `errors`, and the keys whose values did not load
// (wrong type, unknown enum name) to `keys_not_loaded`. A YAML syntax error or a root that is not a mapping throws:
// nothing of such a file can be read.
void read_run_config(const std::string& yaml_text, const std::string& source, RunConfig& config,
                     std::vector<std::string>& errors, std::set<std::string>& keys_not_loaded) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw Error(msg(source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg));
  }
  if (root.IsNull()) return;  // an empty file: every default
  if (!root.IsMap()) {
    throw Error(msg(where(source, root), "a run config is a mapping of sections (run:, model:, train:, ...), got ",
                    yaml_node_kind(root)));
  }
  std::set<std::string> seen;
  for (const auto& top : root) {
    if (!top.first.IsScalar()) {
      errors.push_back(msg(where(source, top.first), "a key must be a plain name, got ", yaml_node_kind(top.first)));
      continue;
    }
    const std::string name = top.first.Scalar();
    if (!seen.insert(name).second) {
      errors.push_back(msg(where(source, top.first), name, ": duplicate key"));
      continue;
    }
    if (const Entry* entry = find_entry(name)) {  // a top-level key (precision)
      set_from_node(config, *entry, top.first, top.second, source, errors, keys_not_loaded);
      continue;
    }
    if (!is_section(name)) {
      errors.push_back(where(source, top.first) + unknown_key_message(name));
      continue;
    }
    if (top.second.IsNull()) continue;  // "train:" with no keys
    if (!top.second.IsMap()) {
      errors.push_back(msg(where(source, top.second), name, ": a section holds keys (", name,
                           ": {key: value, ...}), got ", yaml_node_kind(top.second)));
      continue;
    }
    for (const auto& item : top.second) {
      if (!item.first.IsScalar()) {
        errors.push_back(
            msg(where(source, item.first), name, ": a key must be a plain name, got ", yaml_node_kind(item.first)));
        continue;
      }
      const std::string key = name + "." + item.first.Scalar();
      if (!seen.insert(key).second) {
        errors.push_back(msg(where(source, item.first), key, ": duplicate key"));
        continue;
      }
      const Entry* entry = find_entry(key);
      if (entry == nullptr) {
        errors.push_back(where(source, item.first) + unknown_key_message(key));
        continue;
      }
      set_from_node(config, *entry, item.first, item.second, source, errors, keys_not_loaded);
    }
  }
}

// Whether a validate() error concerns a key that did not load: at that key, or naming it in its reason. Such a key
// holds its default, not what the user wrote, so a check on it would report a problem the user does not have.
bool concerns_any(const ConfigError& error, const std::set<std::string>& keys) {
  for (const std::string& key : keys) {
    if (error.key == key || error.message.find(key) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

RunConfig parse_run_config(const std::string& yaml_text, const std::string& source) {
  RunConfig config;
  std::vector<std::string> errors;
  std::set<std::string> keys_not_loaded;
  read_run_config(yaml_text, source, config, errors, keys_not_loaded);
  if (!errors.empty()) {
    // The keys that loaded are range-checked too, so that one type error does not hide the file's other problems
    // (a key that did not load keeps its default, which passes; checks across keys wait for --set overrides:
    // load_run_config(path, overrides) makes them).
    for (const ConfigError& e : check_key_ranges(config)) {
      if (!concerns_any(e, keys_not_loaded)) errors.push_back(msg(source, ": ", e.text()));
    }
    throw_load_errors(source, errors);
  }
  return config;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides,
                          const std::function<void(RunConfig&)>& complete,
                          const std::function<std::vector<ConfigError>(const RunConfig&)>& more_checks) {
  const std::string source = path.empty() ? "the default config" : path;
  RunConfig config;
  std::vector<std::string> errors;
  std::set<std::string> keys_not_loaded;
  if (!path.empty()) read_run_config(read_text_file(path, "the run config"), path, config, errors, keys_not_loaded);
  for (const std::string& assignment : overrides) {
    try {
      apply_override(config, assignment);
      keys_not_loaded.erase(trim(assignment.substr(0, assignment.find('='))));  // set again, now as typed
    } catch (const Error& e) {
      errors.push_back(e.what());
      const size_t eq = assignment.find('=');
      if (eq != std::string::npos) keys_not_loaded.insert(trim(assignment.substr(0, eq)));
    }
  }
  if (complete) complete(config);
  std::vector<ConfigError> invalid = validate(config);
  if (more_checks) {
    for (ConfigError& e : more_checks(config)) {
      const bool listed = std::any_of(invalid.begin(), invalid.end(), [&](const ConfigError& x) { return x.text() == e.text(); });
      if (!listed) invalid.push_back(std::move(e));
    }
  }
  if (errors.empty()) {
    throw_if_errors(invalid, source);
    return config;
  }
  // Every problem in one pass: what did not load, then every check (per key and across keys) on what did.
  for (const ConfigError& e : invalid) {
    if (!concerns_any(e, keys_not_loaded)) errors.push_back(msg(source, ": ", e.text()));
  }
  throw_load_errors(source, errors);
}

RunConfig load_run_config(const std::string& path) {
  return parse_run_config(read_text_file(path, "the run config"), path);
}

namespace {

// The value of `--set key=value`: the text as typed, or unquoted when the whole of it is quoted YAML.
std::string override_value(const std::string& raw) {
  const std::string value = trim(raw);
  if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front()) {
    try {
      const YAML::Node node = YAML::Load(value);
      if (node.IsScalar()) return node.Scalar();
    } catch (const YAML::Exception& e) {
      throw Error(msg("the quoted value ", value, " is not a valid YAML string: ", e.msg));
    }
  }
  return value;
}

}  // namespace

void apply_override(RunConfig& config, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  try {
    if (eq == std::string::npos) throw Error("expected section.key=value");
    set_config_value(config, trim(assignment.substr(0, eq)), override_value(assignment.substr(eq + 1)));
  } catch (const Error& e) {
    throw Error(msg("--set ", assignment, ": ", e.what()));
  }
}

void apply_overrides(RunConfig& config, const std::vector<std::string>& assignments) {
  std::vector<std::string> errors;
  for (const auto& assignment : assignments) {
    try {
      apply_override(config, assignment);
    } catch (const Error& e) {
      errors.push_back(e.what());
    }
  }
  if (!errors.empty()) throw_load_errors("--set", errors);
}

std::string to_yaml(const RunConfig& config) {
  std::string out;
  for (const auto& section : config_sections()) {
    if (const Entry* top = find_entry(section.name)) {
      out += section.name + ": " + top->yaml(config) + "\n";
      continue;
    }
    out += section.name + ":\n";
    for (const Entry& e : registry()) {
      if (e.info.section == section.name) out += "  " + split_key(e.info.key).second + ": " + e.yaml(config) + "\n";
    }
  }
  return out;
}

}  // namespace t5scale
