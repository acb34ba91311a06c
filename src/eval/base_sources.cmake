# Generation metrics (ROUGE, SQuAD EM/F1, classification): no LibTorch, so they live in t5scale_base.
target_sources(t5scale_base PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unicode_tables.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unicode_text.cpp
  ${CMAKE_CURRENT_LIST_DIR}/porter_stemmer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rouge.cpp
  ${CMAKE_CURRENT_LIST_DIR}/squad.cpp
  ${CMAKE_CURRENT_LIST_DIR}/classification.cpp
)
