// Test helpers that need no LibTorch: temporary folders and the message of an expected error. The LibTorch
// helpers (tensor comparison) are in test_support.h, which includes this header.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <initializer_list>
#include <string>

namespace t5scale::testing {

// A fresh folder under the test temp dir, removed with the object.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The error message of `fn` (which must throw t5scale::Error); fails the test if it does not throw.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error, none was thrown";
  return "";
}

// Fails for each of `parts` that `message` does not contain, naming it and the message.
void expect_mentions(const std::string& message, std::initializer_list<std::string> parts);

// The whole file at `path`, byte for byte ("" if it cannot be read).
std::string read_bytes(const std::string& path);

// Fails, naming the first line that differs and the build target that regenerates it, when the checked-in file at
// `path` (relative to the source tree) is not `generated`.
void expect_checked_in_file_current(const std::string& path, const std::string& generated,
                                    const std::string& update_target);

}  // namespace t5scale::testing
