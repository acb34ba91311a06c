# The cost model: FLOPs against FlopCounterMode on transformers' T5, memory prediction arithmetic.
target_sources(t5scale_base_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_cost_model.cpp)
set(FLOP_REFERENCES ${CMAKE_CURRENT_BINARY_DIR}/flop_references.json)
add_test(NAME unit.cost_model_references
         COMMAND ${T5SCALE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/make_flop_references.py ${FLOP_REFERENCES})
set_tests_properties(unit.cost_model_references PROPERTIES LABELS unit FIXTURES_SETUP flop_references TIMEOUT 300)
t5scale_base_gtest(unit.cost_model unit "CostModel.*")
set_tests_properties(unit.cost_model PROPERTIES ENVIRONMENT T5SCALE_FLOP_REFERENCES=${FLOP_REFERENCES}
                     FIXTURES_REQUIRED flop_references)
