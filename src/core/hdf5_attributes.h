// Scalar HDF5 attributes, as every t5scale file writes and reads them (the run file, the tokenized dataset, the
// study's status poll): 64-bit integers, 64-bit floats, and fixed-length NUL-padded UTF-8 strings (no
// variable-length types: SWMR and the formats allow none).
//
//   write_attribute(file, "schema_version", int64_t{1}, path);
//   std::optional<Hdf5Value> value = read_attribute(file, "status", path);   // std::nullopt when absent
//   std::string status = read_required<std::string>(file, "status", path, "the run file's root");
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/check.h"

namespace t5scale {

using Hdf5Value = std::variant<int64_t, double, std::string>;
// Named values in the order they are written (a run file's root attributes, its /summary).
using Hdf5Attributes = std::vector<std::pair<std::string, Hdf5Value>>;
// The value named `name` in `attributes`, nullptr when there is none.
const Hdf5Value* find_attribute(const Hdf5Attributes& attributes, const std::string& name);

// Creates the attribute `name` on `location` (a file, group or dataset). "" is stored as one NUL (HDF5 refuses
// strings of size 0) and read back as "".
void write_attribute(hid_t location, const std::string& name, const Hdf5Value& value, const std::string& path);

// The attribute's value, std::nullopt when it does not exist. An attribute that is not a scalar integer, float or
// fixed-length string throws, naming the file and the attribute.
std::optional<Hdf5Value> read_attribute(hid_t location, const std::string& name, const std::string& path);

// The attribute, which must exist and hold a T (int64_t, double or std::string); `where` names the object in the
// messages ("the root", "split 'train'").
template <typename T>
T read_required(hid_t location, const std::string& name, const std::string& path, const std::string& where) {
  const std::optional<Hdf5Value> value = read_attribute(location, name, path);
  T5S_CHECK(value.has_value(), "'", path, "': ", where, " has no attribute '", name, "'");
  const T* typed = std::get_if<T>(&*value);
  T5S_CHECK(typed != nullptr, "'", path, "': attribute '", name, "' of ", where, " must be ",
            std::is_same_v<T, std::string> ? "a string" : std::is_same_v<T, int64_t> ? "an integer" : "a number");
  return *typed;
}

}  // namespace t5scale
