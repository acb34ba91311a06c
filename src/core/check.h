// Check macros for t5scale. A failed check throws t5scale::Error with the expression, the file and line,
// and the message; the program's top level (apps/) turns an Error on any rank into a job-wide abort.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace t5scale {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void append_all(std::ostringstream& out, const T& first, const Rest&... rest) {
  out << first;
  append_all(out, rest...);
}
template <typename... Args>
[[noreturn]] void fail_check(const char* expression, const char* file, int line, const Args&... args) {
  std::ostringstream out;
  append_all(out, args...);
  out << " [check '" << expression << "' failed at " << file << ":" << line << "]";
  throw Error(out.str());
}
}  // namespace detail

// Builds a message from any streamable pieces: t5scale::msg("d_ff ", d_ff, " is not divisible by tp ", tp).
template <typename... Args>
std::string msg(const Args&... args) {
  std::ostringstream out;
  detail::append_all(out, args...);
  return out.str();
}

// "a, b, c": the items in order with `separator` between them.
inline std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

}  // namespace t5scale

// T5S_CHECK(tp > 0, "tp must be positive, got ", tp);
#define T5S_CHECK(condition, ...)                                                   \
  do {                                                                              \
    if (!(condition)) {                                                             \
      ::t5scale::detail::fail_check(#condition, __FILE__, __LINE__, ##__VA_ARGS__); \
    }                                                                               \
  } while (0)

// T5S_CHECK_DIVISIBLE(d_ff, tp) -> "d_ff 10240 is not divisible by tp 3"
#define T5S_CHECK_DIVISIBLE(numerator, denominator)                                              \
  T5S_CHECK((denominator) > 0 && (numerator) % (denominator) == 0, #numerator " ", (numerator), \
            " is not divisible by " #denominator " ", (denominator))
