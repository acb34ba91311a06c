// UTF-8 decoding with Python's "replace" error handling, and str.lower()/isalnum()/isspace() over the generated
// tables.
#include "eval/unicode_text.h"

#include <algorithm>

#include "eval/unicode_tables.h"

namespace t5scale {
namespace {

using unicode_tables::CodePointRange;

constexpr char32_t kReplacementCharacter = 0xFFFD;
constexpr char32_t kCapitalSigma = 0x3A3;
constexpr char32_t kSmallSigma = 0x3C3;
constexpr char32_t kFinalSigma = 0x3C2;
constexpr char32_t kCapitalIWithDot = 0x130;
constexpr char32_t kCombiningDotAbove = 0x307;

bool in_ranges(const CodePointRange* ranges, std::size_t size, char32_t c) {
  const CodePointRange* end = ranges + size;
  // The last range starting at or before c is the only one that can hold it.
  const CodePointRange* after =
      std::upper_bound(ranges, end, c, [](char32_t value, const CodePointRange& r) { return value < r.first; });
  return after != ranges && c <= (after - 1)->last;
}

bool is_case_ignorable(char32_t c) {
  return in_ranges(unicode_tables::kCaseIgnorableRanges, unicode_tables::kCaseIgnorableRanges_size, c);
}
bool is_cased(char32_t c) { return in_ranges(unicode_tables::kCasedRanges, unicode_tables::kCasedRanges_size, c); }

char32_t lower_one(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  const auto* runs = unicode_tables::kLowerRuns;
  const auto* end = runs + unicode_tables::kLowerRuns_size;
  const auto* after =
      std::upper_bound(runs, end, c, [](char32_t value, const unicode_tables::LowerRun& r) { return value < r.first; });
  if (after == runs) return c;
  const auto& run = *(after - 1);
  if (c > run.last || (c - run.first) % static_cast<char32_t>(run.stride) != 0) return c;
  return static_cast<char32_t>(static_cast<int64_t>(c) + run.delta);
}

// CPython's handle_capital_sigma: final form when a cased letter comes before (case-ignorable characters
// skipped) and no cased letter comes after (likewise).
char32_t lower_capital_sigma(std::u32string_view text, std::size_t i) {
  std::size_t j = i;
  while (j > 0 && is_case_ignorable(text[j - 1])) --j;
  bool final_form = j > 0 && is_cased(text[j - 1]);
  if (final_form) {
    std::size_t k = i + 1;
    while (k < text.size() && is_case_ignorable(text[k])) ++k;
    final_form = k == text.size() || !is_cased(text[k]);
  }
  return final_form ? kFinalSigma : kSmallSigma;
}

bool is_continuation(unsigned char b) { return b >= 0x80 && b <= 0xBF; }

}  // namespace

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  std::size_t i = 0;
  const std::size_t n = text.size();
  while (i < n) {
    const auto lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      out.push_back(lead);
      ++i;
      continue;
    }
    // Length and the allowed range of the second byte, which rules out overlong forms, surrogates and code
    // points past U+10FFFF (Unicode's table 3-7, which Python's decoder follows).
    std::size_t length = 0;
    unsigned char second_low = 0x80, second_high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) second_low = 0xA0;
      if (lead == 0xED) second_high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) second_low = 0x90;
      if (lead == 0xF4) second_high = 0x8F;
    }
    if (length == 0) {  // a continuation byte without a lead, C0, C1 or F5..FF
      out.push_back(kReplacementCharacter);
      ++i;
      continue;
    }
    char32_t code_point = lead & (0xFF >> (length + 1));
    std::size_t consumed = 1;
    bool valid = true;
    for (; consumed < length; ++consumed) {
      if (i + consumed >= n) {
        valid = false;
        break;
      }
      const auto b = static_cast<unsigned char>(text[i + consumed]);
      const bool in_range = consumed == 1 ? (b >= second_low && b <= second_high) : is_continuation(b);
      if (!in_range) {
        valid = false;
        break;
      }
      code_point = (code_point << 6) | (b & 0x3F);
    }
    // One replacement character for the maximal invalid subpart; decoding resumes at the offending byte.
    out.push_back(valid ? code_point : kReplacementCharacter);
    i += consumed;
  }
  return out;
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

std::u32string python_lower(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    if (c == kCapitalIWithDot) {
      out.push_back('i');
      out.push_back(kCombiningDotAbove);
    } else if (c == kCapitalSigma) {
      out.push_back(lower_capital_sigma(text, i));
    } else {
      out.push_back(lower_one(c));
    }
  }
  return out;
}

bool python_isalnum(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  return in_ranges(unicode_tables::kAlnumRanges, unicode_tables::kAlnumRanges_size, c);
}

bool python_isspace(char32_t c) {
  return in_ranges(unicode_tables::kSpaceRanges, unicode_tables::kSpaceRanges_size, c);
}

const char* unicode_version() { return unicode_tables::kUnicodeVersion; }

}  // namespace t5scale
