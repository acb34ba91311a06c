# t5scale-bench: its library on the tiny model (gtest), the program and bench/hf_reference.py end to end with the
# same JSON keys, and bench/compare.py alternating the two (tests/bench/check_bench_programs.py). Label bench.
target_sources(t5scale_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_step_benchmark.cpp)
t5scale_gtest(bench.step_benchmark bench "Bench.*")

foreach(check program reference compare)
  add_test(NAME bench.${check}
           COMMAND ${T5SCALE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_bench_programs.py ${check}
                   --bench-bin $<TARGET_FILE:t5scale-bench> --work ${CMAKE_CURRENT_BINARY_DIR}/bench_${check})
  set_tests_properties(bench.${check} PROPERTIES LABELS bench TIMEOUT 300 PROCESSORS 2)
endforeach()
