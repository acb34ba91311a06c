#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "core/check.h"
#include "model/t5_layers.h"
#include "model/parallel_rng.h"
#include "model/t5_model.h"
#include "model/vocab_parallel_cross_entropy.h"
#include "support/operator_count.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

std::shared_ptr<Communicator> solo() { return std::make_shared<SoloCommunicator>("tp"); }

ModelConfig small_config(FeedForwardKind kind, bool tied) {
  ModelConfig c = tiny_model_config(50);
  c.feed_forward = kind;
  c.tie_word_embeddings = tied;
  c.num_layers = 3;
  c.num_decoder_layers = 2;
  c.num_heads = 3;
  c.d_kv = 8;
  c.dropout_rate = 0.1;
  return c;
}

TEST(T5Model, ShiftRightStartsFromDecoderStartAndReplacesIgnoredLabels) {
  T5Model model(small_config(FeedForwardKind::kRelu, true), solo());
  const torch::Tensor labels = torch::tensor({{5, 6, 1, -100}, {7, 1, -100, -100}});
  const torch::Tensor expected = torch::tensor({{0, 5, 6, 1}, {0, 7, 1, 0}});
  EXPECT_TRUE(torch::equal(model->shift_right(labels), expected)) << model->shift_right(labels);
}

TEST(T5Model, RelativePositionBucketsFollowT5) {
  // memory position - query position, 32 buckets, max distance 128 (T5's defaults).
  const torch::Tensor distance = torch::tensor({0, -1, 1, -7, 7, -8, -200, 200});
  EXPECT_TRUE(torch::equal(relative_position_bucket(distance, true, 32, 128),
                           torch::tensor({0, 1, 17, 7, 23, 8, 15, 31})));
  // Causal: keys after the query all share bucket 0; far-back keys saturate at the last bucket.
  EXPECT_TRUE(torch::equal(relative_position_bucket(distance, false, 32, 128),
                           torch::tensor({0, 1, 0, 7, 0, 8, 31, 0})));
}

TEST(T5Model, InitialisationIsSeededAndFollowsHuggingFaceScales) {
  const ModelConfig config = small_config(FeedForwardKind::kGatedGelu, false);
  T5Model a(config, solo()), b(config, solo()), c(config, solo());
  a->initialize_weights(7);
  b->initialize_weights(7);
  c->initialize_weights(8);
  auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  for (const auto& item : pa) {
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
    if (item.key().find("norm") == std::string::npos) {
      EXPECT_FALSE(torch::equal(item.value(), pc[item.key()])) << item.key();
    }
  }
  // Spot-check the Mesh TensorFlow scales: embeddings std 1, q std (d_model * d_kv)^-0.5, norms 1.
  EXPECT_NEAR(pa["shared.weight"].std().item<double>(), 1.0, 0.05);
  EXPECT_NEAR(pa["encoder.blocks.0.self_attn.q.weight"].std().item<double>(), std::pow(64.0 * 8.0, -0.5), 0.01);
  EXPECT_TRUE(torch::equal(pa["decoder.final_norm.weight"], torch::ones({64})));
}

TEST(T5Model, LossIsTheMeanTokenCrossEntropyOverLabelledTokens) {
  T5Model model(small_config(FeedForwardKind::kRelu, true), solo());
  model->initialize_weights(1);
  model->eval();
  Seq2SeqBatch batch;
  batch.input_ids = torch::randint(3, 50, {2, 6});
  batch.attention_mask = torch::ones({2, 6}, torch::kLong);
  batch.labels = torch::tensor({{4, 5, 1, -100}, {9, 1, -100, -100}});
  const torch::Tensor logits = model->forward(batch.input_ids, batch.attention_mask, model->shift_right(batch.labels));
  const torch::Tensor reference = torch::nn::functional::cross_entropy(
      logits.reshape({-1, 50}), batch.labels.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex));
  EXPECT_TRUE(testing::tensors_close("loss", model->loss(batch), reference, 1e-6));
}

