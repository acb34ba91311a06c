// Templates (fields, nesting, arrays, escapes, missing fields), render_example's outcomes, and recipe loading:
// every key read, and every bad recipe refused with the file and the key in the message.
#include <gtest/gtest.h>

#include "data_prep/recipe.h"
#include "prep_test_support.h"

namespace t5scale {
namespace {

using nlohmann::json;
using testing::error_of;
using testing::TempDir;
using testing::write_file;

std::string render(const std::string& t, const json& fields) {
  std::string out, missing;
  EXPECT_TRUE(render_template(t, fields, &out, &missing)) << t << ": missing " << missing;
  return out;
}

std::string missing_of(const std::string& t, const json& fields) {
  std::string out, missing;
  EXPECT_FALSE(render_template(t, fields, &out, &missing)) << t << " rendered as '" << out << "'";
  return missing;
}

// ---- Templates ------------------------------------------------------------------------------------------------

TEST(PrepTemplates, FieldsNestingArraysAndEscapes) {
  const json record = json::parse(R"({
    "dialogue": "A: hi\nB: hello", "n": 3, "x": 0.5, "yes": true, "big": 12345678901234,
    "meta": {"source": {"name": "bbc"}},
    "answers": {"text": ["Paris", "paris"], "answer_start": [7, 9]},
    "list": ["first", "second"], "matrix": [[1, 2], [3, 4]],
    "a.b": "whole key", "a": {"b": "path"}, "obj": {"k": [1, "v"]}, "empty": ""})");
  EXPECT_EQ(render("summarize: {dialogue}", record), "summarize: A: hi\nB: hello");
  EXPECT_EQ(render("{meta.source.name}", record), "bbc");
  EXPECT_EQ(render("{answers.text[0]} / {answers.text[1]} @ {answers.answer_start[1]}", record), "Paris / paris @ 9");
  EXPECT_EQ(render("{list[1]}", record), "second");
  EXPECT_EQ(render("{matrix[1][0]}", record), "3");
  EXPECT_EQ(render("n={n} x={x} yes={yes} big={big}", record), "n=3 x=0.5 yes=true big=12345678901234");
  EXPECT_EQ(render("{{literal}} {{{n}}} }}", record), "{literal} {3} }");
  EXPECT_EQ(render("{a.b}", record), "whole key");  // a top-level key equal to the whole text wins
  EXPECT_EQ(render("{obj}", record), R"({"k":[1,"v"]})");
  EXPECT_EQ(render("[{empty}]", record), "[]");
  EXPECT_EQ(render("no placeholders", record), "no placeholders");
  EXPECT_EQ(render("", record), "");
  EXPECT_EQ(template_fields("<question> {question} <context> {context} {{x}}"),
            (std::vector<std::string>{"question", "context"}));
}

TEST(PrepTemplates, MissingFieldsNameThePlaceholder) {
  const json record = json::parse(R"({"a": {"b": 1}, "list": [1], "s": "text", "nothing": null})");
  EXPECT_EQ(missing_of("x {summary} y", record), "summary");
  EXPECT_EQ(missing_of("{a.c}", record), "a.c");
  EXPECT_EQ(missing_of("{a.b.c}", record), "a.b.c");      // a step into a number
  EXPECT_EQ(missing_of("{list[1]}", record), "list[1]");  // out of range
  EXPECT_EQ(missing_of("{s[0]}", record), "s[0]");        // indexing a string
  EXPECT_EQ(missing_of("{a[0]}", record), "a[0]");        // indexing an object
  EXPECT_EQ(missing_of("{nothing}", record), "nothing");  // null counts as missing
  EXPECT_EQ(missing_of("{ a}", record), " a");            // no trimming inside the braces
}

TEST(PrepTemplates, InvalidTemplatesAreErrors) {
  const json record = json::object();
  std::string out;
  for (const auto& [bad, reason] : std::vector<std::pair<std::string, std::string>>{
           {"summarize: {dialogue", "is never closed"},
           {"a } b", "a lone '}' at character 3"},
           {"{}", "an empty placeholder"},
           {"{a[x]}", "a bad index"},
           {"{a[]}", "a bad index"},
           {"{a[1}", "a bad index"},
           {"{a.}", "ending in '.'"},
           {"{.a}", "an empty field name"},
           {"{a..b}", "an empty field name"},
           {"{a{b}}", "placeholders do not nest"},
           {"{a]b}", "a ']' without '['"},
           {"{a[0]b}", "unexpected 'b'"},
           {"{a[99999999999999]}", "an index too large"}}) {
    const std::string error = error_of([&] { render_template(bad, record, &out, nullptr); });
    EXPECT_NE(error.find(reason), std::string::npos) << bad << " -> " << error;
  }
}

// ---- render_example ----------------------------------------------------------------------------------------------

Recipe summarization_recipe() {
  Recipe recipe;
  recipe.name = "test";
  recipe.source_template = "summarize: {dialogue}";
  recipe.target_template = "{summary}";
  recipe.id_field = "id";
  return recipe;
}

TextRecord record_of(const std::string& json_text, int64_t line = 7) {
  TextRecord record;
  record.line_number = line;
  record.fields = json::parse(json_text);
  return record;
}

TEST(PrepTemplates, RenderExampleOutcomes) {
  const Recipe recipe = summarization_recipe();
  RenderedExample out;
  std::string problem;
  ASSERT_EQ(render_example(recipe, record_of(R"({"id": "13818513", "dialogue": "A: hi", "summary": "A greets."})"),
                           &out, &problem),
            RenderOutcome::kOk);
  EXPECT_EQ(out.id, "13818513");
  EXPECT_EQ(out.source, "summarize: A: hi");
  EXPECT_EQ(out.target, "A greets.");

  EXPECT_EQ(render_example(recipe, record_of(R"({"id": 5, "dialogue": "A: hi"})"), &out, &problem),
            RenderOutcome::kMissingField);
  EXPECT_EQ(problem, "missing field 'summary' (target_template)");
  EXPECT_EQ(render_example(recipe, record_of(R"({"id": 5, "summary": "s"})"), &out, &problem),
            RenderOutcome::kMissingField);
  EXPECT_EQ(problem, "missing field 'dialogue' (source_template)");
  EXPECT_EQ(render_example(recipe, record_of(R"({"dialogue": "d", "summary": "s"})"), &out, &problem),
            RenderOutcome::kMissingField);
  EXPECT_EQ(problem, "missing field 'id' (id_field)");
  for (const std::string& empty : {"\"\"", "\"  \\n\\t \"", "\"\\r\\n\""}) {
    EXPECT_EQ(render_example(recipe, record_of(R"({"id": 1, "dialogue": "d", "summary": )" + empty + "}"), &out,
                             &problem),
              RenderOutcome::kEmptyTarget)
        << empty;
    EXPECT_EQ(problem, "the target is empty");
  }
  // A number as id renders as its JSON text.
  ASSERT_EQ(render_example(recipe, record_of(R"({"id": 42, "dialogue": "d", "summary": "s"})"), &out, nullptr),
            RenderOutcome::kOk);
  EXPECT_EQ(out.id, "42");
  // Without id_field the id is the line number.
  Recipe no_id = recipe;
  no_id.id_field = "";
  ASSERT_EQ(render_example(no_id, record_of(R"({"dialogue": "d", "summary": "s"})", 1234), &out, nullptr),
            RenderOutcome::kOk);
  EXPECT_EQ(out.id, "1234");
  // A record built in code with bytes that are not UTF-8 (the readers never hand one out).
  TextRecord bad;
  bad.fields = json::object({{"id", "1"}, {"dialogue", std::string("caf\xE9")}, {"summary", "s"}});
  EXPECT_EQ(render_example(recipe, bad, &out, &problem), RenderOutcome::kInvalidUtf8);
  EXPECT_STREQ(render_outcome_name(RenderOutcome::kEmptyTarget), "empty_target");
}

TEST(PrepTemplates, LabelWords) {
  Recipe recipe;
  recipe.name = "sentiment";
  recipe.source_template = "sentiment: {title}. {content}";
  recipe.target_template = "{label}";
  recipe.label_words = {{"0", "negative"}, {"1", "positive"}};
  recipe.validate("test");
  RenderedExample out;
  std::string problem;
  ASSERT_EQ(render_example(recipe, record_of(R"({"label": 1, "title": "Great", "content": "Loved it."})"), &out,
                           &problem),
            RenderOutcome::kOk);
  EXPECT_EQ(out.source, "sentiment: Great. Loved it.");
  EXPECT_EQ(out.target, "positive");
  ASSERT_EQ(render_example(recipe, record_of(R"({"label": "0", "title": "t", "content": "c"})"), &out, &problem),
            RenderOutcome::kOk);  // the string "0" and the number 0 are the same label
  EXPECT_EQ(out.target, "negative");
  EXPECT_EQ(render_example(recipe, record_of(R"({"label": 2, "title": "t", "content": "c"})"), &out, &problem),
            RenderOutcome::kUnknownLabel);
  EXPECT_EQ(problem, "label value '2' is not in label_words (0, 1)");
  EXPECT_EQ(render_example(recipe, record_of(R"({"title": "t", "content": "c"})"), &out, &problem),
            RenderOutcome::kMissingField);
  // label_words need the target to be one placeholder, nothing around it.
  recipe.target_template = "label: {label}";
  EXPECT_NE(error_of([&] { recipe.validate("r.yaml"); })
                .find("r.yaml: key 'label_words': needs target_template to be exactly one placeholder"),
            std::string::npos);
}

// ---- Recipe files ---------------------------------------------------------------------------------------------

TEST(PrepRecipes, LoadsEveryKey) {
  TempDir dir;
  const std::string text = R"(# a comment
name: my_qa
format: csv
csv_columns: [id, q, c, a]
source_template: "<question> {q} <context> {c}"
target_template: "{a}"
id_field: id
special_tokens: [<question>, <context>]
split_ratios: {train: 0.8, validation: 0.1, test: 0.1}
split_seed: 17
max_source_length: 1024
max_target_length: 0
on_malformed: skip
)";
  const std::string path = write_file(dir, "my.yaml", text);
  const Recipe recipe = Recipe::load(path);
  EXPECT_EQ(recipe.name, "my_qa");
  EXPECT_EQ(recipe.yaml_text, text);
  EXPECT_EQ(recipe.path, path);
  EXPECT_EQ(recipe.dir, dir.path().string());
  EXPECT_EQ(recipe.format, InputFormat::kCsv);
  EXPECT_EQ(recipe.csv_columns, (std::vector<std::string>{"id", "q", "c", "a"}));
  EXPECT_EQ(recipe.source_template, "<question> {q} <context> {c}");
  EXPECT_EQ(recipe.target_template, "{a}");
  EXPECT_EQ(recipe.id_field, "id");
  EXPECT_EQ(recipe.special_tokens, (std::vector<std::string>{"<question>", "<context>"}));
  EXPECT_EQ(recipe.split_ratios, (std::map<std::string, double>{{"train", 0.8}, {"validation", 0.1}, {"test", 0.1}}));
  EXPECT_TRUE(recipe.split_files.empty());
  EXPECT_EQ(recipe.split_seed, 17);
  EXPECT_EQ(recipe.max_source_length, 1024);
  EXPECT_EQ(recipe.max_target_length, 0);
  EXPECT_EQ(recipe.on_malformed, MalformedPolicy::kSkip);

