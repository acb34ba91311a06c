// libFuzzer harness of templates and render_example. Input: a template on the first line, an id_field on the
// second, and a JSONL record in the rest (when the reader does not take it, the rest becomes the value of "x").
// The template is rendered alone, then as source and target of a recipe (with label_words when it is a single
// placeholder). An invalid template may give a t5scale::Error, nothing else may be thrown.
// fuzz-sources: src/data_prep/text_records.cpp src/data_prep/recipe.cpp src/core/nearest_word.cpp
// fuzz-libs: -lyaml-cpp
#include <cstddef>
#include <cstdint>
#include <string>

#include "data_prep/recipe.h"
#include "fuzz_reader_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace t5scale;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t first = input.find('\n');
  const size_t second = first == std::string::npos ? std::string::npos : input.find('\n', first + 1);
  const std::string template_text = input.substr(0, first);
  const std::string id_field = first == std::string::npos ? "" : input.substr(first + 1, second - first - 1);
  const std::string rest = second == std::string::npos ? "" : input.substr(second + 1);
  // The record as the JSONL reader would hand it out (a JSON object, valid UTF-8, nesting within the limit).
  std::string line = rest;
  for (char& c : line) c = c == '\n' ? ' ' : c;
  TextRecord record;
  TextRecordReader reader = TextRecordReader::from_string(line, "fuzz", InputFormat::kJsonl, MalformedPolicy::kSkip);
  if (!reader.next(&record)) record.fields = nlohmann::json::object({{"x", rest}});
  record.line_number = 3;

  std::vector<std::string> fields;
  try {
    fields = template_fields(template_text);
  } catch (const Error&) {
    // An invalid template: rendering must say so too.
    std::string out;
    bool threw = false;
    try {
      render_template(template_text, record.fields, &out, nullptr);
    } catch (const Error&) {
      threw = true;
    }
    T5S_FUZZ_ASSERT(threw);
    return 0;
  }
  std::string out, missing;
  if (!render_template(template_text, record.fields, &out, &missing)) {
    bool named = false;
    for (const std::string& f : fields) named = named || f == missing;
    T5S_FUZZ_ASSERT(named);  // the missing field is one of the template's
  } else if (fields.empty()) {
    // Without placeholders the output is the template with {{ and }} undone: never longer.
    T5S_FUZZ_ASSERT(out.size() <= template_text.size());
  }

  Recipe recipe;
  recipe.name = "fuzz";
  recipe.source_template = template_text.empty() ? "x" : template_text;
  recipe.target_template = recipe.source_template;
  recipe.id_field = id_field;
  if (fields.size() == 1 && template_text == "{" + fields[0] + "}") recipe.label_words = {{"0", "no"}, {"1", "yes"}};
  try {
    recipe.validate("fuzz");
  } catch (const Error&) {
    return 0;  // e.g. an id_field that is not a field path
  }
  RenderedExample example;
  std::string problem;
  const RenderOutcome outcome = render_example(recipe, record, &example, &problem);
  if (outcome == RenderOutcome::kOk) {
    T5S_FUZZ_ASSERT(is_valid_utf8(example.source) && is_valid_utf8(example.target) && is_valid_utf8(example.id));
    T5S_FUZZ_ASSERT(!recipe.label_words.empty() || example.source == example.target);
    if (!recipe.label_words.empty()) T5S_FUZZ_ASSERT(example.target == "no" || example.target == "yes");
  } else {
    T5S_FUZZ_ASSERT(!problem.empty());
  }
  return 0;
}
