# t5scale-study: plan, render, submit and follow a study's Slurm jobs (no LibTorch; runs on a login node).
add_executable(t5scale-study ${CMAKE_CURRENT_LIST_DIR}/study_main.cpp)
target_link_libraries(t5scale-study PRIVATE t5scale_base)
set_target_properties(t5scale-study PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