TEST(T5Model, GreedyGenerationWithCacheEqualsFullRecomputation) {
  for (bool tied : {true, false}) {
    T5Model model(small_config(tied ? FeedForwardKind::kRelu : FeedForwardKind::kGatedGelu, tied), solo());
    model->initialize_weights(3);
    model->eval();
    const torch::Tensor input_ids = torch::randint(3, 50, {3, 7});
    torch::Tensor mask = torch::ones({3, 7}, torch::kLong);
    mask.index_put_({1, torch::indexing::Slice(4, torch::indexing::None)}, 0);
    const int64_t steps = 9;
    const torch::Tensor cached = model->generate_greedy(input_ids, mask, steps);

    // Without a cache: run the whole decoder over the prefix at every step and take the last position's argmax.
    torch::NoGradGuard no_grad;
    torch::Tensor sequences = torch::zeros({3, 1}, torch::kLong);
    torch::Tensor unfinished = torch::ones({3}, torch::kLong);
    for (int64_t s = 0; s < steps; ++s) {
      const torch::Tensor logits = model->forward(input_ids, mask, sequences).select(1, -1);
      torch::Tensor next = logits.argmax(-1) * unfinished;  // pad (0) once finished
      sequences = torch::cat({sequences, next.unsqueeze(1)}, 1);
      unfinished = unfinished * (next != 1).to(torch::kLong);
      if (unfinished.max().item<int64_t>() == 0) break;
    }
    EXPECT_TRUE(torch::equal(cached, sequences)) << "tied=" << tied << "\ncached\n" << cached << "\nrecomputed\n"
                                                 << sequences;
  }
}

TEST(T5Model, DropoutIsActiveOnlyInTraining) {
  T5Model model(small_config(FeedForwardKind::kRelu, true), solo());
  model->initialize_weights(2);
  const torch::Tensor ids = torch::randint(3, 50, {2, 5});
  const torch::Tensor mask = torch::ones({2, 5}, torch::kLong);
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(ids, mask, ids), model->forward(ids, mask, ids)));
  model->train();
  EXPECT_FALSE(torch::equal(model->forward(ids, mask, ids), model->forward(ids, mask, ids)));
}

// One training step of a freshly built model (weights and dropout streams from the seeds): its logits and every
// parameter's gradient, by name ("logits", "<parameter>.grad").
std::map<std::string, torch::Tensor> training_step(const ModelConfig& config, AttentionKernel kernel,
                                                   int64_t checkpoint_every, uint64_t seed, const torch::Tensor& ids,
                                                   const torch::Tensor& mask, const torch::Tensor& labels,
                                                   bool selective_recomputation = false) {
  torch::manual_seed(seed);
  auto rng = std::make_shared<ParallelRng>(seed + 1, /*tp_rank=*/0);
  T5Model model(config, solo(), torch::kFloat32, rng);
  model->initialize_weights(seed + 2);
  model->set_attention_kernel(kernel);
  model->set_activation_checkpointing(checkpoint_every);
  model->set_selective_recomputation(selective_recomputation);
  model->train();
  const torch::Tensor logits = model->forward(ids, mask, model->shift_right(labels));
  model->token_losses(logits, labels).sum().backward();
  std::map<std::string, torch::Tensor> results = {{"logits", logits.detach()}};
  for (const auto& item : model->named_parameters()) results[item.key() + ".grad"] = item.value().grad();
  return results;
}

// The model of the recomputation tests: dropout 0.2, gated GELU, untied.
ModelConfig dropout_config() {
  ModelConfig config = small_config(FeedForwardKind::kGatedGelu, false);
  config.dropout_rate = 0.2;
  return config;
}

// Two rows of 7 source tokens, the second padded after 4, and 5 labels each: ids, attention mask, labels.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> padded_batch() {
  const torch::Tensor ids = torch::randint(3, 50, {2, 7});
  torch::Tensor padded = torch::ones({2, 7}, torch::kLong);
  padded.index_put_({1, torch::indexing::Slice(4, torch::indexing::None)}, 0);
  return {ids, padded, torch::randint(3, 50, {2, 5})};
}

// Activation checkpointing recomputes a block exactly as its forward ran: the same inputs with the same
// requires-grad flags (the attention backend depends on them, and backends draw different dropout masks), the same
// generator states. So a training step with dropout is the same, bit for bit, with and without it; padded inputs make
// the masks and the position bias real inputs of every block. Selective recomputation (each attention core made again
// in backward) likewise, padded and unpadded (cross-attention without a mask), and together with checkpointing.
TEST(T5Model, RecomputedStepWithDropoutEqualsTheStepWithout) {
  for (const AttentionKernel kernel : {AttentionKernel::kSdpa, AttentionKernel::kExplicit, AttentionKernel::kCudnn}) {
    const ModelConfig config = dropout_config();
    const auto [ids, padded, labels] = padded_batch();
    for (const torch::Tensor& mask : {padded, torch::Tensor()}) {
      const auto plain = training_step(config, kernel, 0, 21, ids, mask, labels);
      struct Recomputation {
        const char* name;
        int64_t checkpoint_every;
        bool selective;
      };
      for (const Recomputation& r : {Recomputation{"checkpointing", 1, false}, Recomputation{"selective", 0, true},
                                     Recomputation{"both", 2, true}}) {
        const auto recomputed = training_step(config, kernel, r.checkpoint_every, 21, ids, mask, labels, r.selective);
        for (const auto& [name, expected] : plain) {
          EXPECT_TRUE(torch::equal(recomputed.at(name), expected))
              << name << " (kernel " << static_cast<int>(kernel) << (mask.defined() ? ", padded" : ", unpadded")
              << ") differs with " << r.name << " by up to "
              << (recomputed.at(name) - expected).abs().max().item<double>();
        }
      }
    }
  }
}

