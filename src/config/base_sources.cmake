# The run config: key registry, YAML loading and overrides, validation, reference; Hugging Face's config.json
# (no LibTorch).
target_sources(t5scale_base PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/config_registry.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hf_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/placement.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_config.cpp
)
