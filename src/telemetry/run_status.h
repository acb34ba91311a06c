// A run's status: the run file's root attribute "status", as the job writes it and the study, the analysis and the
// programs read it. The one list of them.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace t5scale {

enum class RunStatus {
  kRunning,    // the job is writing the file, or was killed while it did
  kCompleted,  // every step trained (or early stopping ended it)
  kPreempted,  // the job saved a checkpoint on a signal and ended to be requeued
  kDiverged,   // the loss went non-finite past the job's patience
  kFailed,     // the job ended with an error (the file's `error` says which)
};

// "running", "completed", "preempted", "diverged", "failed".
const char* run_status_name(RunStatus status);
// The status a name stands for; none for any other text.
std::optional<RunStatus> parse_run_status(const std::string& name);
// The statuses a job writes when it ends: all but running.
const std::vector<RunStatus>& final_run_statuses();
// "completed, preempted, diverged, failed": for messages.
std::string final_run_status_names();

}  // namespace t5scale
