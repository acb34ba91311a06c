// Check macros for t5scale. A failed check throws t5scale::Error with the message, and the expression, file and
// line apart (Error::check(), printed on a debug line); the program's top level (apps/) turns an Error on any rank
// into a job-wide abort.
#pragma once

#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace t5scale {

class Error : public std::runtime_error {
 public:
  // `check`: the internal check that failed ("check 'tp > 0' failed at src/x.cpp:12"), kept apart from the message
  // so that a user reads what went wrong and what to do, and the check text goes to a debug line.
  explicit Error(const std::string& message, std::string check = "")
      : std::runtime_error(message), check_(std::move(check)) {}
  const std::string& check() const { return check_; }

 private:
  std::string check_;
};

// An allocation that failed (host or device memory), reported with what was being allocated; the training job adds
// where it happened and the memory figures.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
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
  std::ostringstream check;
  check << "check '" << expression << "' failed at " << file << ":" << line;
  throw Error(out.str(), check.str());
}
}  // namespace detail

// Builds a message from any streamable pieces: t5scale::msg("d_ff ", d_ff, " is not divisible by tp ", tp).
template <typename... Args>
std::string msg(const Args&... args) {
  std::ostringstream out;
  detail::append_all(out, args...);
  return out.str();
}

// What a user reads of an exception: its message without LibTorch's C++ stack trace, which c10 errors append after
// "Exception raised from".
inline std::string user_message(const std::exception& e) {
  const std::string text = e.what();
  const size_t trace = text.find("\nException raised from ");
  return trace == std::string::npos ? text : text.substr(0, trace);
}

// The internal side of an exception, for a debug line: the failed check of an Error, or LibTorch's stack trace;
// "" when there is none.
inline std::string debug_text(const std::exception& e) {
  if (const auto* error = dynamic_cast<const Error*>(&e)) return error->check();
  const std::string text = e.what();
  const size_t trace = text.find("\nException raised from ");
  return trace == std::string::npos ? "" : text.substr(trace + 1);
}

// "a, b, c": the items in order, as a stream writes them, with `separator` between them.
template <typename Items>
std::string join(const Items& items, const std::string& separator) {
  std::ostringstream out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out << separator;
    out << item;
    first = false;
  }
  return out.str();
}
inline std::string join(const std::vector<std::string>& items, const std::string& separator) {
  return join<std::vector<std::string>>(items, separator);
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
