// What every program's command line needs: flags read one at a time with their values, numbers parsed whole, and a
// main that turns an exception into one line on stderr and an exit code.
#pragma once

#include <cstdio>
#include <exception>
#include <string>

#include "core/check.h"

namespace t5scale {

// Walks argv[1..]: next() gives each word in turn; value() the word after the current flag, or an error naming it.
class CommandLine {
 public:
  CommandLine(int argc, char** argv) : argc_(argc), argv_(argv) {}
  bool next() {
    if (index_ + 1 >= argc_) return false;
    word_ = argv_[++index_];
    return true;
  }
  const std::string& word() const { return word_; }
  std::string value() {
    T5S_CHECK(index_ + 1 < argc_, word_, ": needs a value");
    return argv_[++index_];
  }
  int positive_int() {
    const std::string text = value();
    size_t used = 0;
    int parsed = 0;
    try {
      parsed = std::stoi(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    T5S_CHECK(used == text.size() && !text.empty() && parsed >= 1, word_, ": '", text, "' is not a positive integer");
    return parsed;
  }

 private:
  int argc_;
  char** argv_;
  int index_ = 0;
  std::string word_;
};

// run(argc, argv), with any exception printed as "<program>: error: <what>" and exit code `error_code`.
template <typename Run>
int guarded_main(const char* program, int argc, char** argv, Run run, int error_code = 2) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return error_code;
  }
}

}  // namespace t5scale
