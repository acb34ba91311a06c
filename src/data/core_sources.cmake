# The data part's LibTorch sources: collation of tokenized examples into padded batches.
target_sources(t5scale_core PRIVATE ${CMAKE_CURRENT_LIST_DIR}/collate.cpp)
