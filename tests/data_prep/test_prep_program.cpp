// The t5scale-prep program ($T5SCALE_PREP_BIN): the synthetic task's dataset, exit codes and messages for bad
// input, `check`, and the run whose output test_prep_h5py_check.py compares with transformers
// ($T5SCALE_PREP_E2E_DIR; ctest runs the two in order).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "data/synthetic_examples.h"
#include "data/tokenized_dataset.h"
#include "data/tokenizer.h"
#include "support/base_test_support.h"

#ifndef T5SCALE_PREP_RECIPES_DIR
#error "T5SCALE_PREP_RECIPES_DIR must name data_prep/recipes (tests/data/CMakeLists.txt defines it)"
#endif

namespace t5scale {
namespace {

using testing::read_bytes;
using testing::TempDir;

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) throw std::runtime_error(std::string(name) + " is not set: run through ctest (e2e.prep_*)");
  return value;
}

struct Outcome {
  int status = -1;
  std::string out, err;
};

// Runs t5scale-prep with `arguments` (shell words), capturing stdout and stderr.
Outcome prep(const std::string& arguments) {
  static int counter = 0;
  static TempDir logs;
  const std::string out = logs / ("out" + std::to_string(counter)), err = logs / ("err" + std::to_string(counter));
  ++counter;
  const int raw = std::system((environment("T5SCALE_PREP_BIN") + " " + arguments + " >" + out + " 2>" + err).c_str());
  Outcome outcome;
  outcome.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  const auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  outcome.out = slurp(out);
  outcome.err = slurp(err);
  return outcome;
}

std::string recipe(const std::string& name) { return std::string(T5SCALE_PREP_RECIPES_DIR) + "/" + name + ".yaml"; }

// Dialogues and summaries over a small word list, as a SAMSum file (fixed seed).
std::string samsum_jsonl(int count, unsigned seed) {
  static const std::vector<std::string> words = {
      "the",     "a",       "and",    "to",     "of",    "in",    "is",      "was",   "for",    "on",
      "with",    "I",       "you",    "we",     "will",  "be",    "cookies", "baked", "bring",  "tomorrow",
      "meeting", "project", "dinner", "movie",  "train", "late",  "sorry",   "great", "thanks", "see",
      "party",   "Friday",  "office", "coffee", "call",  "later", "home",    "now",   "okay"};
  std::mt19937 rng(seed);
  const auto sentence = [&](int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += (i ? " " : "") + words[rng() % words.size()];
    return out + (rng() % 2 ? "." : "?");
  };
  std::string lines;
  for (int i = 0; i < count; ++i) {
    std::string dialogue;
    for (int t = 0; t < 2 + static_cast<int>(rng() % 6); ++t) {
      dialogue += (t ? "\r\n" : "") + std::string(t % 2 ? "Jerry: " : "Amanda: ") + sentence(2 + rng() % 12);
    }
    lines +=
        nlohmann::json{
            {"id", std::to_string(13818513 + i)}, {"dialogue", dialogue}, {"summary", sentence(3 + rng() % 10)}}
            .dump() +
        "\n";
  }
  return lines;
}

