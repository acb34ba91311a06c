#include "telemetry/run_status.h"

namespace t5scale {

const char* run_status_name(RunStatus status) {
  switch (status) {
    case RunStatus::kRunning: return "running";
    case RunStatus::kCompleted: return "completed";
    case RunStatus::kPreempted: return "preempted";
    case RunStatus::kDiverged: return "diverged";
    case RunStatus::kFailed: return "failed";
  }
  return "?";
}

std::optional<RunStatus> parse_run_status(const std::string& name) {
  for (const RunStatus status : {RunStatus::kRunning, RunStatus::kCompleted, RunStatus::kPreempted,
                                 RunStatus::kDiverged, RunStatus::kFailed}) {
    if (name == run_status_name(status)) return status;
  }
  return std::nullopt;
}

const std::vector<RunStatus>& final_run_statuses() {
  static const std::vector<RunStatus> statuses = {RunStatus::kCompleted, RunStatus::kPreempted, RunStatus::kDiverged,
                                                  RunStatus::kFailed};
  return statuses;
}

std::string final_run_status_names() {
  std::string names;
  for (const RunStatus status : final_run_statuses()) {
    names += (names.empty() ? "" : ", ") + std::string(run_status_name(status));
  }
  return names;
}

}  // namespace t5scale
