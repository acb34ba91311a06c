# GPUs. On any machine: how a rank finds its GPU and its backend (in the multi-rank binary, so the node-local rank
# is checked under mpirun with 1, 2 and 4 ranks), the trainer's refusal of a GPU node LibTorch cannot use, and the
# dry run of scripts/gpu-check.sh. With CUDA: the entries labelled gpu, which exit with the skip code 77 where
# LibTorch sees no CUDA device, so that ctest reports them as skipped, never as passed.
target_sources(t5scale_mpi_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_device_placement.cpp)

# CUDA_VISIBLE_DEVICES=99 names a GPU no machine has: on a GPU node LibTorch then sees none while the driver's
# files remain, and on a CPU machine the variable alone is the sign of a GPU node. Either way auto must refuse,
# and parallel.backend: mpi must train.
add_test(NAME e2e.train_program_auto_refuses_unusable_gpus
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/expect_job_failure.sh 60
                 "parallel.backend: auto: this node has NVIDIA GPUs (" $<TARGET_FILE:t5scale-train> ${T5SCALE_TRAIN_QUICK}
                 --set run.name=refuse_gpu --set run.output_dir=${CMAKE_CURRENT_BINARY_DIR}/program_runs)
add_test(NAME e2e.train_program_backend_mpi_on_a_gpu_node
         COMMAND t5scale-train ${T5SCALE_TRAIN_QUICK} --set parallel.backend=mpi --set run.name=forced_cpu
                 --set run.output_dir=${CMAKE_CURRENT_BINARY_DIR}/program_runs --set checkpoint.resume=never)
set_tests_properties(e2e.train_program_auto_refuses_unusable_gpus e2e.train_program_backend_mpi_on_a_gpu_node
                     PROPERTIES LABELS e2e TIMEOUT 120 ENVIRONMENT CUDA_VISIBLE_DEVICES=99)

add_test(NAME unit.gpu_check_dry_run
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/check_gpu_check_dry_run.sh ${PROJECT_SOURCE_DIR}/scripts/gpu-check.sh
                 ${PROJECT_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/gpu_check_dry_run)
set_tests_properties(unit.gpu_check_dry_run PROPERTIES LABELS unit TIMEOUT 120)

set(T5SCALE_GPU_SKIP 77)  # kSkipReturnCode in gpu_test_support.h
if(T5SCALE_WITH_CUDA)
  add_executable(t5scale_gpu_tests
    ${CMAKE_CURRENT_LIST_DIR}/gpu_test_main.cpp
    ${CMAKE_CURRENT_LIST_DIR}/gpu_test_support.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_cuda_layers.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_nccl_communicator.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_cuda_training.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_gpu_telemetry.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/base_test_support.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/test_support.cpp
  )
  target_include_directories(t5scale_gpu_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(t5scale_gpu_tests PRIVATE t5scale_core GTest::gtest)
  target_precompile_headers(t5scale_gpu_tests REUSE_FROM t5scale_core)
  set(T5SCALE_GPU_PROBE $<TARGET_FILE:t5scale_gpu_tests>)
  # The wrapper passes the binary's skip on to ctest before running a test that is not the binary itself.
  set(T5SCALE_UNLESS_SKIPPED ${CMAKE_CURRENT_LIST_DIR}/unless_skipped.sh ${T5SCALE_GPU_PROBE} --)
else()
  # A LibTorch without CUDA: every entry says so and is skipped.
  set(T5SCALE_GPU_PROBE sh -c "echo skipped: this build's LibTorch has no CUDA\; exit ${T5SCALE_GPU_SKIP}" --)
  set(T5SCALE_UNLESS_SKIPPED ${T5SCALE_GPU_PROBE})
endif()

function(t5scale_gpu_test name filter)
  add_test(NAME gpu.${name} COMMAND ${T5SCALE_GPU_PROBE} --gtest_filter=${filter} --gtest_color=no)
  set_tests_properties(gpu.${name} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE ${T5SCALE_GPU_SKIP}
                       FAIL_REGULAR_EXPRESSION "${T5SCALE_NO_TEST_RAN}" ENVIRONMENT "${T5SCALE_MPI_ENV}")
endfunction()

t5scale_gpu_test(nccl_communicator "NcclCommunicator.*")
t5scale_gpu_test(cuda_layers "CudaLayers.*")
t5scale_gpu_test(bf16_training "CudaTraining.Bf16*")
t5scale_gpu_test(fused_adamw "CudaTraining.FusedAdamW*")
t5scale_gpu_test(nvml_energy "GpuTelemetry.Nvml*")
t5scale_gpu_test(run_file_peak_memory "GpuTelemetry.TrainingJob*")

# The watchdog ends the process: the probe must fail within a minute with its message.
add_test(NAME gpu.nccl_watchdog_aborts_a_stalled_collective
         COMMAND ${T5SCALE_UNLESS_SKIPPED} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/expect_job_failure.sh 60
                 "ncclAllReduce(sum) timed out after 1 s: a peer rank has stalled or died [probe group, rank 0 of 1"
                 ${T5SCALE_GPU_PROBE} --gtest_also_run_disabled_tests --gtest_filter=NcclWatchdogProbe.*)
# t5scale-train on the GPU, its run file read with h5py: MFU, energy and memory filled in.
add_test(NAME gpu.train_program
         COMMAND ${T5SCALE_UNLESS_SKIPPED} ${T5SCALE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_train_on_gpu.py
                 --bin ${PROJECT_BINARY_DIR}/bin --work ${CMAKE_CURRENT_BINARY_DIR}/gpu_train_program)
set_tests_properties(gpu.nccl_watchdog_aborts_a_stalled_collective gpu.train_program PROPERTIES
                     LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE ${T5SCALE_GPU_SKIP} ENVIRONMENT "${T5SCALE_MPI_ENV}")
