#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace t5scale {

namespace {

const std::vector<std::pair<std::string, torch::ScalarType>>& dtype_table() {
  static const std::vector<std::pair<std::string, torch::ScalarType>> table = {
      {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
      {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
      {"U8", torch::kUInt8},    {"BOOL", torch::kBool},
  };
  return table;
}

// Header sizes beyond this are refused before allocating: real headers are kilobytes, 100 MB is the
// reference implementation's own limit.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

}  // namespace

std::string safetensors_dtype_name(torch::ScalarType dtype) {
  for (const auto& [name, type] : dtype_table()) {
    if (type == dtype) return name;
  }
  throw Error(msg("safetensors: no dtype name for ", dtype));
}

struct SafetensorsFile::Mapping {
  void* address = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (address != nullptr && address != MAP_FAILED) munmap(address, size);
  }
};

namespace {

constexpr uint64_t kHeaderLengthBytes = 8;  // the little-endian length that opens every file

int open_read_only(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(msg(path, ": cannot open safetensors file: ", std::strerror(errno)));
  return fd;
}

// The size of the open file `fd`, which must hold at least the header length; `fd` is closed on a problem.
uint64_t read_file_size_bytes(int fd, const std::string& path) {
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    ::close(fd);
    throw Error(msg(path, ": cannot stat: ", std::strerror(errno)));
  }
  const uint64_t size_bytes = static_cast<uint64_t>(info.st_size);
  if (size_bytes < kHeaderLengthBytes) {
    ::close(fd);
    throw Error(msg(path, ": truncated safetensors file: ", size_bytes, " bytes, fewer than the 8-byte header length"));
  }
  return size_bytes;
}

// Maps the whole file read-only and closes `fd` (the mapping outlives it).
void* map_and_close(int fd, uint64_t size_bytes, const std::string& path) {
  void* address = mmap(nullptr, size_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (address == MAP_FAILED) throw Error(msg(path, ": cannot map: ", std::strerror(errno)));
  return address;
}

// The header's length from the file's first bytes, refused unless the header fits in the file.
uint64_t read_header_size_bytes(const uint8_t* bytes, uint64_t file_size_bytes, const std::string& path) {
  uint64_t size_bytes = 0;
  for (int i = 7; i >= 0; --i) size_bytes = (size_bytes << 8) | bytes[i];  // little-endian
  if (size_bytes > kMaxHeaderBytes || size_bytes > file_size_bytes - kHeaderLengthBytes) {
    throw Error(msg(path, ": header length ", size_bytes, " points outside the file of ", file_size_bytes,
                    " bytes (truncated or not a safetensors file)"));
  }
  return size_bytes;
}

nlohmann::json parse_header(const uint8_t* bytes, uint64_t header_bytes, const std::string& path) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + kHeaderLengthBytes, bytes + kHeaderLengthBytes + header_bytes);
  } catch (const nlohmann::json::exception& e) {
    throw Error(msg(path, ": header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) throw Error(msg(path, ": header is not a JSON object"));
  return header;
}

void read_metadata(const nlohmann::json& value, const std::string& path, std::map<std::string, std::string>& metadata) {
  if (!value.is_object()) throw Error(msg(path, ": __metadata__ is not an object"));
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) throw Error(msg(path, ": __metadata__ value of '", key, "' is not a string"));
    metadata[key] = v.get<std::string>();
  }
}

// Makes the Error for a problem of one tensor's header entry, naming the file and the tensor.
struct TensorProblem {
  const std::string& path;
  const std::string& name;
  Error operator()(const std::string& why) const { return Error(msg(path, ": tensor '", name, "': ", why)); }
};

torch::ScalarType parse_dtype(const nlohmann::json& dtype, const TensorProblem& bad) {
  if (!dtype.is_string()) throw bad("dtype is not a string");
  for (const auto& [dtype_name, type] : dtype_table()) {
    if (dtype_name == dtype.get<std::string>()) return type;
  }
  throw bad(msg("unsupported dtype '", dtype.get<std::string>(), "'"));
}

// Appends the dimensions of `shape` to `dims` and returns their product, refusing one that overflows.
uint64_t parse_shape(const nlohmann::json& shape, const TensorProblem& bad, std::vector<int64_t>& dims) {
  if (!shape.is_array()) throw bad("shape is not an array");
  uint64_t numel = 1;
  for (const auto& dim : shape) {
    if (!dim.is_number_unsigned()) throw bad(msg("shape ", shape.dump(), " has a non-natural dimension"));
    const uint64_t d = dim.get<uint64_t>();
    if (d != 0 && numel > (uint64_t{1} << 62) / d) throw bad(msg("shape ", shape.dump(), " overflows"));
    numel *= d;
    dims.push_back(static_cast<int64_t>(d));
  }
  return numel;
}

// Sets the entry's byte range from `offsets`, which must lie within the data section.
void parse_data_offsets(const nlohmann::json& offsets, uint64_t data_size_bytes, const TensorProblem& bad,
                        SafetensorsEntry& entry) {
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    throw bad("data_offsets is not a pair of natural numbers");
  }
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  if (entry.begin > entry.end || entry.end > data_size_bytes) {
    throw bad(msg("data_offsets [", entry.begin, ", ", entry.end, ") point outside the data section of ",
                  data_size_bytes, " bytes (file truncated?)"));
  }
}

