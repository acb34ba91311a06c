# The distributed batch sampler (no LibTorch): included by src/data/base_sources.cmake.
target_sources(t5scale_base PRIVATE ${CMAKE_CURRENT_LIST_DIR}/batch_sampler.cpp)
