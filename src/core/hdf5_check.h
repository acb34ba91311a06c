// Error handling and handle ownership for code that calls the HDF5 C API.
//
//   hid_t file = H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), path);
//
// A negative return value throws t5scale::Error naming the HDF5 file it worked on and HDF5's own reason (the
// outermost and innermost entries of its error stack: "unable to open file (file is already open for write)"),
// with the call and its place as the error's check text. H5Handle closes whatever kind of id it owns. Hdf5Quiet stops HDF5 from printing its error stack to
// stderr while our calls run, since every failure is reported in the thrown message instead.
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>

#include "core/check.h"

namespace t5scale {

namespace detail {
// "<outermost description> (<innermost description>)" of HDF5's current error stack, then clears it.
std::string hdf5_error_stack_text();

template <typename T>
T h5_check(T result, const char* expression, const std::string& h5_file, const char* source_file, int line) {
  if (result < 0) {
    // The reason is the user's; the call and where it was made go to the debug line.
    throw Error(msg("HDF5 failed on '", h5_file, "': ", hdf5_error_stack_text()),
                msg("HDF5 call '", expression, "' failed at ", source_file, ":", line));
  }
  return result;
}
}  // namespace detail

// Owns one HDF5 id (file, group, dataset, dataspace, datatype, attribute or property list) and closes it with
// the matching H5?close.
class H5Handle {
 public:
  H5Handle() = default;
  explicit H5Handle(hid_t id) : id_(id) {}
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
  H5Handle& operator=(H5Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  ~H5Handle() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Gives the id up to the caller, who closes it.
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  // Closes now; returns HDF5's status (negative on failure), 0 when nothing was held.
  herr_t reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// While alive, HDF5 prints nothing on errors (the previous handler comes back afterwards).
class Hdf5Quiet {
 public:
  Hdf5Quiet();
  ~Hdf5Quiet();
  Hdf5Quiet(const Hdf5Quiet&) = delete;
  Hdf5Quiet& operator=(const Hdf5Quiet&) = delete;

 private:
  H5E_auto2_t previous_function_ = nullptr;
  void* previous_data_ = nullptr;
};

}  // namespace t5scale

// H5_CHECK(H5Dwrite(...), path): the call's result, or a t5scale::Error naming the call, the file and the reason.
#define H5_CHECK(expression, h5_file) \
  ::t5scale::detail::h5_check((expression), #expression, (h5_file), __FILE__, __LINE__)
