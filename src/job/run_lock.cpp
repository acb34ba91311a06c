#include "job/run_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/utc_time.h"

namespace t5scale {
namespace fs = std::filesystem;

namespace {

std::string this_host() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

std::string this_slurm_job() {
  const char* job = std::getenv("SLURM_JOB_ID");
  return job ? job : "";
}

// "host=...\njob=...\npid=...\nstarted=...\n": one line a field, what a person reads with cat.
std::string lock_text(const RunLockOwner& owner) {
  return msg("host=", owner.host, "\nslurm_job_id=", owner.slurm_job_id, "\npid=", owner.pid,
             "\nstarted_utc=", owner.started_utc, "\n");
}

std::string describe(const RunLockOwner& owner) {
  return msg("host ", owner.host, owner.slurm_job_id.empty() ? "" : ", Slurm job " + owner.slurm_job_id, ", pid ",
             owner.pid, ", since ", owner.started_utc);
}

double age_s(const fs::path& path) {
  std::error_code error;
  const auto written = fs::last_write_time(path, error);
  if (error) return 0.0;
  return std::chrono::duration<double>(fs::file_time_type::clock::now() - written).count();
}

// Creates `path` holding `text`, failing when it exists (O_EXCL: one of two racing jobs wins).
bool create_exclusively(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return false;
    throw Error(msg("cannot create the run lock '", path, "': ", std::strerror(errno)));
  }
  const ssize_t written = ::write(fd, text.data(), text.size());
  const bool complete = written == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!complete) {
    ::unlink(path.c_str());
    throw Error(msg("cannot write the run lock '", path, "' (disk full?)"));
  }
  return true;
}

}  // namespace

std::optional<RunLockOwner> read_run_lock(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  RunLockOwner owner;
  std::string line;
  bool any = false;
  while (std::getline(in, line)) {
    const size_t equals = line.find('=');
    if (equals == std::string::npos) continue;
    const std::string key = line.substr(0, equals), value = line.substr(equals + 1);
    if (key == "host") owner.host = value, any = true;
    else if (key == "slurm_job_id") owner.slurm_job_id = value;
    else if (key == "pid") owner.pid = std::atoll(value.c_str());
    else if (key == "started_utc") owner.started_utc = value;
  }
  if (!any) return std::nullopt;
  return owner;
}

std::string why_run_lock_is_stale(const RunLockOwner& owner, double heartbeat_age_s) {
  const std::string job = this_slurm_job();
  if (!job.empty() && owner.slurm_job_id == job) {
    return msg("it was taken by this Slurm job ", job, " before a restart or requeue");
  }
  if (owner.host == this_host()) {
    if (owner.pid <= 0) return "it names no process";
    if (owner.pid == static_cast<int64_t>(getpid())) return "";
    if (::kill(static_cast<pid_t>(owner.pid), 0) != 0 && errno == ESRCH) {
      return msg("its process ", owner.pid, " on this host is gone");
    }
    // A process that has exited but not been reaped yet (a zombie) still answers kill(pid, 0).
    std::ifstream stat(msg("/proc/", owner.pid, "/stat"));
    std::string pid_field, command, state;
    if (stat >> pid_field >> command >> state && state == "Z") {
      return msg("its process ", owner.pid, " on this host has exited");
    }
    return "";
  }
  if (heartbeat_age_s > RunLock::kStaleAfterS) {
    return msg("its heartbeat stopped ", static_cast<int64_t>(heartbeat_age_s), " s ago");
  }
  return "";
}

RunLock::RunLock(std::string path, const std::string& run) : path_(std::move(path)) {
  RunLockOwner me{this_host(), this_slurm_job(), utc_iso_time(), static_cast<int64_t>(getpid())};
  token_ = lock_text(me);
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (create_exclusively(path_, token_)) break;
    const std::optional<RunLockOwner> owner = read_run_lock(path_);
    const double heartbeat_age_s = age_s(path_);
    const std::string stale =
        owner ? why_run_lock_is_stale(*owner, heartbeat_age_s)
              : (heartbeat_age_s > 5.0 ? "it is empty or unreadable" : "");  // a racing job may be writing it
    if (stale.empty()) {
      throw Error(msg("run '", run, "' is owned by another job: ",
                      owner ? describe(*owner) : std::string("a job that is writing its lock now"), " (",
                      path_, ", refreshed ", static_cast<int64_t>(heartbeat_age_s),
                      " s ago). Two jobs must not share a run's checkpoints and run file: wait for that job, or "
                      "give this one another run.name or run.output_dir. If that job is gone, the lock counts as "
                      "stale ", static_cast<int64_t>(kStaleAfterS), " s after its last refresh, or remove it."));
    }
    takeover_note_ = msg("took over the stale lock ", path_, " of ", owner ? describe(*owner) : std::string("?"),
                         ": ", stale);
    std::error_code ignored;
    fs::remove(path_, ignored);
    if (attempt == 2) throw Error(msg("cannot take the run lock '", path_, "': another job keeps taking it"));
  }
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

void RunLock::heartbeat_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::duration<double>(kHeartbeatS), [this] { return stopping_; })) {
    std::error_code ignored;
    fs::last_write_time(path_, fs::file_time_type::clock::now(), ignored);
  }
}

void RunLock::release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (heartbeat_.joinable() && heartbeat_.get_id() != std::this_thread::get_id()) heartbeat_.join();
  // Only our own lock is removed: one taken over from us (after a long stall) belongs to someone else now.
  std::ifstream in(path_);
  std::stringstream text;
  text << in.rdbuf();
  if (in && text.str() == token_) ::unlink(path_.c_str());
}

RunLock::~RunLock() { release(); }

}  // namespace t5scale
