#include "config/hf_model_folder.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

#include "core/check.h"

namespace t5scale {

namespace fs = std::filesystem;

namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// A leading "~" as huggingface_hub expands it (os.path.expanduser).
fs::path expand_home(const std::string& path) {
  if (path == "~" || path.rfind("~/", 0) == 0) return environment("HOME") + path.substr(1);
  return path;
}

struct HubCache {
  fs::path path;
  std::string chosen_by;  // the variable that chose it, as the user would write it
};

// huggingface_hub's order: HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
std::optional<HubCache> hub_cache() {
  if (!environment("HF_HUB_CACHE").empty()) return HubCache{expand_home(environment("HF_HUB_CACHE")), "$HF_HUB_CACHE"};
  if (!environment("HF_HOME").empty()) return HubCache{expand_home(environment("HF_HOME")) / "hub", "$HF_HOME/hub"};
  if (!environment("XDG_CACHE_HOME").empty()) {
    return HubCache{expand_home(environment("XDG_CACHE_HOME")) / "huggingface" / "hub",
                    "$XDG_CACHE_HOME/huggingface/hub"};
  }
  if (!environment("HOME").empty()) {
    return HubCache{fs::path(environment("HOME")) / ".cache" / "huggingface" / "hub", "~/.cache/huggingface/hub"};
  }
  return std::nullopt;
}

// A repository id as the Hugging Face hub allows it: "name" or "org/name", each part of letters, digits, '-', '_'
// and '.', starting with a letter or digit, without "--" or "..".
bool is_model_name(const std::string& text) {
  static const std::regex pattern(R"(^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$)");
  return text.size() <= 96 && std::regex_match(text, pattern) && text.find("--") == std::string::npos &&
         text.find("..") == std::string::npos;
}

// "google/t5-v1_1-base" -> "models--google--t5-v1_1-base".
std::string cache_folder_name(const std::string& name) {
  std::string out = "models--";
  for (const char c : name) out += c == '/' ? std::string("--") : std::string(1, c);
  return out;
}

std::string first_line_of(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

// The snapshot of a cached model: refs/main's when it is there, else the only one, else the newest (latest
// modification; ties by name). "" when there is none; `looked` says why.
std::string pick_snapshot(const fs::path& model, std::vector<std::string>& looked) {
  std::error_code ec;
  const fs::path snapshots = model / "snapshots";
  const fs::path main_ref = model / "refs" / "main";
  if (fs::is_regular_file(main_ref, ec)) {
    const std::string commit = first_line_of(main_ref);
    if (!commit.empty() && commit.find('/') == std::string::npos && fs::is_directory(snapshots / commit, ec)) {
      return (snapshots / commit).string();
    }
    looked.push_back(msg(main_ref.string(), " names commit '", commit, "', which is not in ", snapshots.string()));
  }
  std::vector<fs::path> found;
  if (fs::is_directory(snapshots, ec)) {
    for (const auto& entry : fs::directory_iterator(snapshots, ec)) {
      if (entry.is_directory(ec)) found.push_back(entry.path());
    }
  }
  if (found.empty()) {
    looked.push_back(msg(snapshots.string(), " (no snapshot)"));
    return "";
  }
  const auto newest = std::max_element(found.begin(), found.end(), [](const fs::path& a, const fs::path& b) {
    std::error_code error;
    const auto time_a = fs::last_write_time(a, error), time_b = fs::last_write_time(b, error);
    return time_a != time_b ? time_a < time_b : a.filename() < b.filename();
  });
  return newest->string();
}

}  // namespace

HfModelLookup find_hf_model_folder(const std::string& name_or_folder) {
  HfModelLookup lookup;
  std::error_code ec;
  if (fs::is_directory(name_or_folder, ec)) {
    lookup.folder = name_or_folder;
    return lookup;
  }
  const fs::path as_folder = fs::absolute(name_or_folder, ec);
  const bool exists = fs::exists(as_folder, ec);
  lookup.looked.push_back(as_folder.string() + (exists ? " (a file, not a folder)" : " (no such folder)"));
  if (!is_model_name(name_or_folder)) {
    lookup.looked.push_back("not the Hugging Face cache: '" + name_or_folder + "' is not a model name (org/name)");
    return lookup;
  }
  const std::optional<HubCache> cache = hub_cache();
  if (!cache) {
    lookup.looked.push_back("no Hugging Face cache: none of HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME and HOME is set");
    return lookup;
  }
  const fs::path model = cache->path / cache_folder_name(name_or_folder);
  if (!fs::is_directory(model, ec)) {
    lookup.looked.push_back(msg(model.string(), " (no such folder; the cache is ", cache->chosen_by, ")"));
    return lookup;
  }
  lookup.folder = pick_snapshot(model, lookup.looked);
  return lookup;
}

std::string hf_model_not_found(const std::string& name_or_folder, const HfModelLookup& lookup) {
  return msg("'", name_or_folder, "' is neither a folder nor a model in the Hugging Face cache (nothing is "
             "downloaded); looked in: ", join(lookup.looked, "; "),
             ". Download the model where there is network (hf download NAME, or from_pretrained) and copy the cache "
             "here or set HF_HUB_CACHE, or give its folder");
}

std::string resolve_hf_model_folder(const std::string& name_or_folder) {
  const HfModelLookup lookup = find_hf_model_folder(name_or_folder);
  if (lookup.folder.empty()) throw Error(hf_model_not_found(name_or_folder, lookup));
  return lookup.folder;
}

}  // namespace t5scale
