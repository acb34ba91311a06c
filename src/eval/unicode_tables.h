// Declarations of the generated character tables in unicode_tables.cpp (see make_unicode_tables.py). Only
// unicode_text.cpp reads them; everything else goes through unicode_text.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace t5scale::unicode_tables {

struct CodePointRange {
  char32_t first;
  char32_t last;  // inclusive
};

// Every stride-th code point in [first, last] lowercases to itself + delta.
struct LowerRun {
  char32_t first;
  char32_t last;  // inclusive
  int32_t stride;
  int32_t delta;
};

extern const char kUnicodeVersion[];
extern const LowerRun kLowerRuns[];
extern const std::size_t kLowerRuns_size;
extern const CodePointRange kAlnumRanges[];
extern const std::size_t kAlnumRanges_size;
extern const CodePointRange kSpaceRanges[];
extern const std::size_t kSpaceRanges_size;
extern const CodePointRange kCaseIgnorableRanges[];
extern const std::size_t kCaseIgnorableRanges_size;
extern const CodePointRange kCasedRanges[];
extern const std::size_t kCasedRanges_size;

}  // namespace t5scale::unicode_tables
