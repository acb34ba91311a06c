// SQuAD exact match and F1 against transformers' squad_metrics, and the Unicode behaviour they rest on:
// normalize_answer on fixture answers, random Unicode strings and every code point where a character property
// changes, so each range of the Unicode tables is checked at both ends.
#include <gtest/gtest.h>

#include <cmath>
#include <iomanip>
#include <iostream>

#include "eval/eval_references.h"
#include "eval/squad.h"
#include "eval/unicode_text.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

using testing::eval_references;
using testing::kEvalTolerance;

TEST(EvalSquad, ScoresMatchTransformersSquadMetrics) {
  const auto& cases = eval_references()["squad"];
  ASSERT_GE(cases.size(), 30u);
  double worst = 0.0;
  std::size_t compared = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const std::string prediction = c["prediction"];
    const auto references = c["references"].get<std::vector<std::string>>();
    const std::string where = "case " + std::to_string(i) + ", prediction " + c["prediction"].dump() + ", references " +
                              c["references"].dump();
    const SquadScore score = squad_score(prediction, references);
    for (const auto& [got, want, name] :
         {std::tuple<double, double, const char*>{score.exact_match, c["exact_match"], "exact match"},
          {score.f1, c["f1"], "f1"}}) {
      worst = std::max(worst, std::abs(got - want));
      ++compared;
      EXPECT_LE(std::abs(got - want), kEvalTolerance)
          << where << "\n  " << name << ": t5scale " << std::setprecision(17) << got << ", transformers " << want;
    }
    for (const auto& pair : c["pairs"]) {
      const std::string reference = pair["reference"];
      const double exact = squad_exact_match(prediction, reference), f1 = squad_f1(prediction, reference);
      worst = std::max(
          {worst, std::abs(exact - pair["exact_match"].get<double>()), std::abs(f1 - pair["f1"].get<double>())});
      compared += 2;
      EXPECT_EQ(exact, pair["exact_match"].get<double>()) << where << "\n  against " << pair["reference"].dump();
      EXPECT_LE(std::abs(f1 - pair["f1"].get<double>()), kEvalTolerance)
          << where << "\n  against " << pair["reference"].dump() << ": t5scale f1 " << std::setprecision(17) << f1
          << ", transformers " << pair["f1"].get<double>();
    }
  }
  std::cout << compared << " values compared, worst |difference| " << worst << "\n";
}

TEST(EvalSquad, MeanMatchesTheMeanOfTransformersValues) {
  const auto& references = eval_references();
  std::vector<std::string> predictions;
  std::vector<std::vector<std::string>> answers;
  for (const auto& c : references["squad"]) {
    predictions.push_back(c["prediction"]);
    answers.push_back(c["references"].get<std::vector<std::string>>());
  }
  const SquadScore mean = mean_squad(predictions, answers);
  EXPECT_LE(std::abs(mean.exact_match - references["squad_mean"]["exact_match"].get<double>()), kEvalTolerance);
  EXPECT_LE(std::abs(mean.f1 - references["squad_mean"]["f1"].get<double>()), kEvalTolerance);
}

TEST(EvalSquad, NormalizationMatchesTransformersOnUnicodeText) {
  const auto& cases = eval_references()["normalize"];
  ASSERT_GE(cases.size(), 1000u);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string text = cases[i][0], expected = cases[i][1];
    const std::string got = squad_normalize_answer(text);
    if (got != expected) ++mismatches;
    EXPECT_EQ(got, expected) << "text " << i << " " << cases[i][0].dump();
  }
  std::cout << cases.size() << " texts normalised, " << mismatches << " differ from transformers\n";
}

TEST(EvalSquad, InvalidUtf8ReadsAsPythonsReplaceDecoding) {
  for (const auto& c : eval_references()["invalid_utf8"]) {
    EXPECT_EQ(squad_normalize_answer(testing::bytes_from_hex(c["hex"])), c["normalized"].get<std::string>())
        << "bytes " << c["hex"];
  }
}

TEST(EvalSquad, Utf8RoundTripsEveryCodePoint) {
  std::u32string all;
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c < 0xD800 || c > 0xDFFF) all.push_back(c);
  }
  EXPECT_TRUE(decode_utf8(encode_utf8(all)) == all);
  EXPECT_STREQ(unicode_version(), eval_references()["versions"]["unicode"].get<std::string>().c_str())
      << "the Unicode tables and the reference Python disagree on the Unicode version: regenerate "
         "src/eval/unicode_tables.cpp with src/eval/make_unicode_tables.py";
}

TEST(EvalSquad, MeanRefusesMismatchedOrEmptyInput) {
  const std::string mismatch = testing::error_of([] { mean_squad({"a"}, {{"a"}, {"b"}}); });
  EXPECT_NE(mismatch.find("mean_squad: 1 predictions but 2 reference lists"), std::string::npos) << mismatch;
  const std::string empty = testing::error_of([] { mean_squad({}, {}); });
  EXPECT_NE(empty.find("mean_squad: no examples"), std::string::npos) << empty;
}

}  // namespace
}  // namespace t5scale
