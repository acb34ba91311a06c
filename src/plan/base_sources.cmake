# The plan part (no LibTorch): the cost model, and the study spec, its expansion and planning, sbatch rendering
# and the Slurm/run-file status of t5scale-study.
target_sources(t5scale_base PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cost_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/study_spec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/study_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sbatch_render.cpp
  ${CMAKE_CURRENT_LIST_DIR}/study_status.cpp
)