// Nothing padded: the model run without a mask (the trainer's choice then, which keeps the position bias broadcast
// over the rows and lets cross-attention go without one) equals the run with the all-ones mask, bit for bit: logits
// and every gradient but the position biases' (summed in another order: 1e-6 of their largest element), with
// dropout, both attention kernels, with and without activation checkpointing.
TEST(T5Model, AnUnpaddedBatchNeedsNoMask) {
  const ModelConfig config = small_config(FeedForwardKind::kRelu, true);
  const torch::Tensor ids = torch::randint(3, 50, {2, 7});
  const torch::Tensor labels = torch::randint(3, 50, {2, 5});
  for (const AttentionKernel kernel : {AttentionKernel::kSdpa, AttentionKernel::kExplicit}) {
    for (const int every : {0, 1}) {
      const auto masked = training_step(config, kernel, every, 8, ids, torch::ones({2, 7}, torch::kLong), labels);
      const auto unmasked = training_step(config, kernel, every, 8, ids, torch::Tensor(), labels);
      for (const auto& [name, expected] : masked) {
        const torch::Tensor& got = unmasked.at(name);
        const std::string which = msg(name, " (kernel ", static_cast<int>(kernel), ", checkpoint every ", every, ")");
        if (name.find("relative_attention_bias") != std::string::npos) {
          // The bias's gradient is summed over the rows inside each block when the bias is broadcast, after all
          // blocks when it is per row: the same sum in another fp32 order.
          const double scale = expected.abs().max().item<double>();
          EXPECT_LE((got - expected).abs().max().item<double>(), 1e-6 * scale) << which;
        } else {
          EXPECT_TRUE(torch::equal(got, expected))
              << which << " differs without the mask by up to " << (got - expected).abs().max().item<double>();
        }
      }
    }
  }
}

// The cudnn kernel where cuDNN takes no call (the CPU): the stack hands it the position bias alone with the causal
// mask and the key lengths beside it (AttentionMasking), and the sdpa kernel it falls back to gets them added to the
// bias per call. That is the sdpa kernel's step, bit for bit, with dropout, padded or not, with activation
// checkpointing and selective recomputation (which keep the maskings for the recompute), but for the position
// biases' gradients, reduced over the rows in each block rather than once for the stack (1e-6 of their largest
// element). The model says which kernel ran, and why.
TEST(T5Model, CudnnKernelWithoutCudnnRunsTheSdpaStepAndSaysWhy) {
  const ModelConfig config = dropout_config();
  const auto [ids, padded, labels] = padded_batch();
  for (const torch::Tensor& mask : {padded, torch::Tensor()}) {
    for (const int every : {0, 1}) {
      const bool selective = every == 0;
      const auto sdpa = training_step(config, AttentionKernel::kSdpa, every, 5, ids, mask, labels, selective);
      const auto cudnn = training_step(config, AttentionKernel::kCudnn, every, 5, ids, mask, labels, selective);
      for (const auto& [name, expected] : sdpa) {
        const torch::Tensor& got = cudnn.at(name);
        const std::string which = msg(name, mask.defined() ? " (padded" : " (unpadded", ", checkpoint every ", every,
                                      selective ? ", selective)" : ")");
        if (name.find("relative_attention_bias") != std::string::npos) {
          const double scale = expected.abs().max().item<double>();
          EXPECT_LE((got - expected).abs().max().item<double>(), 1e-6 * scale) << which;
        } else {
          EXPECT_TRUE(torch::equal(got, expected))
              << which << " differs from sdpa by up to " << (got - expected).abs().max().item<double>();
        }
      }
    }
  }
  T5Model model(config, solo());
  model->set_attention_kernel(AttentionKernel::kCudnn);
  EXPECT_EQ(model->attention_kernels(), "cudnn refused (not on a CUDA device), so sdpa: self-attention math; "
                                        "cross-attention math");
  model->train();
  model->forward(ids, padded, model->shift_right(labels));
  EXPECT_EQ(model->attention_kernels(), "cudnn refused (not on a CUDA device), so sdpa: self-attention math; "
                                        "cross-attention math; sdpa ran where cuDNN did not take a call: not on a "
                                        "CUDA device");
}

