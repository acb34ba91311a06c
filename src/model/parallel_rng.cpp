#include "model/parallel_rng.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include "core/check.h"

namespace t5scale {

namespace {
constexpr uint64_t kTensorParallelSeedOffset = 2718;  // Megatron's offset, kept for familiarity

at::Generator default_generator(torch::Device device) {
  return device.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
}
}  // namespace

ParallelRng::ParallelRng(uint64_t seed, int tp_rank, torch::Device device) : device_(device) {
  if (device.is_cpu()) {
    tensor_parallel_ = at::make_generator<at::CPUGeneratorImpl>(seed + kTensorParallelSeedOffset + tp_rank);
  } else {
    // A CUDA generator of our own: a clone of the default one, reseeded.
    tensor_parallel_ = default_generator(device).clone();
    tensor_parallel_.set_current_seed(seed + kTensorParallelSeedOffset + tp_rank);
  }
}

ParallelRng::State ParallelRng::get_state() {
  at::Generator def = default_generator(device_);
  State state;
  {
    std::lock_guard<std::mutex> lock(def.mutex());
    state.default_generator = def.get_state();
  }
  {
    std::lock_guard<std::mutex> lock(tensor_parallel_.mutex());
    state.tensor_parallel = tensor_parallel_.get_state();
  }
  return state;
}

void ParallelRng::set_state(const State& state) {
  at::Generator def = default_generator(device_);
  {
    std::lock_guard<std::mutex> lock(def.mutex());
    def.set_state(state.default_generator);
  }
  std::lock_guard<std::mutex> lock(tensor_parallel_.mutex());
  tensor_parallel_.set_state(state.tensor_parallel);
}

torch::Tensor dropout_with(const torch::Tensor& input, double p, bool training, at::Generator& generator) {
  if (!training || p == 0.0) return input;
  T5S_CHECK(p > 0.0 && p < 1.0, "dropout probability must be in [0, 1), got ", p);
  const torch::Tensor keep = torch::empty_like(input).bernoulli_(1.0 - p, generator);
  return input * keep * (1.0 / (1.0 - p));
}

}  // namespace t5scale
