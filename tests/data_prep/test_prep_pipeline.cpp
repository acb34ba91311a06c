// t5scale-prep's pipeline in-process: the shipped recipes on fixture files in their datasets' shapes (written
// here), the splits (given files, a seeded hash stable as the file grows), byte-identical output for any thread
// count, skip and fail policies, truncation counts, tokenizer training, and the errors for bad arguments. The
// token ids themselves are checked against transformers by test_prep_h5py_check.py (e2e.prep_matches_transformers).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/check.h"
#include "data/tokenized_dataset.h"
#include "data/tokenizer.h"
#include "data_prep/prep_pipeline.h"
#include "data_prep/prep_report.h"
#include "data_prep/recipe.h"
#include "data_prep/tokenizer_training.h"
#include "support/base_test_support.h"

#ifndef T5SCALE_PREP_RECIPES_DIR
#error "T5SCALE_PREP_RECIPES_DIR must name data_prep/recipes (tests/data/CMakeLists.txt defines it)"
#endif

namespace t5scale {
namespace {

using testing::error_of;
using testing::read_bytes;
using testing::TempDir;

std::string recipe(const std::string& name) { return std::string(T5SCALE_PREP_RECIPES_DIR) + "/" + name + ".yaml"; }

std::string write(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Sentences over a fixed word list; the shared tokenizer is trained on the same words and every printable ASCII
// character, so fixture text never meets an unknown piece.
class Text {
 public:
  explicit Text(unsigned seed) : rng_(seed) {}
  std::string sentence(int words) {
    static const std::vector<std::string> vocabulary = {
        "the",     "a",        "and",      "to",       "of",         "in",     "is",     "was",    "for",     "on",
        "with",    "said",     "he",       "she",      "they",       "we",     "you",    "it",     "will",    "be",
        "have",    "not",      "this",     "that",     "at",         "from",   "by",     "police", "city",    "council",
        "report",  "year",     "week",     "people",   "government", "new",    "first",  "last",   "cookies", "baked",
        "bring",   "tomorrow", "meeting",  "project",  "dinner",     "movie",  "train",  "late",   "sorry",   "great",
        "thanks",  "see",      "Amanda",   "Jerry",    "Hannah",     "London", "Monday", "storm",  "flood",   "repair",
        "work",    "ongoing",  "damage",   "who",      "what",       "when",   "where",  "wrote",  "book",    "river",
        "longest", "world",    "positive", "negative", "album",      "song",   "review", "bad",    "good",    "quality",
        "price",   "2019",     "42",       "7"};
    std::string out;
    for (int i = 0; i < words; ++i) {
      std::string word = vocabulary[rng_() % vocabulary.size()];
      if (i == 0) word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
      out += (i ? " " : "") + word;
      if (i + 1 < words && rng_() % 9 == 0) out += ",";
    }
    return out + std::vector<std::string>{".", ".", "!", "?"}[rng_() % 4];
  }
  std::string paragraph(int sentences, int words) {
    std::string out;
    for (int i = 0; i < sentences; ++i) out += (i ? " " : "") + sentence(words);
    return out;
  }
  unsigned next(unsigned bound) { return rng_() % bound; }

 private:
  std::mt19937 rng_;
};

// One model for the whole binary: trained once on Text's words.
const std::string& shared_model() {
  static TempDir dir;
  static const std::string model = [] {
    Text text(99);
    const std::string corpus = dir / "corpus.txt";
    std::ofstream out(corpus);
    for (int i = 0; i < 4000; ++i)
      out << text.paragraph(1 + static_cast<int>(text.next(3)), 4 + static_cast<int>(text.next(12))) << "\n";
    for (int i = 0; i < 20; ++i)
      out << "!\"#$%&'()*+,-./0123456789:;<=>?@[\\]^_`{|}~ ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz\n";
    out.close();
    TokenizerTrainOptions options;
    options.vocab_size = 250;
    options.character_coverage = 1.0;
    options.user_symbols = {"<question>", "<context>"};
    const std::string path = dir / "shared.model";
    train_tokenizer(corpus, path, options);
    return path;
  }();
  return model;
}

// Whitespace runs to one space, trimmed: what SentencePiece's normalisation does to this ASCII text.
std::string normalized(const std::string& text) {
  std::string out;
  bool space = false;
  for (const char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

PrepOptions options_for(const std::string& recipe_name, const std::string& out) {
  PrepOptions options;
  options.recipe_path = recipe(recipe_name);
  options.out_path = out;
  options.tokenizer_path = shared_model();
  options.progress = ProgressStyle::kNone;
  return options;
}

PrepResult run(const PrepOptions& options) {
  std::ostringstream progress;
  return run_prep(options, progress);
}

// Every example of `split` decodes to the expected text (a prefix of it when cut), with the cut counted.
void expect_examples(const TokenizedDataset& dataset, const std::string& split,
                     const std::vector<std::pair<std::string, std::string>>& expected) {
  const Tokenizer tokenizer = Tokenizer::load(shared_model(), dataset.info().added_tokens);
  const TokenizedSplit& s = dataset.split(split);
  ASSERT_EQ(s.size(), static_cast<int64_t>(expected.size())) << split;
  int64_t cut_sources = 0, cut_targets = 0;
  for (int64_t i = 0; i < s.size(); ++i) {
    const TokenSequences e = s.example(i);
    const std::string source = tokenizer.decode(e.source), target = tokenizer.decode(e.target);
    const std::string want_source = normalized(expected[static_cast<size_t>(i)].first);
    const std::string want_target = normalized(expected[static_cast<size_t>(i)].second);
    EXPECT_EQ(want_source.rfind(source, 0), 0u)
        << split << " " << i << ": '" << source << "' vs '" << want_source << "'";
    EXPECT_EQ(want_target.rfind(target, 0), 0u)
        << split << " " << i << ": '" << target << "' vs '" << want_target << "'";
    cut_sources += source != want_source;
    cut_targets += target != want_target;
    if (dataset.info().max_source_length > 0)
      EXPECT_LE(static_cast<int64_t>(e.source.size()), dataset.info().max_source_length);
    if (dataset.info().max_target_length > 0)
      EXPECT_LE(static_cast<int64_t>(e.target.size()), dataset.info().max_target_length);
  }
  EXPECT_EQ(s.statistics().truncated_sources, cut_sources) << split;
  EXPECT_EQ(s.statistics().truncated_targets, cut_targets) << split;
}

std::string jsonl(const std::vector<nlohmann::json>& records) {
  std::string out;
  for (const auto& r : records) out += r.dump() + "\n";
  return out;
}

// ---- the shipped recipes ----

TEST(PrepPipeline, SamsumFromItsSplitFiles) {
  TempDir dir;
  Text text(1);
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> expected;
  for (const std::string split : {"train", "validation", "test"}) {
    std::vector<nlohmann::json> records;
    for (int i = 0; i < (split == "train" ? 40 : 7); ++i) {
      std::string dialogue;
      for (int t = 0; t < 2 + static_cast<int>(text.next(8)); ++t) {
        dialogue += (t ? "\r\n" : "") + std::string(t % 2 ? "Jerry: " : "Amanda: ") + text.sentence(3 + text.next(9));
      }
      const std::string summary = text.sentence(6 + text.next(10));
      records.push_back({{"id", std::to_string(13818513 + i)}, {"dialogue", dialogue}, {"summary", summary}});
      expected[split].push_back({"summarize: " + dialogue, summary});
    }
    write(dir, split + ".jsonl", jsonl(records));
  }
  PrepOptions options = options_for("samsum", dir / "samsum.h5");
  options.data_dir = dir.path().string();
  const PrepResult result = run(options);
  EXPECT_EQ(result.examples, 54);
  const auto dataset = TokenizedDataset::open(dir / "samsum.h5");
  EXPECT_EQ(dataset->split_names(), (std::vector<std::string>{"test", "train", "validation"}));
  for (const auto& [split, examples] : expected) expect_examples(*dataset, split, examples);
  EXPECT_EQ(dataset->info().recipe_name, "samsum");
  EXPECT_EQ(dataset->info().recipe_yaml, read_bytes(recipe("samsum")));
  EXPECT_EQ(dataset->info().max_source_length, 512);
  EXPECT_EQ(dataset->info().tokenizer_sha256, sha256_file_hex(shared_model()));
  EXPECT_EQ(dataset->info().tokenizer_file, shared_model());
  EXPECT_NE(dataset->info().input_files.find("train=" + (dir / "train.jsonl")), std::string::npos);
}

TEST(PrepPipeline, XsumAndCnnDailymailCutLongArticles) {
  for (const std::string name : {"xsum", "cnn_dailymail"}) {
    TempDir dir;
    Text text(2);
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> expected;
    for (const std::string split : {"train", "validation", "test"}) {
      std::vector<nlohmann::json> records;
      for (int i = 0; i < 12; ++i) {
        // Every third article is long enough to be cut at 512 tokens.
        const std::string article = text.paragraph(i % 3 == 0 ? 90 : 5, 12) + "\n" + text.paragraph(3, 9);
        const std::string summary = name == "xsum" ? text.sentence(20) : text.sentence(12) + "\n" + text.sentence(10);
        if (name == "xsum") {
          records.push_back({{"document", article}, {"summary", summary}, {"id", std::to_string(35232142 + i)}});
        } else {
          records.push_back(
              {{"article", article}, {"highlights", summary}, {"id", sha256_hex(std::to_string(i)).substr(0, 40)}});
        }
        expected[split].push_back({"summarize: " + article, summary});
      }
      write(dir, split + ".jsonl", jsonl(records));
    }
    PrepOptions options = options_for(name, dir / "out.h5");
    options.data_dir = dir.path().string();
    const PrepResult result = run(options);
    const auto dataset = TokenizedDataset::open(dir / "out.h5");
    for (const auto& [split, examples] : expected) expect_examples(*dataset, split, examples);
    EXPECT_EQ(dataset->split("train").statistics().truncated_sources, 4) << name;
    EXPECT_EQ(dataset->split("train").statistics().source_length_max, 512) << name;
  }
}

TEST(PrepPipeline, NaturalQuestionsHashSplitWithSpecialTokens) {
  TempDir dir;
  Text text(3);
  std::vector<nlohmann::json> records;
  std::vector<std::pair<std::string, std::string>> all;
  std::vector<std::string> ids;
  for (int i = 0; i < 300; ++i) {
    const std::string question = "who " + text.sentence(6);
    const std::string context = text.paragraph(4, 10);
    const bool unanswered = i % 10 == 9;  // answers.text == []: a missing field, counted and skipped
    const std::string answer = text.sentence(3);
    nlohmann::json answers = {{"text", unanswered ? nlohmann::json::array() : nlohmann::json::array({answer})},
                              {"answer_start", unanswered ? nlohmann::json::array() : nlohmann::json::array({5})}};
    const std::string id = std::to_string(-1220107454853145579LL + i * 7919LL);
    records.push_back({{"id", id}, {"question", question}, {"context", context}, {"answers", answers}});
    if (!unanswered) {
      all.push_back({"<question> " + question + " <context> " + context, answer});
      ids.push_back(id);
    }
  }
  const std::string input = write(dir, "nq.jsonl", jsonl(records));
  PrepOptions options = options_for("natural_questions", dir / "nq.h5");
  options.inputs = {input};
  const PrepResult result = run(options);
  const auto dataset = TokenizedDataset::open(dir / "nq.h5");
  // The split of every record is the recipe's seeded hash of its id into train .9 / validation .05 / test .05.
  const Recipe nq = Recipe::load(recipe("natural_questions"));
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> expected;
  for (size_t i = 0; i < all.size(); ++i) {
    expected[hash_split(nq.split_ratios, static_cast<uint64_t>(nq.split_seed), ids[i])].push_back(all[i]);
  }
  int64_t skipped = 0;
  for (const std::string split : {"train", "validation", "test"}) {
    expect_examples(*dataset, split, expected[split]);
    skipped += dataset->split(split).statistics().skipped_missing_field;
  }
  EXPECT_EQ(skipped, 30);
  EXPECT_GT(expected["train"].size(), 200u);
  // <question> and <context> are pieces of this model: nothing is added to the vocabulary.
  EXPECT_TRUE(dataset->info().added_tokens.empty());
  EXPECT_EQ(dataset->info().vocab_size, 350);
}

TEST(PrepPipeline, SpecialTokensMissingFromTheModelBecomeAddedTokens) {
  TempDir dir;
  // A model without a <question> piece: it becomes id 250 + 100, after the sentinels, as T5Tokenizer.add_tokens does.
  Text text(4);
  std::ofstream corpus(dir / "corpus.txt");
  for (int i = 0; i < 3000; ++i) corpus << text.paragraph(2, 8) << " !\"#$%&'()*+,-./:;<=>?@[]^_{|}~ 0123456789\n";
  corpus.close();
  TokenizerTrainOptions training;
  training.vocab_size = 250;
  training.character_coverage = 1.0;
  train_tokenizer(dir / "corpus.txt", dir / "plain.model", training);
  const std::string input = write(dir, "closed.jsonl",
                                  jsonl({{{"question", "where is the river"}, {"answer", {"London"}}},
                                         {{"question", "who wrote the book"}, {"answer", {"Amanda", "Jerry"}}}}));
  PrepOptions options = options_for("natural_questions_closed_book", dir / "closed.h5");
  options.tokenizer_path = dir / "plain.model";
  options.input_splits = {{"train", input}};
  run(options);
  const auto dataset = TokenizedDataset::open(dir / "closed.h5");
  EXPECT_EQ(dataset->info().added_tokens, std::vector<std::string>{"<question>"});
  EXPECT_EQ(dataset->info().vocab_size, 351);
  const TokenSequences first = dataset->split("train").example(0);
  EXPECT_EQ(first.source.front(), 350);  // <question>, the first id after the sentinels
  const Tokenizer tokenizer = Tokenizer::load(dir / "plain.model", dataset->info().added_tokens);
  EXPECT_EQ(tokenizer.decode(first.source), "<question> where is the river");
  EXPECT_EQ(tokenizer.decode(dataset->split("train").example(1).target), "Amanda");
  dataset->check_tokenizer(tokenizer.sha256(), tokenizer.vocab_size());
}

TEST(PrepPipeline, AmazonPolarityCsvAndJsonlWithLabelWords) {
  TempDir dir;
  Text text(5);
  std::string train_csv, test_csv, train_jsonl, test_jsonl;
  std::vector<std::pair<std::string, std::string>> train_expected, test_expected;
  for (int i = 0; i < 30; ++i) {
    const bool positive = i % 3 != 0;
    const std::string title = text.sentence(3), content = text.paragraph(2, 8) + (i % 4 ? "" : " \"quoted\", text");
    std::string quoted_content;
    for (const char c : content) quoted_content += c == '"' ? std::string("\"\"") : std::string(1, c);
    const std::string row =
        std::string("\"") + (positive ? "2" : "1") + "\",\"" + title + "\",\"" + quoted_content + "\"\n";
    const nlohmann::json record = {{"label", positive ? 1 : 0}, {"title", title}, {"content", content}};
    (i < 24 ? train_csv : test_csv) += row;
    (i < 24 ? train_jsonl : test_jsonl) += record.dump() + "\n";
    (i < 24 ? train_expected : test_expected)
        .push_back({"sentiment: " + title + ". " + content, positive ? "positive" : "negative"});
  }
  for (const std::string name : {"amazon_polarity", "amazon_polarity_jsonl"}) {
    const bool csv = name == "amazon_polarity";
    TempDir data;
    write(data, csv ? "train.csv" : "train.jsonl", csv ? train_csv : train_jsonl);
    write(data, csv ? "test.csv" : "test.jsonl", csv ? test_csv : test_jsonl);
    PrepOptions options = options_for(name, data / "out.h5");
    options.data_dir = data.path().string();
    run(options);
    const auto dataset = TokenizedDataset::open(data / "out.h5");
    expect_examples(*dataset, "train", train_expected);
    expect_examples(*dataset, "test", test_expected);
  }
}

// ---- splits, determinism, policies ----

TEST(PrepPipeline, HashSplitFollowsTheRatiosAndTheSeed) {
  const std::map<std::string, double> ratios = {{"test", 0.05}, {"train", 0.9}, {"validation", 0.05}};
  std::map<std::string, int> counts;
  int moved = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const std::string id = "record-" + std::to_string(i);
    const std::string split = hash_split(ratios, 0, id);
    ++counts[split];
    EXPECT_EQ(hash_split(ratios, 0, id), split);  // a function of the id and the seed only
    moved += hash_split(ratios, 1, id) != split;
  }
  // Binomial spread: sd of the train count is sqrt(n * .9 * .1) = 42; allow 5 sd.
  EXPECT_NEAR(counts["train"], 0.9 * n, 5 * 42);
  EXPECT_NEAR(counts["validation"], 0.05 * n, 5 * 31);
  EXPECT_NEAR(counts["test"], 0.05 * n, 5 * 31);
  // Another seed reshuffles: a record keeps its split with probability .9^2 + 2 * .05^2 = .815.
  EXPECT_NEAR(moved, 0.185 * n, 5 * 55);
  EXPECT_EQ(hash_split({{"only", 1.0}}, 7, "x"), "only");
}

std::string samsum_lines(Text& text, int first, int count) {
  std::string out;
  for (int i = first; i < first + count; ++i) {
    nlohmann::json record = {
        {"id", std::to_string(i)},
        {"dialogue", "Amanda: " + text.sentence(5 + text.next(20)) + "\r\nJerry: " + text.sentence(4)},
        {"summary", text.sentence(3 + text.next(8))}};
    out += record.dump() + "\n";
  }
  return out;
}

TEST(PrepPipeline, HashSplitIsStableAsTheFileGrows) {
  TempDir dir;
  Text text(6);
  const std::string head = samsum_lines(text, 0, 500);
  const std::string more = samsum_lines(text, 500, 300);
  const std::string small = write(dir, "small.jsonl", head);
  const std::string grown = write(dir, "grown.jsonl", head + more);
  for (const auto& [input, out] : {std::pair{small, dir / "small.h5"}, std::pair{grown, dir / "grown.h5"}}) {
    PrepOptions options = options_for("samsum", out);
    options.inputs = {input};
    run(options);
  }
  const auto before = TokenizedDataset::open(dir / "small.h5");
  const auto after = TokenizedDataset::open(dir / "grown.h5");
  int64_t total = 0;
  for (const std::string split : {"train", "validation", "test"}) {
    // The grown file's split starts with exactly the small file's split: no record moved.
    const TokenizedSplit& a = before->split(split);
    const TokenizedSplit& b = after->split(split);
    ASSERT_LE(a.size(), b.size()) << split;
    for (int64_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a.example(i).source, b.example(i).source) << split << " " << i;
    }
    total += b.size();
    EXPECT_GT(b.size(), a.size()) << split << ": 300 more records add to every split";
  }
  EXPECT_EQ(total, 800);
}

TEST(PrepPipeline, SameBytesForAnyThreadCount) {
  TempDir dir;
  Text text(7);
  // More than five batches of 1024 records, with lines that are skipped on the way.
  std::string lines = samsum_lines(text, 0, 3000) + "{broken json\n" + samsum_lines(text, 3000, 2500) +
                      "{\"id\": \"x\", \"dialogue\": \"no summary\"}\n" + samsum_lines(text, 5500, 1000);
  const std::string input = write(dir, "in.jsonl", lines);
  std::vector<std::string> outputs;
  for (const int threads : {1, 2, 3}) {
    PrepOptions options = options_for("samsum", dir / ("out" + std::to_string(threads) + ".h5"));
    options.inputs = {input};
    options.threads = threads;
    options.on_malformed = MalformedPolicy::kSkip;
    const PrepResult result = run(options);
    EXPECT_EQ(result.examples, 6500);
    EXPECT_EQ(result.records, 6502);
    outputs.push_back(read_bytes(options.out_path));
  }
  ASSERT_GT(outputs[0].size(), 100000u);
  EXPECT_TRUE(outputs[0] == outputs[1]) << "1 and 2 threads differ";
  EXPECT_TRUE(outputs[0] == outputs[2]) << "1 and 3 threads differ";
}

TEST(PrepPipeline, SkipPolicyCountsEveryReason) {
  TempDir dir;
  Text text(8);
  const std::string good = samsum_lines(text, 0, 10);
  const std::string bad =
      "{\"id\": \"m1\", \"dialogue\": \"a\", \"summary\": \n"                        // malformed JSON
      "[1, 2]\n"                                                                     // not an object: malformed
      "{\"id\": \"f1\", \"dialogue\": \"Amanda: hi\"}\n"                             // missing field
      "{\"id\": \"e1\", \"dialogue\": \"Amanda: hi\", \"summary\": \"  \"}\n"        // empty target
      "{\"id\": \"u1\", \"dialogue\": \"Amanda: \xff\xfe\", \"summary\": \"x\"}\n";  // invalid UTF-8
  const std::string input = write(dir, "in.jsonl", good + bad + samsum_lines(text, 10, 5));
  PrepOptions options = options_for("samsum", dir / "out.h5");
  options.input_splits = {{"train", input}};
  options.on_malformed = MalformedPolicy::kSkip;
  const PrepResult result = run(options);
  EXPECT_EQ(result.examples, 15);
  const SplitStatistics s = TokenizedDataset::open(dir / "out.h5")->split("train").statistics();
  EXPECT_EQ(s.num_examples, 15);
  EXPECT_EQ(s.skipped_malformed, 2);
  EXPECT_EQ(s.skipped_missing_field, 1);
  EXPECT_EQ(s.skipped_empty_target, 1);
  EXPECT_EQ(s.skipped_invalid_utf8, 1);

  // Under fail, malformed and non-UTF-8 records stop the run naming the file and line; the missing field and the
  // empty target are skipped and counted all the same (data without an example, not damage).
  options.on_malformed = MalformedPolicy::kFail;
  options.out_path = dir / "fail.h5";
  std::string message = error_of([&] { run(options); });
  EXPECT_NE(message.find("in.jsonl:11"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(dir / "fail.h5"));
  const std::string utf8 =
      write(dir, "utf8.jsonl", good + "{\"id\": \"u1\", \"dialogue\": \"\xff\", \"summary\": \"x\"}\n");
  options.input_splits = {{"train", utf8}};
  message = error_of([&] { run(options); });
  EXPECT_NE(message.find("utf8.jsonl:11"), std::string::npos) << message;
  const std::string missing = write(dir, "missing.jsonl",
                                    good + "{\"id\": \"f1\", \"dialogue\": \"hi\"}\n" +
                                        "{\"id\": \"e1\", \"dialogue\": \"hi\", \"summary\": \"\"}\n");
  options.input_splits = {{"train", missing}};
  run(options);
  const SplitStatistics f = TokenizedDataset::open(dir / "fail.h5")->split("train").statistics();
  EXPECT_EQ(f.num_examples, 10);
  EXPECT_EQ(f.skipped_missing_field, 1);
  EXPECT_EQ(f.skipped_empty_target, 1);
  // Nothing but misses is a recipe that does not fit the file: an error naming the first record and field.
  const std::string none =
      write(dir, "none.jsonl", "{\"id\": \"1\", \"text\": \"a\"}\n{\"id\": \"2\", \"text\": \"b\"}\n");
  options.input_splits = {{"train", none}};
  message = error_of([&] { run(options); });
  EXPECT_NE(message.find("none.jsonl:1: missing field 'dialogue'"), std::string::npos) << message;
}

TEST(PrepPipeline, UnknownLabelFollowsThePolicy) {
  TempDir dir;
  const std::string input = write(dir, "train.jsonl",
                                  "{\"label\": 1, \"title\": \"Good\", \"content\": \"great album\"}\n"
                                  "{\"label\": 5, \"title\": \"Odd\", \"content\": \"five stars\"}\n");
  PrepOptions options = options_for("amazon_polarity_jsonl", dir / "out.h5");
  options.input_splits = {{"train", input}};
  std::string message = error_of([&] { run(options); });
  EXPECT_NE(message.find("train.jsonl:2"), std::string::npos) << message;
  EXPECT_NE(message.find("'5'"), std::string::npos) << message;
  options.on_malformed = MalformedPolicy::kSkip;
  run(options);
  EXPECT_EQ(TokenizedDataset::open(dir / "out.h5")->split("train").statistics().skipped_unknown_label, 1);
}

TEST(PrepPipeline, LengthLimitsFromTheCommandLine) {
  TempDir dir;
  Text text(9);
  const std::string input = write(dir, "in.jsonl", samsum_lines(text, 0, 200));
  const Tokenizer tokenizer = Tokenizer::load(shared_model());
  const Recipe samsum = Recipe::load(recipe("samsum"));
  // Each side's full length (with eos), as the recipe renders it; the limits are the medians, which cut about half
  // of each side (cutting every one is refused: TruncationThatCutsMuch... below).
  std::vector<std::vector<int32_t>> sources, targets;
  {
    TextRecordReader reader(input, InputFormat::kJsonl, MalformedPolicy::kFail);
    TextRecord record;
    while (reader.next(&record)) {
      RenderedExample rendered;
      ASSERT_EQ(render_example(samsum, record, &rendered, nullptr), RenderOutcome::kOk);
      sources.push_back(tokenizer.encode(rendered.source));
      targets.push_back(tokenizer.encode(rendered.target));
    }
  }
  auto median_length = [](const std::vector<std::vector<int32_t>>& side) {
    std::vector<int64_t> lengths;
    for (const auto& ids : side) lengths.push_back(static_cast<int64_t>(ids.size()));
    std::sort(lengths.begin(), lengths.end());
    return lengths[lengths.size() / 2];
  };
  const int64_t source_limit = median_length(sources), target_limit = median_length(targets);
  ASSERT_GE(target_limit, 3);
  PrepOptions options = options_for("samsum", dir / "out.h5");
  options.input_splits = {{"train", input}};
  options.max_source_length = source_limit;
  options.max_target_length = target_limit;
  run(options);
  const auto dataset = TokenizedDataset::open(dir / "out.h5");
  EXPECT_EQ(dataset->info().max_source_length, source_limit);
  EXPECT_EQ(dataset->info().max_target_length, target_limit);
  const TokenizedSplit& split = dataset->split("train");
  int64_t cut_sources = 0, cut_targets = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto& source = sources[i];
    const auto& target = targets[i];
    const TokenSequences e = split.example(static_cast<int64_t>(i));
    EXPECT_EQ(static_cast<int64_t>(e.source.size()), std::min<int64_t>(static_cast<int64_t>(source.size()), source_limit));
    EXPECT_EQ(static_cast<int64_t>(e.target.size()), std::min<int64_t>(static_cast<int64_t>(target.size()), target_limit));
    EXPECT_TRUE(std::equal(e.source.begin(), e.source.end() - 1, source.begin()));  // a prefix, then eos
    EXPECT_EQ(e.source.back(), Tokenizer::kEosId);
    cut_sources += static_cast<int64_t>(source.size()) > source_limit;
    cut_targets += static_cast<int64_t>(target.size()) > target_limit;
  }
  EXPECT_GT(cut_sources, 20);
  EXPECT_GT(cut_targets, 20);
  EXPECT_EQ(split.statistics().truncated_sources, cut_sources);
  EXPECT_EQ(split.statistics().truncated_targets, cut_targets);
  EXPECT_EQ(split.statistics().source_length_max, source_limit);
}

TEST(PrepPipeline, TruncationThatCutsMuchIsSaidAndCuttingEveryTargetIsRefused) {
  TempDir dir;
  Text text(9);
  const std::string input = write(dir, "in.jsonl", samsum_lines(text, 0, 200));
  PrepOptions options = options_for("samsum", dir / "out.h5");
  options.input_splits = {{"train", input}};
  options.max_target_length = 5;
  const PrepResult cut = run(options);
  const int64_t cut_targets = cut.splits.at(0).statistics.truncated_targets;
  ASSERT_GT(10 * cut_targets, 200);
  ASSERT_LT(cut_targets, 200);
  ASSERT_EQ(cut.warnings.size(), 1u);
  EXPECT_EQ(cut.warnings[0], msg("--max-target-length 5 cuts ", cut_targets, " of 200 targets (",
                                 (100 * cut_targets + 100) / 200, "%): check that the cut part is not what the model "
                                 "must learn"));
  EXPECT_NE(format_prep_report(cut).find("  warning: " + cut.warnings[0] + "\n"), std::string::npos);
  options.max_target_length.reset();
  EXPECT_TRUE(run(options).warnings.empty());  // the recipe's limits cut nothing here

  // Every summary has at least three words and a full stop: 2 tokens (one and eos) cut every one. From the recipe's
  // key, named with the recipe's file.
  std::string yaml = read_bytes(recipe("samsum"));
  const size_t at = yaml.find("max_target_length: 128");
  ASSERT_NE(at, std::string::npos);
  const std::string limited = write(dir, "limited.yaml", yaml.replace(at, 22, "max_target_length: 2"));
  options.recipe_path = limited;
  options.out_path = dir / "refused.h5";
  const std::string refused = error_of([&] { run(options); });
  EXPECT_EQ(refused, msg("recipe ", limited, ": max_target_length 2 cuts every target (200 of 200 examples): the data "
                         "would no longer hold the task. Raise it (0 = no limit), or check the recipe's target "
                         "template"));
  EXPECT_FALSE(std::filesystem::exists(dir / "refused.h5"));
  options.recipe_path = recipe("samsum");
  options.max_source_length = 2;
  EXPECT_NE(error_of([&] { run(options); }).find("--max-source-length 2 cuts every source (200 of 200 examples)"),
            std::string::npos);
}

TEST(PrepPipeline, TrainsTheTokenizerOnTheTrainSplit) {
  TempDir dir;
  Text text(10);
  std::string lines;
  for (int i = 0; i < 1500; ++i) {
    const nlohmann::json record = {{"id", std::to_string(i)},
                                   {"question", "who " + text.sentence(6)},
                                   {"context", text.paragraph(2, 10)},
                                   {"answers", {{"text", {text.sentence(2)}}, {"answer_start", {1}}}}};
    lines += record.dump() + "\n";
  }
  const std::string input = write(dir, "nq.jsonl", lines);
  PrepOptions options = options_for("natural_questions", dir / "nq.h5");
  options.tokenizer_path.clear();
  options.train_tokenizer = true;
  options.tokenizer_out = dir / "trained.model";
  options.tokenizer_training.vocab_size = 200;
  options.inputs = {input};
  options.threads = 2;
  const PrepResult result = run(options);
  EXPECT_GT(result.tokenizer_training_s, 0);
  const Tokenizer tokenizer = Tokenizer::load(dir / "trained.model", {"<question>", "<context>"});
  EXPECT_EQ(tokenizer.piece_count(), 200);
  EXPECT_TRUE(tokenizer.added_tokens().empty()) << "the recipe's special tokens are pieces of the trained model";
  const auto dataset = TokenizedDataset::open(dir / "nq.h5");
  dataset->check_tokenizer(tokenizer.sha256(), tokenizer.vocab_size());
  EXPECT_EQ(dataset->info().tokenizer_file, dir / "trained.model");
  const std::vector<int32_t> first = dataset->split("train").example(0).source;
  EXPECT_EQ(std::count(first.begin(), first.end(), 3), 1) << "<question> is piece 3 of the trained model";
  // Only the model, its .vocab and the dataset are left: no training text, no temporary files.
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"nq.h5", "nq.jsonl", "trained.model", "trained.vocab"}));
}

