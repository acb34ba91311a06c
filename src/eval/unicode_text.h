// The few pieces of Python's str behaviour that the generation metrics depend on, for UTF-8 text: decoding,
// str.lower(), str.isalnum() (re's \b word characters) and str.isspace(). rouge-score and the SQuAD scripts run
// on Python strings, so matching their scores on non-ASCII text needs these exactly; the character data comes
// from the reference Python (unicode_tables.cpp, Unicode unicode_version()).
#pragma once

#include <string>
#include <string_view>

namespace t5scale {

// Code points of UTF-8 `text`. Invalid bytes never throw: each maximal invalid subsequence becomes U+FFFD, as
// Python's bytes.decode("utf-8", "replace") does (overlong forms, surrogates and values past U+10FFFF included).
std::u32string decode_utf8(std::string_view text);
std::string encode_utf8(std::u32string_view text);

// Python's str.lower(): full lowercase mapping (U+0130 becomes "i" + U+0307) with the final-sigma rule for
// U+03A3 (lowercased to U+03C2 after a cased letter and not before one, case-ignorable characters skipped).
std::u32string python_lower(std::u32string_view text);

bool python_isalnum(char32_t c);  // str.isalnum() of one character
bool python_isspace(char32_t c);  // str.isspace() of one character: what str.split() splits on

// The Unicode version of the character data ("14.0.0" for Python 3.11).
const char* unicode_version();

}  // namespace t5scale
