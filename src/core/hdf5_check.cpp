#include "core/hdf5_check.h"

#include <algorithm>
#include <string>
#include <vector>

namespace t5scale {

namespace detail {

std::string hdf5_error_stack_text() {
  std::vector<std::string> descriptions;
  auto collect = [](unsigned, const H5E_error2_t* error, void* data) -> herr_t {
    auto* out = static_cast<std::vector<std::string>*>(data);
    out->push_back(error->desc != nullptr ? error->desc : "");
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &descriptions);
  H5Eclear2(H5E_DEFAULT);
  if (descriptions.empty()) return "no HDF5 error message";
  // The operating system's failure, as HDF5's file driver words it ("file write failed: time = ..., filename = ...,
  // errno = 28, error message = 'No space left on device', buf = ..."): its kind and the system's reason.
  std::string& lowest = descriptions.back();
  const std::string quoted = "error message = '";
  const size_t reason = lowest.find(quoted);
  if (reason != std::string::npos) {
    const size_t end = lowest.find('\'', reason + quoted.size());
    const size_t kind = lowest.find(':');
    lowest = lowest.substr(0, std::min(kind, reason)) + ": " +
             lowest.substr(reason + quoted.size(), end == std::string::npos ? std::string::npos
                                                                             : end - reason - quoted.size());
  }
  // Downward: the API function's own entry first, the lowest layer (often the operating system's reason) last.
  if (descriptions.size() == 1 || descriptions.front() == descriptions.back()) return descriptions.front();
  return descriptions.front() + " (" + descriptions.back() + ")";
}

}  // namespace detail

herr_t H5Handle::reset() {
  if (id_ < 0) return 0;
  const hid_t id = std::exchange(id_, H5I_INVALID_HID);
  switch (H5Iget_type(id)) {
    case H5I_FILE: return H5Fclose(id);
    case H5I_GROUP: return H5Gclose(id);
    case H5I_DATASET: return H5Dclose(id);
    case H5I_DATASPACE: return H5Sclose(id);
    case H5I_DATATYPE: return H5Tclose(id);
    case H5I_ATTR: return H5Aclose(id);
    case H5I_GENPROP_LST: return H5Pclose(id);
    default: return H5Idec_ref(id);
  }
}

Hdf5Quiet::Hdf5Quiet() {
  H5Eget_auto2(H5E_DEFAULT, &previous_function_, &previous_data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

Hdf5Quiet::~Hdf5Quiet() { H5Eset_auto2(H5E_DEFAULT, previous_function_, previous_data_); }

}  // namespace t5scale
