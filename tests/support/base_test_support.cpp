#include "support/base_test_support.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

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

void expect_mentions(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void expect_checked_in_file_current(const std::string& path, const std::string& generated,
                                    const std::string& update_target) {
  const std::string full_path = std::string(T5SCALE_SOURCE_DIR) + "/" + path;
  std::ifstream in(full_path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "cannot read " << full_path;
  std::stringstream checked_in;
  checked_in << in.rdbuf();
  if (checked_in.str() == generated) return;
  std::istringstream a(checked_in.str()), b(generated);
  std::string line_a, line_b;
  int line = 1;
  while (std::getline(a, line_a) && std::getline(b, line_b) && line_a == line_b) ++line;
  ADD_FAILURE() << path << " is not what the code generates (first difference on line " << line
                << ":\n  file:      " << line_a << "\n  generated: " << line_b
                << ")\nregenerate it with:\n  cmake --build " << T5SCALE_BINARY_DIR << " --target " << update_target;
}

}  // namespace t5scale::testing
