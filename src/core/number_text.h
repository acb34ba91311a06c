// A whole text as an integer or a finite number: the one reading of numbers from config files, study specs, recipes
// and command lines. The whole text must be the number (no blanks, no trailing characters); a leading '+' is
// allowed; infinities, NaN and out-of-range values are not numbers here.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace t5scale {

namespace detail {
template <typename Number>
std::optional<Number> whole_number(const std::string& text) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (first != last && *first == '+') {
    ++first;
    if (first != last && (*first == '+' || *first == '-')) return std::nullopt;  // one sign at most
  }
  if (first == last || (*first == '-' && first + 1 == last)) return std::nullopt;
  Number value{};
  const auto [end, error] = std::from_chars(first, last, value);
  if (error != std::errc() || end != last) return std::nullopt;
  return value;
}
}  // namespace detail

inline std::optional<int64_t> parse_integer(const std::string& text) { return detail::whole_number<int64_t>(text); }

inline std::optional<double> parse_finite_number(const std::string& text) {
  const std::optional<double> value = detail::whole_number<double>(text);
  if (!value || !std::isfinite(*value)) return std::nullopt;
  return value;
}

}  // namespace t5scale
