// What the tokenized dataset's writer (tokenized_dataset_writer.cpp) and reader (tokenized_dataset.cpp) share:
// the layout's constants and the split attributes' order. Include it from those two files only.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/hdf5_check.h"
#include "data/tokenized_dataset.h"

namespace t5scale::tokenized_dataset_internal {

// 1 Mi tokens (4 MiB of int32) per chunk, as the spec says.
inline constexpr int64_t kChunkElements = int64_t{1} << 20;
inline constexpr unsigned kMaxCompactAttributes = 64, kMinDenseAttributes = 48;  // the root has 15, a split 18
inline constexpr const char* kDatasetNames[4] = {"source_tokens", "source_offsets", "target_tokens",
                                                 "target_offsets"};

// Closes a stored id (the classes keep raw ids so that their header needs no hdf5.h) and marks it closed.
inline void close_id(int64_t& id) { H5Handle closing(static_cast<hid_t>(std::exchange(id, int64_t{-1}))); }

// The split attributes in the order they are written and read.
inline std::vector<std::pair<const char*, int64_t SplitStatistics::*>> split_attribute_fields() {
  return {{"num_examples", &SplitStatistics::num_examples},
          {"num_source_tokens", &SplitStatistics::num_source_tokens},
          {"num_target_tokens", &SplitStatistics::num_target_tokens},
          {"source_length_p50", &SplitStatistics::source_length_p50},
          {"source_length_p90", &SplitStatistics::source_length_p90},
          {"source_length_p99", &SplitStatistics::source_length_p99},
          {"source_length_max", &SplitStatistics::source_length_max},
          {"target_length_p50", &SplitStatistics::target_length_p50},
          {"target_length_p90", &SplitStatistics::target_length_p90},
          {"target_length_p99", &SplitStatistics::target_length_p99},
          {"target_length_max", &SplitStatistics::target_length_max},
          {"truncated_sources", &SplitStatistics::truncated_sources},
          {"truncated_targets", &SplitStatistics::truncated_targets},
          {"skipped_malformed", &SplitStatistics::skipped_malformed},
          {"skipped_missing_field", &SplitStatistics::skipped_missing_field},
          {"skipped_empty_target", &SplitStatistics::skipped_empty_target},
          {"skipped_invalid_utf8", &SplitStatistics::skipped_invalid_utf8},
          {"skipped_unknown_label", &SplitStatistics::skipped_unknown_label}};
}

}  // namespace t5scale::tokenized_dataset_internal
