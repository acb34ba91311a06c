#include "train/training_loop.h"

#include <algorithm>
#include <chrono>

#include "model/vocab_parallel_cross_entropy.h"

namespace t5scale {

std::vector<StepRecord> train(T5ModelImpl& model, const BatchSource& next_batch, const TrainingOptions& options,
                              const StepCallback& on_step) {
  model.train();
  torch::optim::AdamW optimizer(model.parameters(), torch::optim::AdamWOptions(options.learning_rate)
                                                         .betas({0.9, 0.999})
                                                         .eps(1e-8)
                                                         .weight_decay(options.weight_decay));
  std::vector<StepRecord> history;
  for (int64_t step = 1; step <= options.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const double warmup = options.warmup_steps > 0
                              ? std::min(1.0, static_cast<double>(step) / static_cast<double>(options.warmup_steps))
                              : 1.0;
    const double lr = options.learning_rate * warmup;
    for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);

    const Seq2SeqBatch batch = next_batch();
    optimizer.zero_grad();
    const torch::Tensor loss = model.loss(batch);
    loss.backward();
    double grad_norm = 0.0;
    if (options.max_grad_norm > 0) {
      grad_norm = torch::nn::utils::clip_grad_norm_(model.parameters(), options.max_grad_norm);
    }
    optimizer.step();

    StepRecord record;
    record.step = step;
    record.loss = loss.item<double>();
    record.learning_rate = lr;
    record.grad_norm = grad_norm;
    record.target_tokens = (batch.labels != kIgnoreIndex).sum().item<int64_t>();
    record.step_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    history.push_back(record);
    if (on_step) on_step(record);
  }
  return history;
}

}  // namespace t5scale
