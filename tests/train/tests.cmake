# LR plan: scaling rules and warmup by hand, and every schedule against transformers' own schedulers on
# reference values that make_lr_schedule_reference.py writes (a ctest fixture).
target_sources(t5scale_base_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_lr_schedule.cpp)
t5scale_base_gtest(unit.lr_schedule unit "LrSchedule.*")

set(LR_SCHEDULE_REFERENCE ${CMAKE_CURRENT_BINARY_DIR}/lr_schedule_reference/reference.json)
add_test(NAME unit.lr_schedule_reference
         COMMAND ${T5SCALE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/make_lr_schedule_reference.py ${LR_SCHEDULE_REFERENCE})
set_tests_properties(unit.lr_schedule_reference PROPERTIES LABELS unit FIXTURES_SETUP lr_schedule_reference
                     TIMEOUT 300)
t5scale_base_gtest(unit.lr_schedule_vs_transformers unit "LrScheduleVsTransformers.*")
set_tests_properties(unit.lr_schedule_vs_transformers PROPERTIES
                     ENVIRONMENT T5SCALE_LR_SCHEDULE_REFERENCE=${LR_SCHEDULE_REFERENCE}
                     FIXTURES_REQUIRED lr_schedule_reference)

# The optimizer tests (LibTorch) list themselves beside this file.
include(${CMAKE_CURRENT_LIST_DIR}/optim_tests.cmake OPTIONAL)
