# t5scale-study: unit tests of the spec, plan, rendering and status (t5scale_base_tests), and the study on a
# real one-node Slurm cluster started on this machine (label slurm; needs root, slurm-wlm and munge).
target_sources(t5scale_base_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_study.cpp)
set_property(SOURCE ${CMAKE_CURRENT_LIST_DIR}/test_study.cpp APPEND PROPERTY COMPILE_DEFINITIONS
             "T5SCALE_SOURCE_DIR=\"${PROJECT_SOURCE_DIR}\"")
t5scale_base_gtest(unit.study_spec unit "StudySpec.*")
t5scale_base_gtest(unit.study_plan unit "StudyPlan.*")
t5scale_base_gtest(unit.study_render unit "StudyRender.*")
t5scale_base_gtest(unit.study_status unit "StudyStatus.*")
t5scale_base_gtest(unit.study_examples unit "StudyExamples.*")

# Starts munged, slurmctld and slurmd in a temporary folder, submits jobs/cpu-demo.yaml with t5scale-study,
# waits for the jobs, checks the run files (h5py) and `t5scale-study status`, and stops the daemons. Needs the
# targets t5scale-study and t5scale-train built. Fails (never skips) where Slurm cannot start.
add_test(NAME slurm.study_on_local_cluster
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/run_local_slurm_study.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/bin
                 ${T5SCALE_PYTHON})
set_tests_properties(slurm.study_on_local_cluster PROPERTIES LABELS slurm TIMEOUT 1200 RESOURCE_LOCK local_slurm
                     PROCESSORS 2)
