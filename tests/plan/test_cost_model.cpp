// The cost model against PyTorch's FlopCounterMode on transformers' T5 (forward and backward FLOPs, exact; the
// unpadded count of equal examples too), and the memory prediction's arithmetic.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "core/check.h"
#include "plan/cost_model.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

ModelConfig model_from(const nlohmann::json& c) {
  ModelConfig m;
  m.vocab_size = c.at("vocab_size");
  m.d_model = c.at("d_model");
  m.d_kv = c.at("d_kv");
  m.d_ff = c.at("d_ff");
  m.num_layers = c.at("num_layers");
  m.num_decoder_layers = c.at("num_decoder_layers");
  m.num_heads = c.at("num_heads");
  m.feed_forward = c.at("feed_forward_proj") == "gated-gelu" ? FeedForwardKind::kGatedGelu : FeedForwardKind::kRelu;
  m.tie_word_embeddings = c.at("tie_word_embeddings");
  return m;
}

TEST(CostModel, FlopsEqualFlopCounterModeOnTransformersT5) {
  const char* path = std::getenv("T5SCALE_FLOP_REFERENCES");
  ASSERT_NE(path, nullptr) << "T5SCALE_FLOP_REFERENCES is not set (ctest sets it)";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  const nlohmann::json references = nlohmann::json::parse(in);
  ASSERT_EQ(references.at("cases").size(), 2u);
  for (const auto& c : references.at("cases")) {
    const ModelConfig model = model_from(c.at("config"));
    const BatchShape batch{c.at("rows"), c.at("source_length"), c.at("target_length")};
    const double forward = c.at("forward_flops").get<double>();
    const double backward = c.at("backward_flops").get<double>();
    // Integer counts far below 2^53: the arithmetic is exact in double.
    EXPECT_EQ(forward_flops(model, batch), forward) << c.at("name");
    EXPECT_EQ(training_flops(model, batch), forward + backward) << c.at("name");
    // The same examples counted one by one on their own (here equal) lengths.
    const auto rows = static_cast<size_t>(batch.rows);
    EXPECT_EQ(unpadded_training_flops(model, std::vector<int64_t>(rows, batch.source_length),
                                      std::vector<int64_t>(rows, batch.target_length)),
              forward + backward)
        << c.at("name");
  }
}

TEST(CostModel, UnpaddedFlopsCountEachExampleOnItsOwnLengths) {
  const ModelConfig model = tiny_model_config(64);
  // Two examples, (3, 7) and (11, 2) tokens: what each costs as a batch of one; padded to (11, 7), both cost more.
  const double each = training_flops(model, BatchShape{1, 3, 7}) + training_flops(model, BatchShape{1, 11, 2});
  EXPECT_EQ(unpadded_training_flops(model, {3, 11}, {7, 2}), each);
  EXPECT_LT(each, training_flops(model, BatchShape{2, 11, 7}));
  EXPECT_EQ(unpadded_training_flops(model, {}, {}), 0.0);
  EXPECT_THROW(unpadded_training_flops(model, {3, 11}, {7}), std::exception);
  EXPECT_THROW(unpadded_training_flops(model, {-1}, {7}), std::exception);
}

TEST(CostModel, ParametersPerRankSplitEverythingButTheNorms) {
  const ModelConfig model = named_model_config("t5-v1_1-xxl");
  EXPECT_EQ(parameters_per_rank(model, 1), parameter_count(model));
  const int64_t norms = model.d_model * (2 * model.num_layers + 3 * model.num_decoder_layers + 2);
  EXPECT_EQ(parameters_per_rank(model, 8), norms + (parameter_count(model) - norms) / 8);
}

