// The folder of the running program (/proc/self/exe): where the build and the bundle put the other programs (bin/)
// and, one level up, their lib/.
#pragma once

#include <filesystem>
#include <system_error>

namespace t5scale {

// The current directory where /proc/self/exe cannot be read.
inline std::filesystem::path program_folder() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::current_path() : self.parent_path();
}

}  // namespace t5scale
