// The Porter stemmer against nltk 3.10's PorterStemmer (default mode) on the word list and every fixture token.
#include <gtest/gtest.h>

#include <iostream>

#include "eval/eval_references.h"
#include "eval/porter_stemmer.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

TEST(EvalPorterStemmer, EveryWordMatchesNltk) {
  const auto& stems = testing::eval_references()["stems"];
  ASSERT_GE(stems.size(), 300u);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < stems.size(); ++i) {
    const std::string word = stems[i][0], expected = stems[i][1];
    const std::string got = porter_stem(word);
    if (got != expected) ++mismatches;
    EXPECT_EQ(got, expected) << "word " << i << " '" << word << "'";
  }
  std::cout << stems.size() << " words compared, " << mismatches << " differ from nltk\n";
}

TEST(EvalPorterStemmer, RefusesNonAscii) {
  const std::string message = testing::error_of([] { porter_stem("caf\xc3\xa9"); });
  EXPECT_NE(message.find("is not ASCII"), std::string::npos) << message;
}

}  // namespace
}  // namespace t5scale