  // Defaults: the name from the file, jsonl, fail, 512/128, no splits.
  const std::string minimal = write_file(dir, "tiny_task.yaml", "source_template: \"{x}\"\ntarget_template: \"{y}\"\n");
  const Recipe defaults = Recipe::load(minimal);
  EXPECT_EQ(defaults.name, "tiny_task");
  EXPECT_EQ(defaults.format, InputFormat::kJsonl);
  EXPECT_EQ(defaults.on_malformed, MalformedPolicy::kFail);
  EXPECT_EQ(defaults.max_source_length, 512);
  EXPECT_EQ(defaults.max_target_length, 128);
  EXPECT_TRUE(defaults.split_files.empty() && defaults.split_ratios.empty() && defaults.label_words.empty());
}

TEST(PrepRecipes, SplitFilesResolveAgainstTheRecipeOrADataFolder) {
  TempDir dir;
  const std::string path = write_file(dir, "r.yaml",
                                      "source_template: \"{x}\"\ntarget_template: \"{y}\"\n"
                                      "split_files: {train: data/train.jsonl, test: ./test.jsonl, x: a..b/c..}\n");
  const Recipe recipe = Recipe::load(path);
  EXPECT_EQ(recipe.split_files.at("train"), (dir.path() / "data/train.jsonl").string());
  EXPECT_EQ(recipe.split_files.at("test"), (dir.path() / "test.jsonl").string());
  EXPECT_EQ(recipe.split_files.at("x"), (dir.path() / "a..b/c..").string());
  EXPECT_EQ(recipe.split_files_as_written.at("train"), "data/train.jsonl");
  EXPECT_EQ(recipe.split_file_path("train"), (dir.path() / "data/train.jsonl").string());
  EXPECT_EQ(recipe.split_file_path("train", "/data/samsum"), "/data/samsum/data/train.jsonl");
  EXPECT_EQ(recipe.split_file_path("test", "/data/samsum"), "/data/samsum/test.jsonl");
  EXPECT_NE(error_of([&] { recipe.split_file_path("validation"); }).find("no split 'validation' (has test, train, x)"),
            std::string::npos);
}