TEST(CostModel, MemoryPredictionMovesTheWayEachSwitchShould) {
  const ModelConfig model = named_model_config("t5-v1_1-xxl");
  MemoryInputs base;
  base.tp = 8;
  base.dp = 4;
  base.compute_bytes_per_element = 2;
  base.micro_batch = {4, 512, 128};
  const MemoryPrediction plain = predict_memory(model, base);
  EXPECT_EQ(plain.weights_bytes, parameters_per_rank(model, 8) * 2);
  // fp32 without ZeRO-1: the parameters are the master weights (one buffer, in optimizer_bytes); with ZeRO-1 each
  // rank keeps its full fp32 parameters beside its chunk of masters.
  MemoryInputs fp32 = base;
  fp32.compute_bytes_per_element = 4;
  EXPECT_EQ(predict_memory(model, fp32).weights_bytes, 0);
  // AdamW: master weights, two moments and the weight-decay mask, 4 + 8 + 1 bytes per element.
  EXPECT_EQ(predict_memory(model, fp32).optimizer_bytes, parameters_per_rank(model, 8) * 13);
  fp32.zero1 = true;
  EXPECT_EQ(predict_memory(model, fp32).weights_bytes, parameters_per_rank(model, 8) * 4);
  EXPECT_EQ(plain.optimizer_bytes, parameters_per_rank(model, 8) * 13);

  MemoryInputs zero1 = base;
  zero1.zero1 = true;
  const int64_t shard = (parameters_per_rank(model, 8) + 3) / 4;
  EXPECT_EQ(predict_memory(model, zero1).optimizer_bytes, shard * 13);

  // The fp32 buckets, whole; with ZeRO-1 also the rank's reduced chunk; ZeRO-2: the chunk and the whole buckets
  // being filled or reduced. A parameter's compute-dtype .grad is released into its bucket as it is made: not here.
  EXPECT_EQ(plain.gradients_bytes, parameters_per_rank(model, 8) * 4);
  MemoryInputs zero2 = zero1;
  zero2.zero2 = true;
  const int64_t n = parameters_per_rank(model, 8);
  EXPECT_EQ(predict_memory(model, zero1).gradients_bytes, n * 4 + shard * 4);
  EXPECT_EQ(predict_memory(model, zero2).gradients_bytes, shard * 4 + kZero2BucketsHeld * zero2.bucket_bytes);
  EXPECT_EQ(predict_memory(model, zero2).optimizer_bytes, shard * 13);
  zero2.zero1 = false;
  EXPECT_NE(testing::error_of([&] { predict_memory(model, zero2); }).find("ZeRO-2 needs ZeRO-1"), std::string::npos);

  MemoryInputs checkpointed = base;
  checkpointed.checkpoint_every_blocks = 1;
  const int64_t every_block = predict_memory(model, checkpointed).activations_bytes;
  EXPECT_LT(every_block, plain.activations_bytes / 4);
  // Fewer checkpointed blocks keep more: every 2nd block lies between none and every block, and the prediction
  // never falls as k grows (blocks 0, k, 2k, ... are checkpointed).
  checkpointed.checkpoint_every_blocks = 2;
  const int64_t every_second = predict_memory(model, checkpointed).activations_bytes;
  EXPECT_GT(every_second, every_block);
  EXPECT_LT(every_second, plain.activations_bytes);
  int64_t previous = every_block;
  for (int64_t k = 2; k <= model.num_layers + 1; ++k) {
    checkpointed.checkpoint_every_blocks = k;
    const int64_t now = predict_memory(model, checkpointed).activations_bytes;
    EXPECT_GE(now, previous) << "k=" << k;
    previous = now;
  }
  EXPECT_LT(previous, plain.activations_bytes);  // k beyond the depth still checkpoints block 0

  MemoryInputs wider = base;
  wider.tp = 4;
  EXPECT_GT(predict_memory(model, wider).total_bytes(), plain.total_bytes());
  EXPECT_NE(plain.describe().find(" GiB"), std::string::npos);
}

// The measured peaks of every committed GPU row are unit.gpu_evidence's (tests/plan/test_gpu_evidence.cpp); a row
// that ran out of memory leaves no JSON there, so the one committed is held here.
TEST(CostModel, ExplicitPathRunsOutOfMemoryWhereTheH200DidToo) {
  // The explicit path ran out of the H200's 143771 MiB for T5-v1.1-base at 256 x 512/128
  // (t5-v1_1-base-512-128-explicit.log); the fused one held it: the planner must say the same.
  MemoryInputs base_row;
  base_row.compute_bytes_per_element = 2;
  base_row.micro_batch = {256, 512, 128};
  base_row.on_gpu = true;
  base_row.padded = false;  // the benchmark's rows: every row of the full lengths
  const int64_t h200_bytes = int64_t{143771} * 1024 * 1024;
  const ModelConfig base = named_model_config("t5-v1_1-base");
  EXPECT_TRUE(fits_device_memory(predict_memory(base, base_row).total_bytes(), h200_bytes));
  base_row.fused_attention = false;
  EXPECT_FALSE(fits_device_memory(predict_memory(base, base_row).total_bytes(), h200_bytes));
}

