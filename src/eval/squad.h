// SQuAD-style exact match and token F1, equal to transformers' data/metrics/squad_metrics.py (normalize_answer,
// compute_exact, compute_f1, and the gold-answer handling of get_raw_scores), itself the official SQuAD 2.0
// evaluation script:
//   - normalisation: Python's str.lower(); ASCII punctuation (string.punctuation) deleted, not replaced, so
//     "well-known" becomes "wellknown"; the words "a", "an", "the" replaced by a space where re's \b sees a word
//     boundary (Unicode word characters: str.isalnum() and '_'); whitespace runs (str.isspace()) collapsed to
//     one space and trimmed;
//   - exact match: 1 if the normalised strings are equal, else 0;
//   - F1 over the normalised whitespace tokens with multiset overlap; when either side has no tokens, 1 if both
//     have none and 0 otherwise;
//   - several references: the maximum over them, after dropping references that normalise to "" (a question
//     with no non-empty reference is unanswerable: its only reference is "").
// Scores are fractions in [0, 1]; Hugging Face's "squad" metric reports the same numbers times 100.
// Invalid UTF-8 never throws: each invalid byte sequence reads as U+FFFD.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace t5scale {

std::string squad_normalize_answer(std::string_view text);

double squad_exact_match(std::string_view prediction, std::string_view reference);  // 0 or 1
double squad_f1(std::string_view prediction, std::string_view reference);

struct SquadScore {
  double exact_match = 0.0;
  double f1 = 0.0;
};

// Best exact match and best F1 of `prediction` over `references` (each maximised on its own, as SQuAD does).
SquadScore squad_score(std::string_view prediction, const std::vector<std::string>& references);

// Means over examples of squad_score (summed in order, divided by the count). Throws t5scale::Error when the
// vectors differ in size or are empty.
SquadScore mean_squad(const std::vector<std::string>& predictions,
                      const std::vector<std::vector<std::string>>& references);

}  // namespace t5scale
