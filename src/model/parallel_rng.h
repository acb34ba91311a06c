// Two random streams for dropout, as Megatron's model-parallel RNG tracker keeps them:
//   - activations replicated over the TP group (the residual stream) draw from the device's default generator,
//     seeded alike on every TP rank so that the replicas stay identical;
//   - activations split over the TP group (this rank's attention heads, its d_ff / tp feed-forward columns) draw
//     from the tensor-parallel generator, seeded seed + 2718 + tp_rank, so every slice gets its own mask.
// Activation checkpointing saves both states before a block and restores them before recomputing it.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/torch.h>

namespace t5scale {

class ParallelRng {
 public:
  ParallelRng(uint64_t seed, int tp_rank, torch::Device device = torch::kCPU);

  at::Generator& tensor_parallel() { return tensor_parallel_; }
  torch::Device device() const { return device_; }

  struct State {
    torch::Tensor default_generator;
    torch::Tensor tensor_parallel;
  };
  State get_state();
  void set_state(const State& state);

  // The device's default generator (the replicated stream).
  at::Generator default_generator() const;

 private:
  torch::Device device_;
  at::Generator tensor_parallel_;
};

// While alive, the device's default generator draws from the tensor-parallel stream, for kernels that take no
// generator argument (the dropout inside scaled_dot_product_attention); at the end the TP stream continues where
// the kernel left it and the default stream is as it was. Megatron's get_cuda_rng_tracker().fork().
class TensorParallelStreamAsDefault {
 public:
  explicit TensorParallelStreamAsDefault(ParallelRng& rng);
  ~TensorParallelStreamAsDefault();
  TensorParallelStreamAsDefault(const TensorParallelStreamAsDefault&) = delete;
  TensorParallelStreamAsDefault& operator=(const TensorParallelStreamAsDefault&) = delete;

 private:
  ParallelRng& rng_;
  torch::Tensor saved_default_state_;
};

// Inverted dropout as one kernel that keeps a one-byte mask for backward (at::native_dropout; fused on CUDA, and the
// same mask on the CPU), drawing from the device's default generator: the stream all TP ranks share, for replicated
// activations. The identity when not training or p == 0.
torch::Tensor fused_dropout(const torch::Tensor& input, double p, bool training);
// The same drawing from the tensor-parallel stream, for activations split over TP (each rank its own mask).
torch::Tensor tensor_parallel_dropout(const torch::Tensor& input, double p, bool training, ParallelRng& rng);

}  // namespace t5scale