// The masks the cudnn kernel takes apart from the bias, added back for the other kernels: key lengths from a
// right-padded additive mask, and the causal and padding masks as the model's own additive masks.
TEST(T5Model, AttentionMaskingAddsBackAsTheAdditiveMasks) {
  const torch::Tensor attention_mask = torch::tensor({{1, 1, 1, 1}, {1, 1, 0, 0}});
  const torch::Tensor additive = padding_additive_mask(attention_mask, torch::kFloat32);
  const torch::Tensor lengths = key_lengths_of_padding_mask(additive);
  EXPECT_TRUE(torch::equal(lengths, torch::tensor({4, 2}, torch::kInt32))) << lengths;
  EXPECT_FALSE(key_lengths_of_padding_mask(torch::Tensor()).defined());
  const torch::Tensor bias = torch::randn({1, 3, 4, 4});
  AttentionMasking padding;
  padding.key_lengths = lengths;
  EXPECT_TRUE(torch::equal(bias_with_masks(bias, padding, 4, 4, torch::kFloat32, torch::kCPU), bias + additive));
  AttentionMasking causal;
  causal.causal = true;
  EXPECT_TRUE(torch::equal(bias_with_masks(bias, causal, 4, 4, torch::kFloat32, torch::kCPU),
                           bias + causal_additive_mask(4, torch::kFloat32, torch::kCPU)));
  EXPECT_TRUE(torch::equal(bias_with_masks(torch::Tensor(), padding, 4, 4, torch::kFloat32, torch::kCPU), additive));
  EXPECT_FALSE(AttentionMasking().any());
}

// A stand-in for one rank of a TP group that is never asked for a collective: construction and initialisation
// need none.
class StandInGroup final : public Communicator {
 public:
  StandInGroup(int rank, int size) : Communicator(rank, size, "tp") {}
  void all_reduce_max(torch::Tensor&) override { FAIL() << "no collective expected"; }
  torch::Tensor all_gather(const torch::Tensor& t) override {
    ADD_FAILURE() << "no collective expected";
    return t;
  }
  void broadcast(torch::Tensor&, int) override { FAIL() << "no collective expected"; }
  std::unique_ptr<CollectiveWork> all_reduce_sum_async(torch::Tensor&) override {
    ADD_FAILURE() << "no collective expected";
    return std::make_unique<CompletedWork>();
  }
  std::unique_ptr<CollectiveWork> reduce_scatter_sum_async(const torch::Tensor&, torch::Tensor&) override {
    ADD_FAILURE() << "no collective expected";
    return std::make_unique<CompletedWork>();
  }
};

TEST(T5Model, SplitsThatDoNotDivideAreRefusedWithBothNumbers) {
  ModelConfig config = named_model_config("t5-v1_1-xxl");  // 64 heads, d_ff 10240, vocab 32128
  const std::string message = testing::error_of(
      [&] { T5Model(config, std::make_shared<StandInGroup>(0, 3), torch::TensorOptions().device(torch::kMeta)); });
  EXPECT_NE(message.find("num_heads 64 is not divisible by tp 3"), std::string::npos) << message;
  config.num_heads = 63;
  const std::string d_ff_message = testing::error_of(
      [&] { T5Model(config, std::make_shared<StandInGroup>(0, 3), torch::TensorOptions().device(torch::kMeta)); });
  EXPECT_NE(d_ff_message.find("d_ff 10240 is not divisible by tp 3"), std::string::npos) << d_ff_message;
}


// The planner's list of parameters (config/model_config.h, no LibTorch) is the model's: the same names in the same
// order, the same elements on every TP rank, for both feed-forward kinds, tied and untied, at every TP size.
TEST(T5Model, ParameterElementsAreTheModelsParameters) {
  for (bool tied : {true, false}) {
    ModelConfig config = small_config(tied ? FeedForwardKind::kRelu : FeedForwardKind::kGatedGelu, tied);
    config.num_heads = 4;
    config.vocab_size = 48;
    for (int tp : {1, 2, 4}) {
      T5Model model(config, std::make_shared<StandInGroup>(tp - 1, tp), torch::TensorOptions().device(torch::kMeta));
      const auto params = model->named_parameters();
      const std::vector<ParameterElements> listed = parameter_elements(config, tp);
      ASSERT_EQ(listed.size(), params.size()) << "tp " << tp;
      int64_t total = 0;
      for (size_t i = 0; i < listed.size(); ++i) {
        EXPECT_EQ(listed[i].name, params[i].key()) << "tp " << tp;
        EXPECT_EQ(listed[i].per_rank, params[i].value().numel()) << listed[i].name << " at tp " << tp;
        total += params[i].value().numel();
      }
      if (tp == 1) EXPECT_EQ(total, parameter_count(config)) << (tied ? "tied" : "untied");
    }
  }
}

