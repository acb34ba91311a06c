// The cost model against PyTorch's FlopCounterMode on transformers' T5 (forward and backward FLOPs, exact), and
// the memory prediction's arithmetic.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>

#include "plan/cost_model.h"

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
  }
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
  EXPECT_EQ(plain.optimizer_bytes, parameters_per_rank(model, 8) * 12);

  MemoryInputs zero1 = base;
  zero1.zero1 = true;
  const int64_t shard = (parameters_per_rank(model, 8) + 3) / 4;
  EXPECT_EQ(predict_memory(model, zero1).optimizer_bytes, shard * 12);

  MemoryInputs checkpointed = base;
  checkpointed.activation_checkpointing = true;
  EXPECT_LT(predict_memory(model, checkpointed).activations_bytes, plain.activations_bytes / 4);

  MemoryInputs wider = base;
  wider.tp = 4;
  EXPECT_GT(predict_memory(model, wider).total_bytes(), plain.total_bytes());
  EXPECT_NE(plain.describe().find(" GiB"), std::string::npos);
}

TEST(CostModel, RefusesImpossibleShapes) {
  EXPECT_THROW(forward_flops(tiny_model_config(64), BatchShape{0, 8, 8}), std::exception);
  MemoryInputs bad;
  bad.compute_bytes_per_element = 3;
  EXPECT_THROW(predict_memory(tiny_model_config(64), bad), std::exception);
}

}  // namespace
}  // namespace t5scale
