# Tests of data preparation's input side: the JSONL/CSV readers, templates, recipes and the shipped recipes.
set(_prep_tests
  ${CMAKE_CURRENT_LIST_DIR}/test_text_records.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_recipe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_shipped_recipes.cpp
)
target_sources(t5scale_base_tests PRIVATE ${_prep_tests})
# Where the shipped recipes are, and the Python whose csv module is the CSV reader's reference.
set_source_files_properties(${_prep_tests} PROPERTIES COMPILE_DEFINITIONS
  "T5SCALE_PREP_RECIPES_DIR=\"${PROJECT_SOURCE_DIR}/data_prep/recipes\";T5SCALE_PREP_TEST_PYTHON=\"${T5SCALE_PYTHON}\"")
t5scale_base_gtest(unit.prep_text_records unit "PrepTextRecords.*")
t5scale_base_gtest(unit.prep_templates unit "PrepTemplates.*")
t5scale_base_gtest(unit.prep_recipes unit "PrepRecipes.*")
t5scale_base_gtest(unit.prep_shipped_recipes unit "PrepShippedRecipes.*")
