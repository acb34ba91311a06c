// A run's tokenizer found for an export and written as Hugging Face's T5 tokenizer files: data.tokenizer or the file
// the dataset names, checked against the dataset's SHA-256; none for synthetic data; every path tried named when it
// is not found; the ids of the written files (sentinels, added tokens) as data/tokenizer.h numbers them. That
// transformers loads the files, encodes and decodes as the run did is tests/e2e's job_export_whole.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "data/hf_tokenizer_files.h"
#include "data/tokenized_dataset.h"
#include "data/tokenizer.h"
#include "data_prep/tokenizer_training.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::expect_mentions;
using testing::read_bytes;
using testing::TempDir;

// A small model trained here, and a dataset made with it (one example) that records it as `recorded_file` with one
// added token that the model does not hold as a piece.
class HfTokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    {
      std::ofstream corpus(dir_ / "corpus.txt");
      for (int i = 0; i < 200; ++i) corpus << "the cat sat on the mat " << i % 7 << " times\nhello world\n";
    }
    TokenizerTrainOptions options;
    options.vocab_size = 26;
    options.character_coverage = 1.0;
    fs::create_directories(dir_ / "data");
    train_tokenizer(dir_ / "corpus.txt", model(), options);
  }
  std::string model() const { return dir_ / "data/spiece.model"; }
  std::string dataset() const { return dir_ / "data/set.h5"; }

  void write_dataset(const std::string& recorded_file, const std::string& sha256) const {
    const Tokenizer tokenizer = Tokenizer::load(model(), {"<sep>"});
    TokenizedDatasetInfo info;
    info.tokenizer_sha256 = sha256;
    info.tokenizer_file = recorded_file;
    info.vocab_size = tokenizer.vocab_size();
    info.recipe_name = "test";
    info.recipe_yaml = "name: test\n";
    info.created_by = "t5scale-prep test";
    info.input_files = "a.jsonl";
    info.added_tokens = {"<sep>"};
    TokenizedDatasetWriter writer(dataset(), info);
    writer.add_split("train");
    writer.append("train", tokenizer.encode("the cat"), tokenizer.encode("sat"));
    writer.finish();
  }
  RunConfig run(const std::string& tokenizer) const {
    RunConfig c;
    c.data.dataset = dataset();
    c.data.tokenizer = tokenizer;
    return c;
  }

  TempDir dir_;
};

TEST_F(HfTokenizerFiles, TheRunsTokenizerIsCheckedAgainstTheDatasetAndCarriesItsAddedTokens) {
  write_dataset(model(), sha256_file_hex(model()));
  const RunTokenizer found = find_run_tokenizer(run(model()));
  EXPECT_EQ(found.model_path, model());
  EXPECT_EQ(found.added_tokens, std::vector<std::string>{"<sep>"});
  expect_mentions(found.description, {"data.tokenizer; the tokenizer that made " + dataset()});
}

TEST_F(HfTokenizerFiles, WithoutDataTokenizerTheFileTheDatasetNamesAlsoBesideIt) {
  // t5scale-prep ran elsewhere: the recorded path is not here, the same file name beside the dataset is.
  write_dataset("/elsewhere/spiece.model", sha256_file_hex(model()));
  const RunTokenizer found = find_run_tokenizer(run(""));
  EXPECT_EQ(found.model_path, model());
  expect_mentions(found.description, {"the dataset's tokenizer_file, beside the dataset"});
}

TEST_F(HfTokenizerFiles, ATokenizerNotFoundOrNotTheDatasetsNamesEveryPathTried) {
  write_dataset("/elsewhere/spiece.model", std::string(64, 'b'));
  const std::string message = error_of([&] { find_run_tokenizer(run(dir_ / "missing.model")); });
  expect_mentions(message, {"the run's SentencePiece tokenizer is not found; tried: ",
                            dir_ / "missing.model" + std::string(" (data.tokenizer): no such file"),
                            "/elsewhere/spiece.model (the dataset's tokenizer_file): no such file",
                            model() + " (the dataset's tokenizer_file, beside the dataset): sha256 " +
                                sha256_file_hex(model()) + ", but " + dataset() + " was made with sha256 " +
                                std::string(64, 'b')});
}

TEST_F(HfTokenizerFiles, SyntheticDataHasNoTokenizerAndAMovedDatasetChecksNothing) {
  RunConfig synthetic;
  const RunTokenizer none = find_run_tokenizer(synthetic);
  EXPECT_EQ(none.model_path, "");
  expect_mentions(none.description, {"synthetic data"});
  // A given file is taken even then.
  EXPECT_EQ(find_run_tokenizer(synthetic, model()).model_path, model());

  const RunTokenizer unchecked = find_run_tokenizer(run(model()));  // no dataset file written
  EXPECT_EQ(unchecked.model_path, model());
  expect_mentions(unchecked.description, {"is not here: not checked against it"});
  const std::string message = error_of([&] { find_run_tokenizer(run("")); });
  expect_mentions(message, {"data.tokenizer is not set, and the dataset " + dataset() + " is not here"});
}

TEST_F(HfTokenizerFiles, TheFilesHoldTheIdsOfTheRunsTokenizer) {
  write_dataset(model(), sha256_file_hex(model()));
  const RunTokenizer found = find_run_tokenizer(run(model()));
  const Tokenizer tokenizer = Tokenizer::load(model(), {"<sep>"});
  const int64_t pieces = tokenizer.piece_count();
  fs::create_directories(dir_ / "hf");
  const auto files = write_hf_tokenizer_files(found, tokenizer.vocab_size(), dir_ / "hf");
  EXPECT_EQ(files, (std::vector<std::string>{"spiece.model", "tokenizer_config.json", "special_tokens_map.json"}));
  EXPECT_EQ(read_bytes(dir_ / "hf/spiece.model"), read_bytes(model()));

  const auto config = nlohmann::json::parse(std::ifstream(dir_ / "hf/tokenizer_config.json"));
  const auto& decoder = config.at("added_tokens_decoder");
  EXPECT_EQ(decoder.at("0").at("content"), "<pad>");
  EXPECT_EQ(decoder.at("1").at("content"), "</s>");
  EXPECT_EQ(decoder.at("2").at("content"), "<unk>");
  EXPECT_EQ(decoder.at(std::to_string(pieces)).at("content"), "<extra_id_99>");
  EXPECT_EQ(decoder.at(std::to_string(pieces + 99)).at("content"), "<extra_id_0>");
  EXPECT_EQ(decoder.at(std::to_string(pieces + 100)).at("content"), "<sep>");
  EXPECT_EQ(static_cast<int64_t>(decoder.size()), 3 + 100 + 1);
  EXPECT_EQ(config.at("extra_ids"), 100);
  EXPECT_EQ(config.at("tokenizer_class"), "T5Tokenizer");
  EXPECT_EQ(config.at("additional_special_tokens").back(), "<sep>");
  const auto special = nlohmann::json::parse(std::ifstream(dir_ / "hf/special_tokens_map.json"));
  EXPECT_EQ(special.at("eos_token").at("content"), "</s>");
  EXPECT_EQ(special.at("additional_special_tokens").size(), 101u);

  // A model with fewer embedding rows than the tokenizer has ids is refused, naming both.
  const std::string message =
      error_of([&] { write_hf_tokenizer_files(found, tokenizer.vocab_size() - 1, dir_ / "hf"); });
  expect_mentions(message, {model() + ": the tokenizer has " + std::to_string(tokenizer.vocab_size()) + " ids",
                            std::to_string(tokenizer.vocab_size() - 1) + " embedding rows"});
}

}  // namespace
}  // namespace t5scale
