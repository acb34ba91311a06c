// The tokenizer without reference files: SHA-256 against FIPS 180-4's examples, T5's id layout on a model trained
// here, round trips, and the errors for files that are not T5 tokenizers. The comparison with transformers'
// T5Tokenizer is in test_tokenizer_parity.cpp.
#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <fstream>
#include <random>
#include <thread>

#include "core/check.h"
#include "data/tokenizer.h"
#include "data_prep/tokenizer_training.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

using testing::error_of;
using testing::TempDir;

// A corpus of invented words (a fixed seed), a few lines with the user symbols.
std::string write_corpus(const TempDir& dir, int lines = 3000) {
  const std::string path = dir / "corpus.txt";
  std::ofstream out(path);
  std::mt19937 rng(11);
  const std::vector<std::string> syllables = {"ka", "to", "ri", "mu", "se", "na", "lo",  "pe", "di", "gu",
                                              "an", "el", "or", "is", "un", "th", "ing", "ed", "er", "ly"};
  std::vector<std::string> words = {"the", "cat", "sat", "on", "mat", "hello", "world"};
  for (int i = 0; i < 800; ++i) {
    std::string word;
    for (unsigned k = 0; k <= rng() % 3; ++k) word += syllables[rng() % syllables.size()];
    words.push_back(word);
  }
  for (int i = 0; i < lines; ++i) {
    const unsigned count = 3 + rng() % 12;
    for (unsigned k = 0; k < count; ++k) out << (k ? " " : "") << words[rng() % words.size()];
    if (i % 6 == 0) out << " <question> " << words[rng() % words.size()];
    out << (i % 3 == 0 ? "." : "") << "\n";
  }
  return path;
}

std::string train_small_model(const TempDir& dir, int64_t pieces = 300) {
  TokenizerTrainOptions options;
  options.vocab_size = pieces;
  options.character_coverage = 1.0;  // 'c' and 'w' are rare in this corpus: keep every character
  options.user_symbols = {"<question>", "<context>"};
  const std::string model = dir / "small.model";
  train_tokenizer(write_corpus(dir), model, options);
  return model;
}

TEST(PrepTokenizer, Sha256MatchesFipsExamples) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),  // two blocks
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // 55, 56 and 64 bytes: the padding fits the block, spills into a second one, fills one of its own
  // (expected values from Python's hashlib).
  EXPECT_EQ(sha256_hex(std::string(55, 'x')), "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  EXPECT_EQ(sha256_hex(std::string(56, 'x')), "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
  EXPECT_EQ(sha256_hex(std::string(64, 'x')), "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
}

TEST(PrepTokenizer, Sha256OfAFileIsTheHashOfItsBytes) {
  TempDir dir;
  std::string bytes;
  for (int i = 0; i < 3 * (1 << 20) + 17; ++i) bytes += static_cast<char>(i * 7 + (i >> 9));  // crosses read sizes
  const std::string path = dir / "bytes.bin";
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(sha256_file_hex(path), sha256_hex(bytes));
  EXPECT_NE(error_of([&] { sha256_file_hex(dir / "missing.bin"); }).find("missing.bin"), std::string::npos);
}

TEST(PrepTokenizer, TrainedModelHasT5IdLayout) {
  TempDir dir;
  const Tokenizer tokenizer = Tokenizer::load(train_small_model(dir), {"<question>", "<sep>", "<sep>", "<extra_id_3>"});
  EXPECT_EQ(tokenizer.piece_count(), 300);
  // <question> is a piece of the model; <sep> is added once after the sentinels; sentinels are never added.
  ASSERT_EQ(tokenizer.added_tokens(), std::vector<std::string>{"<sep>"});
  EXPECT_EQ(tokenizer.vocab_size(), 300 + 100 + 1);
  EXPECT_EQ(tokenizer.sentinel_id(0), 399);
  EXPECT_EQ(tokenizer.sentinel_id(99), 300);
  EXPECT_EQ(tokenizer.sha256(), sha256_file_hex(tokenizer.model_path()));

  EXPECT_EQ(tokenizer.encode(""), std::vector<int32_t>{Tokenizer::kEosId});
  EXPECT_EQ(tokenizer.encode("<extra_id_0>"), (std::vector<int32_t>{399, Tokenizer::kEosId}));
  EXPECT_EQ(tokenizer.encode("<sep>"), (std::vector<int32_t>{400, Tokenizer::kEosId}));
  // User symbols are pieces 3 and 4 (SentencePiece puts them right after pad, eos, unk), kept whole.
  const std::vector<int32_t> symbols = tokenizer.encode("a<question>b<context>c");
  EXPECT_EQ(std::count(symbols.begin(), symbols.end(), 3), 1);
  EXPECT_EQ(std::count(symbols.begin(), symbols.end(), 4), 1);
  for (const std::string text : {"the cat sat on the mat", "hello <extra_id_7> world <sep> x"}) {
    const std::vector<int32_t> ids = tokenizer.encode(text);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.back(), Tokenizer::kEosId);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), Tokenizer::kEosId), 1);
    for (const int32_t id : ids) EXPECT_TRUE(id >= 0 && id < tokenizer.vocab_size()) << id;
  }
}

