// A whole text file as a string, or an error naming what it is ("the run config") and why it cannot be read
// (missing, unreadable, a folder); and a text file written whole or not at all.
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

// `text` into `path` whole or not at all: written under <path>.tmp, then renamed over it. Throws naming the file.
inline void write_text_file_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  std::error_code ignored;
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(msg("cannot write '", temporary, "': ", std::strerror(errno)));
    out << text;
    out.close();
    if (!out) {
      const std::string reason = std::strerror(errno);
      std::filesystem::remove(temporary, ignored);  // nothing half-written is left behind
      throw Error(msg("writing '", temporary, "' failed: ", reason));
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::filesystem::remove(temporary, ignored);
    throw Error(msg("cannot rename '", temporary, "' to '", path, "': ", error.message()));
  }
}

}  // namespace t5scale