// A newcomer's first run: --tokenizer-out and --out in folders that do not exist yet are made; T5's 32000 pieces on
// a small sample are refused naming the option to lower.
TEST(PrepPipeline, OutputFoldersAreMadeAndAVocabularyTooLargeNamesTheOption) {
  TempDir dir;
  Text text(12);
  const std::string input = write(dir, "in.jsonl", samsum_lines(text, 0, 200));
  PrepOptions options = options_for("samsum", dir / "made/here/data.h5");
  options.tokenizer_path.clear();
  options.train_tokenizer = true;
  options.tokenizer_out = dir / "new/folder/my.model";
  options.tokenizer_training.vocab_size = 32000;
  options.input_splits = {{"train", input}};
  const std::string refused = error_of([&] { run(options); });
  EXPECT_NE(refused.find("vocab_size 32000 is more than this text holds pieces for (SentencePiece: "),
            std::string::npos) << refused;
  EXPECT_NE(refused.find("give a smaller one (t5scale-prep --vocab-size N"), std::string::npos) << refused;
  EXPECT_FALSE(std::filesystem::exists(dir / "new/folder/my.model"));
  options.tokenizer_training.vocab_size = 150;
  run(options);
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "new/folder/my.model"));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "made/here/data.h5"));
  write(dir, "blocked", "a file where the folder should be");
  options.out_path = dir / "blocked/data.h5";
  EXPECT_NE(error_of([&] { run(options); }).find("--out " + dir / "blocked/data.h5" + ": cannot make its folder '" +
                                                  dir / "blocked" + "'"),
            std::string::npos);
}

