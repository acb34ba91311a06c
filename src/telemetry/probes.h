// Small measurements for the run file that need neither a GPU nor the model: this process's host memory and the
// node's. (The
// phases of a step are timed by the trainer, on CUDA events where it runs on a GPU: train/parallel_trainer.cpp.)
#pragma once

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
// The node's memory, from /proc/meminfo.
struct NodeMemory {
  int64_t total_bytes = 0;      // MemTotal
  int64_t available_bytes = 0;  // MemAvailable: what can be had now without swapping
};
// Parses the text of /proc/meminfo; throws t5scale::Error naming `source` when MemTotal or MemAvailable is missing.
NodeMemory parse_meminfo(const std::string& text, const std::string& source);
NodeMemory read_node_memory(const std::string& meminfo_path = "/proc/meminfo");

// The peak resident set size of this process so far (getrusage's ru_maxrss): what the trainer records every step.
// It costs about a microsecond, where reading /proc/self/status (90 us) or statm (45 us) in a process with
// LibTorch's threads and mappings would be a visible fraction of a short step.
int64_t peak_resident_set_bytes();

}  // namespace t5scale
