#include "core/hdf5_superblock.h"

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/check.h"
#include "core/hdf5_check.h"

namespace t5scale {

namespace {

constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
constexpr unsigned kSwmrWriteFlag = 0x04;  // a version 3 superblock's file consistency flags

uint64_t little_endian(const unsigned char* bytes, int size) {
  uint64_t value = 0;
  for (int i = size - 1; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

}  // namespace

Hdf5SuperblockCheck check_hdf5_superblock(const std::string& path) {
  Hdf5SuperblockCheck check;
  std::error_code error;
  uint64_t size = std::filesystem::file_size(path, error);
  if (error) {
    check.damage = "cannot be read: " + error.message();
    return check;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    check.damage = msg("cannot be opened: ", std::strerror(errno));
    return check;
  }
  std::array<unsigned char, 96> head{};
  uint64_t offset = 0;
  for (;;) {
    if (offset + 48 > size) {
      check.damage = msg("no HDF5 superblock in its ", size, " bytes (not an HDF5 file, or cut before its first block)");
      return check;
    }
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(reinterpret_cast<char*>(head.data()), head.size());
    in.clear();  // a short read at the end leaves zeros, which the checks below refuse
    if (std::memcmp(head.data(), kSignature, sizeof(kSignature)) == 0) break;
    offset = offset == 0 ? 512 : 2 * offset;
  }
  const int version = head[8];
  int sizeof_offsets = 0, addresses = 0;
  unsigned flags = 0;
  if (version == 0 || version == 1) {
    sizeof_offsets = head[13];
    flags = static_cast<unsigned>(little_endian(&head[20], 4));
    addresses = 24 + (version == 1 ? 4 : 0);  // base, free-space info, end of file, driver info
  } else if (version == 2 || version == 3) {
    sizeof_offsets = head[9];
    flags = head[11];
    addresses = 12;  // base, superblock extension, end of file, root object header
  } else {
    check.damage = msg("superblock version ", version, " at byte ", offset, ", which no HDF5 1.10 writes");
    return check;
  }
  if ((sizeof_offsets != 2 && sizeof_offsets != 4 && sizeof_offsets != 8) ||
      addresses + 3 * sizeof_offsets > static_cast<int>(head.size())) {
    check.damage = msg("superblock at byte ", offset, " gives ", sizeof_offsets, "-byte addresses");
    return check;
  }
  check.swmr_writer = version == 3 && (flags & kSwmrWriteFlag) != 0;
  // The end of file address counts from the file's first byte, a user block before the superblock included (HDF5
  // 1.10 writes it so; the base address is the superblock's own offset).
  const uint64_t end = little_endian(&head[addresses + 2 * sizeof_offsets], sizeof_offsets);
  if (size >= end) return check;
  if (check.swmr_writer) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    size = std::filesystem::file_size(path, error);
    if (!error && size >= end) return check;
  }
  check.damage = msg("truncated: ", size, " bytes, but its superblock says the file ends at byte ", end);
  return check;
}

void limit_swmr_read_attempts(hid_t fapl, const std::string& path) {
  H5_CHECK(H5Pset_metadata_read_attempts(fapl, kSwmrMetadataReadAttempts), path);
}

}  // namespace t5scale
