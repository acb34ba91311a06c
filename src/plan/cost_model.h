// What a training step costs before it runs: model FLOPs and per-rank memory, from the model's shape, the grid
// and the batch. The trainer records these predictions in the run file beside what it measured; the study
// planner prints them for every run before anything is submitted.
#pragma once

#include <cstdint>
#include <string>

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
  BatchShape micro_batch;
  bool on_gpu = true;                    // adds the CUDA context and communication buffers
  int64_t frozen_parameters_per_rank = 0;  // of this rank's shard: no gradients, no optimizer state
};

// Bytes per rank, by what holds them.
struct MemoryPrediction {
  int64_t parameters_per_rank = 0;  // elements of this rank's shard
  int64_t weights_bytes = 0;        // parameters in the compute dtype
  int64_t gradients_bytes = 0;      // fp32 gradient buckets (ZeRO-2: this rank's 1 / dp and the buckets in
                                    // flight) + the compute-dtype .grad of each parameter
  int64_t optimizer_bytes = 0;      // fp32 master weights and moments (ZeRO-1: this rank's 1 / dp)
  int64_t activations_bytes = 0;    // saved for backward over one micro-batch, at the peak
  int64_t workspace_bytes = 0;      // CUDA context, allocator slack and communication buffers (GPU only)
  int64_t total_bytes() const {
    return weights_bytes + gradients_bytes + optimizer_bytes + activations_bytes + workspace_bytes;
  }
  std::string describe() const;  // "weights 1.2 GiB + gradients ... = 14.3 GiB"
};

// Parameters held by one rank of a TP group: tensors split by TP count 1/tp, the norms count fully.
int64_t parameters_per_rank(const ModelConfig& model, int tp);
// Of those, the ones `freeze` selects (throws as frozen_parameter_names does).
int64_t frozen_parameters_per_rank(const ModelConfig& model, int tp, const FreezeOptions& freeze);

// An estimate (the activation term follows Korthikanti et al. 2022, adapted to T5's blocks; it is a model, and
// the run file shows prediction and measurement side by side).
MemoryPrediction predict_memory(const ModelConfig& model, const MemoryInputs& inputs);

// The least activation checkpointing whose prediction fits `device_memory_bytes` with 5% to spare (allocator
// fragmentation the model does not see): none, then every k-th block for k from the deeper stack's depth down to 1,
// i.e. in order of growing recomputation. inputs.checkpoint_every_blocks is ignored. When even every block does not
// fit, fits is false and the choice is every block.
struct CheckpointingChoice {
  int64_t checkpoint_every_blocks = 0;  // 0 none
  MemoryPrediction memory;
  bool fits = false;
  std::string describe() const;  // "none" / "every 2nd block" / "every block"
  // "every 2nd block (predicted 61.2 GiB of 79.1 GiB)", "...; does not fit)"
  std::string describe_against(int64_t device_memory_bytes) const;
};
CheckpointingChoice choose_activation_checkpointing(const ModelConfig& model, const MemoryInputs& inputs,
                                                    int64_t device_memory_bytes);

// A requested checkpoint_every_blocks that asks the planner to choose (the config's `auto`).
constexpr int64_t kChooseCheckpointing = -1;

// The checkpointing a run uses: inputs.checkpoint_every_blocks when it is 0 or more (fits: against
// device_memory_bytes, true when that is 0, unknown), and choose_activation_checkpointing's choice when it is
// kChooseCheckpointing (none when the memory is unknown). The trainer, the planner and the benchmark all resolve
// it here, so that the plan predicts what the job runs.
CheckpointingChoice resolve_activation_checkpointing(const ModelConfig& model, const MemoryInputs& inputs,
                                                     int64_t device_memory_bytes);

}  // namespace t5scale