TEST(PrepPipeline, ProgressLinesGiveRatesAndEta) {
  TempDir dir;
  Text text(11);
  const std::string input = write(dir, "in.jsonl", samsum_lines(text, 0, 3000));
  PrepOptions options = options_for("samsum", dir / "out.h5");
  options.input_splits = {{"train", input}};
  options.progress = ProgressStyle::kLines;
  options.log_every_s = 1e-6;
  std::ostringstream progress;
  run_prep(options, progress);
  const std::string lines = progress.str();
  EXPECT_GE(std::count(lines.begin(), lines.end(), '\n'), 2) << lines;
  for (const std::string part : {"MB/s", "examples/s", "ETA", "(done)", "100.0%"}) {
    EXPECT_NE(lines.find(part), std::string::npos) << part << " not in: " << lines;
  }
}

TEST(PrepPipeline, RefusesBadArguments) {
  TempDir dir;
  const std::string input = write(dir, "in.jsonl", "{\"id\": \"1\", \"dialogue\": \"a\", \"summary\": \"b\"}\n");
  const auto message = [&](const std::function<void(PrepOptions&)>& change) {
    PrepOptions options = options_for("samsum", dir / "out.h5");
    options.inputs = {input};
    change(options);
    return error_of([&] { run(options); });
  };
  EXPECT_NE(message([&](PrepOptions& o) { o.input_splits = {{"train", input}}; }).find("not both"), std::string::npos);
  EXPECT_NE(message([&](PrepOptions& o) { o.inputs = {dir / "absent.jsonl"}; }).find("absent.jsonl': no such file"),
            std::string::npos);
  EXPECT_NE(message([&](PrepOptions& o) { o.train_tokenizer = true; }).find("exactly one"), std::string::npos);
  EXPECT_NE(message([&](PrepOptions& o) {
              o.split_ratios = {{"train", 0.5}, {"test", 0.4}};
            }).find("sum to 1"),
            std::string::npos);
  EXPECT_NE(message([&](PrepOptions& o) {
              o.tokenizer_path.clear();
              o.train_tokenizer = true;
              o.tokenizer_out = dir / "model.bin";
            }).find("--tokenizer-out FILE.model"),
            std::string::npos);
  EXPECT_NE(message([&](PrepOptions& o) { o.max_source_length = -1; }).find(">= 0"), std::string::npos);
  EXPECT_NE(message([&](PrepOptions& o) { o.recipe_path = dir / "absent.yaml"; }).find("absent.yaml"),
            std::string::npos);
  EXPECT_NE(message([&](PrepOptions& o) { o.tokenizer_path = input; }).find("in.jsonl"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir / "out.h5"));
}

}  // namespace
}  // namespace t5scale
