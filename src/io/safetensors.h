// safetensors files, our own reader and writer. Layout: an 8-byte little-endian header length N, N bytes of
// JSON ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}), then the
// raw little-endian buffers; offsets count from the end of the header. The reader maps the file and validates
// the header length, every dtype, shape and offset range against the file size before any data is touched.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace t5scale {

struct SafetensorsEntry {
  std::string name;
  torch::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

class SafetensorsFile {
 public:
  // Maps and validates `path`; throws t5scale::Error naming the file (and the tensor) on any problem.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // in file order
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  torch::Tensor read(const std::string& name) const;  // a copy, contiguous, on the CPU
  // Elements [offset, offset + length) along `dim`, reading only what that slice needs where it is contiguous.
  torch::Tensor read_slice(const std::string& name, int64_t dim, int64_t offset, int64_t length) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> mapping_;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (any device; copied to the CPU) under their names, to `path` + a temporary suffix, then renames,
// so a crash never leaves a half-written file under the real name.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

std::string safetensors_dtype_name(torch::ScalarType dtype);  // "F32", "BF16", ...

}  // namespace t5scale
