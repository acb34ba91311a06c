// The loop's data loader: the steps it hands out are the sampler's, collated, in order, whatever runs ahead; the
// next step is read on another thread while the caller works; a checkpoint's position is that of the next step to
// hand out; an error reading a step surfaces at that step; a step counts the model FLOPs of its examples unpadded.
// And the trainer copies an unpadded batch without its mask.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/check.h"
#include "job/step_data_prefetcher.h"
#include "plan/cost_model.h"
#include "support/operator_count.h"
#include "support/synthetic_task.h"
#include "support/test_support.h"
#include "train/parallel_trainer.h"

namespace t5scale {
namespace {

// 40 examples of varied lengths; reading one counts, and reading example `poisoned` fails.
class CountingExamples final : public ExampleSource {
 public:
  explicit CountingExamples(int64_t poisoned = -1) : poisoned_(poisoned) {
    for (int32_t i = 0; i < 40; ++i) {
      examples_.push_back({std::vector<int32_t>(3 + i % 7, 5 + i), std::vector<int32_t>(2 + i % 3, 7 + i)});
      source_lengths_.push_back(3 + i % 7);
      target_lengths_.push_back(2 + i % 3);
    }
  }
  std::string name() const override { return "counting"; }
  const std::vector<int64_t>& source_lengths() const override { return source_lengths_; }
  const std::vector<int64_t>& target_lengths() const override { return target_lengths_; }
  std::vector<TokenSequences> fetch(const std::vector<int64_t>& indices) override {
    ++fetches;
    std::vector<TokenSequences> out;
    for (int64_t i : indices) {
      T5S_CHECK(i != poisoned_, "example ", i, " is unreadable");
      out.push_back(examples_[static_cast<size_t>(i)]);
    }
    return out;
  }
  std::atomic<int> fetches{0};