// Each bad recipe: its text and what the message must contain besides the file name.
TEST(PrepRecipes, BadRecipesNameTheFileAndTheKey) {
  TempDir dir;
  const std::string ok = "source_template: \"s: {x}\"\ntarget_template: \"{y}\"\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {ok + "target_templte: \"{z}\"\n", "unknown key 'target_templte' (did you mean 'target_template'?)"},
      {ok + "colour: red\n", "unknown key 'colour' (known keys: name, format"},
      {"target_template: \"{y}\"\n", "key 'source_template': missing"},
      {"source_template: \"{x}\"\n", "key 'target_template': missing"},
      {ok + "split_ratios: {train: 0.9, validation: 0.05}\n", "key 'split_ratios': the ratios sum to 0.95; they must sum to 1"},
      {ok + "split_ratios: {train: 1.5, test: -0.5}\n", "key 'split_ratios.test': must be in (0, 1]"},
      {ok + "split_ratios: {train: lots}\n", "key 'split_ratios': train: expected a number, got 'lots'"},
      {ok + "split_ratios: {train: 1}\nsplit_files: {train: a.jsonl}\n", "key 'split_files': give split_files"},
      {ok + "split_files: {train: }\n", "key 'split_files.train': has no value"},
      {ok + "split_files: [a.jsonl]\n", "key 'split_files': expected a mapping"},
      // A recipe travels between users: the files it names stay in its folder, whatever it says.
      {ok + "split_files: {train: ../../../../etc/hostname}\n",
       "key 'split_files.train': '../../../../etc/hostname' is not a path inside the recipe's folder (it climbs out "
       "of the folder with '..'); nothing outside it is opened. Put the file in the recipe's folder or below it, give "
       "t5scale-prep --data-dir DIR to read the recipe's names from DIR, or --input-split train=FILE"},
      {ok + "split_files: {test: data/../../x.jsonl}\n", "key 'split_files.test': 'data/../../x.jsonl' is not a path"},
      {ok + "split_files: {test: data/..}\n", "(it climbs out of the folder with '..')"},
      {ok + "split_files: {train: /etc/hostname}\n", "'/etc/hostname' is not a path inside the recipe's folder (it "
                                                      "is an absolute path)"},
      {ok + "split_files: {train: \"a\\\\b.jsonl\"}\n", "(it holds a backslash)"},
      {ok + "split_files: {train: \"a\\tb.jsonl\"}\n", "'a\\x09b.jsonl' is not a path inside"},
      {ok + "format: json\n", "key 'format': unknown format 'json' (expected jsonl or csv)"},
      {ok + "on_malformed: ignore\n", "key 'on_malformed': unknown policy 'ignore'"},
      {ok + "max_source_length: -1\n", "key 'max_source_length': must be >= 0"},
      {ok + "max_target_length: 12.5\n", "key 'max_target_length': expected an integer, got '12.5'"},
      {ok + "split_seed: [1]\n", "key 'split_seed': expected a single value"},
      {"source_template: \"{x}\"\ntarget_template: \"{y} !\"\nlabel_words: {0: no}\n",
       "key 'label_words': needs target_template"},
      {"source_template: \"{x}\"\ntarget_template: \"{y}\"\nlabel_words: {0: \" \"}\n",
       "key 'label_words': the word for '0' is empty"},
      {"source_template: \"{x}\"\ntarget_template: \"{y}\"\nlabel_words: [a, b]\n", "key 'label_words': expected a mapping"},
      {ok + "special_tokens: [<q>, <q>]\n", "key 'special_tokens': '<q>' appears twice"},
      {ok + "special_tokens: [\"<a b>\"]\n", "key 'special_tokens': '<a b>' contains whitespace"},
      {ok + "special_tokens: <q>\n", "key 'special_tokens': expected a list"},
      {ok + "csv_columns: [a, b]\n", "key 'csv_columns': is only for format: csv"},
      {ok + "format: csv\ncsv_columns: [a, a]\n", "key 'csv_columns': 'a' appears twice"},
      {"source_template: \"summarize: {dialogue\"\ntarget_template: \"{y}\"\n",
       "key 'source_template': the '{' at character 12 is never closed"},
      {"source_template: \"{x}\"\ntarget_template: \"{y}}\"\n", "key 'target_template': a lone '}' at character 4"},
      {ok + "id_field: \"a[\"\n", "key 'id_field': a bad index"},
      {ok + "id_field: \"{id}\"\n", "key 'id_field': a field path has no braces"},
      {ok + "name: \"\"\n", "key 'name': must not be empty"},
      {ok + "name: a\nname: b\n", "key 'name': appears twice"},
      {"source_template: [a]\ntarget_template: \"{y}\"\n", "key 'source_template': expected a single value"},
      {"source_template:\ntarget_template: \"{y}\"\n", "key 'source_template': has no value"},
      {"", "the recipe is empty"},
      {"- a\n- b\n", "a recipe is a mapping of keys"},
      {"source_template: [unclosed\n", "not valid YAML"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string path = write_file(dir, "bad.yaml", text);
    const std::string error = error_of([&] { Recipe::load(path); });
    EXPECT_EQ(error.rfind(path + ": ", 0), 0u) << text << " -> " << error;
    EXPECT_NE(error.find(expected), std::string::npos) << text << " -> " << error;
  }
  EXPECT_NE(error_of([&] { Recipe::load(dir / "missing.yaml"); }).find("cannot read recipe '" + (dir / "missing.yaml")),
            std::string::npos);
}

}  // namespace
}  // namespace t5scale
