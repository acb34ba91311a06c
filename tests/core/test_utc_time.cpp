// The time stamps every file of a run uses.
#include <gtest/gtest.h>

#include <chrono>

#include "core/utc_time.h"

namespace t5scale {
namespace {

TEST(CoreUtcTime, IsoSecondsInUtc) {
  using std::chrono::seconds;
  using std::chrono::system_clock;
  EXPECT_EQ(utc_iso_time(system_clock::time_point(seconds(0))), "1970-01-01T00:00:00Z");
  // `date -u -d @1700000000`: Tue Nov 14 22:13:20 UTC 2023
  EXPECT_EQ(utc_iso_time(system_clock::time_point(seconds(1700000000))), "2023-11-14T22:13:20Z");
  EXPECT_EQ(utc_iso_time().size(), 20u);
}

}  // namespace
}  // namespace t5scale
