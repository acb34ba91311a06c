// One job at a time in a run's place: <output_dir>/<run>.lock names the job that owns the run (its host, Slurm job
// id, pid and start time) and is refreshed every kHeartbeatS seconds while it lives. A second job with the same run
// name and output folder is refused with the owner named, before it reads a checkpoint or touches the run file.
//
// A lock left by a job that died is recognised as stale and taken over: on the same host when its pid is gone; in
// the same Slurm job (a requeued or restarted job has the same job id, and Slurm runs one instance of a job at a
// time); on another host when its heartbeat is older than kStaleAfterS.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace t5scale {

struct RunLockOwner {
  std::string host, slurm_job_id, started_utc;
  int64_t pid = 0;
};

class RunLock {
 public:
  static constexpr double kHeartbeatS = 20.0;
  static constexpr double kStaleAfterS = 120.0;

  // Takes the lock at `path` for this process, or throws naming its owner. `run` is the run's name, for messages.
  RunLock(std::string path, const std::string& run);
  ~RunLock();  // releases it (removes the file, if it is still ours)
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }
  // What the caller should say when it took over a stale lock ("" otherwise).
  const std::string& takeover_note() const { return takeover_note_; }

  // Removes the lock now (also from a failure path that will not unwind).
  void release();

 private:
  void heartbeat_loop();

  std::string path_, token_, takeover_note_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread heartbeat_;
};

// The owner written in the lock at `path`, if it can be read.
std::optional<RunLockOwner> read_run_lock(const std::string& path);
// Why the owner of a lock is gone ("" when it may still be running), as seen from this process.
std::string why_run_lock_is_stale(const RunLockOwner& owner, double heartbeat_age_s);

}  // namespace t5scale
