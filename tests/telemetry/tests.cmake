# Telemetry: the run file (C++ checks, and h5py against the spec), its survival of SIGKILL and resume, the energy
# meters against a scripted fake NVML library and fake powercap folders, the probes and the cost figures.
target_sources(t5scale_base_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/test_run_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_energy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_probes.cpp
)

# A stand-in for libnvidia-ml.so.1; the test finds it by the path compiled into it.
add_library(t5scale_fake_nvml SHARED ${CMAKE_CURRENT_LIST_DIR}/fake_nvml.cpp)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/test_energy.cpp PROPERTIES
                            COMPILE_DEFINITIONS "T5SCALE_FAKE_NVML_PATH=\"$<TARGET_FILE:t5scale_fake_nvml>\"")

# Writes run files for the h5py checks; killed with SIGKILL by check_sigkill.py.
add_executable(t5scale_run_file_probe ${CMAKE_CURRENT_LIST_DIR}/run_file_probe.cpp)
target_link_libraries(t5scale_run_file_probe PRIVATE t5scale_base)
add_dependencies(t5scale_base_tests t5scale_fake_nvml t5scale_run_file_probe)

# Not a test: the cost of append_step and flush (run it by hand, see its header).
add_executable(t5scale-bench-run-file ${CMAKE_CURRENT_LIST_DIR}/bench_run_file.cpp)
target_link_libraries(t5scale-bench-run-file PRIVATE t5scale_base)

t5scale_base_gtest(unit.telemetry_run_file unit "RunFile.*")
t5scale_base_gtest(unit.telemetry_energy unit "NvmlMeter.*:PowerIntegrator.*:RaplMeter.*")
t5scale_base_gtest(unit.telemetry_probes unit "TelemetryProbes.*")

add_test(NAME unit.telemetry_run_file_h5py
         COMMAND ${T5SCALE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_run_file.py $<TARGET_FILE:t5scale_run_file_probe>
                 ${CMAKE_CURRENT_BINARY_DIR}/telemetry_run_file_h5py)
set_tests_properties(unit.telemetry_run_file_h5py PROPERTIES LABELS unit TIMEOUT 120)
add_test(NAME e2e.telemetry_run_file_sigkill
         COMMAND ${T5SCALE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_sigkill.py $<TARGET_FILE:t5scale_run_file_probe>
                 ${CMAKE_CURRENT_BINARY_DIR}/telemetry_run_file_sigkill)
set_tests_properties(e2e.telemetry_run_file_sigkill PROPERTIES LABELS e2e TIMEOUT 180)
