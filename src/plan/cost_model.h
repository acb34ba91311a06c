// What a training step costs before it runs: model FLOPs and per-rank memory, from the model's shape, the grid
// and the batch. The trainer records these predictions in the run file beside what it measured; the study
// planner prints them for every run before anything is submitted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"

namespace t5scale {

// Shapes of one micro-batch as the hardware sees them: rows, and padded source and target lengths.
struct BatchShape {
  int64_t rows = 1;
  int64_t source_length = 512;
  int64_t target_length = 128;
};

// Forward FLOPs of one micro-batch: 2 x m x n x k for every matrix product (the projections, attention scores
// and weighted values at full, unmasked size, the LM head), nothing for norms, softmax and activations. This
// is the count PyTorch's FlopCounterMode gives for the same T5 (tested against transformers').
double forward_flops(const ModelConfig& model, const BatchShape& batch);
// Model FLOPs of a training step on it: forward + backward = 3 x forward. Activation recomputation is not
// counted (model FLOPs, not hardware FLOPs), so MFU does not reward recomputing.
double training_flops(const ModelConfig& model, const BatchShape& batch);
// Model FLOPs of a training step on examples of their own lengths, padding not counted: the sum of each example's
// training_flops as a batch of one. The same examples count the same on every grid, however they were batched and
// padded (a run's recorded model_flops, and so its MFU).
double unpadded_training_flops(const ModelConfig& model, const std::vector<int64_t>& source_lengths,
                               const std::vector<int64_t>& target_lengths);

// Under ZeRO-2 the whole buckets a rank holds at once: one being filled and the others being reduced (the gradient
// buckets of train/ leave kZero2BucketsHeld - 1 reductions outstanding).
constexpr int64_t kZero2BucketsHeld = 3;

struct MemoryInputs {
  int tp = 1;
  int dp = 1;
  int64_t compute_bytes_per_element = 4;  // fp32 4, bf16/fp16 2
  bool zero1 = false;
  bool zero2 = false;                    // the fp32 gradients sharded too (needs zero1)
  int64_t bucket_bytes = 25 * 1024 * 1024;  // ZeRO-2: the gradient buckets being filled or reduced are whole
  bool adafactor = false;                // factored second moments instead of AdamW's two full moments
  int64_t checkpoint_every_blocks = 0;    // activation checkpointing: 0 none, k: blocks 0, k, 2k, ... of each stack
  bool sequence_parallel = false;        // the residual stream split over TP: its activations 1 / tp (tp > 1)
  bool selective_recomputation = false;  // every attention core recomputed in backward (with blocks: exclusive)
  BatchShape micro_batch;
  bool on_gpu = true;  // fused norms, one-byte dropout masks, and the CUDA context and buffers
  // On a GPU, SDPA's fused attention kernel (the model's default there); false: the explicit path, whose scores the
  // step keeps as the CPU's do (t5scale-bench --attention explicit). The CPU always runs the explicit path.
  bool fused_attention = true;
  // A micro-batch with padding (rows shorter than the longest, the usual case): the encoder's position bias carries
  // each row's mask, (B, H, S, S), and the cross-attention a mask; false: every row of the full lengths (the trainer
  // then passes no mask, the bias stays (1, H, S, S) and the cross-attention runs SDPA's flash kernel).
  bool padded = true;
  // On the CPU: LibTorch's GEMM on bf16 or fp16 operands writes its product in fp32 and then rounds it, an fp32
  // buffer of the product's size beside the result while it runs (its own kernels do so on a CPU without bf16 matrix
  // instructions; CpuMemoryTracker::half_products_through_fp32 probes the machine). Counted for the products of the
  // vocabulary's size, the LM head's weight gradient.
  bool half_products_through_fp32 = false;
  int64_t frozen_parameters_per_rank = 0;  // of this rank's shard: no gradients, no optimizer state
  // parallel.offload_optimizer: master weights, moments, a host copy of the owned reduced gradients and (on a GPU)
  // the staging of the new weights in host memory; the device keeps the weights and gradient buckets.
  bool offload_optimizer = false;
};

// Bytes per rank, by what holds them.
struct MemoryPrediction {
  int64_t parameters_per_rank = 0;  // elements of this rank's shard
  int64_t weights_bytes = 0;        // parameters in the compute dtype
  int64_t gradients_bytes = 0;      // fp32 gradient buckets (ZeRO-1: and this rank's reduced chunk; ZeRO-2: the
                                    // chunk and the buckets in flight)
  int64_t optimizer_bytes = 0;      // fp32 master weights, moments and AdamW's decay mask (ZeRO-1: 1 / dp of them)
  int64_t activations_bytes = 0;    // the step's own tensors at its peak: what backward keeps of one micro-batch,
                                    // the loss, and the gradients in flight
  int64_t workspace_bytes = 0;      // CUDA context, allocator slack and communication buffers (GPU only)
  // Host memory of this rank's host-resident optimizer state (parallel.offload_optimizer; 0 without it): fp32 master
  // weights and moments (optimizer_bytes is then 0), the host copy of the owned fp32 gradients, and on a GPU the
  // pinned staging of the new weights in the compute dtype. Not in total_bytes(), which is the device's. On the CPU
  // the host is the device: the state stays in optimizer_bytes, the gradients' host copy in gradients_bytes, and this
  // is 0.
  int64_t host_bytes = 0;
  int64_t total_bytes() const { return tensor_bytes() + workspace_bytes; }
  // What the job's own tensors hold at the peak, without the backend's buffers (workspace_bytes): the figure a
  // tracking allocator measures (t5scale-bench's predicted_peak_bytes against measured_peak_bytes).
  int64_t tensor_bytes() const { return weights_bytes + gradients_bytes + optimizer_bytes + activations_bytes; }
  std::string describe() const;  // "weights 1.2 GiB + gradients ... = 14.3 GiB" (", host 40.1 GiB" when offloaded)
};

// Parameters held by one rank of a TP group: tensors split by TP count 1/tp, the norms count fully.
int64_t parameters_per_rank(const ModelConfig& model, int tp);
// Of those, the ones `freeze` selects (throws as frozen_parameter_names does).
int64_t frozen_parameters_per_rank(const ModelConfig& model, int tp, const FreezeOptions& freeze);

// The bytes of the step's peak, term by term from the tensors t5scale's code keeps (the weights, buckets and
// optimizer state; each block's saved activations for the attention kernel it runs: explicit on the CPU, fused
// SDPA on the GPU unless inputs.fused_attention is false; the loss and the gradients at the moments of the step
// where they meet). On the CPU its tensor_bytes() is held within 5% of the peak a tracking allocator measures
// (unit.memory_model); the run file shows prediction and measurement side by side.
MemoryPrediction predict_memory(const ModelConfig& model, const MemoryInputs& inputs);

// The least recomputation whose prediction fits `device_memory_bytes` with 5% to spare (allocator fragmentation the
// model does not see): of none, selective recomputation and every k-th block for k from the deeper stack's depth down
// to 1, the first to fit in order of recomputed FLOPs (recomputed_flops; none first, every block last).
// inputs.checkpoint_every_blocks and inputs.selective_recomputation are ignored. When even every block does not fit,
// fits is false and the choice is every block.
struct CheckpointingChoice {
  int64_t checkpoint_every_blocks = 0;  // 0 none
  bool selective_recomputation = false;
  MemoryPrediction memory;
  bool fits = false;
  std::string describe() const;  // "none" / "selective (attention cores)" / "every 2nd block" / "every block"
  // "every 2nd block (predicted 61.2 GiB of 79.1 GiB)", "...; does not fit)"
  std::string describe_against(int64_t device_memory_bytes) const;
};
CheckpointingChoice choose_activation_checkpointing(const ModelConfig& model, const MemoryInputs& inputs,
                                                    int64_t device_memory_bytes);

// Forward FLOPs a training step computes again in backward under a recomputation (inputs.checkpoint_every_blocks,
// inputs.selective_recomputation), per micro-batch: the checkpointed blocks' whole forward, or every attention core's
// two products (q k^T, p v). What auto minimises.
double recomputed_flops(const ModelConfig& model, const MemoryInputs& inputs);

// The share of a device's memory a prediction may fill: the rest for allocator fragmentation the model does not see.
inline constexpr double kUsableMemoryFraction = 0.95;
// True when `bytes` fits `device_memory_bytes` with 5% to spare (false when that is unknown, 0): the planner's and
// the job's rule.
bool fits_device_memory(int64_t bytes, int64_t device_memory_bytes);

// A requested checkpoint_every_blocks that asks the planner to choose (the config's `auto`).
constexpr int64_t kChooseCheckpointing = -1;

// The checkpointing a run uses: inputs.checkpoint_every_blocks when it is 0 or more (fits: against
// device_memory_bytes, true when that is 0, unknown), and choose_activation_checkpointing's choice when it is
// kChooseCheckpointing (none when the memory is unknown). The trainer, the planner and the benchmark all resolve
// it here, so that the plan predicts what the job runs.
CheckpointingChoice resolve_activation_checkpointing(const ModelConfig& model, const MemoryInputs& inputs,
                                                     int64_t device_memory_bytes);

}  // namespace t5scale
