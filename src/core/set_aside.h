// Where a file or folder that must not be overwritten is kept when something new takes its place: beside it, as
// <path>.<why>.<UTC stamp>[.<n>], a name no two calls share. For run files, `why` says what the analysis does with
// it: world<N> (an earlier attempt of the run on another grid: joined), unreadable (listed, not joined), previous
// (a run started over: not part of the new run, not read).
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>

#include "core/check.h"
#include "core/utc_time.h"

namespace t5scale {

inline std::string set_aside_name(const std::string& path, const std::string& why) {
  std::string stamp = utc_iso_time();
  stamp.erase(std::remove_if(stamp.begin(), stamp.end(), [](char c) { return c == '-' || c == ':'; }), stamp.end());
  std::string candidate = path + "." + why + "." + stamp;
  for (int i = 1; std::filesystem::exists(candidate); ++i) {
    candidate = path + "." + why + "." + stamp + "." + std::to_string(i);
  }
  return candidate;
}

// Renames `path` (a file or a folder) to set_aside_name(path, why); returns the new name. Throws naming both.
inline std::string set_aside(const std::string& path, const std::string& why) {
  const std::string aside = set_aside_name(path, why);
  std::error_code error;
  std::filesystem::rename(path, aside, error);
  if (error) throw Error(msg("cannot keep '", path, "' aside as '", aside, "': ", error.message()));
  return aside;
}

}  // namespace t5scale
