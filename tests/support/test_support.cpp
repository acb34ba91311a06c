#include "support/test_support.h"

#include <ATen/CPUGeneratorImpl.h>

#include <sstream>

namespace t5scale::testing {

torch::Tensor seeded_normal(std::vector<int64_t> shape, uint64_t seed) {
  return at::normal(0.0, 1.0, shape, at::make_generator<at::CPUGeneratorImpl>(seed)).to(torch::kFloat64);
}

Mismatch compare(const torch::Tensor& actual, const torch::Tensor& reference) {
  Mismatch m;
  const torch::Tensor a = actual.detach().to(torch::kCPU, torch::kFloat64).flatten();
  const torch::Tensor r = reference.detach().to(torch::kCPU, torch::kFloat64).flatten();
  if (a.numel() == 0) return m;
  const torch::Tensor diff = (a - r).abs();
  m.worst_index = diff.argmax().item<int64_t>();
  m.max_abs_error = diff.max().item<double>();
  const double scale = r.abs().max().item<double>();
  m.max_rel_error = scale > 0 ? m.max_abs_error / scale : m.max_abs_error;
  const double norm = r.norm().item<double>();
  const double diff_norm = (a - r).norm().item<double>();
  m.norm_rel_error = norm > 0 ? diff_norm / norm : diff_norm;
  return m;
}

std::string Mismatch::describe(const std::string& name, const torch::Tensor& actual,
                               const torch::Tensor& reference) const {
  std::ostringstream out;
  out << name << ": norm rel error " << norm_rel_error << ", max abs error " << max_abs_error << ", max rel error "
      << max_rel_error;
  if (worst_index >= 0) {
    out << ", worst element #" << worst_index << " (actual " << actual.flatten()[worst_index].item<double>()
        << ", reference " << reference.flatten()[worst_index].item<double>() << ")";
  }
  return out.str();
}

::testing::AssertionResult tensors_close(const std::string& name, const torch::Tensor& actual,
                                         const torch::Tensor& reference, double relative_tolerance) {
  if (actual.sizes() != reference.sizes()) {
    return ::testing::AssertionFailure() << name << ": shape " << actual.sizes() << " vs reference "
                                         << reference.sizes();
  }
  if (!torch::isfinite(actual).all().item<bool>()) {
    return ::testing::AssertionFailure() << name << ": actual holds NaN or Inf";
  }
  if (!torch::isfinite(reference).all().item<bool>()) {
    return ::testing::AssertionFailure() << name << ": reference holds NaN or Inf";
  }
  const Mismatch m = compare(actual, reference);
  if (m.norm_rel_error <= relative_tolerance) {
    return ::testing::AssertionSuccess() << m.describe(name, actual, reference);
  }
  return ::testing::AssertionFailure() << m.describe(name, actual, reference) << " > tolerance "
                                       << relative_tolerance;
}


}  // namespace t5scale::testing