// Each TP rank draws only its own shard of the initial weights, and the shards of every TP size put together are
// the tensors one rank draws (the grid tests rely on it: every grid starts from the same model).
TEST(T5Model, InitialisationDrawsEachShardOfTheOneRankTensors) {
  for (bool tied : {true, false}) {
    ModelConfig config = small_config(tied ? FeedForwardKind::kRelu : FeedForwardKind::kGatedGelu, tied);
    config.num_heads = 4;    // divisible by every TP size below,
    config.vocab_size = 48;  // as is the vocabulary
    T5Model whole(config, solo());
    whole->initialize_weights(17);
    auto whole_params = whole->named_parameters();
    for (int tp_size : {2, 4}) {
      std::map<std::string, std::vector<torch::Tensor>> shards;
      std::vector<ParameterLayout> layouts;
      for (int tp_rank = 0; tp_rank < tp_size; ++tp_rank) {
        T5Model part(config, std::make_shared<StandInGroup>(tp_rank, tp_size));
        part->initialize_weights(17);
        layouts = part->parameter_layouts();
        for (const auto& item : part->named_parameters()) shards[item.key()].push_back(item.value().clone());
      }
      ASSERT_EQ(layouts.size(), whole_params.size());
      for (const ParameterLayout& layout : layouts) {
        const auto& pieces = shards.at(layout.name);
        const torch::Tensor joined = layout.is_split() ? torch::cat(pieces, layout.split_dim) : pieces[0];
        EXPECT_TRUE(torch::equal(joined, whole_params[layout.name]))
            << layout.name << " at tp " << tp_size << (tied ? " (tied)" : " (untied)");
        if (!layout.is_split()) {
          for (const auto& piece : pieces) EXPECT_TRUE(torch::equal(piece, pieces[0])) << layout.name;
        }
      }
    }
  }
}

// The same function through both attention kernels: logits and every parameter's gradient (the relative-position
// bias reaches its table only through the mask's gradient). fp64 shows the kernels compute the same thing; fp32
// allows for a different summation order inside the softmax and products (a few ulps over d_kv = 8 and 7 keys).
TEST(T5Model, AttentionKernelsAgreeOnLogitsAndGradients) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    ModelConfig config = small_config(FeedForwardKind::kGatedGelu, false);
    config.dropout_rate = 0.0;
    std::map<std::string, torch::Tensor> results[2];
    const torch::Tensor ids = torch::randint(3, 50, {2, 7});
    torch::Tensor mask = torch::ones({2, 7}, torch::kLong);
    mask.index_put_({1, torch::indexing::Slice(5, torch::indexing::None)}, 0);
    const torch::Tensor labels = torch::randint(3, 50, {2, 5});
    for (int which = 0; which < 2; ++which) {
      T5Model model(config, solo(), dtype);
      model->initialize_weights(4);
      model->set_attention_kernel(which == 0 ? AttentionKernel::kExplicit : AttentionKernel::kSdpa);
      model->train();
      const torch::Tensor logits = model->forward(ids, mask, model->shift_right(labels));
      model->token_losses(logits, labels).sum().backward();
      results[which]["logits"] = logits.detach();
      for (const auto& item : model->named_parameters()) results[which][item.key() + ".grad"] = item.value().grad();
    }
    // The explicit path rounds the softmax to fp32 as transformers does (the fp64 parity tests rely on it) while
    // SDPA keeps fp64 throughout, so in fp64 the two agree to a few fp32 ulps (1.2e-7 each), not to fp64's.
    const double tolerance = dtype == torch::kFloat64 ? 1e-6 : 1e-5;
    for (const auto& [name, expected] : results[0]) {
      EXPECT_TRUE(testing::tensors_close(name, results[1].at(name), expected, tolerance)) << c10::toString(dtype);
    }
  }
}

// SDPA's dropout takes no generator: TensorParallelStreamAsDefault lends it the TP stream and gives the default
// stream back untouched, so the replicated dropout stays alike on every TP rank.
TEST(T5Model, DefaultGeneratorDrawsFromTheTensorParallelStreamInsideTheGuard) {
  ParallelRng rng(11, /*tp_rank=*/1);
  torch::manual_seed(5);
  const torch::Tensor default_before = at::detail::getDefaultCPUGenerator().get_state();
  at::Generator tp_copy = rng.tensor_parallel().clone();
  const torch::Tensor expected = torch::rand({64}, tp_copy);
  torch::Tensor drawn;
  {
    TensorParallelStreamAsDefault guard(rng);
    drawn = torch::rand({64});
  }
  EXPECT_TRUE(torch::equal(drawn, expected));
  EXPECT_TRUE(torch::equal(at::detail::getDefaultCPUGenerator().get_state(), default_before));
  EXPECT_TRUE(torch::equal(rng.tensor_parallel().get_state(), tp_copy.get_state()));  // advanced past the draw
}

