#include "base_test_support.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace t5scale::testing {

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  const char* base = std::getenv("TMPDIR");
  path_ = std::filesystem::path(base ? base : "/tmp") /
          ("t5scale-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace t5scale::testing
