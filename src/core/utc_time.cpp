#include "core/utc_time.h"

#include <ctime>

namespace t5scale {

std::string utc_iso_time(std::chrono::system_clock::time_point time) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(time);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string utc_iso_time() { return utc_iso_time(std::chrono::system_clock::now()); }

}  // namespace t5scale
