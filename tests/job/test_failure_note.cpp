// The failure notes of a job's ranks: each rank's space reserved at start, the first note published stays, and
// every reservation is given back (the published one lives on under the note's name), by the rank that recorded
// the failure when the others are taken down by the job's abort.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "job/failure_note.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(FailureNote, TheFirstRanksNoteStaysAndReservationsAreGivenBack) {
  testing::TempDir dir;
  const std::string path = dir / "run.failed.json";
  {
    ReservedFailureNote first(path, 1), second(path, 2), unused(path, 3);
    EXPECT_TRUE(fs::exists(path + ".reserve.3"));
    EXPECT_TRUE(first.publish("first\n"));
    EXPECT_FALSE(second.publish("second\n"));
  }
  EXPECT_EQ(read_all(path), "first\n");
  for (const int rank : {1, 2, 3}) EXPECT_FALSE(fs::exists(path + ".reserve." + std::to_string(rank))) << rank;
}

// A job going down through an abort: the rank that recorded the failure gives back every rank's space (the others
// are killed before they can); a rank whose space is gone publishes nothing; a note already published stays.
TEST(FailureNote, EveryRanksSpaceIsGivenBackByTheRankThatRecordedTheFailure) {
  testing::TempDir dir;
  const std::string path = dir / "run.failed.json";
  const std::string other_run = dir / "other.failed.json";
  ReservedFailureNote first(path, 0), late(path, 1), other(other_run, 1);
  EXPECT_TRUE(first.publish("first\n"));
  ReservedFailureNote::give_back_every_ranks_space(path);
  EXPECT_FALSE(fs::exists(path + ".reserve.0"));
  EXPECT_FALSE(fs::exists(path + ".reserve.1"));
  EXPECT_TRUE(fs::exists(other_run + ".reserve.1"));  // another run's, in the same folder, stays
  EXPECT_FALSE(late.publish("late\n"));
  EXPECT_EQ(read_all(path), "first\n");
  ReservedFailureNote::give_back_every_ranks_space(dir / "none.failed.json");  // nothing to give back: no error
}

}  // namespace
}  // namespace t5scale
