// Memory sizes as users write them (GiB, in configs and on the command line) and as the code counts them (bytes).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace t5scale {

inline constexpr double kBytesPerMiB = 1024.0 * 1024.0;
inline constexpr double kBytesPerGiB = 1024.0 * kBytesPerMiB;

inline int64_t gib_to_bytes(double gib) { return static_cast<int64_t>(gib * kBytesPerGiB); }
inline int64_t mib_to_bytes(double mib) { return static_cast<int64_t>(mib * kBytesPerMiB); }
inline double bytes_to_gib(double bytes) { return bytes / kBytesPerGiB; }

// A size in text, the two ways the programs print one; "n/a" for NaN (not measured).
// gib_text: a measured or predicted figure in GiB to the hundredth, "1.25 GiB" (logs, cards, comparisons).
inline std::string gib_text(double bytes) {
  if (!std::isfinite(bytes)) return "n/a";
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", bytes_to_gib(bytes));
  return text;
}
// memory_text: a size in a table of sizes that span MiB to TiB, "45 MiB" below a GiB and "12.3 GiB" above.
inline std::string memory_text(double bytes) {
  if (!std::isfinite(bytes)) return "n/a";
  char text[32];
  const double mib = bytes / kBytesPerMiB;
  if (mib < 1024.0) {
    std::snprintf(text, sizeof(text), "%.0f MiB", mib);
  } else {
    std::snprintf(text, sizeof(text), "%.1f GiB", bytes_to_gib(bytes));
  }
  return text;
}

}  // namespace t5scale