TEST(PrepTokenizer, TextToIdsToTextRoundTrips) {
  TempDir dir;
  const Tokenizer tokenizer = Tokenizer::load(train_small_model(dir), {"<sep>"});
  for (const std::string text :
       {"the cat sat on the mat", "hello world.", "the <extra_id_0> sat <extra_id_1> mat <extra_id_99>",
        "<question> hello world <sep> the cat", "<extra_id_0> <extra_id_1>"}) {
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
  }
  // pad and eos are skipped wherever they are.
  std::vector<int32_t> ids = tokenizer.encode("the cat");
  ids.insert(ids.begin(), Tokenizer::kPadId);
  ids.push_back(Tokenizer::kPadId);
  EXPECT_EQ(tokenizer.decode(ids), "the cat");
}

TEST(PrepTokenizer, EncodesTheSameFromManyThreads) {
  TempDir dir;
  const Tokenizer tokenizer = Tokenizer::load(train_small_model(dir));
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i)
    texts.push_back("the cat " + std::to_string(i) + " sat <extra_id_" + std::to_string(i % 100) + "> on the mat");
  std::vector<std::vector<int32_t>> expected;
  for (const auto& text : texts) expected.push_back(tokenizer.encode(text));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) mismatches[t] += tokenizer.encode(texts[i]) != expected[i];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(PrepTokenizer, TruncationEncodingAPrefixEqualsCuttingTheWholeEncoding) {
  TempDir dir;
  const Tokenizer tokenizer = Tokenizer::load(train_small_model(dir), {"<sep>"});
  std::ifstream corpus(dir / "corpus.txt");
  std::vector<std::string> lines;
  for (std::string line; std::getline(corpus, line);) lines.push_back(line);
  std::mt19937 rng(5);
  int cuts = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const unsigned count = 1 + rng() % 40;
    for (unsigned k = 0; k < count; ++k) {
      text += lines[rng() % lines.size()];
      text += std::vector<std::string>{" ", "\n", "  ", " <extra_id_3> ", "\t", " <sep> "}[rng() % 6];
    }
    const int64_t max_length = 2 + static_cast<int64_t>(rng() % 300);
    std::vector<int32_t> whole = tokenizer.encode(text);
    const bool expect_cut = static_cast<int64_t>(whole.size()) > max_length;
    if (expect_cut) {
      whole.resize(static_cast<size_t>(max_length - 1));
      whole.push_back(Tokenizer::kEosId);
    }
    std::vector<int32_t> ids = {42};  // replaced, not appended to
    EXPECT_EQ(tokenizer.encode_truncated(text, max_length, &ids), expect_cut) << max_length << " '" << text << "'";
    EXPECT_EQ(ids, whole) << max_length << " '" << text << "'";
    cuts += expect_cut;
  }
  EXPECT_GT(cuts, 100);
  std::vector<int32_t> ids;
  EXPECT_FALSE(tokenizer.encode_truncated(lines[0] + " " + lines[1], 0, &ids));  // 0: no limit
  EXPECT_EQ(ids, tokenizer.encode(lines[0] + " " + lines[1]));
}

