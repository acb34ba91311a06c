// The training step a reader can follow top to bottom: forward, loss, backward, clip, AdamW step, learning-rate
// schedule. One rank for now; the parallel strategies extend this loop.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "model/t5_model.h"

namespace t5scale {

struct TrainingOptions {
  int64_t steps = 600;
  int64_t batch_size = 16;
  double learning_rate = 3e-3;
  int64_t warmup_steps = 20;  // linear warmup, then constant
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;  // 0 disables clipping
  int64_t log_every = 20;
};

struct StepRecord {
  int64_t step = 0;  // 1-based
  double loss = 0.0;
  double learning_rate = 0.0;
  double grad_norm = 0.0;
  double step_time_s = 0.0;
  int64_t target_tokens = 0;
};

using BatchSource = std::function<Seq2SeqBatch()>;
using StepCallback = std::function<void(const StepRecord&)>;

// Trains `model` for options.steps steps on batches from `next_batch`; calls `on_step` after every step.
std::vector<StepRecord> train(T5ModelImpl& model, const BatchSource& next_batch, const TrainingOptions& options,
                              const StepCallback& on_step = {});

}  // namespace t5scale
