#include "telemetry/run_file_state.h"

#include <hdf5.h>

#include <filesystem>
#include <optional>
#include <variant>

#include "core/check.h"
#include "core/hdf5_attributes.h"
#include "core/hdf5_check.h"
#include "core/hdf5_superblock.h"

namespace t5scale {

namespace fs = std::filesystem;

RunFileState read_run_file_state(const std::string& path) {
  RunFileState state;
  std::error_code ec;
  state.exists = fs::exists(path, ec);
  if (!state.exists) return state;
  try {
    Hdf5Quiet quiet;
    // SWMR read opens the file of a running writer and of one that was killed; a file finished without SWMR
    // (the summary is written after SWMR ends) opens the same way.
    // Without HDF5's file lock: a poll that holds a shared lock while the trainer reopens the file at its end
    // (or at a resume) would make the trainer's open fail; a poll that reads a file changing under it fails
    // this once and is asked again.
    // A truncated file would make SWMR read retry for minutes: the superblock says so first (core/hdf5_superblock.h).
    const Hdf5SuperblockCheck superblock = check_hdf5_superblock(path);
    if (!superblock.damage.empty()) throw Error(msg(path, ": ", superblock.damage));
    H5Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), path));
    H5_CHECK(H5Pset_file_locking(fapl.get(), false, true), path);
    limit_swmr_read_attempts(fapl.get(), path);
    hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl.get());
    if (id < 0) {
      detail::hdf5_error_stack_text();
      id = H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), path);
    }
    H5Handle file(id);
    const std::string status = read_required<std::string>(file.get(), "status", path, "the run file's root");
    state.status = parse_run_status(status);
    T5S_CHECK(state.status.has_value(), path, ": status '", status, "' is none of running, ", final_run_status_names());
    state.attempt = read_required<int64_t>(file.get(), "attempt", path, "the run file's root");
    state.max_steps = read_required<int64_t>(file.get(), "max_steps", path, "the run file's root");
    H5Handle steps(H5_CHECK(H5Dopen2(file.get(), "/steps/step", H5P_DEFAULT), path));
    H5Handle space(H5_CHECK(H5Dget_space(steps.get()), path));
    T5S_CHECK(H5Sget_simple_extent_ndims(space.get()) == 1, path, ": /steps/step is not 1-D");
    hsize_t rows = 0;
    H5_CHECK(H5Sget_simple_extent_dims(space.get(), &rows, nullptr), path);
    state.steps_rows = static_cast<int64_t>(rows);
    if (rows > 0) {
      const hsize_t start = rows - 1, count = 1;
      H5_CHECK(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr), path);
      H5Handle memory(H5_CHECK(H5Screate_simple(1, &count, nullptr), path));
      int64_t last = -1;
      H5_CHECK(H5Dread(steps.get(), H5T_NATIVE_INT64, memory.get(), space.get(), H5P_DEFAULT, &last), path);
      state.last_step = last;
    }
  } catch (const Error& e) {
    state.error = e.what();
    state.status.reset();
  }
  return state;
}

std::string closed_run_file_status(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || !check_hdf5_superblock(path).damage.empty()) return "";
  Hdf5Quiet quiet;
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) return "";
  std::string status;
  try {
    const std::optional<Hdf5Value> value = read_attribute(file, "status", path);
    if (value && std::holds_alternative<std::string>(*value)) status = std::get<std::string>(*value);
  } catch (const Error&) {
    status = "";
  }
  H5Fclose(file);
  return status;
}

}  // namespace t5scale
