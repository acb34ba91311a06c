// The superblock check every reader of run files asks before HDF5 walks a file (core/hdf5_superblock.h): a file
// shorter than the end its superblock records is truncated, a longer one is fine, anything else that is no HDF5
// superblock is named. analysis/tests/test_reader.py holds the Python twin (runfile.py) to the same cases.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/base_test_support.h"
#include "core/check.h"
#include "core/hdf5_superblock.h"

namespace t5scale {
namespace {

using testing::TempDir;

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A small file with one dataset, in the superblock version that `latest` picks: 0 (HDF5's default bounds) or 3
// (the 1.10 format that SWMR needs, as run files are written), after a user block of `user_block` bytes.
void write_hdf5(const std::string& path, bool latest, hsize_t user_block = 0) {
  const hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  if (user_block > 0) H5Pset_userblock(fcpl, user_block);
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (latest) H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
  ASSERT_GE(file, 0) << path;
  const hsize_t n = 1000;
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t dataset = H5Dcreate2(file, "values", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<double> values(n, 1.5);
  H5Dwrite(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  H5Dclose(dataset);
  H5Sclose(space);
  H5Fclose(file);
  H5Pclose(fapl);
  H5Pclose(fcpl);
}

std::string truncated(uint64_t size, uint64_t end) {
  return msg("truncated: ", size, " bytes, but its superblock says the file ends at byte ", end);
}

TEST(CoreHdf5Superblock, AWholeFileInEitherVersionAndAfterAUserBlockShowsNothing) {
  TempDir dir;
  for (const bool latest : {false, true}) {
    for (const hsize_t user_block : {hsize_t{0}, hsize_t{512}, hsize_t{4096}}) {
      const std::string path = dir / msg("whole_", latest, "_", user_block, ".h5");
      write_hdf5(path, latest, user_block);
      const Hdf5SuperblockCheck check = check_hdf5_superblock(path);
      EXPECT_EQ(check.damage, "") << path;
      EXPECT_FALSE(check.swmr_writer) << path;
    }
  }
}

TEST(CoreHdf5Superblock, AFileShorterThanItsStoredEndIsTruncatedAndALongerOneIsFine) {
  TempDir dir;
  for (const bool latest : {false, true}) {
    const std::string whole_path = dir / msg("whole_", latest, ".h5");
    write_hdf5(whole_path, latest, latest ? 512 : 0);
    const std::string whole = bytes_of(whole_path);
    const uint64_t size = whole.size();
    for (const uint64_t cut : {size - 1, size - 100, size / 2, uint64_t{600}}) {
      const std::string path = dir / msg("cut_", latest, "_", cut, ".h5");
      write_bytes(path, whole.substr(0, cut));
      EXPECT_EQ(check_hdf5_superblock(path).damage, truncated(cut, size)) << path;
    }
    // A SWMR writer's data ahead of the end it last recorded, or bytes appended after the file.
    const std::string longer = dir / msg("longer_", latest, ".h5");
    write_bytes(longer, whole + std::string(4096, '\0'));
    EXPECT_EQ(check_hdf5_superblock(longer).damage, "");
  }
}

TEST(CoreHdf5Superblock, WhatIsNoHdf5SuperblockIsNamed) {
  TempDir dir;
  write_bytes(dir / "text.h5", std::string(20, 'x') + "\n");
  EXPECT_EQ(check_hdf5_superblock(dir / "text.h5").damage,
            "no HDF5 superblock in its 21 bytes (not an HDF5 file, or cut before its first block)");
  write_bytes(dir / "empty.h5", "");
  EXPECT_EQ(check_hdf5_superblock(dir / "empty.h5").damage,
            "no HDF5 superblock in its 0 bytes (not an HDF5 file, or cut before its first block)");
  EXPECT_NE(check_hdf5_superblock(dir / "missing.h5").damage.find("cannot be read: "), std::string::npos);

  write_hdf5(dir / "whole.h5", true);
  const std::string whole = bytes_of(dir / "whole.h5");
  write_bytes(dir / "signature_only.h5", whole.substr(0, 40));
  EXPECT_EQ(check_hdf5_superblock(dir / "signature_only.h5").damage,
            "no HDF5 superblock in its 40 bytes (not an HDF5 file, or cut before its first block)");
  std::string version = whole;
  version[8] = 7;
  write_bytes(dir / "version.h5", version);
  EXPECT_EQ(check_hdf5_superblock(dir / "version.h5").damage,
            "superblock version 7 at byte 0, which no HDF5 1.10 writes");
  std::string offsets = whole;
  offsets[9] = 3;
  write_bytes(dir / "offsets.h5", offsets);
  EXPECT_EQ(check_hdf5_superblock(dir / "offsets.h5").damage, "superblock at byte 0 gives 3-byte addresses");
  // The end of file address (version 2/3: after the base and superblock extension addresses) set past the file.
  std::string end = whole;
  end[12 + 2 * 8 + 3] = 1;  // + 2^24 bytes
  write_bytes(dir / "end.h5", end);
  EXPECT_NE(check_hdf5_superblock(dir / "end.h5").damage.find(msg("truncated: ", whole.size(), " bytes")),
            std::string::npos);
}

// A file that a SWMR writer has open (or left open when it was killed) carries the flag; a short one is looked at
// once more, since the writer may be extending it, before it is called truncated.
TEST(CoreHdf5Superblock, ASwmrWritersFileIsToldApartAndGivenAMomentToGrow) {
  TempDir dir;
  const std::string path = dir / "live.h5";
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  ASSERT_GE(file, 0);
  ASSERT_GE(H5Fstart_swmr_write(file), 0);
  H5Fflush(file, H5F_SCOPE_GLOBAL);
  const std::string live = bytes_of(path);
  H5Fclose(file);
  H5Pclose(fapl);
  write_bytes(path, live);  // as the writer left it: the flag still set
  Hdf5SuperblockCheck check = check_hdf5_superblock(path);
  EXPECT_EQ(check.damage, "");
  EXPECT_TRUE(check.swmr_writer);

  // Short now, whole again within the moment the check waits: not truncated. (Half: the end a SWMR writer records
  // may lag the file's size a little.)
  const std::string half = live.substr(0, live.size() / 2);
  write_bytes(path, half);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    write_bytes(path, live);
  });
  check = check_hdf5_superblock(path);
  writer.join();
  EXPECT_EQ(check.damage, "");

  // Short and staying short: truncated, after that moment only.
  write_bytes(path, half);
  const auto start = std::chrono::steady_clock::now();
  check = check_hdf5_superblock(path);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  EXPECT_EQ(check.damage.rfind(msg("truncated: ", half.size(), " bytes, but its superblock says"), 0), 0u)
      << check.damage;
  EXPECT_TRUE(check.swmr_writer);
}

}  // namespace
}  // namespace t5scale