SafetensorsEntry parse_tensor_entry(const std::string& name, const nlohmann::json& value, uint64_t data_size_bytes,
                                    const std::string& path) {
  const TensorProblem bad{path, name};
  if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets")) {
    throw bad("entry needs dtype, shape and data_offsets");
  }
  SafetensorsEntry entry;
  entry.name = name;
  entry.dtype = parse_dtype(value["dtype"], bad);
  const uint64_t numel = parse_shape(value["shape"], bad, entry.shape);
  parse_data_offsets(value["data_offsets"], data_size_bytes, bad, entry);
  const uint64_t expected_bytes = numel * torch::elementSize(entry.dtype);
  if (entry.end - entry.begin != expected_bytes) {
    throw bad(msg("data_offsets cover ", entry.end - entry.begin, " bytes but shape ", value["shape"].dump(), " of ",
                  value["dtype"].get<std::string>(), " needs ", expected_bytes));
  }
  return entry;
}

void check_no_overlap(const std::vector<SafetensorsEntry>& entries, const std::string& path) {
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end && by_offset[i]->begin != by_offset[i]->end) {
      throw Error(msg(path, ": tensors '", by_offset[i - 1]->name, "' and '", by_offset[i]->name, "' overlap"));
    }
  }
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;
  const int fd = open_read_only(path);
  const uint64_t file_size_bytes = read_file_size_bytes(fd, path);
  file.mapping_ = std::make_shared<Mapping>();
  file.mapping_->size = file_size_bytes;
  file.mapping_->address = map_and_close(fd, file_size_bytes, path);
  const auto* bytes = static_cast<const uint8_t*>(file.mapping_->address);

  const uint64_t header_size_bytes = read_header_size_bytes(bytes, file_size_bytes, path);
  const nlohmann::json header = parse_header(bytes, header_size_bytes, path);
  file.data_ = bytes + kHeaderLengthBytes + header_size_bytes;
  const uint64_t data_size_bytes = file_size_bytes - kHeaderLengthBytes - header_size_bytes;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      read_metadata(value, path, file.metadata_);
      continue;
    }
    SafetensorsEntry entry = parse_tensor_entry(name, value, data_size_bytes, path);
    file.index_[name] = file.entries_.size();
    file.entries_.push_back(std::move(entry));
  }
  check_no_overlap(file.entries_, path);  // buffers may not overlap
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw Error(msg(path_, ": no tensor '", name, "'"));
  return entries_[it->second];
}

torch::Tensor SafetensorsFile::read(const std::string& name) const {
  const auto& e = entry(name);
  return read_slice(name, 0, 0, e.shape.empty() ? 1 : e.shape[0]);
}

torch::Tensor SafetensorsFile::read_slice(const std::string& name, int64_t dim, int64_t offset, int64_t length) const {
  const auto& e = entry(name);
  const uint8_t* start = data_ + e.begin;
  if (e.shape.empty()) {  // a scalar
    torch::Tensor out = torch::empty({}, torch::TensorOptions().dtype(e.dtype));
    std::memcpy(out.data_ptr(), start, e.end - e.begin);
    return out;
  }
  T5S_CHECK(dim >= 0 && dim < static_cast<int64_t>(e.shape.size()), path_, ": tensor '", name, "' has no dimension ",
            dim);
  T5S_CHECK(offset >= 0 && length >= 0 && offset + length <= e.shape[dim], path_, ": tensor '", name, "': slice [",
            offset, ", ", offset + length, ") of dimension ", dim, " is outside its size ", e.shape[dim]);
  torch::Tensor out;
  const size_t element = torch::elementSize(e.dtype);
  if (reinterpret_cast<uintptr_t>(start) % element == 0) {
    // The mapping stays alive until the copy below is made; from_blob does not own the memory.
    const torch::Tensor view = torch::from_blob(const_cast<uint8_t*>(start), e.shape, torch::TensorOptions().dtype(e.dtype));
    out = view.narrow(dim, offset, length).clone(at::MemoryFormat::Contiguous);
  } else {  // unaligned buffer: copy the bytes first
    torch::Tensor aligned = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
    std::memcpy(aligned.data_ptr(), start, e.end - e.begin);
    out = aligned.narrow(dim, offset, length).contiguous();
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> buffers;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    T5S_CHECK(!header.contains(name), path, ": tensor name '", name, "' given twice");
    torch::Tensor cpu = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = cpu.numel() * cpu.element_size();
    header[name] = {{"dtype", safetensors_dtype_name(cpu.scalar_type())},
                    {"shape", cpu.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    buffers.push_back(std::move(cpu));
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // keeps every buffer 8-byte aligned
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    T5S_CHECK(out.good(), temporary, ": cannot open for writing: ", std::strerror(errno));
    uint8_t length[8];
    const uint64_t n = header_text.size();
    for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>((n >> (8 * i)) & 0xff);
    out.write(reinterpret_cast<const char*>(length), 8);
    out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
    for (const auto& buffer : buffers) {
      out.write(static_cast<const char*>(buffer.data_ptr()), static_cast<std::streamsize>(buffer.nbytes()));
    }
    out.flush();
    T5S_CHECK(out.good(), temporary, ": write failed: ", std::strerror(errno));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw Error(msg(path, ": cannot rename from ", temporary, ": ", std::strerror(errno)));
  }
}

}  // namespace t5scale
