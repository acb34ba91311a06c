# t5scale-prep: JSONL/CSV to tokenized HDF5 datasets, and the synthetic task's dataset (no LibTorch).
add_executable(t5scale-prep ${PROJECT_SOURCE_DIR}/data_prep/prep_main.cpp)
target_link_libraries(t5scale-prep PRIVATE t5scale_base)
target_compile_definitions(t5scale-prep PRIVATE T5SCALE_VERSION="${PROJECT_VERSION}")
set_target_properties(t5scale-prep PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
