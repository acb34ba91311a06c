# Data preparation without LibTorch (t5scale_base): the tokenizer, the tokenized dataset file, the t5scale-prep
# pipeline and the synthetic task's examples. Included by src/data/base_sources.cmake.
target_sources(t5scale_base PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenized_dataset.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prep_pipeline.cpp
  ${CMAKE_CURRENT_LIST_DIR}/synthetic_examples.cpp
)
