// How long a training step takes, predicted by phase from what the step does, on a machine given by its rates
// (plan/machine_rates.h): every matrix product of every block at its shape class's rate; on a GPU SDPA's fused
// attention kernels on their padded tiles (the memory-efficient kernel where there is a bias or mask, flash where
// there is none), or the explicit path's products, score kernels and head copies; every elementwise kernel's bytes
// at the step's bandwidth and the optimizer's at its own; the device's idle time between kernels; the host's time
// per dispatched operator; TP collectives (all-
// reduces, or all-gathers and reduce-scatters under sequence parallelism) and the DP gradient reduction by the
// alpha-beta model of their link. Overlap is what the code overlaps: on a GPU the host queues ahead of the device (a
// phase takes the longer of the two) and gradient buckets are reduced while backward goes on; on a CPU everything
// adds, ranks beyond a host's cores share them, and each runs slower still by the busy host's measured slowdown
// (plan/machine_rates.h). TP collectives are never overlapped (Megatron's are not either).
//
//   StepTimeInputs in; in.memory = run.memory_inputs; in.grad_accumulation = 4; in.ranks_per_node = 8; in.nodes = 2;
//   StepTimePrediction t = predict_step_time(model, in, *published_machine_rates("A100-80GB"));
//   t.total_s; t.describe();   // "forward 1.2 s + backward 2.5 s + exposed DP 0.1 s + optimizer 0.2 s = 4.0 s"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "plan/cost_model.h"
#include "plan/machine_rates.h"

namespace t5scale {

struct StepTimeInputs {
  MemoryInputs memory;            // grid, dtype, ZeRO, optimizer, recomputation, sequence parallelism, micro-batch
  int64_t grad_accumulation = 1;  // micro-batches per optimizer step
  int64_t nodes = 1;
  int64_t ranks_per_node = 1;     // TP groups stay inside a node; DP groups cross nodes when nodes > 1
};

// Seconds per optimizer step, by the phases a run file records (forward_time_s, backward_time_s,
// comm_exposed_time_s, optimizer_time_s; their sum is step_time_s), and by what takes the time.
struct StepTimePrediction {
  double forward_s = 0.0;     // every micro-batch's forward, its TP collectives included
  double backward_s = 0.0;    // every micro-batch's backward, recomputation and TP collectives included
  double comm_exposed_s = 0.0;  // the DP reduction's part that backward does not hide, and under sequence
                                // parallelism the norms' gradient sum over TP after it
  double optimizer_s = 0.0;     // gradient norm, clipping and the update of this rank's parameters
  double total_s = 0.0;
  // Of optimizer_s under parallel.offload_optimizer on a GPU: the copies over the device's host link that are not
  // hidden (the owned fp32 gradients go to the host bucket by bucket as they are reduced while the last micro-batch's
  // backward goes on, so only what outlasts it, and at least the last bucket's copy, counts; the new weights come
  // back after the update, all of it), and the update on the host's cores at this rank's share of the host's memory
  // bandwidth (or of its cores' streaming rate, whichever is lower).
  double offload_copies_s = 0.0;
  double host_update_s = 0.0;

  // What the phases hold (seconds per step, before overlap): device work and host dispatch.
  double matmul_s = 0.0;          // matrix products, recomputed ones included
  double elementwise_s = 0.0;     // forward and backward: the other kernels' bytes at the memory bandwidth
  double attention_s = 0.0;       // the attention cores' fused kernels, or the explicit path's head copies (GPU)
  double host_s = 0.0;            // operators dispatched x op latency
  double recompute_s = 0.0;       // of matmul_s + elementwise_s: the recomputed forward
  double tp_collectives_s = 0.0;  // in forward_s and backward_s (and the norms' gradient sum in comm_exposed_s)
  double dp_collectives_s = 0.0;  // the whole reduction, of which comm_exposed_s is not hidden
  double compute_share_factor = 1.0;  // CPU: ranks per core (> 1 when a host's ranks outnumber its cores) x the
                                      // busy host's slowdown (plan/machine_rates.h)
  int64_t operators = 0;              // dispatched per step

  std::string describe() const;  // "forward 1.21 s + backward 2.50 s + DP exposed 0.10 s + optimizer 0.20 s = 4.01 s"
};

StepTimePrediction predict_step_time(const ModelConfig& model, const StepTimeInputs& inputs, const MachineRates& rates);
// One rank's step over micro-batches of their own shapes (inputs.memory.micro_batch and grad_accumulation are
// replaced): the forwards and backwards add, the DP reduction follows the last one, the optimizer runs once.
StepTimePrediction predict_step_time(const ModelConfig& model, const StepTimeInputs& inputs, const MachineRates& rates,
                                     const std::vector<BatchShape>& micro_batches);

// LibTorch operators a training step dispatches, as its profiler counts them (nested calls included): per
// sub-layer (an encoder block has two, a decoder block three) in forward and in backward, and per step around them.
// unit.step_time_model holds these to a profiled step of the CPU.
inline constexpr int64_t kOperatorsPerSublayerForward = 130;
inline constexpr int64_t kOperatorsPerSublayerBackward = 250;
inline constexpr int64_t kOperatorsPerMicroBatchOutside = 20;  // embeddings, LM head, loss, gradient buckets
inline constexpr int64_t kOperatorsPerStepOptimizer = 10;      // foreach norm, clip factor, fused update
int64_t operators_per_step(const ModelConfig& model, const MemoryInputs& inputs, int64_t grad_accumulation);

}  // namespace t5scale
