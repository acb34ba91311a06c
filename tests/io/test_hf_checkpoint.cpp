// Loading and exporting Hugging Face checkpoint folders, and every kind of bad folder refused with a message
// that names the file and the tensor or key. (Parity with transformers itself: tests/parity.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::expect_mentions;
using testing::TempDir;

ModelConfig checkpoint_config() {
  ModelConfig c = tiny_model_config(40);
  c.num_layers = 2;
  c.num_decoder_layers = 1;
  return c;
}

class HfCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = T5Model(checkpoint_config(), std::make_shared<SoloCommunicator>("tp"));
    model_->initialize_weights(11);
    export_hf_checkpoint(*model_, folder());
  }
  std::string folder() const { return dir_ / "ckpt"; }
  std::string weights() const { return dir_ / "ckpt/model.safetensors"; }
  std::string config_path() const { return dir_ / "ckpt/config.json"; }

  nlohmann::json read_config() const { return nlohmann::json::parse(std::ifstream(config_path())); }
  void write_config(const nlohmann::json& j) const { std::ofstream(config_path()) << j.dump(2); }

  // Rewrites model.safetensors through `edit`, which may change the list of named tensors.
  template <typename Edit>
  void rewrite_weights(Edit&& edit) const {
    const auto file = SafetensorsFile::open(weights());
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (const auto& name : file.names()) tensors.emplace_back(name, file.read(name));
    edit(tensors);
    write_safetensors(weights(), tensors, {{"format", "pt"}});
  }

  std::string load_error() const {
    return error_of([&] { load_hf_model(folder(), std::make_shared<SoloCommunicator>("tp")); });
  }

  TempDir dir_;
  T5Model model_{nullptr};
};

TEST_F(HfCheckpoint, ExportThenLoadGivesTheSameModel) {
  T5Model loaded = load_hf_model(folder(), std::make_shared<SoloCommunicator>("tp"));
  auto original = model_->named_parameters();
  for (const auto& item : loaded->named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), original[item.key()])) << item.key();
  }
  const auto file = SafetensorsFile::open(weights());
  EXPECT_TRUE(file.contains("decoder.block.0.layer.1.EncDecAttention.q.weight"));
  EXPECT_TRUE(file.contains("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"));
  EXPECT_EQ(file.metadata().at("format"), "pt");
}

TEST_F(HfCheckpoint, ShardedCheckpointWithIndexLoads) {
  const auto file = SafetensorsFile::open(weights());
  std::vector<std::pair<std::string, torch::Tensor>> first, second;
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  int i = 0;
  for (const auto& name : file.names()) {
    auto& part = (i++ % 2 == 0) ? first : second;
    part.emplace_back(name, file.read(name));
    index["weight_map"][name] = (&part == &first) ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(dir_ / "ckpt/model-00001-of-00002.safetensors", first, {{"format", "pt"}});
  write_safetensors(dir_ / "ckpt/model-00002-of-00002.safetensors", second, {{"format", "pt"}});
  fs::remove(weights());
  std::ofstream(dir_ / "ckpt/model.safetensors.index.json") << index.dump();
  T5Model loaded = load_hf_model(folder(), std::make_shared<SoloCommunicator>("tp"));
  auto original = model_->named_parameters();
  for (const auto& item : loaded->named_parameters()) EXPECT_TRUE(torch::equal(item.value(), original[item.key()]));

  fs::remove(dir_ / "ckpt/model-00002-of-00002.safetensors");
  expect_mentions(load_error(), {"model.safetensors.index.json", "model-00002-of-00002.safetensors"});
}

TEST_F(HfCheckpoint, AnIndexNamingAShardOutsideTheFolderIsRefusedBeforeItIsOpened) {
  // The shard outside is a good one: only its name can stop it.
  fs::copy_file(weights(), dir_ / "outside.safetensors");
  nlohmann::json index;
  for (const auto& item : model_->named_parameters()) index["weight_map"][item.key()] = "../outside.safetensors";
  fs::remove(weights());
  std::ofstream(dir_ / "ckpt/model.safetensors.index.json") << index.dump();
  expect_mentions(load_error(), {"model.safetensors.index.json", "'../outside.safetensors' is not a plain file name"});
}

TEST_F(HfCheckpoint, MissingWeightsFileIsNamed) {
  fs::remove(weights());
  expect_mentions(load_error(), {"ckpt", "model.safetensors"});
}

TEST_F(HfCheckpoint, TruncatedWeightsFileIsNamed) {
  fs::resize_file(weights(), fs::file_size(weights()) - 64);
  expect_mentions(load_error(), {"model.safetensors", "outside the data section"});
}

TEST_F(HfCheckpoint, ConfigWithoutARequiredFieldIsRefused) {
  auto j = read_config();
  j.erase("d_model");
  write_config(j);
  expect_mentions(load_error(), {"config.json", "d_model", "required"});
}

TEST_F(HfCheckpoint, ConfigWithImpossibleValuesIsRefusedListingEach) {
  auto j = read_config();
  j["num_heads"] = 0;
  j["feed_forward_proj"] = "gated-swish";
  j["layer_norm_epsilon"] = "small";
  write_config(j);
  expect_mentions(load_error(), {"config.json", "num_heads", "feed_forward_proj", "gated-swish", "layer_norm_epsilon"});
}

TEST_F(HfCheckpoint, ConfigFieldsT5scaleDoesNotUseAreIgnored) {
  auto j = read_config();
  j["task_specific_params"] = {{"summarization", {{"prefix", "summarize: "}}}};
  j["n_positions"] = 512;
  j["transformers_version"] = "4.57.1";
  write_config(j);
  EXPECT_NO_THROW(load_hf_model(folder(), std::make_shared<SoloCommunicator>("tp")));
}

TEST_F(HfCheckpoint, TensorOfTheWrongShapeIsNamed) {
  rewrite_weights([](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (name == "encoder.block.1.layer.1.DenseReluDense.wo.weight") t = torch::zeros({64, 100});
    }
  });
  expect_mentions(load_error(),
                  {"model.safetensors", "encoder.block.1.layer.1.DenseReluDense.wo.weight", "[64, 100]", "[64, 128]"});
}