 private:
  int64_t poisoned_;
  std::vector<TokenSequences> examples_;
  std::vector<int64_t> source_lengths_, target_lengths_;
};

BatchSamplerOptions sampler_options() {
  BatchSamplerOptions o;
  o.global_batch = 8;
  o.micro_batches = 2;
  o.seed = 7;
  return o;  // 40 / 8 = 5 steps an epoch, two micro-batches of 4 each
}

DistributedBatchSampler make_sampler(ExampleSource& source) {
  return DistributedBatchSampler(source.source_lengths(), source.target_lengths(), sampler_options());
}

TEST(StepDataPrefetcher, HandsOutTheSamplersStepsInOrderWithTheirPositions) {
  CountingExamples source, reference_source;
  DistributedBatchSampler sampler = make_sampler(source), reference = make_sampler(reference_source);
  const ModelConfig model = tiny_model_config(64);
  StepDataPrefetcher prefetcher(sampler, source, CollateOptions{}, /*pin_memory=*/false, model);
  double counted_flops = 0.0, padded_flops = 0.0;
  for (int step = 0; step < 12; ++step) {  // across two epoch boundaries
    const StepData data = prefetcher.next();
    const auto indices = reference.next_step();
    ASSERT_EQ(data.micro_batches.size(), indices.size());
    for (size_t m = 0; m < indices.size(); ++m) {
      const Seq2SeqBatch expected = collate(reference_source.fetch(indices[m]));
      EXPECT_TRUE(torch::equal(data.micro_batches[m].input_ids, expected.input_ids)) << "step " << step;
      EXPECT_TRUE(torch::equal(data.micro_batches[m].labels, expected.labels)) << "step " << step;
    }
    EXPECT_EQ(data.samples, 8);
    // Model FLOPs on each example's own lengths (CountingExamples: 3 + i % 7 and 2 + i % 3), not the padded ones.
    double unpadded = 0.0, padded = 0.0;
    for (const auto& micro_batch : indices) {
      for (const int64_t i : micro_batch) unpadded += training_flops(model, BatchShape{1, 3 + i % 7, 2 + i % 3});
      const Seq2SeqBatch expected = collate(reference_source.fetch(micro_batch));
      padded += training_flops(model, BatchShape{expected.input_ids.size(0), expected.input_ids.size(1),
                                                 expected.labels.size(1)});
    }
    EXPECT_NEAR(data.model_flops, unpadded, 1e-12 * unpadded) << "step " << step;
    counted_flops += data.model_flops;
    padded_flops += padded;
    EXPECT_EQ(prefetcher.position(), reference.position()) << "step " << step;
    EXPECT_EQ(data.epoch_after, reference.epoch_fraction());
    EXPECT_EQ(prefetcher.epoch_fraction(), reference.epoch_fraction());
    EXPECT_FALSE(sampler.position() == reference.position()) << "the sampler runs a step ahead";
  }
  EXPECT_LT(counted_flops, 0.95 * padded_flops) << "the batches pad: the padded shapes count more";
}

TEST(StepDataPrefetcher, ReadsTheNextStepWhileTheCallerWorks) {
  CountingExamples source;
  DistributedBatchSampler sampler = make_sampler(source);
  StepDataPrefetcher prefetcher(sampler, source, CollateOptions{}, false, tiny_model_config(64));
  prefetcher.next();
  EXPECT_GE(source.fetches.load(), 2);  // the first step's two micro-batches
  // Without another call, the following step's micro-batches are read.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (source.fetches.load() < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(source.fetches.load(), 4) << "the next step was not read ahead";
}

TEST(StepDataPrefetcher, RestoreServesFromThePositionAgain) {
  CountingExamples source, reference_source;
  DistributedBatchSampler sampler = make_sampler(source), reference = make_sampler(reference_source);
  StepDataPrefetcher prefetcher(sampler, source, CollateOptions{}, false, tiny_model_config(64));
  prefetcher.next();
  const SamplerPosition saved = prefetcher.position();  // what a checkpoint after step 1 saves
  prefetcher.next();
  prefetcher.next();
  prefetcher.restore(saved);
  EXPECT_EQ(prefetcher.position(), saved);
  reference.next_step();
  const auto second = reference.next_step();
  const StepData data = prefetcher.next();
  EXPECT_TRUE(torch::equal(data.micro_batches[0].input_ids, collate(reference_source.fetch(second[0])).input_ids));
}

TEST(StepDataPrefetcher, AReadErrorSurfacesAtItsStep) {
  CountingExamples probe;
  DistributedBatchSampler order = make_sampler(probe);
  order.next_step();
  const int64_t in_second_step = order.next_step()[1][0];  // an example of step 2's second micro-batch
  CountingExamples source(in_second_step);
  DistributedBatchSampler sampler = make_sampler(source);
  StepDataPrefetcher prefetcher(sampler, source, CollateOptions{}, false, tiny_model_config(64));
  EXPECT_NO_THROW(prefetcher.next()) << "step 1 is readable, step 2 (being read ahead) is not";
  const std::string error = testing::error_of([&] { prefetcher.next(); });
  EXPECT_NE(error.find("example " + std::to_string(in_second_step) + " is unreadable"), std::string::npos) << error;
}

// The trainer reads the host mask and hands the model none for an unpadded micro-batch: no additive mask is made,
// while a padded one makes two (padding_additive_mask's 1 - mask, a sub_ each: the encoder's and the cross mask).
TEST(StepDataPrefetcher, TheTrainerCopiesAnUnpaddedBatchWithoutItsMask) {
  ModelConfig config = tiny_model_config(32);
  ProcessGrid grid = ProcessGrid::solo();
  T5Model model(config, grid.tp, torch::kFloat32);
  model->initialize_weights(3);
  ParallelTrainer trainer(model, grid, ParallelTrainingOptions{});
  SyntheticTaskOptions task_options;
  task_options.vocab_size = 32;
  SyntheticTask task(task_options);
  Seq2SeqBatch batch = task.next_batch(4);
  batch.attention_mask = torch::ones_like(batch.attention_mask);
  for (const bool padded : {false, true}) {
    Seq2SeqBatch b = batch;
    if (padded) {
      b.attention_mask = batch.attention_mask.clone();
      b.attention_mask.index_put_({0, -1}, 0);
    }
    testing::OperatorCount count;
    testing::OperatorCount::clear();
    trainer.step({b}, 1e-3);
    EXPECT_EQ(testing::OperatorCount::of("aten::sub_"), padded ? 2 : 0)
        << (padded ? "padded" : "unpadded") << "\n" << testing::OperatorCount::listing();
  }
}

}  // namespace
}  // namespace t5scale
