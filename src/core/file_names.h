// File names that one of our files gives for another file: a checkpoint manifest or a safetensors index for a file
// beside it (a plain name), a dataset recipe or a study spec for a file in its folder or below (a relative path that
// does not climb out). Such files travel between users and clusters, so what they name is held to their own folder:
// nothing is opened outside it, whatever the file says. Paths a user types on a command line are theirs and are not
// held (t5scale-prep --data-dir and --input-split, t5scale-study --base-config).
#pragma once

#include <algorithm>
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

// Why `path` is not a relative path inside its folder ("" when it is one): empty, absolute, a ".." part, a
// backslash, a NUL byte or a control character. "data/train.jsonl" and "./train.jsonl" are inside.
inline std::string inside_path_problem(const std::string& path) {
  if (path.empty()) return "it is empty";
  if (path.front() == '/') return "it is an absolute path";
  for (size_t start = 0; start <= path.size();) {
    const size_t end = std::min(path.find('/', start), path.size());
    if (path.substr(start, end - start) == "..") return "it climbs out of the folder with '..'";
    start = end + 1;
  }
  for (const char c : path) {
    if (c == '\\') return "it holds a backslash";
    if (c == '\0' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "it holds a control character";
  }
  return "";
}

// `name` with its control characters written as \xNN, for a message.
inline std::string printable_name(const std::string& name) {
  std::string shown;
  for (const char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      shown += msg("\\x", "0123456789abcdef"[(c >> 4) & 0xf], "0123456789abcdef"[c & 0xf]);
    } else {
      shown += c;
    }
  }
  return shown;
}

// Throws "<source>: <what> '<name>' is not a plain file name (<why>); ..." unless `name` is one.
inline void check_plain_file_name(const std::string& name, const std::string& source, const std::string& what) {
  const std::string problem = plain_file_name_problem(name);
  if (!problem.empty()) {
    throw Error(msg(source, ": ", what, " '", printable_name(name), "' is not a plain file name (", problem,
                    "); nothing outside the folder is opened"));
  }
}

}  // namespace t5scale
