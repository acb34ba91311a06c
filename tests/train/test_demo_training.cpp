// End to end: the demo's training run (tiny T5, synthetic task) learns, and the exported result loads back.
#include <gtest/gtest.h>

#include <numeric>

#include "io/hf_checkpoint.h"
#include "model/vocab_parallel_cross_entropy.h"
#include "support/synthetic_task.h"
#include "support/test_support.h"
#include "train/parallel_trainer.h"

namespace t5scale {
namespace {

double mean_loss(const std::vector<StepResult>& history, size_t begin, size_t end) {
  double sum = 0.0;
  for (size_t i = begin; i < end; ++i) sum += history[i].loss;
  return sum / static_cast<double>(end - begin);
}

TEST(E2E, DemoTrainingLossFallsAndTheModelLearnsTheTask) {
  torch::manual_seed(0);
  const ProcessGrid grid = ProcessGrid::solo();
  T5Model model(tiny_model_config(32), grid.tp);
  model->initialize_weights(1234);
  SyntheticTaskOptions task_options;
  task_options.vocab_size = 32;
  SyntheticTask task(task_options);
  ParallelTrainer trainer(model, grid, ParallelTrainingOptions{});
  std::vector<StepResult> history;
  for (int step = 1; step <= 400; ++step) {
    history.push_back(trainer.step({task.next_batch(16)}, 3e-3 * std::min(1.0, step / 20.0)));
    ASSERT_TRUE(std::isfinite(history.back().loss)) << "step " << step;
  }
  const double first = mean_loss(history, 0, 20), last = mean_loss(history, 380, 400);
  std::cout << "mean loss: first 20 steps " << first << ", last 20 steps " << last << "\n";
  EXPECT_LT(last, 0.5 * first);

  // Held-out batch: the model predicts most next tokens (teacher forcing) far above chance (1 / 29).
  SyntheticTaskOptions held_out = task_options;
  held_out.seed = 999;
  const Seq2SeqBatch batch = SyntheticTask(held_out).next_batch(64);
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor predicted =
      model->forward(batch.input_ids, batch.attention_mask, model->shift_right(batch.labels)).argmax(-1);
  const torch::Tensor counted = batch.labels != kIgnoreIndex;
  const double accuracy = ((predicted == batch.labels) & counted).sum().item<double>() / counted.sum().item<double>();
  std::cout << "held-out next-token accuracy " << accuracy << "\n";
  EXPECT_GT(accuracy, 0.3);
}

TEST(E2E, SyntheticTaskBatchesArePaddedAndLabelled) {
  SyntheticTask task({});
  const Seq2SeqBatch batch = task.next_batch(8);
  const torch::Tensor source_lengths = batch.attention_mask.sum(1);
  for (int64_t row = 0; row < 8; ++row) {
    const int64_t n = source_lengths[row].item<int64_t>();
    const torch::Tensor labels = batch.labels[row];
    EXPECT_EQ(labels[n].item<int64_t>(), 1) << "eos after the last token";
    EXPECT_TRUE((labels.narrow(0, n + 1, labels.size(0) - n - 1) == kIgnoreIndex).all().item<bool>());
    EXPECT_TRUE((batch.input_ids[row].narrow(0, n, batch.input_ids.size(1) - n) == 0).all().item<bool>());
    const torch::Tensor words = batch.input_ids[row].narrow(0, 0, n) - 3;
    EXPECT_TRUE(torch::equal(labels.narrow(0, 0, n), (words + 1) % 61 + 3));
  }
}

}  // namespace
}  // namespace t5scale