TEST(PrepProgram, WritesTheSyntheticTask) {
  TempDir dir;
  const Outcome made = prep("synthetic --out " + (dir / "syn.h5") + " --examples 500 --vocab-size 32 --seed 5");
  ASSERT_EQ(made.status, 0) << made.err;
  const auto dataset = TokenizedDataset::open(dir / "syn.h5");
  EXPECT_EQ(dataset->info().tokenizer_sha256, "synthetic-vocab32");
  EXPECT_EQ(dataset->info().vocab_size, 32);
  EXPECT_EQ(dataset->split_names(), (std::vector<std::string>{"train", "validation"}));
  EXPECT_EQ(dataset->split("train").size(), 500);
  EXPECT_EQ(dataset->split("validation").size(), 62);
  std::map<int32_t, int> seen;
  for (const std::string split : {"train", "validation"}) {
    const TokenizedSplit& s = dataset->split(split);
    s.check_token_ids();
    for (int64_t i = 0; i < s.size(); ++i) {
      const TokenSequences e = s.example(i);
      ASSERT_EQ(e.source.size(), e.target.size());
      ASSERT_GE(e.source.size(), 4u);  // 3..8 words, then eos
      ASSERT_LE(e.source.size(), 9u);
      for (size_t k = 0; k + 1 < e.source.size(); ++k) {
        ASSERT_GE(e.source[k], 3);
        // The next word of the alphabet 3..31, the last one wrapping to the first (SyntheticTask's rule).
        ASSERT_EQ(e.target[k], e.source[k] == 31 ? 3 : e.source[k] + 1);
        ++seen[e.source[k]];
      }
      ASSERT_EQ(e.source.back(), 1);
      ASSERT_EQ(e.target.back(), 1);
    }
  }
  EXPECT_EQ(seen.size(), 29u) << "every word of the alphabet 3..31 appears";
  // Deterministic for a seed, another seed another dataset.
  ASSERT_EQ(prep("synthetic --out " + (dir / "again.h5") + " --examples 500 --vocab-size 32 --seed 5").status, 0);
  ASSERT_EQ(prep("synthetic --out " + (dir / "other.h5") + " --examples 500 --vocab-size 32 --seed 6").status, 0);
  EXPECT_TRUE(read_bytes(dir / "syn.h5") == read_bytes(dir / "again.h5"));
  EXPECT_NE(TokenizedDataset::open(dir / "other.h5")->split("train").example(0).source,
            dataset->split("train").example(0).source);
  EXPECT_EQ(synthetic_next_word(63, 64), 3);
  EXPECT_EQ(synthetic_next_word(3, 64), 4);
}

TEST(PrepProgram, ExitCodesAndMessages) {
  TempDir dir;
  std::ofstream(dir / "train.jsonl") << samsum_jsonl(50, 1) << "{\"id\": \"x\", \"dialogue\": \n" << samsum_jsonl(5, 2);
  const std::string base =
      "--recipe " + recipe("samsum") + " --input-split train=" + (dir / "train.jsonl") + " --progress none";
  Outcome o = prep(base + " --out " + (dir / "a.h5") + " --train-tokenizer --tokenizer-out " + (dir / "m.model") +
                   " --vocab-size 70");
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find("train.jsonl:51"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "a.h5"));

  o = prep(base + " --out " + (dir / "a.h5") + " --train-tokenizer --tokenizer-out " + (dir / "m.model") +
           " --vocab-size 70 --on-malformed skip --report-json " + (dir / "report.json"));
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("wrote " + (dir / "a.h5")), std::string::npos) << o.out;
  std::ifstream report_file(dir / "report.json");
  const nlohmann::json report = nlohmann::json::parse(report_file);
  EXPECT_EQ(report["examples"], 55);
  EXPECT_EQ(report["splits"]["train"]["skipped_malformed"], 1);
  EXPECT_EQ(report["tokenizer_sha256"], sha256_file_hex(dir / "m.model"));

  o = prep("check " + (dir / "a.h5") + " --tokenizer " + (dir / "m.model"));
  EXPECT_EQ(o.status, 0) << o.err;
  // A dataset checked against another tokenizer, a truncated dataset: exit 2, naming the file.
  ASSERT_EQ(prep("synthetic --out " + (dir / "syn.h5") + " --examples 10").status, 0);
  o = prep("check " + (dir / "syn.h5") + " --tokenizer " + (dir / "m.model"));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("synthetic-vocab64"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find(sha256_file_hex(dir / "m.model")), std::string::npos) << o.err;
  const std::string bytes = read_bytes(dir / "a.h5");
  std::ofstream(dir / "cut.h5", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  o = prep("check " + (dir / "cut.h5"));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("cut.h5"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("truncated"), std::string::npos) << o.err;

  o = prep(base + " --out " + (dir / "b.h5") + " --tokenizer " + (dir / "m.model") + " --no-such-option");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("unknown option '--no-such-option'"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("usage:"), std::string::npos) << o.err;
  o = prep(base + " --out " + (dir / "b.h5") + " --tokenizer " + (dir / "m.model") + " --threads two");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--threads: 'two' is not an integer"), std::string::npos) << o.err;
  o = prep("--recipe " + (dir / "absent.yaml") + " --input " + (dir / "train.jsonl") + " --out " + (dir / "b.h5") +
           " --tokenizer " + (dir / "m.model"));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("absent.yaml"), std::string::npos) << o.err;
  EXPECT_EQ(prep("--help").status, 0);
}