TEST_F(HfCheckpoint, TensorOfANonFloatingDtypeIsNamed) {
  rewrite_weights([](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (name == "decoder.final_layer_norm.weight") t = torch::ones({64}, torch::kInt64);
    }
  });
  expect_mentions(load_error(), {"model.safetensors", "decoder.final_layer_norm.weight", "dtype"});
}

TEST_F(HfCheckpoint, TensorThatMapsToNothingIsNamed) {
  rewrite_weights([](auto& tensors) {
    tensors.emplace_back("encoder.block.0.layer.0.SelfAttention.gate.weight", torch::zeros({2}));
  });
  expect_mentions(load_error(),
                  {"model.safetensors", "encoder.block.0.layer.0.SelfAttention.gate.weight", "maps to no t5scale parameter"});
}

TEST_F(HfCheckpoint, ParameterThatNothingFillsIsNamed) {
  rewrite_weights([](auto& tensors) {
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                 [](const auto& p) { return p.first == "decoder.block.0.layer.1.EncDecAttention.k.weight"; }),
                  tensors.end());
  });
  expect_mentions(load_error(), {"decoder.block.0.layer.1.EncDecAttention.k.weight", "decoder.blocks.0.cross_attn.k.weight"});
}

TEST_F(HfCheckpoint, TiedEmbeddingAliasesAreAccepted) {
  // Tied (v1.0) checkpoints from the hub also carry the embedding under each stack's name.
  ModelConfig tied = checkpoint_config();
  tied.tie_word_embeddings = true;
  tied.feed_forward = FeedForwardKind::kRelu;
  T5Model model(tied, std::make_shared<SoloCommunicator>("tp"));
  model->initialize_weights(5);
  export_hf_checkpoint(*model, dir_ / "tied");
  const std::string path = dir_ / "tied/model.safetensors";
  const auto file = SafetensorsFile::open(path);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& name : file.names()) tensors.emplace_back(name, file.read(name));
  const torch::Tensor shared = file.read("shared.weight");
  tensors.emplace_back("encoder.embed_tokens.weight", shared);
  tensors.emplace_back("decoder.embed_tokens.weight", shared);
  write_safetensors(path, tensors, {{"format", "pt"}});
  T5Model loaded = load_hf_model(dir_ / "tied", std::make_shared<SoloCommunicator>("tp"));
  EXPECT_TRUE(torch::equal(loaded->shared->weight, shared));
}

}  // namespace
}  // namespace t5scale
