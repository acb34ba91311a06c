// Accuracy and macro-F1 over label strings, on cases small enough to count by hand.
#include <gtest/gtest.h>

#include "eval/classification.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

TEST(EvalClassification, CountsByHand) {
  const std::vector<std::string> references = {"positive", "negative", "neutral", "positive", "negative", "positive"};
  const std::vector<std::string> predictions = {" positive\n", "negative", "positive", "Positive", "maybe", "positive"};
  const ClassificationScores scores = classification_scores(predictions, references);
  // Right: 0 (after trimming), 1, 5. Wrong: 2 (neutral read as positive), 3 (case differs: no label), 4 (no label).
  EXPECT_EQ(scores.accuracy, 0.5);
  EXPECT_EQ(scores.num_labels, 3u);
  // positive: TP 2, FP 1, FN 1 -> 2/3; negative: TP 1, FN 1 -> 2/3; neutral: FN 1 -> 0. "Positive" and "maybe"
  // are nobody's false positives.
  EXPECT_DOUBLE_EQ(scores.macro_f1, (2.0 / 3.0 + 2.0 / 3.0 + 0.0) / 3.0);
}

TEST(EvalClassification, AllRightAndAllWrong) {
  const std::vector<std::string> references = {"yes", "no", "yes"};
  const ClassificationScores right = classification_scores({"yes", " no", "yes\t"}, references);
  EXPECT_EQ(right.accuracy, 1.0);
  EXPECT_EQ(right.macro_f1, 1.0);
  const ClassificationScores wrong = classification_scores({"no", "yes", "no"}, references);
  EXPECT_EQ(wrong.accuracy, 0.0);
  EXPECT_EQ(wrong.macro_f1, 0.0);
}

TEST(EvalClassification, MacroF1WeighsRareLabelsEqually) {
  // 9 of "a" right, the one "b" predicted as "a": accuracy 0.9, but F1(a) = 18/19 and F1(b) = 0.
  std::vector<std::string> references(9, "a");
  references.push_back("b");
  const std::vector<std::string> predictions(10, "a");
  const ClassificationScores scores = classification_scores(predictions, references);
  EXPECT_DOUBLE_EQ(scores.accuracy, 0.9);
  EXPECT_DOUBLE_EQ(scores.macro_f1, (18.0 / 19.0) / 2.0);
}

TEST(EvalClassification, TrimsOnlyAsciiWhitespace) {
  EXPECT_EQ(trim_label(" \t\r\n\v\flabel \n"), "label");
  EXPECT_EQ(trim_label("\xc2\xa0label"), "\xc2\xa0label");  // no-break space is part of the label
  EXPECT_EQ(trim_label("   "), "");
}

TEST(EvalClassification, RefusesMismatchedOrEmptyInput) {
  const std::string mismatch = testing::error_of([] { classification_scores({"a"}, {"a", "b"}); });
  EXPECT_NE(mismatch.find("classification_scores: 1 predictions but 2 references"), std::string::npos) << mismatch;
  const std::string empty = testing::error_of([] { classification_scores({}, {}); });
  EXPECT_NE(empty.find("no examples"), std::string::npos) << empty;
}

}  // namespace
}  // namespace t5scale
