# Generation metrics: compared with rouge-score, nltk and transformers through a reference file that a ctest
# fixture makes first (unit.eval_make_references), and classification counted by hand.
target_sources(t5scale_base_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/eval_references.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_rouge.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_porter_stemmer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_squad.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_classification.cpp
)

set(T5SCALE_EVAL_REFERENCES ${CMAKE_CURRENT_BINARY_DIR}/eval_references/eval_references.json)
add_test(NAME unit.eval_make_references
         COMMAND ${T5SCALE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/make_eval_references.py ${T5SCALE_EVAL_REFERENCES})
set_tests_properties(unit.eval_make_references PROPERTIES LABELS unit FIXTURES_SETUP eval_references TIMEOUT 300)

t5scale_base_gtest(unit.eval_rouge unit "EvalRouge.*")
t5scale_base_gtest(unit.eval_porter_stemmer unit "EvalPorterStemmer.*")
t5scale_base_gtest(unit.eval_squad unit "EvalSquad.*")
t5scale_base_gtest(unit.eval_classification unit "EvalClassification.*")
set_tests_properties(unit.eval_rouge unit.eval_porter_stemmer unit.eval_squad PROPERTIES
                     ENVIRONMENT T5SCALE_EVAL_REFERENCES=${T5SCALE_EVAL_REFERENCES}
                     FIXTURES_REQUIRED eval_references)
