// Where the runs of a submitted study stand: the job ids that `t5scale-study submit` recorded, what Slurm says
// about them (squeue for queued and running jobs, sacct or scontrol for ended ones), and what each run file says
// (its root `status` attribute and its last step, read with SWMR read so that the file of a running or killed
// job opens). The two are joined into one state per run: pending, running, completed, preempted (requeued),
// failed, diverged.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "telemetry/run_file_state.h"

namespace t5scale {

// ---- Commands ----

struct CommandResult {
  int exit_code = -1;  // -1: could not be started
  std::string output;  // stdout
  std::string errors;  // stderr
};
// Runs argv[0] (looked up on PATH) with the arguments, capturing stdout and stderr.
CommandResult run_command(const std::vector<std::string>& argv);
// The program's path on PATH, or "" when it is not there.
std::string find_on_path(const std::string& program);
// Throws an Error naming the missing Slurm client command and what needs it.
void require_slurm_command(const std::string& program, const std::string& purpose);

// ---- Job records (jobs.csv) ----

struct JobRecord {
  std::string run;
  std::string job_id;  // "1234", or "1234_5" for a task of a job array
  std::string submit_time_utc;
  std::string script;
};
std::vector<JobRecord> read_job_records(const std::string& path);  // [] when the file does not exist
void append_job_records(const std::string& path, const std::vector<JobRecord>& records);
// The job id that `sbatch --parsable` printed ("1234" or "1234;cluster"), or an Error quoting the output.
std::string parse_sbatch_job_id(const std::string& output);

// ---- Slurm's view ----

struct SlurmJobState {
  std::string state;    // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, ...
  std::string elapsed;  // as Slurm prints it
  std::string exit_code;  // "0:0", or "" when unknown
  std::string source;   // squeue, sacct, scontrol
};

// Jobs by id. squeue first; ids it does not list are asked of sacct, and where accounting is off, of scontrol
// (which remembers ended jobs for MinJobAge seconds). `notes` says which sources failed and why.
std::map<std::string, SlurmJobState> query_slurm_jobs(const std::vector<std::string>& job_ids,
                                                      std::vector<std::string>& notes);

// Whether Slurm still holds a job in this state: waiting for its start (pending, requeued, held, configuring,
// suspended) or running (and ending: completing, signaling, staging out).
bool slurm_job_waits(const std::string& state);
bool slurm_job_runs(const std::string& state);

// The runs `t5scale-study submit` leaves alone, each with why: one whose run file says completed, and one whose
// latest job (jobs.csv) Slurm still holds (waiting or running). `run_files`: each run's name and its run file.
std::map<std::string, std::string> runs_to_leave_alone(const std::vector<std::pair<std::string, std::string>>& run_files,
                                                       const std::vector<JobRecord>& jobs,
                                                       const std::map<std::string, SlurmJobState>& slurm);

// The state of one run from its job and its run file: pending, running, completed, preempted (requeued),
// preempted, failed (with the reason), diverged, not submitted.
std::string run_state(const JobRecord* job, const SlurmJobState* slurm, const RunFileState& file);

}  // namespace t5scale