// A two-rank tensor-parallel group seen from rank 0, whose collectives leave data as it is and are counted: the
// model then runs one rank's share with every collective it would make.
class CountingGroup final : public Communicator {
 public:
  CountingGroup() : Communicator(0, 2, "tp") {}
  void all_reduce_max(torch::Tensor&) override {}
  torch::Tensor all_gather(const torch::Tensor& t) override { return torch::stack({t, t}); }
  void broadcast(torch::Tensor&, int) override {}
  std::unique_ptr<CollectiveWork> all_reduce_sum_async(torch::Tensor&) override {
    ++all_reduce_sums;
    return std::make_unique<CompletedWork>();
  }
  std::unique_ptr<CollectiveWork> reduce_scatter_sum_async(const torch::Tensor& flat, torch::Tensor& chunk) override {
    chunk.copy_(flat.chunk(2)[0]);
    return std::make_unique<CompletedWork>();
  }
  int all_reduce_sums = 0;
};

// Megatron's count: the backward all-reduces the gradient once where a column-parallel region begins, i.e. once per
// sub-layer (2 per encoder block: attention, feed-forward; 3 per decoder block: self-attention, the query of
// cross-attention, feed-forward), once for the encoder output that every cross-attention reads, and once for the
// tied LM head's input. Not once per q, k, v, wi_0 and wi_1.
TEST(T5Model, BackwardAllReducesOncePerTensorParallelRegion) {
  for (const bool tied : {true, false}) {
    ModelConfig config = small_config(tied ? FeedForwardKind::kRelu : FeedForwardKind::kGatedGelu, tied);
    config.num_heads = 4;  // two heads per rank of the two-rank group
    auto group = std::make_shared<CountingGroup>();
    T5Model model(config, group);
    model->initialize_weights(6);
    const torch::Tensor ids = torch::randint(3, 50, {2, 6});
    const torch::Tensor labels = torch::randint(3, 25, {2, 4});  // ids this rank's half of the vocabulary holds
    const torch::Tensor loss =
        model->token_losses(model->forward(ids, torch::ones({2, 6}, torch::kLong), model->shift_right(labels)), labels)
            .sum();
    group->all_reduce_sums = 0;
    loss.backward();
    const int expected = 2 * config.num_layers + 3 * config.num_decoder_layers + /*encoder output*/ 1 + /*LM head*/ 1;
    EXPECT_EQ(group->all_reduce_sums, expected) << "tied=" << tied;
  }
}

// Each attention call site's SDPA kernel is pinned for the call. On the CPU that is math, also where SDPA would
// otherwise take its CPU flash kernel (no mask, no dropout), and the process's SDPA settings come back after.
TEST(T5Model, SdpaRunsThePinnedKernelAndRestoresTheSettings) {
  EXPECT_EQ(sdpa_backend_for(torch::kCPU, torch::kFloat32, true), SdpaBackend::kMath);
  EXPECT_EQ(sdpa_backend_for(torch::kCPU, torch::kBFloat16, false), SdpaBackend::kMath);
  const torch::Device cuda(torch::kCUDA, 0);
  EXPECT_EQ(sdpa_backend_for(cuda, torch::kBFloat16, true), SdpaBackend::kEfficient);
  EXPECT_EQ(sdpa_backend_for(cuda, torch::kBFloat16, false), SdpaBackend::kFlash);
  EXPECT_EQ(sdpa_backend_for(cuda, torch::kHalf, false), SdpaBackend::kFlash);
  EXPECT_EQ(sdpa_backend_for(cuda, torch::kFloat32, false), SdpaBackend::kEfficient);
  EXPECT_EQ(attention_kernels_description(AttentionKernel::kSdpa, cuda, torch::kBFloat16),
            "sdpa: self-attention efficient; cross-attention flash, efficient when padded");
  EXPECT_EQ(attention_kernels_description(AttentionKernel::kSdpa, cuda, torch::kFloat32),
            "sdpa: self-attention efficient; cross-attention efficient");
  EXPECT_EQ(attention_kernels_description(AttentionKernel::kExplicit, torch::kCPU, torch::kFloat32), "explicit");

  ModelConfig config = small_config(FeedForwardKind::kGatedGelu, false);
  config.dropout_rate = 0.0;
  T5Attention attention(config, solo(), std::make_shared<ParallelRng>(1, 0), torch::TensorOptions());
  attention->kernel = AttentionKernel::kSdpa;
  const torch::Tensor hidden = torch::randn({2, 5, config.d_model});
  const bool flash_before = at::globalContext().userEnabledFlashSDP();
  const bool math_before = at::globalContext().userEnabledMathSDP();
  {
    testing::OperatorCount count;
    testing::OperatorCount::clear();
    attention(hidden, torch::Tensor());  // no mask: unpinned, SDPA takes its CPU flash kernel here
    EXPECT_EQ(testing::OperatorCount::of("aten::_scaled_dot_product_attention_math"), 1)
        << testing::OperatorCount::listing();
    EXPECT_EQ(testing::OperatorCount::of("aten::_scaled_dot_product_flash_attention_for_cpu"), 0)
        << testing::OperatorCount::listing();
  }
  EXPECT_EQ(at::globalContext().userEnabledFlashSDP(), flash_before);
  EXPECT_EQ(at::globalContext().userEnabledMathSDP(), math_before);
}

