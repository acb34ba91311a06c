// libFuzzer harness of recipe loading: any bytes as a recipe's YAML text. A bad recipe may give a t5scale::Error;
// nothing else may be thrown, and a recipe that loads must pass its own validation and render a record.
// fuzz-sources: src/data_prep/text_records.cpp src/data_prep/recipe.cpp src/core/nearest_word.cpp
// fuzz-libs: -lyaml-cpp
#include <cstddef>
#include <cstdint>
#include <string>

#include "data_prep/recipe.h"
#include "fuzz_reader_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace t5scale;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Recipe recipe;
  try {
    recipe = Recipe::parse(text, "fuzz.yaml", "/recipes", "fuzz");
  } catch (const Error&) {
    return 0;
  }
  T5S_FUZZ_ASSERT(recipe.yaml_text == text);
  recipe.validate("again");  // what loads is valid
  TextRecord record;
  record.line_number = 1;
  record.fields = nlohmann::json::object({{"x", "1"}, {"label", "0"}});
  RenderedExample example;
  std::string problem;
  const RenderOutcome outcome = render_example(recipe, record, &example, &problem);
  T5S_FUZZ_ASSERT(outcome == RenderOutcome::kOk || !problem.empty());
  for (const auto& [split, file] : recipe.split_files) T5S_FUZZ_ASSERT(recipe.split_file_path(split) == file);
  return 0;
}
