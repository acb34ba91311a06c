// What every program's command line needs: words read one at a time, flags with their values ("--flag value" or
// "--flag=value"), numbers parsed whole, NAME=VALUE pairs, and a main that turns an exception into one line on
// stderr and an exit code. t5scale-train, -bench, -ckpt, -prep and -study all read their arguments with it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/number_text.h"

namespace t5scale {

// A command line that cannot be used as given: the programs exit with 2 and the message.
struct UsageError : Error {
  using Error::Error;
};

// Walks argv[first..]: next() gives each word in turn; for "--flag=value" the word is "--flag" and value() the
// inline part, else value() takes the next word. Every error is a UsageError naming the flag.
class CommandLine {
 public:
  CommandLine(int argc, char** argv, int first = 1) : argc_(argc), argv_(argv), index_(first - 1) {}
  // With the program's usage text: --help and -h print it and end the program (exit 0).
  CommandLine(int argc, char** argv, const char* usage, int first = 1)
      : argc_(argc), argv_(argv), index_(first - 1), usage_(usage) {}

  bool next() {
    if (has_inline_) throw UsageError(msg(word_, " takes no value"));
    if (index_ + 1 >= argc_) return false;
    word_ = argv_[++index_];
    has_inline_ = false;
    if (const size_t equals = word_.find('='); word_.rfind("--", 0) == 0 && equals != std::string::npos) {
      inline_value_ = word_.substr(equals + 1);
      word_ = word_.substr(0, equals);
      has_inline_ = true;
    }
    if (usage_ != nullptr && (word_ == "--help" || word_ == "-h")) {
      std::fputs(usage_, stdout);
      std::exit(0);
    }
    return true;
  }
  const std::string& word() const { return word_; }
  bool is_flag() const { return word_.size() > 1 && word_[0] == '-'; }

  std::string value() {
    if (has_inline_) {
      has_inline_ = false;
      return inline_value_;
    }
    if (index_ + 1 >= argc_) throw UsageError(msg(word_, ": needs a value"));
    return argv_[++index_];
  }
  int64_t integer() { return integer_in(value()); }
  double number() { return number_in(value()); }
  // `text` (a value read already, or a part of one) as a whole integer or number, or an error naming the flag.
  int64_t integer_in(const std::string& text) const {
    if (const std::optional<int64_t> parsed = parse_integer(text)) return *parsed;
    throw UsageError(msg(word_, ": '", text, "' is not an integer"));
  }
  double number_in(const std::string& text) const {
    if (const std::optional<double> parsed = parse_finite_number(text)) return *parsed;
    throw UsageError(msg(word_, ": '", text, "' is not a number"));
  }
  int positive_int() {
    const std::string text = value();
    const std::optional<int64_t> parsed = parse_integer(text);
    if (!parsed || *parsed < 1 || *parsed > INT32_MAX) {
      throw UsageError(msg(word_, ": '", text, "' is not a positive integer"));
    }
    return static_cast<int>(*parsed);
  }
  // "NAME=VALUE" as {NAME, VALUE}, both non-empty.
  std::pair<std::string, std::string> name_value() {
    const std::string text = value();
    const size_t equals = text.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == text.size()) {
      throw UsageError(msg(word_, ": expected NAME=VALUE, got '", text, "'"));
    }
    return {text.substr(0, equals), text.substr(equals + 1)};
  }

 private:
  int argc_;
  char** argv_;
  int index_;
  const char* usage_ = nullptr;
  std::string word_, inline_value_;
  bool has_inline_ = false;
};

// With T5SCALE_DEBUG set (to anything but 0), the internal side of an error (debug_text) on a line of its own.
inline void print_debug_text(const char* program, const std::exception& e) {
  const char* debug = std::getenv("T5SCALE_DEBUG");
  const std::string text = debug_text(e);
  if (debug == nullptr || std::string(debug) == "0" || text.empty()) return;
  std::fprintf(stderr, "%s: debug: %s\n", program, text.c_str());
}

// run(argc, argv), with any exception printed as "<program>: error: <message>" (its check on a debug line with
// T5SCALE_DEBUG) and exit code `error_code`.
template <typename Run>
int guarded_main(const char* program, int argc, char** argv, Run run, int error_code = 2) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, user_message(e).c_str());
    print_debug_text(program, e);
    return error_code;
  }
}

}  // namespace t5scale
