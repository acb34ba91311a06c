// ROUGE against rouge-score 0.1.2: the fixture of English sentences and seeded random multi-line texts, every
// pair, every metric, with and without the stemmer; the tokens too, so a difference points at its cause.
#include <gtest/gtest.h>

#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "core/check.h"
#include "eval/eval_references.h"
#include "eval/rouge.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

using testing::eval_references;
using testing::kEvalTolerance;

const char* const kRougeTypes[] = {"rouge1", "rouge2", "rougeL", "rougeLsum"};
const char* const kParts[] = {"precision", "recall", "fmeasure"};

const RougeScore& by_type(const RougeScores& scores, const std::string& type) {
  if (type == "rouge1") return scores.rouge1;
  if (type == "rouge2") return scores.rouge2;
  if (type == "rougeL") return scores.rougeL;
  return scores.rougeLsum;
}

double by_part(const RougeScore& score, int part) {
  return part == 0 ? score.precision : part == 1 ? score.recall : score.fmeasure;
}

std::string quoted(const std::string& text) {
  std::ostringstream out;
  out << std::quoted(text);
  return out.str();
}

// Compares every case of `cases` in both stemmer settings; returns the largest absolute difference seen.
double compare_cases(const nlohmann::json& cases, const std::string& name) {
  double worst = 0.0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const std::string prediction = c["prediction"], reference = c["reference"];
    for (bool use_stemmer : {true, false}) {
      const auto& expected = c[use_stemmer ? "stemmed" : "unstemmed"];
      const std::string where = name + " pair " + std::to_string(i) + (use_stemmer ? " (stemmer)" : " (no stemmer)") +
                                "\n  prediction: " + quoted(prediction) + "\n  reference:  " + quoted(reference);
      EXPECT_EQ(rouge_tokenize(prediction, use_stemmer), expected["prediction_tokens"].get<std::vector<std::string>>())
          << where;
      EXPECT_EQ(rouge_tokenize(reference, use_stemmer), expected["reference_tokens"].get<std::vector<std::string>>())
          << where;
      RougeOptions options;
      options.use_stemmer = use_stemmer;
      const RougeScores scores = rouge(prediction, reference, options);
      for (const char* type : kRougeTypes) {
        for (int part = 0; part < 3; ++part) {
          const double want = expected[type][part];
          const double got = by_part(by_type(scores, type), part);
          const double difference = std::abs(got - want);
          worst = std::max(worst, difference);
          EXPECT_LE(difference, kEvalTolerance) << where << "\n  " << type << " " << kParts[part] << ": t5scale "
                                                << std::setprecision(17) << got << ", rouge-score " << want;
        }
      }
    }
  }
  return worst;
}

TEST(EvalRouge, FixtureSentencesMatchRougeScore) {
  const auto& cases = eval_references()["rouge"];
  ASSERT_GE(cases.size(), 40u);
  const double worst = compare_cases(cases, "fixture");
  std::cout << cases.size() << " pairs x 2 stemmer settings x 12 values, worst |difference| " << worst << "\n";
}

TEST(EvalRouge, RandomMultiLineTextsMatchRougeScore) {
  const auto& cases = eval_references()["rouge_random"];
  ASSERT_GE(cases.size(), 100u);
  const double worst = compare_cases(cases, "random");
  std::cout << cases.size() << " pairs x 2 stemmer settings x 12 values, worst |difference| " << worst << "\n";
}

TEST(EvalRouge, MeanOverTheFixtureMatchesTheMeanOfRougeScoresValues) {
  const auto& references = eval_references();
  std::vector<std::string> predictions, targets;
  for (const auto& c : references["rouge"]) {
    predictions.push_back(c["prediction"]);
    targets.push_back(c["reference"]);
  }
  for (bool use_stemmer : {true, false}) {
    RougeOptions options;
    options.use_stemmer = use_stemmer;
    const RougeScores mean = mean_rouge(predictions, targets, options);
    const auto& expected = references["rouge_mean"][use_stemmer ? "stemmed" : "unstemmed"];
    for (const char* type : kRougeTypes) {
      for (int part = 0; part < 3; ++part) {
        const double want = expected[type][part];
        EXPECT_LE(std::abs(by_part(by_type(mean, type), part) - want), kEvalTolerance)
            << type << " " << kParts[part] << (use_stemmer ? " (stemmer)" : " (no stemmer)");
      }
    }
  }
}

TEST(EvalRouge, InvalidUtf8ReadsAsReplacementCharacters) {
  for (const auto& c : eval_references()["invalid_utf8"]) {
    const std::string text = testing::bytes_from_hex(c["hex"]);
    EXPECT_EQ(rouge_tokenize(text, true), c["tokens"].get<std::vector<std::string>>()) << "bytes " << c["hex"];
  }
}

TEST(EvalRouge, StemmingIsOnByDefault) {
  EXPECT_TRUE(RougeOptions{}.use_stemmer);
  EXPECT_EQ(rouge("The runners were running", "the runner runs").rouge1.recall, 1.0);
  RougeOptions plain;
  plain.use_stemmer = false;
  EXPECT_EQ(rouge("The runners were running", "the runner runs", plain).rouge1.recall, 1.0 / 3.0);
}

TEST(EvalRouge, EmptyTextsScoreZero) {
  for (const auto& [prediction, reference] :
       {std::pair<std::string, std::string>{"", "a reference"}, {"a prediction", ""}, {"", ""}, {"?!", "..."}}) {
    const RougeScores scores = rouge(prediction, reference);
    for (const RougeScore* s : {&scores.rouge1, &scores.rouge2, &scores.rougeL, &scores.rougeLsum}) {
      EXPECT_EQ(s->precision, 0.0) << quoted(prediction) << " vs " << quoted(reference);
      EXPECT_EQ(s->recall, 0.0);
      EXPECT_EQ(s->fmeasure, 0.0);
    }
  }
}

TEST(EvalRouge, MeanRefusesMismatchedOrEmptyInput) {
  const std::string mismatch = testing::error_of([] { mean_rouge({"a", "b"}, {"a"}); });
  EXPECT_NE(mismatch.find("mean_rouge: 2 predictions but 1 references"), std::string::npos) << mismatch;
  const std::string empty = testing::error_of([] { mean_rouge({}, {}); });
  EXPECT_NE(empty.find("mean_rouge: no examples"), std::string::npos) << empty;
  EXPECT_THROW(mean_rouge({"a"}, {"a", "b"}), Error);
}

}  // namespace
}  // namespace t5scale
