#include "io/checkpoint_manifest.h"

#include <cstdio>

#include "core/check.h"
#include "core/file_names.h"

namespace t5scale {

std::string checkpoint_shard_name(int tp_rank, int dp_rank) {
  return msg("rank_tp", tp_rank, "_dp", dp_rank, ".safetensors");
}

std::vector<std::string> manifest_problems(const nlohmann::json& manifest) {
  std::vector<std::string> problems;
  auto is_count = [](const nlohmann::json& value, int64_t least) {
    return value.is_number_integer() && value.get<int64_t>() >= least;
  };
  if (!is_count(manifest.value("step", nlohmann::json()), 0)) problems.push_back("'step' is not a step number");
  int64_t tp = 0, dp = 0;
  const nlohmann::json identity = manifest.value("identity", nlohmann::json());
  if (!identity.is_object()) {
    problems.push_back("'identity' is not an object");
  } else {
    for (const char* key : {"tp", "dp"}) {
      if (!is_count(identity.value(key, nlohmann::json()), 1)) {
        problems.push_back(msg("'identity.", key, "' is not a positive whole number"));
      }
    }
    if (!identity.value("model_name", nlohmann::json()).is_string()) {
      problems.push_back("'identity.model_name' is not a text");
    }
    if (!is_count(identity.value("parameter_count", nlohmann::json()), 0)) {
      problems.push_back("'identity.parameter_count' is not a count");
    }
    const nlohmann::json model_config = identity.value("model_config", nlohmann::json());
    if (!model_config.is_null() && !model_config.is_object()) {
      problems.push_back("'identity.model_config' is neither null nor an object");
    }
    if (is_count(identity.value("tp", nlohmann::json()), 1)) tp = identity["tp"].get<int64_t>();
    if (is_count(identity.value("dp", nlohmann::json()), 1)) dp = identity["dp"].get<int64_t>();
  }
  const nlohmann::json run_state = manifest.value("run_state", nlohmann::json());
  if (!run_state.is_null() && !run_state.is_object()) problems.push_back("'run_state' is neither null nor an object");
  const nlohmann::json layout = manifest.value("optimizer_layout", nlohmann::json());
  if (!layout.is_null() && !layout.is_object()) problems.push_back("'optimizer_layout' is neither null nor an object");
  const nlohmann::json files = manifest.value("files", nlohmann::json());
  if (!files.is_object() || files.empty()) {
    problems.push_back("'files' is not an object naming the shard files");
    return problems;
  }
  for (const auto& [name, entry] : files.items()) {
    const std::string not_plain = plain_file_name_problem(name);
    if (!not_plain.empty()) {
      problems.push_back(msg("'files' names '", name, "', which is not a plain file name (", not_plain,
                             "); nothing outside the step folder is opened"));
      continue;
    }
    int t = -1, d = -1;
    const bool of_the_grid = std::sscanf(name.c_str(), "rank_tp%d_dp%d.safetensors", &t, &d) == 2 && t >= 0 &&
                             d >= 0 && t < tp && d < dp && name == checkpoint_shard_name(t, d);
    if (!of_the_grid) {
      problems.push_back(msg("'files' names '", name, "', which is not the shard of a rank of its grid (tp ", tp,
                             " x dp ", dp, ": rank_tp<t>_dp<d>.safetensors)"));
    }
    const bool has_bytes = entry.is_object() && is_count(entry.value("bytes", nlohmann::json()), 0);
    const nlohmann::json checksum = entry.is_object() ? entry.value("checksum", nlohmann::json()) : nlohmann::json();
    const bool has_checksum = checksum.is_string() && checksum.get<std::string>().size() == 16 &&
                              checksum.get<std::string>().find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!has_bytes || !has_checksum) {
      problems.push_back(msg("'files.", name, "' is not {\"bytes\": <size>, \"checksum\": <16 hex digits>}"));
    }
  }
  return problems;
}

nlohmann::json parse_checkpoint_manifest(const std::string& text, const std::string& path, int64_t folder_step) {
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(msg(path, " is not valid JSON: ", e.what()));
  }
  T5S_CHECK(manifest.is_object() && manifest.value("format", nlohmann::json()) == kCheckpointFormat, path,
            " is not a t5scale checkpoint manifest (no \"format\": \"", kCheckpointFormat, "\")");
  const nlohmann::json version_field = manifest.value("format_version", nlohmann::json());
  T5S_CHECK(version_field.is_number_integer(), path, ": 'format_version' is not a whole number");
  const int64_t version = version_field.get<int64_t>();
  T5S_CHECK(version >= kOldestReadableCheckpointFormatVersion && version <= kCheckpointFormatVersion, path,
            ": format_version ", version, " (this build reads ", kOldestReadableCheckpointFormatVersion, " to ",
            kCheckpointFormatVersion, ")");
  const std::vector<std::string> problems = manifest_problems(manifest);
  if (!problems.empty()) throw Error(msg(path, " is damaged:\n    ", join(problems, "\n    ")));
  T5S_CHECK(folder_step < 0 || folder_step == manifest.at("step").get<int64_t>(), path, " says step ",
            manifest.at("step").get<int64_t>(), ", its folder is step ", folder_step);
  return manifest;
}

}  // namespace t5scale
