// The recipes in data_prep/recipes/: each loads, and renders a fixture file in the shape of its real dataset
// (written here, read through open_records) to the exact source, target and id expected.
#include <gtest/gtest.h>

#include <filesystem>

#include "data_prep/recipe.h"
#include "prep_test_support.h"

namespace t5scale {
namespace {

using testing::TempDir;
using testing::write_file;

std::string recipe_path(const std::string& name) {
  return std::string(T5SCALE_PREP_RECIPES_DIR) + "/" + name + ".yaml";
}

struct Rendered {
  RenderOutcome outcome;
  RenderedExample example;
  std::string problem;
};

// Reads every record of `input` with the recipe's reader and renders it.
std::vector<Rendered> render_file(const Recipe& recipe, const std::string& input) {
  TextRecordReader reader = open_records(recipe, input);
  std::vector<Rendered> out;
  TextRecord record;
  while (reader.next(&record)) {
    Rendered r;
    r.outcome = render_example(recipe, record, &r.example, &r.problem);
    out.push_back(r);
  }
  return out;
}

TEST(PrepShippedRecipes, EveryRecipeLoadsAndIsNamedAfterItsFile) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(T5SCALE_PREP_RECIPES_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    const Recipe recipe = Recipe::load(entry.path().string());
    EXPECT_EQ(recipe.name, entry.path().stem().string());
    EXPECT_FALSE(recipe.split_files.empty() && recipe.split_ratios.empty()) << recipe.name;
    EXPECT_EQ(recipe.yaml_text.rfind("# ", 0), 0u) << recipe.name << ": starts with a comment on its fields";
    ++count;
  }
  EXPECT_GE(count, 6);
}

TEST(PrepShippedRecipes, Samsum) {
  TempDir dir;
  const Recipe recipe = Recipe::load(recipe_path("samsum"));
  const std::string input = write_file(
      dir, "train.jsonl",
      R"J({"id": "13818513", "summary": "Amanda baked cookies and will bring Jerry some tomorrow.", "dialogue": "Amanda: I baked  cookies. Do you want some?\r\nJerry: Sure!\r\nAmanda: I'll bring you tomorrow :-)"})J"
      "\n");
  const auto rendered = render_file(recipe, input);
  ASSERT_EQ(rendered.size(), 1u);
  ASSERT_EQ(rendered[0].outcome, RenderOutcome::kOk) << rendered[0].problem;
  EXPECT_EQ(rendered[0].example.source,
            "summarize: Amanda: I baked  cookies. Do you want some?\r\nJerry: Sure!\r\nAmanda: I'll bring you tomorrow :-)");
  EXPECT_EQ(rendered[0].example.target, "Amanda baked cookies and will bring Jerry some tomorrow.");
  EXPECT_EQ(rendered[0].example.id, "13818513");
  EXPECT_EQ(recipe.split_file_path("validation", "/data/samsum"), "/data/samsum/validation.jsonl");
}

TEST(PrepShippedRecipes, Xsum) {
  TempDir dir;
  const Recipe recipe = Recipe::load(recipe_path("xsum"));
  const std::string input = write_file(
      dir, "train.jsonl",
      R"({"document": "The full cost of damage in Newton Stewart, one of the areas worst affected, is still being assessed.\nRepair work is ongoing in Hawick.", "summary": "Clean-up operations are continuing across the Scottish Borders and Dumfries and Galloway after flooding caused by Storm Frank.", "id": "35232142"})"
      "\n");
  const auto rendered = render_file(recipe, input);
  ASSERT_EQ(rendered.size(), 1u);
  ASSERT_EQ(rendered[0].outcome, RenderOutcome::kOk) << rendered[0].problem;
  EXPECT_EQ(rendered[0].example.source,
            "summarize: The full cost of damage in Newton Stewart, one of the areas worst affected, is still being "
            "assessed.\nRepair work is ongoing in Hawick.");
  EXPECT_EQ(rendered[0].example.target.rfind("Clean-up operations", 0), 0u);
  EXPECT_EQ(rendered[0].example.id, "35232142");
  EXPECT_EQ(recipe.max_target_length, 64);
}

TEST(PrepShippedRecipes, CnnDailymail) {
  TempDir dir;
  const Recipe recipe = Recipe::load(recipe_path("cnn_dailymail"));
  const std::string input = write_file(
      dir, "train.jsonl",
      R"({"article": "LONDON, England (Reuters) -- Harry Potter star Daniel Radcliffe gains access to a reported \u00a320 million fortune as he turns 18 on Monday.", "highlights": "Harry Potter star Daniel Radcliffe gets \u00a320M fortune as he turns 18 Monday .\nYoung actor says he has no plans to fritter his cash away .", "id": "42c027e4ff9730fbb3de84c1af0d2c506e41c3e4"})"
      "\n");
  const auto rendered = render_file(recipe, input);
  ASSERT_EQ(rendered.size(), 1u);
  ASSERT_EQ(rendered[0].outcome, RenderOutcome::kOk) << rendered[0].problem;
  EXPECT_EQ(rendered[0].example.source.rfind("summarize: LONDON, England (Reuters) -- Harry Potter star", 0), 0u);
  EXPECT_NE(rendered[0].example.source.find("reported \xC2\xA3" "20 million"), std::string::npos);  // \u00a3 = £
  EXPECT_EQ(rendered[0].example.target,
            "Harry Potter star Daniel Radcliffe gets \xC2\xA3" "20M fortune as he turns 18 Monday .\nYoung actor says "
            "he has no plans to fritter his cash away .");
  EXPECT_EQ(rendered[0].example.id, "42c027e4ff9730fbb3de84c1af0d2c506e41c3e4");
}

TEST(PrepShippedRecipes, NaturalQuestionsWithContext) {
  TempDir dir;
  const Recipe recipe = Recipe::load(recipe_path("natural_questions"));
  EXPECT_EQ(recipe.special_tokens, (std::vector<std::string>{"<question>", "<context>"}));
  EXPECT_DOUBLE_EQ(recipe.split_ratios.at("train"), 0.9);
  const std::string input = write_file(
      dir, "nq.jsonl",
      R"({"id": "-1220107454853145579", "question": "who is the south african high commissioner in london", "context": "The High Commissioner of South Africa in London is Nomatemba Tambo.", "answers": {"text": ["Nomatemba Tambo"], "answer_start": [51]}})"
      "\n"
      R"({"id": "42", "question": "is this answerable", "context": "No short answer here.", "answers": {"text": [], "answer_start": []}})"
      "\n");
  const auto rendered = render_file(recipe, input);
  ASSERT_EQ(rendered.size(), 2u);
  ASSERT_EQ(rendered[0].outcome, RenderOutcome::kOk) << rendered[0].problem;
  EXPECT_EQ(rendered[0].example.source,
            "<question> who is the south african high commissioner in london <context> The High Commissioner of South "
            "Africa in London is Nomatemba Tambo.");
  EXPECT_EQ(rendered[0].example.target, "Nomatemba Tambo");
  EXPECT_EQ(rendered[0].example.id, "-1220107454853145579");
  EXPECT_EQ(rendered[1].outcome, RenderOutcome::kMissingField);  // no short answer: skipped and counted
  EXPECT_EQ(rendered[1].problem, "missing field 'answers.text[0]' (target_template)");
}

TEST(PrepShippedRecipes, NaturalQuestionsClosedBook) {
  TempDir dir;
  const Recipe recipe = Recipe::load(recipe_path("natural_questions_closed_book"));
  EXPECT_EQ(recipe.special_tokens, (std::vector<std::string>{"<question>"}));
  const std::string input = write_file(dir, "nq_open.jsonl",
                                       "\n"
                                       R"({"question": "where did they film hot tub time machine", "answer": ["Fernie Alpine Resort"]})"
                                       "\n");
  const auto rendered = render_file(recipe, input);
  ASSERT_EQ(rendered.size(), 1u);
  ASSERT_EQ(rendered[0].outcome, RenderOutcome::kOk) << rendered[0].problem;
  EXPECT_EQ(rendered[0].example.source, "<question> where did they film hot tub time machine");
  EXPECT_EQ(rendered[0].example.target, "Fernie Alpine Resort");
  EXPECT_EQ(rendered[0].example.id, "2");  // no id field: the line number
}

TEST(PrepShippedRecipes, AmazonPolarityOriginalCsv) {
  TempDir dir;
  const Recipe recipe = Recipe::load(recipe_path("amazon_polarity"));
  EXPECT_EQ(recipe.format, InputFormat::kCsv);
  const std::string input = write_file(
      dir, "train.csv",
      "\"2\",\"Great CD\",\"My lovely Pat has one of the GREAT voices of her generation. Everybody says \"\"Who was "
      "that singing ?\"\"\"\n"
      "\"1\",\"Batteries died within a year ...\",\"I bought this charger in Jul 2003.\\nIt worked OK for a while.\"\n"
      "\"3\",\"odd\",\"a class the archive does not have\"\n");
  const auto rendered = render_file(recipe, input);
  ASSERT_EQ(rendered.size(), 3u);
  ASSERT_EQ(rendered[0].outcome, RenderOutcome::kOk) << rendered[0].problem;
  EXPECT_EQ(rendered[0].example.source,
            "sentiment: Great CD. My lovely Pat has one of the GREAT voices of her generation. Everybody says \"Who "
            "was that singing ?\"");
  EXPECT_EQ(rendered[0].example.target, "positive");
  EXPECT_EQ(rendered[0].example.id, "1");
  ASSERT_EQ(rendered[1].outcome, RenderOutcome::kOk) << rendered[1].problem;
  EXPECT_EQ(rendered[1].example.target, "negative");
  EXPECT_EQ(rendered[1].example.id, "2");
  EXPECT_EQ(rendered[2].outcome, RenderOutcome::kUnknownLabel);
  EXPECT_EQ(rendered[2].problem, "label value '3' is not in label_words (1, 2)");
}

TEST(PrepShippedRecipes, AmazonPolarityJsonl) {
  TempDir dir;
  const Recipe recipe = Recipe::load(recipe_path("amazon_polarity_jsonl"));
  const std::string input = write_file(
      dir, "train.jsonl",
      R"({"label": 1, "title": "Great CD", "content": "My lovely Pat has one of the GREAT voices."})"
      "\n"
      R"({"label": 0, "title": "Batteries died", "content": "It worked OK for a while."})"
      "\n");
  const auto rendered = render_file(recipe, input);
  ASSERT_EQ(rendered.size(), 2u);
  ASSERT_EQ(rendered[0].outcome, RenderOutcome::kOk) << rendered[0].problem;
  EXPECT_EQ(rendered[0].example.target, "positive");
  EXPECT_EQ(rendered[0].example.source, "sentiment: Great CD. My lovely Pat has one of the GREAT voices.");
  ASSERT_EQ(rendered[1].outcome, RenderOutcome::kOk) << rendered[1].problem;
  EXPECT_EQ(rendered[1].example.target, "negative");
}

// The record of data_prep/manpages/make_corpus.py, through its two recipes: the summary, and the section as a word.
TEST(PrepShippedRecipes, ManpagesSummaryAndSection) {
  TempDir dir;
  const std::string input = write_file(
      dir, "corpus.jsonl",
      R"({"document": "The open() system call opens the file specified by pathname.", "id": "man2/open.2", )"
      R"("names": "open, openat, creat", "package": "manpages-dev", "section": 2, )"
      R"("summary": "open and possibly create a file"})"
      "\n"
      R"({"document": "Text.", "id": "man6/game.6", "names": "g", "package": "manpages", "section": 9, "summary": "s"})"
      "\n");
  const Recipe summary = Recipe::load(recipe_path("manpages_summary"));
  const auto summarized = render_file(summary, input);
  ASSERT_EQ(summarized.size(), 2u);
  ASSERT_EQ(summarized[0].outcome, RenderOutcome::kOk) << summarized[0].problem;
  EXPECT_EQ(summarized[0].example.source, "summarize: The open() system call opens the file specified by pathname.");
  EXPECT_EQ(summarized[0].example.target, "open and possibly create a file");
  EXPECT_EQ(summarized[0].example.id, "man2/open.2");

  const Recipe section = Recipe::load(recipe_path("manpages_section"));
  const auto classified = render_file(section, input);
  ASSERT_EQ(classified.size(), 2u);
  ASSERT_EQ(classified[0].outcome, RenderOutcome::kOk) << classified[0].problem;
  EXPECT_EQ(classified[0].example.source,
            "manual section: open and possibly create a file. The open() system call opens the file specified by "
            "pathname.");
  EXPECT_EQ(classified[0].example.target, "syscall");
  EXPECT_EQ(classified[1].outcome, RenderOutcome::kUnknownLabel);
}

}  // namespace
}  // namespace t5scale
