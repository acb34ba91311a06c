// Helpers shared by the tests: tensor comparison that reports the tensor's name, its worst element and the
// maximum absolute and relative errors; temporary folders.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "support/base_test_support.h"

namespace t5scale::testing {

struct Mismatch {
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;   // max |a - b| / max |reference|
  double norm_rel_error = 0.0;  // ||a - b|| / ||reference|| (Frobenius): the relative error the tolerances bound
  int64_t worst_index = -1;    // flat index of the largest absolute error
  std::string describe(const std::string& name, const torch::Tensor& actual, const torch::Tensor& reference) const;
};

// Standard normal values in float64 from a CPU generator seeded with `seed`: the same on every machine and device.
torch::Tensor seeded_normal(std::vector<int64_t> shape, uint64_t seed);

// Compares in float64. NaN or Inf in either tensor is a failure of its own, never skipped.
Mismatch compare(const torch::Tensor& actual, const torch::Tensor& reference);

// gtest assertion: shapes equal, all finite, norm-wise relative error <= tolerance. The message reports both the
// norm-wise and the worst-element errors.
::testing::AssertionResult tensors_close(const std::string& name, const torch::Tensor& actual,
                                         const torch::Tensor& reference, double relative_tolerance);

}  // namespace t5scale::testing
