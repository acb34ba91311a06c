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

// The values of two such keys, both required: an error naming `source` and the file `expected` where one is absent.
std::pair<int64_t, int64_t> two_kib_values_bytes(const std::string& text, const std::string& first,
                                                 const std::string& second, const std::string& source,
                                                 const std::string& expected) {
  const int64_t a = status_kib_value_bytes(text, first, source), b = status_kib_value_bytes(text, second, source);
  T5S_CHECK(a >= 0 && b >= 0, source, ": no ", first, " or ", second, " line (", expected, " is expected)");
  return {a, b};
}

}  // namespace

HostMemory parse_proc_status(const std::string& text, const std::string& source) {
  const auto [rss, peak] = two_kib_values_bytes(text, "VmRSS", "VmHWM", source, "a Linux /proc/<pid>/status");
  return {rss, peak};
}

NodeMemory parse_meminfo(const std::string& text, const std::string& source) {
  const auto [total, available] =
      two_kib_values_bytes(text, "MemTotal", "MemAvailable", source, "a Linux /proc/meminfo, kernel 3.14 or later,");
  return {total, available};
}

namespace {

std::string proc_text(const std::string& path) {
  std::ifstream in(path);
  T5S_CHECK(in.good(), path, ": cannot open (host memory is read from Linux's /proc)");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

HostMemory read_host_memory(const std::string& status_path) {
  return parse_proc_status(proc_text(status_path), status_path);
}

NodeMemory read_node_memory(const std::string& meminfo_path) {
  return parse_meminfo(proc_text(meminfo_path), meminfo_path);
}

int64_t peak_resident_set_bytes() {
  struct rusage usage {};
  T5S_CHECK(::getrusage(RUSAGE_SELF, &usage) == 0, "getrusage(RUSAGE_SELF) failed");
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace t5scale
