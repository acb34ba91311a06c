# Included by ctest (TEST_INCLUDE_FILES, tests/CMakeLists.txt) before it starts any test: the Open MPI settings of
# this one machine, in ctest's own environment, so that every test's processes inherit them. Every test process
# that links MPI starts Open MPI, and most start alone (a singleton, no mpirun): Open MPI's defaults then fork an
# orted daemon for each and try the fabrics' transports (UCX, OFI, PSM) that a machine without a network fabric
# does not have. Measured here on `t5scale-train --help` (perf stat, 3 runs each): 0.65 s and 450 ms of CPU as
# Open MPI starts by default, 0.40 s and 385 ms with these; the suite starts about 400 such processes.
# - no orted for a singleton: t5scale never spawns processes through MPI;
# - the ob1 messaging layer over the transports the tests give (btl self,vader; tcp for the Slurm clusters'
#   nodes), never UCX or a matching transport: users' clusters keep Open MPI's own choice (UCX on InfiniBand).
# A variable the caller has set is kept.
foreach(setting "OMPI_MCA_ess_singleton_isolated=1" "OMPI_MCA_pml=ob1" "OMPI_MCA_mtl=^ofi,psm,psm2")
  string(REPLACE "=" ";" name_value "${setting}")
  list(GET name_value 0 name)
  list(GET name_value 1 value)
  if(NOT DEFINED ENV{${name}})
    set(ENV{${name}} "${value}")
  endif()
endforeach()
