// The one reading of numbers (core/number_text.h): the whole text is the number, a leading '+' is allowed, and
// nothing else reads as one (blanks, trailing text, infinities, NaN, out of range, hex).
#include <gtest/gtest.h>

#include "core/number_text.h"

namespace t5scale {
namespace {

TEST(CoreNumberText, WholeTextsAreNumbersAndNothingElseIs) {
  EXPECT_EQ(parse_integer("42"), 42);
  EXPECT_EQ(parse_integer("+42"), 42);
  EXPECT_EQ(parse_integer("-7"), -7);
  EXPECT_EQ(parse_integer("9223372036854775807"), INT64_MAX);
  for (const std::string text : {"", "+", "-", "++1", "+-1", " 1", "1 ", "1.0", "1e3", "0x10", "12abc",
                                 "9223372036854775808", "banana"}) {
    EXPECT_FALSE(parse_integer(text).has_value()) << "'" << text << "'";
  }
  EXPECT_EQ(parse_finite_number("3e-4"), 3e-4);
  EXPECT_EQ(parse_finite_number("+0.5"), 0.5);
  EXPECT_EQ(parse_finite_number("-2"), -2.0);
  EXPECT_EQ(parse_finite_number(".5"), 0.5);
  for (const std::string text : {"", "+", "-", " 1", "1 ", "1,5", "inf", "-inf", "nan", "1e999", "0x1p3", "1e",
                                 "banana"}) {
    EXPECT_FALSE(parse_finite_number(text).has_value()) << "'" << text << "'";
  }
}

}  // namespace
}  // namespace t5scale
