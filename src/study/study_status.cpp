#include "study/study_status.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/check.h"

namespace t5scale {

namespace {

namespace fs = std::filesystem;

std::string trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, separator)) out.push_back(item);
  if (!text.empty() && text.back() == separator) out.push_back("");
  return out;
}

}  // namespace

// ---- Commands ----

std::string find_on_path(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0 ? program : "";
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (const auto& folder : split(path, ':')) {
    const std::string candidate = (folder.empty() ? std::string(".") : folder) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

void require_slurm_command(const std::string& program, const std::string& purpose) {
  if (find_on_path(program).empty()) {
    throw Error(msg(program, " is not on PATH: ", purpose, " needs Slurm's client commands (sbatch, squeue, sacct, "
                             "scontrol). On a cluster, run it on a login node (module load slurm, if the site "
                             "uses modules); on Debian, apt-get install slurm-client."));
  }
}

CommandResult run_command(const std::vector<std::string>& argv) {
  T5S_CHECK(!argv.empty(), "run_command: no program");
  CommandResult result;
  int out_pipe[2], err_pipe[2];
  T5S_CHECK(::pipe(out_pipe) == 0 && ::pipe(err_pipe) == 0, "pipe: ", std::strerror(errno));
  const pid_t pid = ::fork();
  T5S_CHECK(pid >= 0, "fork: ", std::strerror(errno));
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    const std::string message = msg("cannot run ", argv[0], ": ", std::strerror(errno), "\n");
    (void)!::write(STDERR_FILENO, message.data(), message.size());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.output, &result.errors};
  int open_count = 2;
  char buffer[4096];
  while (open_count > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// ---- Job records ----

std::vector<JobRecord> read_job_records(const std::string& path) {
  std::vector<JobRecord> records;
  std::ifstream in(path);
  if (!in) return records;
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    if (header) {
      header = false;
      continue;
    }
    if (trim(line).empty()) continue;
    const auto fields = split(line, ',');
    T5S_CHECK(fields.size() >= 2, path, ": malformed line '", line, "' (expected run,job_id,submit_time_utc,script)");
    records.push_back({fields[0], fields[1], fields.size() > 2 ? fields[2] : "", fields.size() > 3 ? fields[3] : ""});
  }
  return records;
}

void append_job_records(const std::string& path, const std::vector<JobRecord>& records) {
  std::error_code ec;
  const bool fresh = !fs::exists(path, ec);
  std::ofstream out(path, std::ios::app);
  T5S_CHECK(out.good(), "cannot write ", path);
  if (fresh) out << "run,job_id,submit_time_utc,script\n";
  for (const auto& r : records) out << r.run << "," << r.job_id << "," << r.submit_time_utc << "," << r.script << "\n";
  out.close();
  T5S_CHECK(out.good(), "cannot write ", path);
}

std::string parse_sbatch_job_id(const std::string& output) {
  const std::string text = trim(output);
  const std::string id = text.substr(0, text.find(';'));
  const bool numeric = !id.empty() && id.find_first_not_of("0123456789") == std::string::npos;
  T5S_CHECK(numeric, "sbatch --parsable printed '", text, "', not a job id");
  return id;
}

// ---- Slurm ----

std::map<std::string, SlurmJobState> query_slurm_jobs(const std::vector<std::string>& job_ids,
                                                      std::vector<std::string>& notes) {
  std::map<std::string, SlurmJobState> jobs;
  if (job_ids.empty()) return jobs;
  const std::set<std::string> wanted(job_ids.begin(), job_ids.end());

  // Queued and running jobs (one line per array task).
  const CommandResult queue = run_command({"squeue", "-h", "-r", "-o", "%i|%T|%M", "--me"});
  if (queue.exit_code != 0) {
    throw Error(msg("squeue failed (exit ", queue.exit_code, "): ", trim(queue.errors)));
  }
  for (const auto& line : split(queue.output, '\n')) {
    const auto f = split(trim(line), '|');
    if (f.size() >= 3 && wanted.count(f[0])) jobs[f[0]] = {f[1], f[2], "", "squeue"};
  }

  std::vector<std::string> ended;
  for (const auto& id : job_ids) {
    if (!jobs.count(id)) ended.push_back(id);
  }
  if (ended.empty()) return jobs;

  // Ended jobs: accounting, when the cluster keeps it.
  const CommandResult accounting =
      run_command({"sacct", "-n", "-P", "-X", "-j", join(ended, ","), "-o", "JobID,State,Elapsed,ExitCode"});
  if (accounting.exit_code == 0) {
    for (const auto& line : split(accounting.output, '\n')) {
      const auto f = split(trim(line), '|');
      if (f.size() < 4 || !wanted.count(f[0])) continue;
      const std::string state = f[1].substr(0, f[1].find(' '));  // "CANCELLED by 0"
      jobs[f[0]] = {state, f[2], f[3], "sacct"};
    }
  } else {
    notes.push_back(msg("sacct: ", trim(accounting.errors).empty() ? msg("exit ", accounting.exit_code)
                                                                  : trim(accounting.errors),
                        "; ended jobs asked of scontrol (it keeps them for MinJobAge)"));
  }

  // What accounting did not know (or accounting is off): the controller's memory of recent jobs.
  for (const auto& id : ended) {
    if (jobs.count(id)) continue;
    const CommandResult show = run_command({"scontrol", "-o", "show", "job", id});
    if (show.exit_code != 0) continue;
    SlurmJobState s;
    s.source = "scontrol";
    for (const auto& field : split(trim(show.output), ' ')) {
      const size_t eq = field.find('=');
      if (eq == std::string::npos) continue;
      const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
      if (key == "JobState") s.state = value;
      if (key == "RunTime") s.elapsed = value;
      if (key == "ExitCode") s.exit_code = value;
    }
    if (!s.state.empty()) jobs[id] = s;
  }
  return jobs;
}

bool slurm_job_waits(const std::string& state) {
  for (const char* waiting : {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESV_DEL_HOLD",
                              "SUSPENDED"}) {
    if (state == waiting) return true;
  }
  return false;
}

bool slurm_job_runs(const std::string& state) {
  return state == "RUNNING" || state == "COMPLETING" || state == "SIGNALING" || state == "STAGE_OUT";
}

std::map<std::string, std::string> runs_to_leave_alone(const std::vector<std::pair<std::string, std::string>>& run_files,
                                                       const std::vector<JobRecord>& jobs,
                                                       const std::map<std::string, SlurmJobState>& slurm) {
  std::map<std::string, std::string> latest_job;  // run -> job id, the last one recorded
  for (const JobRecord& r : jobs) latest_job[r.run] = r.job_id;
  std::map<std::string, std::string> leave;  // run -> why
  for (const auto& [run, path] : run_files) {
    const RunFileState file = read_run_file_state(path);
    if (file.exists && file.status == RunStatus::kCompleted) {
      leave[run] = run_status_name(RunStatus::kCompleted);
      continue;
    }
    const auto job = latest_job.find(run);
    if (job == latest_job.end()) continue;
    const auto s = slurm.find(job->second);
    if (s != slurm.end() && (slurm_job_waits(s->second.state) || slurm_job_runs(s->second.state))) {
      leave[run] = msg("job ", job->second, " is ", s->second.state);
    }
  }
  return leave;
}

std::string run_state(const JobRecord* job, const SlurmJobState* slurm, const RunFileState& file) {
  if (file.exists && !file.error.empty()) {
    if (slurm && slurm->state == "RUNNING") return "running";
    return "failed (run file unreadable)";
  }
  // What the file says (read only where it exists: a readable file has a status).
  const RunStatus fs_status = file.exists && file.status ? *file.status : RunStatus::kRunning;
  const std::string fs_text = run_status_name(fs_status);
  if (job == nullptr) {
    if (file.exists && fs_status != RunStatus::kRunning) return fs_text;
    return "not submitted";
  }
  if (slurm != nullptr) {
    if (slurm_job_waits(slurm->state)) {
      return file.exists && fs_status == RunStatus::kPreempted ? "preempted (requeued)" : "pending";
    }
    if (slurm_job_runs(slurm->state)) return "running";
  }
  // The job has ended (or Slurm no longer knows it): the run file decides.
  if (!file.exists) {
    return slurm ? msg("failed (job ", slurm->state, ", no run file: see the job's log)")
                 : "failed (job unknown to Slurm, no run file)";
  }
  if (fs_status == RunStatus::kPreempted) return "preempted (not requeued)";
  if (fs_status != RunStatus::kRunning) return fs_text;  // completed, diverged, failed
  return slurm ? msg("failed (killed: job ", slurm->state, ", run file still says ", fs_text, ")")
               : msg("failed (killed: run file still says ", fs_text, ", job gone)");
}

}  // namespace t5scale
