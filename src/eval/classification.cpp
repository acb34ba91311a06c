// Accuracy and macro-F1 over label strings; counts per label, labels in sorted order so the sum is reproducible.
#include "eval/classification.h"

#include <cstdint>
#include <map>

#include "core/check.h"

namespace t5scale {
namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

struct LabelCounts {
  int64_t true_positives = 0;
  int64_t false_positives = 0;
  int64_t false_negatives = 0;
};

}  // namespace

std::string_view trim_label(std::string_view text) {
  std::size_t begin = 0, end = text.size();
  while (begin < end && is_ascii_space(text[begin])) ++begin;
  while (end > begin && is_ascii_space(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

ClassificationScores classification_scores(const std::vector<std::string>& predictions,
                                           const std::vector<std::string>& references) {
  T5S_CHECK(predictions.size() == references.size(), "classification_scores: ", predictions.size(), " predictions but ",
            references.size(), " references; each prediction needs exactly one reference");
  T5S_CHECK(!predictions.empty(), "classification_scores: no examples to score (empty predictions and references)");
  std::map<std::string_view, LabelCounts> labels;
  for (const std::string& reference : references) labels[trim_label(reference)];

  int64_t correct = 0;
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    const std::string_view truth = trim_label(references[i]);
    const std::string_view predicted = trim_label(predictions[i]);
    if (predicted == truth) {
      ++correct;
      ++labels[truth].true_positives;
      continue;
    }
    ++labels[truth].false_negatives;
    // A prediction outside the label set is no label's false positive.
    auto found = labels.find(predicted);
    if (found != labels.end()) ++found->second.false_positives;
  }

  ClassificationScores scores;
  scores.num_labels = labels.size();
  scores.accuracy = static_cast<double>(correct) / static_cast<double>(predictions.size());
  double f1_sum = 0.0;
  for (const auto& [label, counts] : labels) {
    // Every label occurs among the references, so the denominator is at least 1.
    f1_sum += static_cast<double>(2 * counts.true_positives) /
              static_cast<double>(2 * counts.true_positives + counts.false_positives + counts.false_negatives);
  }
  scores.macro_f1 = f1_sum / static_cast<double>(labels.size());
  return scores;
}

}  // namespace t5scale
