#include "core/hdf5_attributes.h"

#include <algorithm>

#include "core/hdf5_check.h"

namespace t5scale {

void write_attribute(hid_t location, const std::string& name, const Hdf5Value& value, const std::string& path) {
  H5Handle space(H5_CHECK(H5Screate(H5S_SCALAR), path));
  if (const auto* integer = std::get_if<int64_t>(&value)) {
    H5Handle attribute(H5_CHECK(
        H5Acreate2(location, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), path));
    H5_CHECK(H5Awrite(attribute.get(), H5T_NATIVE_INT64, integer), path);
  } else if (const auto* real = std::get_if<double>(&value)) {
    H5Handle attribute(H5_CHECK(
        H5Acreate2(location, name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), path));
    H5_CHECK(H5Awrite(attribute.get(), H5T_NATIVE_DOUBLE, real), path);
  } else {
    std::string text = std::get<std::string>(value);
    const size_t size = std::max<size_t>(1, text.size());
    text.resize(size, '\0');
    H5Handle type(H5_CHECK(H5Tcopy(H5T_C_S1), path));
    H5_CHECK(H5Tset_size(type.get(), size), path);
    H5_CHECK(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), path);
    H5_CHECK(H5Tset_cset(type.get(), H5T_CSET_UTF8), path);
    H5Handle attribute(
        H5_CHECK(H5Acreate2(location, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), path));
    H5_CHECK(H5Awrite(attribute.get(), type.get(), text.data()), path);
  }
}

std::optional<Hdf5Value> read_attribute(hid_t location, const std::string& name, const std::string& path) {
  if (H5_CHECK(H5Aexists(location, name.c_str()), path) <= 0) return std::nullopt;
  H5Handle attribute(H5_CHECK(H5Aopen(location, name.c_str(), H5P_DEFAULT), path));
  H5Handle space(H5_CHECK(H5Aget_space(attribute.get()), path));
  const hssize_t points = H5_CHECK(H5Sget_simple_extent_npoints(space.get()), path);
  T5S_CHECK(points == 1, "'", path, "': attribute '", name, "' must be a scalar, it has ", points, " elements");
  H5Handle type(H5_CHECK(H5Aget_type(attribute.get()), path));
  switch (H5Tget_class(type.get())) {
    case H5T_INTEGER: {
      int64_t value = 0;
      H5_CHECK(H5Aread(attribute.get(), H5T_NATIVE_INT64, &value), path);
      return value;
    }
    case H5T_FLOAT: {
      double value = 0;
      H5_CHECK(H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value), path);
      return value;
    }
    case H5T_STRING: {
      T5S_CHECK(H5_CHECK(H5Tis_variable_str(type.get()), path) == 0, "'", path, "': attribute '", name,
                "' is a variable-length string; t5scale's files have fixed-length ones");
      const size_t size = H5Tget_size(type.get());
      T5S_CHECK(size > 0 && size < (size_t{1} << 30), "'", path, "': attribute '", name,
                "' has an implausible size ", size);
      std::string text(size, '\0');
      H5_CHECK(H5Aread(attribute.get(), type.get(), text.data()), path);
      text.erase(std::find(text.begin(), text.end(), '\0'), text.end());  // NUL-padded or NUL-terminated
      return text;
    }
    default: throw Error(msg("'", path, "': attribute '", name, "' is neither a number nor a string"));
  }
}

const Hdf5Value* find_attribute(const Hdf5Attributes& attributes, const std::string& name) {
  for (const auto& [key, value] : attributes) {
    if (key == name) return &value;
  }
  return nullptr;
}

}  // namespace t5scale
