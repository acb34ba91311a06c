#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/safetensors.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

using testing::error_of;
using testing::expect_mentions;
using testing::TempDir;

// Writes a file from a raw header text and a data section, to forge broken files.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes, int64_t claimed_header = -1) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = claimed_header >= 0 ? static_cast<uint64_t>(claimed_header) : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header;
  out << std::string(data_bytes, '\0');
}

TEST(Safetensors, RoundTripKeepsEveryDtypeShapeAndValue) {
  TempDir dir;
  std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"f32", torch::randn({3, 5})},
      {"f16", torch::randn({4}).to(torch::kHalf)},
      {"bf16", torch::randn({2, 3, 2}).to(torch::kBFloat16)},
      {"f64", torch::randn({2}, torch::kFloat64)},
      {"i64", torch::arange(7)},
      {"i32", torch::arange(6, torch::kInt32).view({2, 3})},
      {"flag", torch::tensor({true, false, true})},
      {"empty", torch::zeros({0, 4})},
      {"strided", torch::randn({4, 6}).t()},  // not contiguous
  };
  write_safetensors(dir / "a.safetensors", tensors, {{"format", "pt"}});
  const auto file = SafetensorsFile::open(dir / "a.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.names().size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor back = file.read(name);
    EXPECT_EQ(back.scalar_type(), tensor.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(back, tensor)) << name;
  }
}

TEST(Safetensors, ReadSliceReturnsExactlyTheSlice) {
  TempDir dir;
  const torch::Tensor full = torch::randn({6, 8});
  write_safetensors(dir / "s.safetensors", {{"w", full}});
  const auto file = SafetensorsFile::open(dir / "s.safetensors");
  EXPECT_TRUE(torch::equal(file.read_slice("w", 0, 2, 3), full.narrow(0, 2, 3)));
  EXPECT_TRUE(torch::equal(file.read_slice("w", 1, 4, 4), full.narrow(1, 4, 4)));
  expect_mentions(error_of([&] { file.read_slice("w", 1, 6, 4); }), {"'w'", "outside"});
  expect_mentions(error_of([&] { file.read("nope"); }), {"s.safetensors", "'nope'"});
}

TEST(Safetensors, MissingFileIsNamed) {
  TempDir dir;
  expect_mentions(error_of([&] { SafetensorsFile::open(dir / "absent.safetensors"); }), {"absent.safetensors"});
}

TEST(Safetensors, TruncatedFileIsRefused) {
  TempDir dir;
  write_safetensors(dir / "t.safetensors", {{"w", torch::randn({64, 64})}});
  const auto size = std::filesystem::file_size(dir / "t.safetensors");
  std::filesystem::resize_file(dir / "t.safetensors", size - 100);
  expect_mentions(error_of([&] { SafetensorsFile::open(dir / "t.safetensors"); }),
                  {"t.safetensors", "'w'", "outside the data section"});
  std::filesystem::resize_file(dir / "t.safetensors", 5);
  expect_mentions(error_of([&] { SafetensorsFile::open(dir / "t.safetensors"); }), {"t.safetensors", "truncated"});
}

TEST(Safetensors, HeaderPointingOutsideTheFileIsRefused) {
  TempDir dir;
  write_raw(dir / "h.safetensors", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8, 1 << 20);
  expect_mentions(error_of([&] { SafetensorsFile::open(dir / "h.safetensors"); }),
                  {"h.safetensors", "header length", "outside the file"});
}

TEST(Safetensors, OffsetsOutsideTheDataAreRefused) {
  TempDir dir;
  write_raw(dir / "o.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 16);
  expect_mentions(error_of([&] { SafetensorsFile::open(dir / "o.safetensors"); }),
                  {"o.safetensors", "'w'", "outside the data section"});
}

TEST(Safetensors, ByteCountThatDisagreesWithShapeAndDtypeIsRefused) {
  TempDir dir;
  write_raw(dir / "b.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  expect_mentions(error_of([&] { SafetensorsFile::open(dir / "b.safetensors"); }), {"'w'", "cover 8 bytes", "needs 12"});
}

TEST(Safetensors, UnknownDtypeAndMalformedEntriesAreRefused) {
  TempDir dir;
  write_raw(dir / "d.safetensors", R"({"w":{"dtype":"F8_E9","shape":[1],"data_offsets":[0,1]}})", 1);
  expect_mentions(error_of([&] { SafetensorsFile::open(dir / "d.safetensors"); }), {"'w'", "unsupported dtype", "F8_E9"});
  write_raw(dir / "m.safetensors", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
  expect_mentions(error_of([&] { SafetensorsFile::open(dir / "m.safetensors"); }), {"'w'", "shape"});
  write_raw(dir / "j.safetensors", R"({"w":{"dtype":"F32")", 4);
  expect_mentions(error_of([&] { SafetensorsFile::open(dir / "j.safetensors"); }), {"j.safetensors", "JSON"});
}

TEST(Safetensors, OverlappingBuffersAreRefused) {
  TempDir dir;
  write_raw(dir / "v.safetensors",
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            12);
  expect_mentions(error_of([&] { SafetensorsFile::open(dir / "v.safetensors"); }), {"'a'", "'b'", "overlap"});
}

TEST(Safetensors, AFailedWriteLeavesTheOldFileIntact) {
  TempDir dir;
  const torch::Tensor good = torch::randn({4});
  write_safetensors(dir / "keep.safetensors", {{"w", good}});
  // The second write fails while building the header (a name given twice): nothing may reach the real name.
  EXPECT_FALSE(error_of([&] {
                 write_safetensors(dir / "keep.safetensors", {{"w", torch::zeros({4})}, {"w", torch::zeros({4})}});
               }).empty());
  EXPECT_TRUE(torch::equal(SafetensorsFile::open(dir / "keep.safetensors").read("w"), good));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename(), "keep.safetensors") << "left behind: " << entry.path();
  }
}

}  // namespace
}  // namespace t5scale
