# Optimizer and freezing tests (included by tests/train/tests.cmake): Adafactor against transformers on fixtures
# the script beside them writes, the fused AdamW kernel against LibTorch's AdamW, and parameter freezing.
# The multi-rank Adafactor cases are part of tests/mpi/test_grid_training.cpp (mpi.mpi_tests_ranks_N).
target_sources(t5scale_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/test_adafactor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_fused_adamw.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_freezing.cpp
)

set(T5SCALE_ADAFACTOR_FIXTURES ${CMAKE_CURRENT_BINARY_DIR}/adafactor_fixtures)
add_test(NAME unit.optim_adafactor_fixtures
         COMMAND ${T5SCALE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/make_adafactor_fixtures.py ${T5SCALE_ADAFACTOR_FIXTURES})
set_tests_properties(unit.optim_adafactor_fixtures PROPERTIES LABELS unit FIXTURES_SETUP adafactor_fixtures
                     TIMEOUT 300)
t5scale_gtest(unit.optim_adafactor_vs_transformers unit "AdafactorVsTransformers.*")
set_tests_properties(unit.optim_adafactor_vs_transformers PROPERTIES
                     ENVIRONMENT T5SCALE_ADAFACTOR_FIXTURES=${T5SCALE_ADAFACTOR_FIXTURES}
                     FIXTURES_REQUIRED adafactor_fixtures)
t5scale_gtest(unit.optim_adafactor_options unit "AdafactorOptionsCheck.*")
t5scale_gtest(unit.optim_fused_adamw unit "FusedAdamW.*")
t5scale_gtest(unit.optim_freezing unit "Freezing.*")
