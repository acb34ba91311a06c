# The parts of training that need no LibTorch: the LR plan (scaling rules, warmup, schedules).
target_sources(t5scale_base PRIVATE ${CMAKE_CURRENT_LIST_DIR}/lr_schedule.cpp)