// The blocks of a bf16 stack share one bf16 copy of the position bias; read through read_with_fp32_gradient, their
// gradients are summed in fp32 at the fp32 source: exactly, here, where 64 readers' bf16 gradients need 14 bits.
// Summed at the bf16 copy itself (what a plain shared tensor gets), the same gradients lose their low bits.
TEST(T5Model, SharedBiasGradientsAreSummedInFp32) {
  const torch::Tensor source = torch::randn({1, 2, 3, 3}).requires_grad_(true);
  const torch::Tensor copy = source.detach().to(torch::kBFloat16);
  const int readers = 64;
  std::vector<torch::Tensor> weights;
  for (int i = 0; i < readers; ++i) weights.push_back((1.0 + torch::rand({1, 2, 3, 3})).to(torch::kBFloat16));
  torch::Tensor total = torch::zeros({}, torch::kBFloat16);
  for (int i = 0; i < readers; ++i) total = total + (read_with_fp32_gradient(copy, source) * weights[i]).sum();
  total.backward();
  torch::Tensor exact = torch::zeros({1, 2, 3, 3}, torch::kFloat64);
  for (const auto& w : weights) exact += w.to(torch::kFloat64);
  EXPECT_EQ(source.grad().scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(source.grad().to(torch::kFloat64), exact)) << (source.grad().to(torch::kFloat64) - exact).abs().max();

  const torch::Tensor plain = source.detach().to(torch::kBFloat16).requires_grad_(true);
  torch::Tensor plain_total = torch::zeros({}, torch::kBFloat16);
  for (int i = 0; i < readers; ++i) plain_total = plain_total + (plain * weights[i]).sum();
  plain_total.backward();
  EXPECT_FALSE(torch::equal(plain.grad().to(torch::kFloat64), exact)) << "bf16 summation lost nothing here: the test "
                                                                         "shows no difference";
}

// The stack reads its shared bias that way: a bf16 model's graph holds one ReadWithFp32Gradient node per block (each
// block's own edge to the fp32 bias), an fp32 model's none.
TEST(T5Model, EveryBlockOfAHalfPrecisionStackReadsTheBiasWithAnFp32Gradient) {
  ModelConfig config = small_config(FeedForwardKind::kGatedGelu, false);
  const torch::Tensor ids = torch::randint(3, 50, {2, 7});
  const torch::Tensor labels = torch::randint(3, 50, {2, 5});
  for (const auto dtype : {torch::kBFloat16, torch::kFloat32}) {
    T5Model model(config, solo(), dtype);
    model->initialize_weights(4);
    const torch::Tensor loss = model->token_losses(model->forward(ids, torch::Tensor(), model->shift_right(labels)),
                                                   labels).sum();
    std::set<const torch::autograd::Node*> seen;
    std::vector<const torch::autograd::Node*> todo = {loss.grad_fn().get()};
    int readers = 0;
    while (!todo.empty()) {
      const torch::autograd::Node* node = todo.back();
      todo.pop_back();
      if (node == nullptr || !seen.insert(node).second) continue;
      readers += node->name().find("ReadWithFp32Gradient") != std::string::npos;
      for (const auto& edge : node->next_edges()) todo.push_back(edge.function.get());
    }
    const int blocks = static_cast<int>(config.num_layers + config.num_decoder_layers);
    EXPECT_EQ(readers, dtype == torch::kBFloat16 ? blocks : 0) << c10::toString(dtype);
  }
}

