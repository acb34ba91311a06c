// Small measurements for the run file that need neither a GPU nor the model: this process's host memory, a
// step timer split into the phases of the run file's /steps columns, and UTC timestamps.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

namespace t5scale {

// ---- Host memory ----

struct HostMemory {
  int64_t rss_bytes = 0;       // resident set size now (VmRSS)
  int64_t peak_rss_bytes = 0;  // its high-water mark over the process's life (VmHWM)
};

// Parses the text of /proc/<pid>/status; throws t5scale::Error naming `source` when VmRSS or VmHWM is missing.
HostMemory parse_proc_status(const std::string& text, const std::string& source);
// This process's memory, from /proc/self/status (Linux; the kernel keeps per-thread counters that it folds in
// every 64 page faults, so the figures may lag by a few hundred KiB per thread).
HostMemory read_host_memory(const std::string& status_path = "/proc/self/status");
// The peak resident set size of this process so far (getrusage's ru_maxrss): what the trainer records every step.
// It costs about a microsecond, where reading /proc/self/status (90 us) or statm (45 us) in a process with
// LibTorch's threads and mappings would be a visible fraction of a short step.
int64_t peak_resident_set_bytes();

// ---- Step timer ----

// The parts of a step that the run file records; kCommExposed is communication that compute did not hide.
enum class Phase { kData, kForward, kBackward, kOptimizer, kCommExposed };
inline constexpr int kNumPhases = 5;
const char* phase_name(Phase phase);  // "data", "forward", ...

// Seconds of one step and of each phase in it.
struct StepTimes {
  double step_time_s = 0;
  double data_time_s = 0;
  double forward_time_s = 0;
  double backward_time_s = 0;
  double optimizer_time_s = 0;
  double comm_exposed_time_s = 0;
};

// Host wall-clock time of a step and its phases (steady_clock). Phases accumulate: with gradient
// accumulation, forward and backward run once per micro-batch and their times add up. GPU work is asynchronous:
// the caller synchronises the device at phase ends it wants to be exact (host time otherwise measures launches).
//
//   timer.start_step();
//   { auto scope = timer.measure(Phase::kForward); ... }
//   StepTimes times = timer.stop_step();
class PhaseTimer {
 public:
  using Clock = std::chrono::steady_clock;

  // Adds the time from its construction to its destruction to one phase.
  class Scope {
   public:
    Scope(PhaseTimer* timer, Phase phase) : timer_(timer), phase_(phase), start_(Clock::now()) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { timer_->add_s(phase_, std::chrono::duration<double>(Clock::now() - start_).count()); }

   private:
    PhaseTimer* timer_;
    Phase phase_;
    Clock::time_point start_;
  };

  // Zeroes every phase and starts the step's clock.
  void start_step();
  Scope measure(Phase phase) { return Scope(this, phase); }
  // For time measured elsewhere (a wait on a communication stream).
  void add_s(Phase phase, double seconds);
  double phase_s(Phase phase) const;
  // Seconds since start_step().
  double step_elapsed_s() const;
  // The step's times: step_time_s is the time since start_step(), the phases what was measured in it.
  StepTimes stop_step() const;

 private:
  Clock::time_point step_start_ = Clock::now();
  std::array<double, kNumPhases> phase_s_{};
};

// ---- Time ----

// ISO 8601 in UTC, to the second: "2026-11-22T10:15:30Z".
std::string utc_iso_time(std::chrono::system_clock::time_point time);
std::string utc_iso_time();

}  // namespace t5scale
