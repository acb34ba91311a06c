# Telemetry without LibTorch (t5scale_base): the HDF5 run file, energy meters (NVML by dlopen, RAPL), probes
# (host memory, step timer, time) and the cost, carbon and peak-FLOPs figures.
target_sources(t5scale_base PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/energy_meter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nvml.cpp
  ${CMAKE_CURRENT_LIST_DIR}/probes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cost.cpp
)
