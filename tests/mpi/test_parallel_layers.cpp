// Each tensor-parallel layer over the whole world as its TP group, against its unsharded twin built from the
// same seed with LibTorch's own ops: forward output, input gradient and each weight shard's gradient.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include "model/parallel_layers.h"
#include "model/t5_model.h"
#include "model/tensor_parallel_mappings.h"
#include "model/vocab_parallel_cross_entropy.h"
#include "mpi_test_support.h"
#include "plan/cost_model.h"
#include "support/synthetic_task.h"
#include "support/test_support.h"
#include "train/parallel_trainer.h"

namespace t5scale {
namespace {

namespace F = torch::nn::functional;
using testing::tensors_close;

// fp32 on the CPU. A layer's output is a sum over the input dimension; splitting it over ranks changes the
// summation order, worth a few ulps of the result (norm-wise ~1e-7).
constexpr double kTolerance = 1e-6;

torch::Tensor seeded(std::vector<int64_t> shape, uint64_t seed) {
  return at::normal(0.0, 1.0, shape, at::make_generator<at::CPUGeneratorImpl>(seed));
}

class ParallelLayers : public ::testing::Test {
 protected:
  void SetUp() override { grid_ = testing::make_grid(testing::world_size()); }
  Communicator& tp() { return *grid_.tp; }
  ProcessGrid grid_;
};

TEST_F(ParallelLayers, ColumnParallelLinearEqualsItsUnshardedTwin) {
  const int64_t in = 12, out = 8 * testing::world_size();
  for (bool gather_output : {false, true}) {
    ColumnParallelLinear layer(ColumnParallelLinearOptions(in, out).gather_output(gather_output), grid_.tp);
    const torch::Tensor weight = seeded({out, in}, 1);
    const ParameterLayout layout = layer->parameter_layouts()[0];
    {
      torch::NoGradGuard no_grad;
      layer->weight.copy_(shard_of(weight, layout, tp().rank(), tp().size()));
    }
    const torch::Tensor x = seeded({3, 5, in}, 2).requires_grad_(true);
    const torch::Tensor x_ref = x.detach().clone().requires_grad_(true);
    const torch::Tensor w_ref = weight.clone().requires_grad_(true);
    const torch::Tensor y_ref = F::linear(x_ref, w_ref);
    const torch::Tensor upstream = seeded(y_ref.sizes().vec(), 3);

    const torch::Tensor y = layer(x);
    const torch::Tensor expected = gather_output ? y_ref : split_last_dim(y_ref, tp());
    EXPECT_TRUE(tensors_close("column output", y, expected, kTolerance));
    (y * (gather_output ? upstream : split_last_dim(upstream, tp()))).sum().backward();
    (y_ref * upstream).sum().backward();
    EXPECT_TRUE(tensors_close("column input grad", x.grad(), x_ref.grad(), kTolerance));
    EXPECT_TRUE(tensors_close("column weight grad", layer->weight.grad(),
                              shard_of(w_ref.grad(), layout, tp().rank(), tp().size()), kTolerance));
  }
}

TEST_F(ParallelLayers, RowParallelLinearEqualsItsUnshardedTwin) {
  const int64_t in = 6 * testing::world_size(), out = 10;
  for (bool input_is_parallel : {true, false}) {
    RowParallelLinear layer(RowParallelLinearOptions(in, out).input_is_parallel(input_is_parallel), grid_.tp);
    const torch::Tensor weight = seeded({out, in}, 4);
    const ParameterLayout layout = layer->parameter_layouts()[0];
    {
      torch::NoGradGuard no_grad;
      layer->weight.copy_(shard_of(weight, layout, tp().rank(), tp().size()));
    }
    const torch::Tensor x_full = seeded({2, 7, in}, 5);
    const torch::Tensor x = (input_is_parallel ? split_last_dim(x_full, tp()) : x_full.clone()).requires_grad_(true);
    const torch::Tensor x_ref = x_full.clone().requires_grad_(true);
    const torch::Tensor w_ref = weight.clone().requires_grad_(true);
    const torch::Tensor y_ref = F::linear(x_ref, w_ref);
    const torch::Tensor upstream = seeded(y_ref.sizes().vec(), 6);

    const torch::Tensor y = layer(x);
    EXPECT_TRUE(tensors_close("row output", y, y_ref, kTolerance));
    (y * upstream).sum().backward();
    (y_ref * upstream).sum().backward();
    const torch::Tensor x_grad_ref = input_is_parallel ? split_last_dim(x_ref.grad(), tp()) : x_ref.grad();
    EXPECT_TRUE(tensors_close("row input grad", x.grad(), x_grad_ref, kTolerance));
    EXPECT_TRUE(tensors_close("row weight grad", layer->weight.grad(),
                              shard_of(w_ref.grad(), layout, tp().rank(), tp().size()), kTolerance));
  }
}

TEST_F(ParallelLayers, VocabParallelEmbeddingEqualsItsUnshardedTwin) {
  const int64_t vocab = 5 * testing::world_size(), dim = 6;
  VocabParallelEmbedding layer(VocabParallelEmbeddingOptions(vocab, dim), grid_.tp);
  const torch::Tensor weight = seeded({vocab, dim}, 7);
  const ParameterLayout layout = layer->parameter_layouts()[0];
  {
    torch::NoGradGuard no_grad;
    layer->weight.copy_(shard_of(weight, layout, tp().rank(), tp().size()));
  }
  const torch::Tensor ids = torch::arange(vocab).flip(0).view({vocab / 5, 5}).repeat({2, 1});  // every id, twice
  const torch::Tensor w_ref = weight.clone().requires_grad_(true);
  const torch::Tensor y_ref = torch::embedding(w_ref, ids);
  const torch::Tensor upstream = seeded(y_ref.sizes().vec(), 8);
  const torch::Tensor y = layer(ids);
  EXPECT_TRUE(tensors_close("embedding output", y, y_ref, kTolerance));
  (y * upstream).sum().backward();
  (y_ref * upstream).sum().backward();
  EXPECT_TRUE(tensors_close("embedding weight grad", layer->weight.grad(),
                            shard_of(w_ref.grad(), layout, tp().rank(), tp().size()), kTolerance));
}

TEST_F(ParallelLayers, VocabParallelCrossEntropyEqualsCrossEntropyOnFullLogits) {
  const int64_t vocab = 7 * testing::world_size();
  const torch::Tensor logits = seeded({4, 6, vocab}, 9) * 3.0;
  torch::Tensor labels = torch::randint(0, vocab, {4, 6}, at::make_generator<at::CPUGeneratorImpl>(10));
  labels.index_put_({0, 5}, kIgnoreIndex);
  labels.index_put_({3, 0}, kIgnoreIndex);
  const int64_t part = vocab / tp().size();
  const torch::Tensor local = logits.narrow(-1, tp().rank() * part, part).clone().requires_grad_(true);
  const torch::Tensor full = logits.clone().requires_grad_(true);

  const torch::Tensor loss = vocab_parallel_cross_entropy(local, labels, tp().rank() * part, tp());
  const torch::Tensor loss_ref =
      F::cross_entropy(full.view({-1, vocab}), labels.view({-1}),
                       F::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).reduction(torch::kNone))
          .view({4, 6});
  EXPECT_TRUE(tensors_close("per-token loss", loss, loss_ref, kTolerance));
  const torch::Tensor weights = seeded({4, 6}, 11);
  (loss * weights).sum().backward();
  (loss_ref * weights).sum().backward();
  EXPECT_TRUE(tensors_close("logits grad", local.grad(), full.grad().narrow(-1, tp().rank() * part, part), kTolerance));
}

TEST_F(ParallelLayers, VocabParallelArgmaxEqualsArgmaxIncludingTies) {
  const int64_t vocab = 3 * testing::world_size();
  torch::Tensor logits = seeded({5, vocab}, 12);
  logits.index_put_({0, torch::indexing::Slice()}, 1.0);  // all tied: the lowest id wins
  logits.index_put_({1, vocab - 1}, 50.0);
  logits.index_put_({2, 0}, 50.0);
  const int64_t part = vocab / tp().size();
  const torch::Tensor local = logits.narrow(-1, tp().rank() * part, part);
  EXPECT_TRUE(torch::equal(vocab_parallel_argmax(local, tp().rank() * part, tp()), logits.argmax(-1)));
}

TEST_F(ParallelLayers, WholeModelAtEveryTpSizeEqualsOneRank) {
  ModelConfig config = tiny_model_config(48);
  config.num_heads = 4;
  config.d_kv = 8;
  config.dropout_rate = 0.0;
  for (bool tied : {true, false}) {
    config.tie_word_embeddings = tied;
    config.feed_forward = tied ? FeedForwardKind::kRelu : FeedForwardKind::kGatedGelu;
    T5Model reference(config, std::make_shared<SoloCommunicator>("tp"));
    reference->initialize_weights(21);
    T5Model sharded(config, grid_.tp);
    sharded->initialize_weights(21);  // per-tensor generators: the same model at every TP size
    const torch::Tensor ids = torch::randint(3, 48, {3, 9}, at::make_generator<at::CPUGeneratorImpl>(22));
    torch::Tensor mask = torch::ones({3, 9}, torch::kLong);
    mask.index_put_({2, torch::indexing::Slice(5, torch::indexing::None)}, 0);
    const torch::Tensor dec = torch::randint(3, 48, {3, 6}, at::make_generator<at::CPUGeneratorImpl>(23));
    const torch::Tensor logits = gather_last_dim(sharded->forward(ids, mask, dec), tp());
    EXPECT_TRUE(tensors_close(tied ? "tied logits" : "untied logits", logits, reference->forward(ids, mask, dec),
                              kTolerance));
    EXPECT_TRUE(torch::equal(sharded->generate_greedy(ids, mask, 8), reference->generate_greedy(ids, mask, 8)));
  }
}

// Sequence parallelism over the whole world as the TP group, in fp64: the loss and every parameter's gradient equal
// one rank's to 1e-12, tied (relu) and untied (gated GELU), with and without checkpointing every block, on a batch
// with a padded row. The norms' weights see 1 / tp of the tokens per rank and are summed over the group in backward.
TEST_F(ParallelLayers, SequenceParallelModelEqualsOneRankForwardAndBackward) {
  ModelConfig config = tiny_model_config(48);
  config.num_heads = 4;
  config.d_kv = 8;
  config.dropout_rate = 0.0;
  const torch::Tensor ids = torch::randint(3, 48, {3, 8}, at::make_generator<at::CPUGeneratorImpl>(22));
  torch::Tensor mask = torch::ones({3, 8}, torch::kLong);
  mask.index_put_({2, torch::indexing::Slice(5, torch::indexing::None)}, 0);
  torch::Tensor labels = torch::randint(3, 48, {3, 4}, at::make_generator<at::CPUGeneratorImpl>(23));
  labels.index_put_({1, 3}, kIgnoreIndex);
  const Seq2SeqBatch batch{ids, mask, labels};
  for (bool tied : {true, false}) {
    config.tie_word_embeddings = tied;
    config.feed_forward = tied ? FeedForwardKind::kRelu : FeedForwardKind::kGatedGelu;
    T5Model reference(config, std::make_shared<SoloCommunicator>("tp"), torch::kFloat64);
    reference->initialize_weights(21);
    const torch::Tensor reference_loss = reference->loss(batch);
    reference_loss.backward();
    for (int64_t checkpoint_every : {0, 1}) {
      const std::string what = msg(tied ? "tied" : "untied", checkpoint_every > 0 ? ", checkpointed" : "", ": ");
      T5Model sharded(config, grid_.tp, torch::kFloat64);
      sharded->initialize_weights(21);
      sharded->set_sequence_parallel(true);
      sharded->set_activation_checkpointing(checkpoint_every);
      const torch::Tensor loss = sharded->loss(batch);
      loss.backward();
      EXPECT_TRUE(tensors_close(what + "loss", loss, reference_loss, 1e-12));
      auto reference_params = reference->named_parameters();
      auto params = sharded->named_parameters();
      for (const ParameterLayout& layout : sharded->parameter_layouts()) {
        const torch::Tensor gathered = testing::gather_shards(params[layout.name].grad(), layout, tp());
        EXPECT_TRUE(tensors_close(what + layout.name, gathered, reference_params[layout.name].grad(), 1e-12));
      }
    }
  }
}

// A sequence that the TP group cannot split is refused with the length, tp and the key; at tp 1 nothing is split and
// any length runs.
TEST_F(ParallelLayers, SequenceParallelRefusesALengthTpDoesNotDivide) {
  ModelConfig config = tiny_model_config(48);
  config.num_heads = 4;
  T5Model sharded(config, grid_.tp);
  sharded->initialize_weights(21);
  sharded->set_sequence_parallel(true);
  const int64_t length = 4 * tp().size() + 1;
  const torch::Tensor ids = torch::randint(3, 48, {2, length}, at::make_generator<at::CPUGeneratorImpl>(24));
  const torch::Tensor dec = torch::randint(3, 48, {2, tp().size()}, at::make_generator<at::CPUGeneratorImpl>(25));
  if (tp().size() == 1) {
    EXPECT_EQ(sharded->forward(ids, torch::Tensor(), dec).size(1), tp().size());
    return;
  }
  try {
    sharded->forward(ids, torch::Tensor(), dec);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(msg("parallel.sequence_parallel splits every sequence over the TP group: the "
                                             "source length ", length, " is not divisible by tp ", tp().size())),
              std::string::npos)
        << e.what();
  }
}

