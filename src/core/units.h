// Memory sizes as users write them (GiB, in configs and on the command line) and as the code counts them (bytes).
#pragma once

#include <cstdint>

namespace t5scale {

inline constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

inline int64_t gib_to_bytes(double gib) { return static_cast<int64_t>(gib * kBytesPerGiB); }
inline double bytes_to_gib(double bytes) { return bytes / kBytesPerGiB; }

}  // namespace t5scale
