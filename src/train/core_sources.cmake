# LibTorch sources of the train part added after src/CMakeLists.txt listed the first ones.
target_sources(t5scale_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/distributed_optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/distributed_adafactor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer_resharding.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_tools.cpp
)
