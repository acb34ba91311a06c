# Data preparation and sampling without LibTorch (t5scale_base). synthetic_task.cpp and collate.cpp use LibTorch
# and are in t5scale_core instead (src/CMakeLists.txt, core_sources.cmake).
# The input side: JSONL/CSV readers and recipes.
target_sources(t5scale_base PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/text_records.cpp
  ${CMAKE_CURRENT_LIST_DIR}/recipe.cpp
)
# The tokenizer, the tokenized dataset file, the t5scale-prep pipeline, the synthetic task's examples.
include(${CMAKE_CURRENT_LIST_DIR}/prep_sources.cmake OPTIONAL)
# The distributed batch samplers.
include(${CMAKE_CURRENT_LIST_DIR}/sampler_sources.cmake OPTIONAL)
