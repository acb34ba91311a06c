// A step's metrics and an evaluation's, each declared once, here: the trainer and the training job fill a
// StepRecord, RunRecord gathers it over the ranks, the run file writes it (one /steps column per field, in this
// order, with this unit) and the checked-in schema is generated from the same list. A new metric is one line in
// T5SCALE_STEP_FIELDS plus the code that measures it.
//
// Each line: FIELD(name, C++ type, unit, initial value[, gathered])  /* what it holds */
// The type gives the column's kind: int64_t -> int64, bool -> int8, double -> float64, std::vector<double> ->
// (rows, world_size) float64, one value per rank in rank order. Floats unknown at write time stay NaN. A step's
// fields say how RunRecord makes rank 0's row from the ranks' rows: rank0 (rank 0's own value stands: the trainer's
// and the job's figures, already global), replicas (each replica's count, from the replica's first TP rank, summed
// over the replicas) or each_rank (a PerRank: every rank's own reading).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace t5scale {

// The value of an unknown float in the run file.
inline constexpr double kUnknownValue = std::numeric_limits<double>::quiet_NaN();
using PerRank = std::vector<double>;

// Who fills what. The trainer (ParallelTrainer::step): loss, lr, grad_norm, loss_scale, skipped, target_tokens
// and the four phase times. The training job: step, epoch, samples, source_tokens (this replica's),
// step_time_s, data_time_s, model_flops (this replica's). RunRecord, when it gathers the ranks' rows: the
// replicas' counts summed, the per-rank columns (StepMeter's readings), wall_time_s and the rates.
#define T5SCALE_STEP_FIELDS(FIELD)                                                                                     \
  FIELD(step, int64_t, "step", 0, rank0)                        /* optimizer steps completed, this one included */     \
  FIELD(epoch, double, "epoch", kUnknownValue, rank0)           /* fractional: samples seen / samples per epoch */     \
  FIELD(wall_time_s, double, "s", kUnknownValue, rank0)         /* since the run's first start */                      \
  FIELD(loss, double, "nat/token", kUnknownValue, rank0)        /* mean cross-entropy per target token */              \
  FIELD(lr, double, "1", kUnknownValue, rank0)                  /* as used (Adafactor: its relative step) */           \
  FIELD(grad_norm, double, "1", kUnknownValue, rank0)           /* global L2 norm before clipping */                   \
  FIELD(loss_scale, double, "1", kUnknownValue, rank0)          /* fp16 dynamic loss scale; 1 without scaling */       \
  FIELD(skipped, bool, "bool", false, rank0)                    /* fp16 overflow: the update was skipped */            \
  FIELD(samples, int64_t, "samples", 0, replicas)               /* in this step's global batch */                      \
  FIELD(source_tokens, int64_t, "tokens", 0, replicas)          /* non-padding, in the global batch */                 \
  FIELD(target_tokens, int64_t, "tokens", 0, rank0)             /* non-padding, in the global batch */                 \
  FIELD(step_time_s, double, "s", kUnknownValue, rank0)         /* the whole step, data wait included */               \
  FIELD(data_time_s, double, "s", kUnknownValue, rank0)         /* waiting for the step's batches */                   \
  FIELD(forward_time_s, double, "s", kUnknownValue, rank0)      /* this rank's phases: CUDA events on a GPU */         \
  FIELD(backward_time_s, double, "s", kUnknownValue, rank0)                                                            \
  FIELD(optimizer_time_s, double, "s", kUnknownValue, rank0)                                                           \
  FIELD(comm_exposed_time_s, double, "s", kUnknownValue, rank0) /* DP reductions not hidden behind backward */         \
  FIELD(tokens_per_s, double, "tokens/s", kUnknownValue, rank0) /* (source + target tokens) / step_time_s */           \
  FIELD(samples_per_s, double, "samples/s", kUnknownValue, rank0)                                                      \
  FIELD(model_flops, double, "FLOP", kUnknownValue, replicas)   /* of its examples, unpadded, all replicas */          \
  FIELD(mfu, double, "fraction", kUnknownValue, rank0)          /* model_flops / (step_time_s peak world_size) */      \
  FIELD(memory_allocated_bytes, PerRank, "B", {}, each_rank)    /* NaN where not measured (a CPU rank) */              \
  FIELD(memory_reserved_bytes, PerRank, "B", {}, each_rank)                                                            \
  FIELD(memory_peak_bytes, PerRank, "B", {}, each_rank)                                                                \
  FIELD(host_memory_bytes, PerRank, "B", {}, each_rank)         /* each process's peak resident set so far */          \
  FIELD(gpu_power_w, PerRank, "W", {}, each_rank)                                                                      \
  FIELD(gpu_energy_j, PerRank, "J", {}, each_rank)              /* cumulative since the run's first start */           \
  FIELD(cpu_energy_j, PerRank, "J", {}, each_rank)              /* the node's packages (RAPL), cumulative */

// Metrics not computed stay NaN; rouge*, exact_match, f1, accuracy and macro_f1 are fractions in [0, 1].
#define T5SCALE_EVAL_FIELDS(FIELD)                                                                               \
  FIELD(step, int64_t, "step", 0)                                                                              \
  FIELD(epoch, double, "epoch", kUnknownValue)                                                                 \
  FIELD(wall_time_s, double, "s", kUnknownValue)                                                               \
  FIELD(loss, double, "nat/token", kUnknownValue)                                                              \
  FIELD(rouge1, double, "fraction", kUnknownValue)                                                             \
  FIELD(rouge2, double, "fraction", kUnknownValue)                                                             \
  FIELD(rougeL, double, "fraction", kUnknownValue)                                                             \
  FIELD(rougeLsum, double, "fraction", kUnknownValue)                                                          \
  FIELD(exact_match, double, "fraction", kUnknownValue)                                                        \
  FIELD(f1, double, "fraction", kUnknownValue)                                                                 \
  FIELD(accuracy, double, "fraction", kUnknownValue)                                                           \
  FIELD(macro_f1, double, "fraction", kUnknownValue)                                                           \
  FIELD(num_examples, int64_t, "examples", 0)                                                                  \
  FIELD(eval_time_s, double, "s", kUnknownValue)                                                               \
  FIELD(generated_ids_beyond_vocab, int64_t, "tokens", 0) /* ids the tokenizer lacks, decoded "<id_613>" */

#define T5SCALE_DECLARE_FIELD(name, type, unit, initial, ...) type name = initial;

// One optimizer step (T5SCALE_STEP_FIELDS).
struct StepRecord {
  T5SCALE_STEP_FIELDS(T5SCALE_DECLARE_FIELD)
};

// One evaluation (T5SCALE_EVAL_FIELDS).
struct EvalRecord {
  T5SCALE_EVAL_FIELDS(T5SCALE_DECLARE_FIELD)
};

#undef T5SCALE_DECLARE_FIELD

}  // namespace t5scale