TEST(ProcessGridLayout, GroupsAreConsecutiveForTpAndStridedForDp) {
  for (int tp : testing::tp_sizes_for_world()) {
    ProcessGrid grid = testing::make_grid(tp);
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    EXPECT_EQ(grid.tp_rank, world_rank % tp);
    EXPECT_EQ(grid.dp_rank, world_rank / tp);
    // Members of my TP group: world ranks dp_rank * tp + i; of my DP group: tp_rank + j * tp.
    torch::Tensor me = torch::full({1}, static_cast<int64_t>(world_rank), torch::kLong);
    const torch::Tensor tp_members = grid.tp->all_gather(me).view({-1});
    const torch::Tensor dp_members = grid.dp->all_gather(me).view({-1});
    EXPECT_TRUE(torch::equal(tp_members, torch::arange(tp) + grid.dp_rank * tp)) << tp_members;
    EXPECT_TRUE(torch::equal(dp_members, torch::arange(grid.dp_size) * tp + grid.tp_rank)) << dp_members;
  }
}

TEST(ProcessGridLayout, BadGridsAreRefusedWithTheReason) {
  const ModelConfig xxl = named_model_config("t5-v1_1-xxl");  // 64 heads, d_ff 10240, vocab 32128
  EXPECT_TRUE(ProcessGrid::validate(16, 8, xxl).empty());
  const auto errors = ProcessGrid::validate(6, 4, xxl);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "world size 6 is not divisible by tp 4 (world = tp x dp)");
  const auto three = ProcessGrid::validate(9, 3, xxl);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0], "parallel.tp: model t5-v1_1-xxl: num_heads 64 is not divisible by tp 3");
  EXPECT_EQ(three[1], "parallel.tp: model t5-v1_1-xxl: d_ff 10240 is not divisible by tp 3");
  EXPECT_EQ(three[2], "parallel.tp: model t5-v1_1-xxl: vocab_size 32128 is not divisible by tp 3");
  EXPECT_EQ(ProcessGrid::validate(4, 0, xxl).at(0), "tp: must be at least 1, got 0");
  if (testing::world_size() > 1) {
    GridOptions options;
    options.tp = testing::world_size() + 1;
    const std::string message = testing::error_of([&] { ProcessGrid::create(options); });
    EXPECT_NE(message.find("is not divisible by tp"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace t5scale

namespace t5scale {
namespace {

TEST(ParallelRngStreams, SplitRegionsDifferPerTpRankReplicatedOnesAgree) {
  ProcessGrid grid = testing::make_grid(testing::world_size());
  ParallelRng rng(123, grid.tp_rank);
  const torch::Tensor split_mask = torch::empty({64}).bernoulli_(0.5, rng.tensor_parallel());
  torch::manual_seed(123);
  const torch::Tensor replicated_mask = torch::dropout(torch::ones({64}), 0.5, true);
  const torch::Tensor split_all = grid.tp->all_gather(split_mask);
  const torch::Tensor replicated_all = grid.tp->all_gather(replicated_mask);
  for (int r = 1; r < grid.tp_size; ++r) {
    EXPECT_FALSE(torch::equal(split_all[r], split_all[0])) << "TP rank " << r << " drew rank 0's split mask";
    EXPECT_TRUE(torch::equal(replicated_all[r], replicated_all[0])) << "TP rank " << r << " drew another replicated mask";
  }
}

TEST(ParallelTraining, AnOverflowOnOneRankIsSeenByEveryRank) {
  ProcessGrid grid = testing::make_grid(1);  // dp = world
  ModelConfig config = tiny_model_config(32);
  config.dropout_rate = 0.0;
  T5Model model(config, grid.tp);
  model->initialize_weights(1);
  ParallelTrainer trainer(model, grid, ParallelTrainingOptions{});
  SyntheticTaskOptions task_options;
  task_options.vocab_size = 32;
  trainer.step({SyntheticTask(task_options).next_batch(2)}, 1e-3);
  EXPECT_FALSE(trainer.optimizer().found_non_finite(*grid.world));
  if (grid.world_rank() == testing::world_size() - 1) trainer.gradients().owned_grad(0)[0] = INFINITY;
  EXPECT_TRUE(trainer.optimizer().found_non_finite(*grid.world));
}

}  // namespace
}  // namespace t5scale

namespace t5scale {
namespace {

// The tiny model without dropout on a dp = world grid, and its parameters as bucket slots.
T5Model overlap_model(const ProcessGrid& grid) {
  ModelConfig config = tiny_model_config(32);
  config.dropout_rate = 0.0;
  T5Model model(config, grid.tp);
  model->initialize_weights(2);
  return model;
}

std::vector<ParameterSlot> slots_of(T5Model& model) {
  std::vector<ParameterSlot> slots;
  auto params = model->named_parameters();
  for (const auto& layout : model->parameter_layouts()) slots.push_back({layout.name, params[layout.name], layout});
  return slots;
}

TEST(GradientBucketsOverlap, ReductionsStartInsideBackwardOnlyOnTheLastMicroBatch) {
  ProcessGrid grid = testing::make_grid(1);  // dp = world
  T5Model model = overlap_model(grid);
  GradientBuckets buckets(slots_of(model), grid.dp, /*bucket_bytes=*/16 * 1024, GradientSharding::kNone);
  ASSERT_GT(buckets.buckets().size(), 3u);
  SyntheticTaskOptions task_options;
  task_options.vocab_size = 32;
  SyntheticTask task(task_options);
  auto in_flight = [&] {
    size_t n = 0;
    for (const auto& b : buckets.buckets()) n += b.work != nullptr;
    return n;
  };
  buckets.begin_step();
  buckets.begin_micro_batch(/*last_micro_batch=*/false);
  model->loss(task.next_batch(2)).backward();
  EXPECT_EQ(in_flight(), 0u) << "no reduction before the last micro-batch";
  buckets.begin_micro_batch(/*last_micro_batch=*/true);
  model->loss(task.next_batch(2)).backward();
  // Every bucket was launched by the gradient hooks while backward ran; finish() only waits.
  EXPECT_EQ(in_flight(), buckets.buckets().size());
  buckets.finish();
  EXPECT_EQ(in_flight(), 0u);
  for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined()) << "gradients live in the fp32 buckets";
}

// ZeRO-2: every micro-batch reduces while its backward runs, with at most kZero2BucketsInFlight reductions
// outstanding, and between micro-batches a rank holds no whole bucket, only its chunk of each.
TEST(GradientBucketsOverlap, Zero2ReducesEveryMicroBatchAndKeepsOnlyItsChunk) {
  ProcessGrid grid = testing::make_grid(1);  // dp = world
  T5Model model = overlap_model(grid);
  GradientBuckets buckets(slots_of(model), grid.dp, /*bucket_bytes=*/16 * 1024, GradientSharding::kGradients);
  ASSERT_GT(buckets.buckets().size(), kZero2BucketsInFlight + 1);
  SyntheticTaskOptions task_options;
  task_options.vocab_size = 32;
  SyntheticTask task(task_options);
  auto count = [&](auto predicate) {
    size_t n = 0;
    for (const auto& b : buckets.buckets()) n += predicate(b);
    return n;
  };
  auto in_flight = [&] { return count([](const GradientBucket& b) { return b.work != nullptr; }); };
  auto whole = [&] { return count([](const GradientBucket& b) { return b.main_grad.defined(); }); };
  EXPECT_EQ(whole(), 0u) << "no whole bucket before the first gradient";
  buckets.begin_step();
  for (bool last : {false, true}) {
    buckets.begin_micro_batch(last);
    EXPECT_EQ(whole(), 0u) << "the previous micro-batch's buffers were released";
    model->loss(task.next_batch(2)).backward();
    EXPECT_GE(in_flight(), 1u) << "reductions run inside backward, in every micro-batch";
    EXPECT_LE(in_flight(), kZero2BucketsInFlight);
    EXPECT_EQ(whole(), in_flight()) << "only the buckets being reduced are whole";
  }
  buckets.finish();
  EXPECT_EQ(in_flight(), 0u);
  EXPECT_EQ(whole(), 0u);
  for (size_t b = 0; b < buckets.buckets().size(); ++b) {
    EXPECT_EQ(buckets.owned_grad(b).numel() * grid.dp_size, buckets.buckets()[b].elements);
  }
}

}  // namespace
}  // namespace t5scale
