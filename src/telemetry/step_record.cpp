#include "telemetry/step_record.h"

#include <algorithm>
#include <cmath>

namespace t5scale {

void StepTotals::add(const StepRecord& row) {
  steps += 1;
  samples += row.samples;
  tokens += row.source_tokens + row.target_tokens;
  step_time_s += row.step_time_s;
  model_flops += row.model_flops;
  if (std::isfinite(row.mfu)) mfu_sum += row.mfu;
  if (!row.memory_allocated_bytes.empty() && std::isfinite(row.memory_allocated_bytes[0])) {
    memory_allocated_sum_bytes += row.memory_allocated_bytes[0];
  }
  for (const double peak : row.memory_peak_bytes) {
    if (std::isfinite(peak)) peak_memory_bytes = std::max(peak_memory_bytes, peak);
  }
}

}  // namespace t5scale
