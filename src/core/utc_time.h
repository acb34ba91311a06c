// Wall-clock time stamps in the one format every file of a run uses (run file, study records, benchmark rows).
#pragma once

#include <chrono>
#include <string>

namespace t5scale {

// ISO 8601 in UTC, to the second: "2026-11-22T10:15:30Z".
std::string utc_iso_time(std::chrono::system_clock::time_point time);
std::string utc_iso_time();

}  // namespace t5scale
