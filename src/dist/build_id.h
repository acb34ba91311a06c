// The build a program and its CUDA backend (dist/cuda_backend.h) come from. The backend resolves t5scale's
// functions from the program that loads it, so the two must come from one build: a backend of another build fails
// in dlopen with an undefined symbol, or worse loads and calls functions of another shape. Both carry the id of the
// build that made them, as a marker in their files, and the loader compares the library's with its own before it
// loads it.
#pragma once

#include <string>

namespace t5scale {

// This program's build: "<git revision>/<token>", the token made at the first configure of its build folder.
const char* build_id();

// The build id a file carries (the CUDA backend's library, a program); "" when it carries none.
std::string build_id_in_file(const std::string& path);

// "" when the library at `path` comes from this program's build; otherwise what to say, naming both builds and
// what to do (rebuild, or reinstall the bundle, so that bin/ and lib/ come from one build).
std::string backend_build_mismatch(const std::string& path);

}  // namespace t5scale
