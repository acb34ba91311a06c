// The key registry of the run config: one entry per key (path, type, default, one-line doc, allowed values, the
// RunConfig member), in the schema's order. Loading, --set, to_yaml, the per-key checks and the Markdown reference
// are all driven from it (run_config.h is the interface most code wants); the functions here let other programs
// address keys by name: t5scale-study sets its axes with set_config_value and prints them with config_value_text.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/run_config.h"

namespace t5scale {

enum class ConfigValueType { kInt, kFloat, kBool, kString, kEnum };
std::string type_name(ConfigValueType type);  // "int", "float", "bool", "string", "enum"

struct ConfigKeyInfo {
  std::string key;      // "train.max_steps"; a top-level key ("precision") has no section
  std::string section;  // "train"; "" for a top-level key
  ConfigValueType type = ConfigValueType::kString;
  std::string default_text;          // the default as YAML writes it
  std::string allowed;               // "> 0", "[0, 1)", "random, sortish, sequential", "" = any
  std::string doc;                   // one line
  std::vector<std::string> choices;  // enum names
};

// Every key in schema order.
const std::vector<ConfigKeyInfo>& config_keys();
// The section names in schema order, with their one-line docs (a top-level key counts as its own section).
struct ConfigSectionInfo {
  std::string name;
  std::string doc;
};
const std::vector<ConfigSectionInfo>& config_sections();

// Nullopt when `key` is not a key.
std::optional<ConfigKeyInfo> find_config_key(const std::string& key);
// The value of `key` as YAML text (strings unquoted). Throws an Error for an unknown key (with a suggestion).
std::string config_value_text(const RunConfig& config, const std::string& key);
// Sets `key` from the text of a YAML scalar, checking its type (not its range). Throws an Error
// "<key>: <reason>" or "unknown key ... (did you mean ...?)".
void set_config_value(RunConfig& config, const std::string& key, const std::string& value_text);

// The known key (or section) nearest to `unknown` by edit distance, or "" when none is close.
std::string suggest_config_key(const std::string& unknown);

// A key whose value differs between the config a checkpoint was written with and the config of a job resuming it.
struct ConfigChange {
  std::string key, before, after;  // the values as YAML text
  bool needs_permission = false;   // config_change_needs_permission(key)
};
// Every differing key, in schema order.
std::vector<ConfigChange> config_changes(const RunConfig& before, const RunConfig& after);
// Whether changing `key` on resume changes the data order or what the run's record means (the model, the data and
// its order, the batch, the optimizer, the LR plan, the precision, the seed, the step count), so that it needs
// checkpoint.allow_config_change. Where the run writes, how often it evaluates, checkpoints or logs, the grid and
// its memory settings, telemetry and cost inputs may change freely (they are recorded all the same), and so may
// train.micro_batch and train.grad_accumulation, whose effect the caller checks on the resolved global batch.
bool config_change_needs_permission(const std::string& key);

// The per-key checks of the registry (range, allowed values, non-empty), one error per failing key.
std::vector<ConfigError> check_key_ranges(const RunConfig& config);

}  // namespace t5scale
