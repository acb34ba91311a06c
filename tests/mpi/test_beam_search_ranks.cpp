// Beam search over the whole world as the TP group: the vocabulary-parallel log-softmax and top-k against LibTorch's
// own on the full logits, and the whole model's beam search at every TP size against one rank's.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include "model/t5_model.h"
#include "model/vocab_parallel_cross_entropy.h"
#include "mpi_test_support.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

// fp32 on the CPU: the log-sum-exp is summed per rank and then over ranks, a few ulps from one sum.
constexpr double kBeamTolerance = 1e-6;

class BeamSearchRanks : public ::testing::Test {
 protected:
  void SetUp() override { grid_ = testing::make_grid(testing::world_size()); }
  Communicator& tp() { return *grid_.tp; }
  ProcessGrid grid_;
};

TEST_F(BeamSearchRanks, VocabParallelLogSoftmaxAndTopkEqualTheFullOnes) {
  const int64_t vocab = 6 * testing::world_size(), part = vocab / tp().size();
  const torch::Tensor logits = at::normal(0.0, 3.0, {2, 3, vocab}, at::make_generator<at::CPUGeneratorImpl>(5));
  const torch::Tensor local = logits.narrow(-1, tp().rank() * part, part);
  EXPECT_TRUE(testing::tensors_close("log-softmax", vocab_parallel_log_softmax(local, tp()),
                                     torch::log_softmax(logits, -1).narrow(-1, tp().rank() * part, part),
                                     kBeamTolerance));
  for (int64_t k : {int64_t{1}, int64_t{4}, vocab}) {  // fewer, more than a rank holds, and every id
    auto [values, ids] = vocab_parallel_topk(local, k, tp().rank() * part, tp());
    auto [full_values, full_ids] = logits.topk(k, -1);
    EXPECT_TRUE(torch::equal(values, full_values)) << "k " << k;
    EXPECT_TRUE(torch::equal(ids, full_ids)) << "k " << k;
  }
}

// A tiny model with 4 heads (a multiple of every TP size tested) and no dropout: tied with a ReLU feed-forward, or
// untied with a gated GELU one; seeded per tensor, the same weights at every TP size. eos is made likely (its output
// row scaled up), so that some hypotheses end in eos and the finished ones are ranked: a random model otherwise
// repeats one token to the limit. The scales were chosen by looking: tied, hypotheses end after 1 and 2 tokens while
// others run to the limit; untied, they end after 2.
T5Model eos_prone_model(bool tied, CommunicatorPtr tp) {
  ModelConfig config = tiny_model_config(48);
  config.num_heads = 4;
  config.d_kv = 8;
  config.dropout_rate = 0.0;
  config.tie_word_embeddings = tied;
  config.feed_forward = tied ? FeedForwardKind::kRelu : FeedForwardKind::kGatedGelu;
  T5Model model(config, std::move(tp));
  model->initialize_weights(31);
  torch::NoGradGuard no_grad;
  torch::Tensor rows = tied ? model->shared->weight : model->lm_head->weight;  // (V / tp, C)
  const int64_t eos_row = config.eos_token_id - model->vocab_start();
  if (eos_row >= 0 && eos_row < rows.size(0)) rows[eos_row].mul_(tied ? 12.0 : 6.0);
  return model;
}

TEST_F(BeamSearchRanks, WholeModelAtEveryTpSizeEqualsOneRank) {
  for (bool tied : {true, false}) {
    T5Model reference = eos_prone_model(tied, std::make_shared<SoloCommunicator>("tp"));
    T5Model sharded = eos_prone_model(tied, grid_.tp);
    const torch::Tensor ids = torch::randint(3, 48, {3, 9}, at::make_generator<at::CPUGeneratorImpl>(32));
    torch::Tensor mask = torch::ones({3, 9}, torch::kLong);
    mask.index_put_({2, torch::indexing::Slice(5, torch::indexing::None)}, 0);
    for (const auto& [beams, length_penalty] : {std::pair{3, 1.0}, std::pair{4, 0.6}, std::pair{2, 2.0}}) {
      const torch::Tensor expected = reference->generate_beam(ids, mask, 10, beams, length_penalty);
      const torch::Tensor generated = expected.narrow(1, 1, expected.size(1) - 1);
      ASSERT_TRUE((generated == reference->config().eos_token_id).any().item<bool>())
          << "no hypothesis ends in eos: the finished ones are never ranked\n" << expected;
      EXPECT_TRUE(torch::equal(sharded->generate_beam(ids, mask, 10, beams, length_penalty), expected))
          << (tied ? "tied" : "untied") << ", " << beams << " beams, length penalty " << length_penalty << "\n"
          << expected;
    }
  }
}

}  // namespace
}  // namespace t5scale