// Frozen parameters keep their weights but have no gradients and no optimizer state; in fp32 without ZeRO-1 they
// are the only weights not held as master buckets.
TEST(CostModel, FrozenParametersHaveNoGradientsAndNoOptimizerState) {
  const ModelConfig model = named_model_config("t5-v1_1-base");
  MemoryInputs base;
  base.tp = 2;
  base.compute_bytes_per_element = 2;
  base.micro_batch = {4, 512, 128};
  FreezeOptions encoder;
  encoder.encoder = true;
  const int64_t frozen = frozen_parameters_per_rank(model, 2, encoder);
  int64_t encoder_elements = 0;
  for (const ParameterElements& p : parameter_elements(model, 2)) {
    if (p.name.rfind("encoder.", 0) == 0) encoder_elements += p.per_rank;
  }
  EXPECT_EQ(frozen, encoder_elements);
  EXPECT_GT(frozen, parameters_per_rank(model, 2) / 4);  // about a third of v1.1-base is its encoder

  MemoryInputs freezing = base;
  freezing.frozen_parameters_per_rank = frozen;
  const MemoryPrediction all = predict_memory(model, base), some = predict_memory(model, freezing);
  EXPECT_EQ(some.weights_bytes, all.weights_bytes);
  EXPECT_EQ(all.gradients_bytes - some.gradients_bytes, frozen * 4);
  EXPECT_EQ(all.optimizer_bytes - some.optimizer_bytes, frozen * 13);
  EXPECT_EQ(some.activations_bytes, all.activations_bytes);

  MemoryInputs fp32 = freezing;
  fp32.compute_bytes_per_element = 4;
  EXPECT_EQ(predict_memory(model, fp32).weights_bytes, frozen * 4);

  FreezeOptions pattern;
  pattern.pattern = "ff[.]wo";
  int64_t wo_elements = 0;
  for (const ParameterElements& p : parameter_elements(model, 2)) {
    if (p.name.find(".ff.wo.") != std::string::npos) wo_elements += p.per_rank;
  }
  EXPECT_EQ(frozen_parameters_per_rank(model, 2, pattern), wo_elements);
  pattern.pattern = "no_such_parameter";
  EXPECT_THROW(frozen_parameters_per_rank(model, 2, pattern), std::exception);
  freezing.frozen_parameters_per_rank = parameters_per_rank(model, 2);
  EXPECT_THROW(predict_memory(model, freezing), std::exception);  // nothing left to train
}

// On the CPU a bf16 GEMM may write its product in fp32 first (MemoryInputs::half_products_through_fp32): the tied
// weight gradient in fp32, 4 bytes x (V / tp) x d_model, beside the LM head's backward. For t5-small at one row of
// 256/64 that moment becomes the peak: the peak rises by the buffer less the lead the moment before it had (none at
// tp 2, where the LM head's backward was already the peak); nothing in fp32, on a GPU, or where the probe found no
// buffer. (unit.memory_model measures it: the bf16 one-row cases were 5% under their measured peaks without it.)
TEST(CostModel, ACpuHalfProductsFp32BufferIsTheLmHeadsWeightGradientInFp32) {
  const ModelConfig model = named_model_config("t5-small");
  for (const int tp : {1, 2}) {
    MemoryInputs in;
    in.tp = tp;
    in.on_gpu = false;
    in.compute_bytes_per_element = 2;
    in.micro_batch = {1, 256, 64};
    MemoryInputs buffered = in;
    buffered.half_products_through_fp32 = true;
    const int64_t buffer_bytes = 4 * (model.vocab_size / tp) * model.d_model;
    const int64_t rise = predict_memory(model, buffered).activations_bytes - predict_memory(model, in).activations_bytes;
    EXPECT_GT(rise, buffer_bytes * 9 / 10) << "tp " << tp;
    EXPECT_LE(rise, buffer_bytes) << "tp " << tp;
    if (tp == 2) EXPECT_EQ(rise, buffer_bytes);
    MemoryInputs fp32 = buffered, gpu = buffered, fp32_plain = in, gpu_plain = in;
    fp32.compute_bytes_per_element = fp32_plain.compute_bytes_per_element = 4;
    gpu.on_gpu = gpu_plain.on_gpu = true;
    EXPECT_EQ(predict_memory(model, fp32).tensor_bytes(), predict_memory(model, fp32_plain).tensor_bytes());
    EXPECT_EQ(predict_memory(model, gpu).tensor_bytes(), predict_memory(model, gpu_plain).tensor_bytes());
  }
}

