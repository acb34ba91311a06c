// "Did you mean ...?" for every name a user types: keys of the run config, study specs and recipes, model names,
// command-line options.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace t5scale {

// Levenshtein distance (insertions, deletions, substitutions).
size_t edit_distance(const std::string& a, const std::string& b);

// The first of `candidates` nearest to `word` by edit distance, if within max_distance edits; otherwise "".
std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates, size_t max_distance);

}  // namespace t5scale