// A model's embedding may have more rows than the tokenizer has ids (T5: 32,128 and 32,100); a weak model
// generates such ids, and decoding them must not end an evaluation.
TEST(PrepTokenizer, DecodeShowsIdsBeyondTheVocabularyAsPlaceholders) {
  TempDir dir;
  const Tokenizer tokenizer = Tokenizer::load(train_small_model(dir));
  const int32_t beyond = static_cast<int32_t>(tokenizer.vocab_size());
  const std::vector<int32_t> word = tokenizer.encode("the cat");
  std::vector<int32_t> ids(word.begin(), word.end() - 1);  // without its eos
  ids.push_back(beyond);
  ids.push_back(beyond + 13);
  EXPECT_EQ(tokenizer.decode(ids), "the cat <id_" + std::to_string(beyond) + "> <id_" + std::to_string(beyond + 13) + ">");
  EXPECT_EQ(Tokenizer::beyond_vocabulary_placeholder(613), "<id_613>");
  EXPECT_NE(error_of([&] { tokenizer.decode({-1}); }).find("id -1"), std::string::npos);
}

TEST(PrepTokenizer, RefusesFilesThatAreNotT5Tokenizers) {
  TempDir dir;
  const std::string text_file = dir / "not_a_model.model";
  std::ofstream(text_file) << "this is not a protobuf";
  std::string message = error_of([&] { Tokenizer::load(text_file); });
  EXPECT_NE(message.find("not_a_model.model"), std::string::npos) << message;
  EXPECT_NE(message.find("not a SentencePiece model"), std::string::npos) << message;
  message = error_of([&] { Tokenizer::load(dir / "absent.model"); });
  EXPECT_NE(message.find("absent.model"), std::string::npos) << message;

  // SentencePiece's own defaults (unk 0, bos 1, eos 2, no pad) are not T5's.
  const std::string corpus = write_corpus(dir, 500);
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + corpus + " --model_prefix=" + (dir / "default_ids") + " --vocab_size=100 --minloglevel=2");
  ASSERT_TRUE(status.ok()) << status.ToString();
  message = error_of([&] { Tokenizer::load(dir / "default_ids.model"); });
  EXPECT_NE(message.find("T5 needs pad=0 eos=1 unk=2"), std::string::npos) << message;
  EXPECT_NE(message.find("default_ids.model"), std::string::npos) << message;
}

TEST(PrepTokenizer, TrainingErrorsNameTheProblem) {
  TempDir dir;
  const std::string corpus = write_corpus(dir, 50);
  TokenizerTrainOptions options;
  options.vocab_size = 100000;  // far more pieces than 50 lines hold
  std::string message = error_of([&] { train_tokenizer(corpus, dir / "big.model", options); });
  EXPECT_NE(message.find("Vocabulary size too high"), std::string::npos) << message;
  EXPECT_NE(message.find("corpus.txt"), std::string::npos) << message;
  options.vocab_size = 100;
  message = error_of([&] { train_tokenizer(corpus, dir / "no_suffix", options); });
  EXPECT_NE(message.find("must end in .model"), std::string::npos) << message;
  options.user_symbols = {"a,b"};
  message = error_of([&] { train_tokenizer(corpus, dir / "comma.model", options); });
  EXPECT_NE(message.find("'a,b'"), std::string::npos) << message;
}

}  // namespace
}  // namespace t5scale
