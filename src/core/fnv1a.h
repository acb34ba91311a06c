// FNV-1a, 64 bits, over bytes: a hash that is the same on every rank, build and platform (std::hash promises none
// of that), for seeds drawn from names, checksums of files and digests compared between ranks.
#pragma once

#include <cstdint>
#include <string_view>

namespace t5scale {

inline uint64_t fnv1a_64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const unsigned char c : bytes) hash = (hash ^ c) * 0x100000001b3ULL;
  return hash;
}

}  // namespace t5scale
