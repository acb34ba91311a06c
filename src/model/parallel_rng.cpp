#include "model/parallel_rng.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include "core/check.h"

namespace t5scale {

namespace {
constexpr uint64_t kTensorParallelSeedOffset = 2718;  // Megatron's offset, kept for familiarity

at::Generator default_generator_of(torch::Device device) {
  return device.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
}

torch::Tensor locked_state(at::Generator& generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_locked_state(at::Generator& generator, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}
}  // namespace

at::Generator ParallelRng::default_generator() const { return default_generator_of(device_); }

ParallelRng::ParallelRng(uint64_t seed, int tp_rank, torch::Device device) : device_(device) {
  if (device.is_cpu()) {
    tensor_parallel_ = at::make_generator<at::CPUGeneratorImpl>(seed + kTensorParallelSeedOffset + tp_rank);
  } else {
    // A CUDA generator of our own: a clone of the default one, reseeded.
    tensor_parallel_ = default_generator_of(device).clone();
    tensor_parallel_.set_current_seed(seed + kTensorParallelSeedOffset + tp_rank);
  }
}

ParallelRng::State ParallelRng::get_state() {
  at::Generator def = default_generator();
  return {locked_state(def), locked_state(tensor_parallel_)};
}

void ParallelRng::set_state(const State& state) {
  at::Generator def = default_generator();
  set_locked_state(def, state.default_generator);
  set_locked_state(tensor_parallel_, state.tensor_parallel);
}

TensorParallelStreamAsDefault::TensorParallelStreamAsDefault(ParallelRng& rng) : rng_(rng) {
  at::Generator def = rng_.default_generator();
  saved_default_state_ = locked_state(def);
  set_locked_state(def, locked_state(rng_.tensor_parallel()));
}

TensorParallelStreamAsDefault::~TensorParallelStreamAsDefault() {
  at::Generator def = rng_.default_generator();
  set_locked_state(rng_.tensor_parallel(), locked_state(def));
  set_locked_state(def, saved_default_state_);
}

torch::Tensor fused_dropout(const torch::Tensor& input, double p, bool training) {
  if (!training || p == 0.0) return input;
  T5S_CHECK(p > 0.0 && p < 1.0, "dropout probability must be in [0, 1), got ", p);
  return std::get<0>(at::native_dropout(input, p, /*train=*/true));
}

torch::Tensor tensor_parallel_dropout(const torch::Tensor& input, double p, bool training, ParallelRng& rng) {
  if (!training || p == 0.0) return input;
  TensorParallelStreamAsDefault tensor_parallel_stream(rng);
  return fused_dropout(input, p, training);
}

}  // namespace t5scale
