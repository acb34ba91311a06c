// What t5scale-prep says when it is done: the end-of-run report of a PrepResult, as text and as JSON.
#pragma once

#include <string>

#include "data_prep/prep_pipeline.h"

namespace t5scale {

// The end-of-run report: counts per split, truncations, skips by reason, length percentiles, throughput.
std::string format_prep_report(const PrepResult& result);
// The same as JSON (for scripts: the benchmark reads it).
std::string prep_report_json(const PrepResult& result);

}  // namespace t5scale
