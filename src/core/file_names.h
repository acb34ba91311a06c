// File names that one of our files (a checkpoint manifest, a safetensors index) gives for a file beside it. Such
// files travel between users and clusters, so what they name is held to a plain name inside their own folder:
// nothing is opened outside it, whatever the file says.
#pragma once

#include <string>

#include "core/check.h"

namespace t5scale {

// Why `name` is not a plain file name ("" when it is one): empty, ".", "..", a path separator, a NUL byte or a
// control character.
inline std::string plain_file_name_problem(const std::string& name) {
  if (name.empty()) return "it is empty";
  if (name == "." || name == "..") return "it names a folder, not a file";
  for (const char c : name) {
    if (c == '/' || c == '\\') return "it is a path, not a plain file name inside the folder";
    if (c == '\0' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "it holds a control character";
  }
  return "";
}

// Throws "<source>: <what> '<name>' is not a plain file name (<why>); ..." unless `name` is one.
inline void check_plain_file_name(const std::string& name, const std::string& source, const std::string& what) {
  const std::string problem = plain_file_name_problem(name);
  if (!problem.empty()) {
    std::string shown;
    for (const char c : name) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        shown += msg("\\x", "0123456789abcdef"[(c >> 4) & 0xf], "0123456789abcdef"[c & 0xf]);
      } else {
        shown += c;
      }
    }
    throw Error(msg(source, ": ", what, " '", shown, "' is not a plain file name (", problem,
                    "); nothing outside the folder is opened"));
  }
}

}  // namespace t5scale
