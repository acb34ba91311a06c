// The failure notes of a job's ranks: each rank's space reserved at start, the first note published stays, and
// every reservation is given back (the published one lives on under the note's name).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support/test_support.h"
#include "train/failure_note.h"

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

}  // namespace
}  // namespace t5scale