// transformers' T5LayerNorm, written as transformers writes it: variance in fp32, the normalised value rounded to a
// half-precision weight's dtype before the product.
torch::Tensor transformers_t5_layer_norm(const torch::Tensor& hidden, const torch::Tensor& weight, double eps) {
  const torch::Tensor variance = hidden.to(torch::kFloat32).pow(2).mean(-1, /*keepdim=*/true);
  torch::Tensor normed = hidden * torch::rsqrt(variance + eps);
  if (weight.scalar_type() == torch::kHalf || weight.scalar_type() == torch::kBFloat16) {
    normed = normed.to(weight.scalar_type());
  }
  return weight * normed;
}

// RMSNorm goes through at::rms_norm (one fused kernel each way on CUDA) except in fp64. fp32: transformers' values
// and gradients bit for bit; fp64: its formula; bf16 and fp16: T5's norm computed in fp32 and rounded once, so one
// rounding (one unit in the last place) from transformers', which rounds twice.
TEST(T5Model, RMSNormIsT5sNorm) {
  const double eps = 1e-6;
  for (const auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kHalf}) {
    const auto options = torch::TensorOptions().dtype(dtype);
    RMSNorm norm(96, eps, std::make_shared<SoloCommunicator>("tp"), options);
    torch::Tensor x;
    torch::Tensor w;
    {
      torch::NoGradGuard no_grad;
      auto g = at::make_generator<at::CPUGeneratorImpl>(17);
      norm->weight.copy_(at::normal(1.0, 0.5, {96}, g));
      x = (at::normal(0.0, 3.0, {3, 5, 96}, g)).to(dtype);
      w = norm->weight.detach().clone();
    }
    const torch::Tensor upstream = torch::randn({3, 5, 96}).to(dtype);
    const torch::Tensor x1 = x.clone().requires_grad_(true);
    const torch::Tensor y = norm(x1);
    (y * upstream).sum().backward();
    const torch::Tensor x2 = x.clone().requires_grad_(true);
    const torch::Tensor w2 = w.clone().requires_grad_(true);
    const torch::Tensor reference = transformers_t5_layer_norm(x2, w2, eps);
    (reference * upstream).sum().backward();
    ASSERT_EQ(y.scalar_type(), dtype);
    if (dtype == torch::kFloat32 || dtype == torch::kFloat64) {
      EXPECT_TRUE(torch::equal(y, reference)) << c10::toString(dtype) << " worst " << (y - reference).abs().max();
      EXPECT_TRUE(torch::equal(x1.grad(), x2.grad())) << c10::toString(dtype) << " worst "
                                                      << (x1.grad() - x2.grad()).abs().max();
      EXPECT_TRUE(torch::equal(norm->weight.grad(), w2.grad())) << c10::toString(dtype);
      continue;
    }
    const torch::Tensor rounded_once =
        transformers_t5_layer_norm(x.to(torch::kFloat32), w.to(torch::kFloat32), eps).to(dtype);
    EXPECT_TRUE(torch::equal(y, rounded_once)) << c10::toString(dtype);
    // One unit in the last place of the larger of the two: 2^-7 relative for bf16, 2^-10 for fp16.
    const double ulp = dtype == torch::kBFloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
    const torch::Tensor ours = y.to(torch::kFloat64), theirs = reference.detach().to(torch::kFloat64);
    const torch::Tensor apart = (ours - theirs).abs() / torch::maximum(ours.abs(), theirs.abs()).clamp_min(1e-30);
    EXPECT_LE(apart.max().item<double>(), ulp) << c10::toString(dtype);
    EXPECT_GT(apart.max().item<double>(), 0.0) << c10::toString(dtype) << ": no rounding apart at all, is the "
                                                  "fused norm in use?";
  }
}

// transformers' T5 clamps fp16 hidden states to 65504 - 1000 when any is infinite, else to 65504; other dtypes pass.
TEST(T5Model, Fp16ClampFollowsTransformers) {
  const torch::Tensor finite = torch::tensor({1.0, 65504.0, -65504.0}).to(torch::kHalf);
  EXPECT_TRUE(torch::equal(clamp_fp16(finite), finite));
  const torch::Tensor with_inf = torch::tensor({1.0f, 65504.0f, -INFINITY}).to(torch::kHalf);
  const torch::Tensor expected = torch::tensor({1.0, 64504.0, -64504.0}).to(torch::kHalf);
  EXPECT_TRUE(torch::equal(clamp_fp16(with_inf), expected)) << clamp_fp16(with_inf);
  const torch::Tensor fp32 = torch::tensor({1e30f, -INFINITY});
  EXPECT_TRUE(torch::equal(clamp_fp16(fp32), fp32));
}

}  // namespace
}  // namespace t5scale
