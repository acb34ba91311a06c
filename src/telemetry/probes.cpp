#include "telemetry/probes.h"

#include <sys/resource.h>

#include <fstream>
#include <sstream>

#include "core/check.h"

namespace t5scale {

namespace {

// The value of a "Key:   1234 kB" line in bytes, or -1 when the key is absent.
int64_t status_kib_value_bytes(const std::string& text, const std::string& key, const std::string& source) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.compare(0, key.size() + 1, key + ":") != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    int64_t value = -1;
    std::string unit;
    fields >> value >> unit;
    T5S_CHECK(fields && value >= 0 && unit == "kB", source, ": cannot read '", key, "' from line '", line,
              "' (expected '<number> kB')");
    return value * 1024;
  }
  return -1;
}

}  // namespace

HostMemory parse_proc_status(const std::string& text, const std::string& source) {
  HostMemory memory;
  memory.rss_bytes = status_kib_value_bytes(text, "VmRSS", source);
  memory.peak_rss_bytes = status_kib_value_bytes(text, "VmHWM", source);
  T5S_CHECK(memory.rss_bytes >= 0 && memory.peak_rss_bytes >= 0, source,
            ": no VmRSS or VmHWM line (a Linux /proc/<pid>/status is expected)");
  return memory;
}

HostMemory read_host_memory(const std::string& status_path) {
  std::ifstream in(status_path);
  T5S_CHECK(in.good(), status_path, ": cannot open (host memory is read from Linux's /proc)");
  std::stringstream text;
  text << in.rdbuf();
  return parse_proc_status(text.str(), status_path);
}

int64_t peak_resident_set_bytes() {
  struct rusage usage {};
  T5S_CHECK(::getrusage(RUSAGE_SELF, &usage) == 0, "getrusage(RUSAGE_SELF) failed");
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace t5scale