// The planner's choice is the least recomputation that fits 95% of the device: none when everything fits, every
// block (and "does not fit") when nothing does, and otherwise a k whose next-larger k would not fit.
// auto: of none, selective recomputation and every k-th block, the candidate that recomputes the fewest FLOPs among
// those that fit; every block (not fitting) when none does. Checked against every candidate at every device size of a
// sweep from too small to roomy, for the explicit attention path (whose scores selective recomputation drops) and the
// fused one.
TEST(CostModel, ActivationCheckpointingChoiceIsTheLeastRecomputationThatFits) {
  const ModelConfig model = named_model_config("t5-3b");
  for (const bool fused : {false, true}) {
    MemoryInputs in;
    in.compute_bytes_per_element = 2;
    in.micro_batch = {32, 512, 128};
    in.fused_attention = fused;
    in.checkpoint_every_blocks = 5;        // ignored by the choice
    in.selective_recomputation = fused;    // likewise
    struct Candidate {
      int64_t every;
      bool selective;
      int64_t bytes;
      double flops;
    };
    std::vector<Candidate> candidates;
    for (int64_t k = 0; k <= model.num_layers; ++k) {
      for (const bool selective : {false, true}) {
        if (selective && k > 0) continue;
        MemoryInputs tried = in;
        tried.checkpoint_every_blocks = k;
        tried.selective_recomputation = selective;
        candidates.push_back({k, selective, predict_memory(model, tried).total_bytes(), recomputed_flops(model, tried)});
      }
    }
    const Candidate& none = candidates[0];
    const Candidate& selective = candidates[1];
    const Candidate& every_block = candidates[2];
    EXPECT_EQ(none.flops, 0.0);
    EXPECT_GT(selective.flops, 0.0);
    EXPECT_LT(selective.flops, every_block.flops);   // the cores are a part of each block
    EXPECT_LT(selective.bytes, none.bytes);
    EXPECT_GT(selective.bytes, every_block.bytes);
    int chosen_selective = 0, chosen_blocks = 0;
    for (double fraction = 0.3; fraction <= 1.3; fraction += 0.01) {
      const int64_t memory = static_cast<int64_t>(fraction * static_cast<double>(none.bytes));
      const CheckpointingChoice choice = choose_activation_checkpointing(model, in, memory);
      const Candidate* best = nullptr;
      for (const Candidate& c : candidates) {
        if (fits_device_memory(c.bytes, memory) && (best == nullptr || c.flops < best->flops)) best = &c;
      }
      const std::string at = msg(fused ? "fused" : "explicit", " attention, ", fraction, " x none's memory");
      if (best == nullptr) {
        EXPECT_FALSE(choice.fits) << at;
        EXPECT_EQ(choice.checkpoint_every_blocks, 1) << at;
        EXPECT_FALSE(choice.selective_recomputation) << at;
        continue;
      }
      ASSERT_TRUE(choice.fits) << at;
      MemoryInputs chosen = in;
      chosen.checkpoint_every_blocks = choice.checkpoint_every_blocks;
      chosen.selective_recomputation = choice.selective_recomputation;
      EXPECT_EQ(recomputed_flops(model, chosen), best->flops) << at << ": chose " << choice.describe();
      EXPECT_EQ(choice.memory.total_bytes(), predict_memory(model, chosen).total_bytes()) << at;
      chosen_selective += choice.selective_recomputation ? 1 : 0;
      chosen_blocks += choice.checkpoint_every_blocks > 0 ? 1 : 0;
    }
    // The sweep reaches every kind of choice: selective where it fits and none does not (on the explicit path, whose
    // scores it drops), and blocks below that.
    if (!fused) EXPECT_GT(chosen_selective, 0);
    EXPECT_GT(chosen_blocks, 0);
  }
  EXPECT_EQ((CheckpointingChoice{0, false, {}, true}.describe()), "none");
  EXPECT_EQ((CheckpointingChoice{0, true, {}, true}.describe()), "selective (attention cores)");
  EXPECT_EQ((CheckpointingChoice{1, false, {}, true}.describe()), "every block");
  EXPECT_EQ((CheckpointingChoice{2, false, {}, true}.describe()), "every 2nd block");
  EXPECT_EQ((CheckpointingChoice{11, false, {}, true}.describe()), "every 11th block");
  EXPECT_EQ((CheckpointingChoice{21, true, {}, true}.describe()), "every 21st block and selective (attention cores)");
  EXPECT_THROW(choose_activation_checkpointing(model, MemoryInputs{}, 0), std::exception);
}

TEST(CostModel, RefusesImpossibleShapes) {
  EXPECT_THROW(forward_flops(tiny_model_config(64), BatchShape{0, 8, 8}), std::exception);
  MemoryInputs bad;
  bad.compute_bytes_per_element = 3;
  EXPECT_THROW(predict_memory(tiny_model_config(64), bad), std::exception);
}

}  // namespace
}  // namespace t5scale
