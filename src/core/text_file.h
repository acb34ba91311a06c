// A whole text file as a string, or an error naming what it is ("the run config") and why it cannot be read
// (missing, unreadable, a folder).
#pragma once

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/check.h"

namespace t5scale {

inline std::string read_text_file(const std::string& path, const std::string& what) {
  // An ifstream opens a folder without complaint and reads nothing from it: an empty text, not an error.
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw Error(msg("cannot read ", what, " '", path, "': it is a folder, not a file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(msg("cannot read ", what, " '", path, "': ", std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(msg("cannot read ", what, " '", path, "': read error"));
  return text.str();
}

}  // namespace t5scale
