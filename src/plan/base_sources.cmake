target_sources(t5scale_base PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cost_model.cpp)
