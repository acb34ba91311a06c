// Where a run stands by its run file, for a reader that polls it while the job may be writing it (t5scale-study
// status and submit): the root status, attempt and max_steps, the rows of /steps and the last step, read with SWMR
// read so that the file of a running or killed job opens, and never a lock a writer could wait on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "telemetry/run_status.h"

namespace t5scale {

struct RunFileState {
  bool exists = false;
  std::string error;                // the file exists but could not be read (the reason, with the path)
  std::optional<RunStatus> status;  // the root attribute (set whenever exists and error is empty)
  int64_t attempt = -1;
  int64_t max_steps = -1;
  int64_t steps_rows = 0;  // rows of /steps
  int64_t last_step = -1;  // the step of the last row, -1 without rows
};

// Reads a run file (schema 1) opened with H5F_ACC_SWMR_READ; never throws for a missing or unreadable file.
RunFileState read_run_file_state(const std::string& path);

// The root status of a run file that its job closed ("completed", "preempted", "diverged", "failed"); "" when the
// file is absent, still open for writing, damaged or not a run file. Opened without SWMR, so that HDF5 checks the
// file's stored end against its size and a damaged file answers at once.
std::string closed_run_file_status(const std::string& path);

}  // namespace t5scale
