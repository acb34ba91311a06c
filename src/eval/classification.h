// Accuracy and macro-F1 for tasks whose targets are label strings (a text-to-text classifier generates the
// label's text).
//   - Predictions and references are compared after trimming ASCII whitespace (space, \t, \n, \v, \f, \r) at
//     both ends, and are otherwise case- and byte-sensitive: "positive" is not "Positive".
//   - The labels are the distinct trimmed references. A prediction that is not one of them is wrong: it counts
//     as a miss (false negative) of the true label and as no label's false positive.
//   - Macro-F1 is the unweighted mean over the labels of F1 = 2 TP / (2 TP + FP + FN) (0 for a label never
//     predicted right); scikit-learn's f1_score(references, predictions, labels=<the labels>, average="macro",
//     zero_division=0) is defined the same way.
// Scores are fractions in [0, 1].
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace t5scale {

struct ClassificationScores {
  double accuracy = 0.0;
  double macro_f1 = 0.0;
  std::size_t num_labels = 0;  // distinct reference labels
};

// `text` without leading and trailing ASCII whitespace: the comparison rule above.
std::string_view trim_label(std::string_view text);

// Throws t5scale::Error when the vectors differ in size or are empty.
ClassificationScores classification_scores(const std::vector<std::string>& predictions,
                                           const std::vector<std::string>& references);

}  // namespace t5scale