// The same input and options give the same tokenizer and dataset, byte for byte, whatever the process and the
// thread count: a dataset prepared again stays usable with the tokenizer of the first run.
TEST(PrepProgram, TrainedTokenizerIsReproducible) {
  TempDir dir;
  std::ofstream(dir / "train.jsonl") << samsum_jsonl(300, 5);
  const std::string command = "--recipe " + recipe("samsum") + " --input-split train=" + (dir / "train.jsonl") +
                              " --out " + (dir / "a.h5") + " --train-tokenizer --tokenizer-out " + (dir / "m.model") +
                              " --vocab-size 90 --progress none";
  std::vector<std::vector<std::string>> outputs;
  for (const std::string threads : {"1", "3"}) {
    const Outcome o = prep(command + " --threads " + threads);
    ASSERT_EQ(o.status, 0) << o.err;
    outputs.push_back({read_bytes(dir / "m.model"), read_bytes(dir / "m.vocab"), read_bytes(dir / "a.h5")});
  }
  EXPECT_FALSE(outputs[0][0].empty());
  EXPECT_TRUE(outputs[0][0] == outputs[1][0]) << "the tokenizer's bytes differ";
  EXPECT_TRUE(outputs[0][1] == outputs[1][1]) << "the .vocab files differ";
  EXPECT_TRUE(outputs[0][2] == outputs[1][2]) << "the datasets differ";
  // Nothing of the run's temporary files is recorded in the model.
  EXPECT_EQ(outputs[0][0].find(".tmp."), std::string::npos);
  EXPECT_EQ(outputs[0][0].find((dir / "").c_str()), std::string::npos);
}

// The run that test_prep_h5py_check.py reads: SAMSum-shaped train and validation files, a tokenizer trained by
// the program, 2 threads, lengths that cut some examples.
TEST(PrepProgram, WritesTheRunForThePythonCheck) {
  const std::string dir = environment("T5SCALE_PREP_E2E_DIR");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/train.jsonl") << samsum_jsonl(600, 3);
  std::ofstream(dir + "/validation.jsonl") << samsum_jsonl(80, 4);
  const Outcome o = prep("--recipe " + recipe("samsum") + " --input-split train=" + dir + "/train.jsonl" +
                         " --input-split validation=" + dir + "/validation.jsonl --out " + dir + "/samsum.h5" +
                         " --train-tokenizer --tokenizer-out " + dir + "/samsum.model --vocab-size 100" +
                         " --max-source-length 48 --max-target-length 10 --threads 2 --progress none");
  ASSERT_EQ(o.status, 0) << o.err;
  std::ofstream(dir + "/run.json") << nlohmann::json{
      {"recipe", recipe("samsum")},
      {"dataset", dir + "/samsum.h5"},
      {"tokenizer", dir + "/samsum.model"},
      {"splits", {{"train", dir + "/train.jsonl"}, {"validation", dir + "/validation.jsonl"}}},
      {"max_source_length", 48},
      {"max_target_length", 10}}.dump(1);
}

}  // namespace
}  // namespace t5scale
