# Tests of data preparation's output side: the tokenizer (against Python sentencepiece and transformers'
# T5Tokenizer), the tokenized dataset file, the t5scale-prep pipeline and program. Included by
# tests/data/tests.cmake.
set(_prep_output_tests
  ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_parity.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_tokenized_dataset.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_prep_pipeline.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_prep_program.cpp
)
target_sources(t5scale_base_tests PRIVATE ${_prep_output_tests})
set_property(SOURCE ${CMAKE_CURRENT_LIST_DIR}/test_prep_pipeline.cpp ${CMAKE_CURRENT_LIST_DIR}/test_prep_program.cpp
             APPEND PROPERTY COMPILE_DEFINITIONS "T5SCALE_PREP_RECIPES_DIR=\"${PROJECT_SOURCE_DIR}/data_prep/recipes\"")
t5scale_base_gtest(unit.prep_tokenizer unit "PrepTokenizer.*")
t5scale_base_gtest(unit.prep_dataset unit "PrepDataset.*")

# Tokenizer parity, three steps: Python makes a model and T5Tokenizer's ids; C++ compares, and trains a model of
# its own; Python checks that T5Tokenizer reads that model to the ids C++ wrote.
set(PREP_TOKENIZER_DIR ${CMAKE_CURRENT_BINARY_DIR}/prep_tokenizer_fixtures)
add_test(NAME unit.prep_tokenizer_reference
         COMMAND ${T5SCALE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_reference.py make ${PREP_TOKENIZER_DIR})
set_tests_properties(unit.prep_tokenizer_reference PROPERTIES LABELS unit FIXTURES_SETUP prep_tokenizer_reference
                     TIMEOUT 300)
t5scale_base_gtest(unit.prep_tokenizer_parity unit "PrepTokenizerParity.*")
set_tests_properties(unit.prep_tokenizer_parity PROPERTIES ENVIRONMENT T5SCALE_PREP_TOKENIZER_DIR=${PREP_TOKENIZER_DIR}
                     FIXTURES_REQUIRED prep_tokenizer_reference FIXTURES_SETUP prep_tokenizer_cpp_trained)
add_test(NAME unit.prep_tokenizer_trained_model_in_python
         COMMAND ${T5SCALE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_reference.py check ${PREP_TOKENIZER_DIR})
set_tests_properties(unit.prep_tokenizer_trained_model_in_python PROPERTIES LABELS unit TIMEOUT 300
                     FIXTURES_REQUIRED "prep_tokenizer_reference;prep_tokenizer_cpp_trained")

# The pipeline in-process (the shipped recipes on fixture files) and the program itself; then the program's
# output read by h5py and compared with T5Tokenizer example by example.
t5scale_base_gtest(e2e.prep_pipeline e2e "PrepPipeline.*")
add_dependencies(t5scale_base_tests t5scale-prep)  # PrepProgram runs the program
set(PREP_E2E_DIR ${CMAKE_CURRENT_BINARY_DIR}/prep_e2e)
t5scale_base_gtest(e2e.prep_program e2e "PrepProgram.*")
set_tests_properties(e2e.prep_program PROPERTIES
                     ENVIRONMENT "T5SCALE_PREP_BIN=$<TARGET_FILE:t5scale-prep>;T5SCALE_PREP_E2E_DIR=${PREP_E2E_DIR}"
                     FIXTURES_SETUP prep_e2e_run)
add_test(NAME e2e.prep_matches_transformers
         COMMAND ${T5SCALE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_prep_h5py_check.py ${PREP_E2E_DIR})
set_tests_properties(e2e.prep_matches_transformers PROPERTIES LABELS e2e TIMEOUT 300 FIXTURES_REQUIRED prep_e2e_run)
