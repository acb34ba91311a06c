# Tests of the data part: the distributed batch sampler (plain and under mpirun) and collation (LibTorch).
target_sources(t5scale_base_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_batch_sampler.cpp)
t5scale_base_gtest(unit.data_batch_sampler unit "BatchSampler.*")

# Run whole by the existing entries mpi.base_mpi_tests_ranks_{1,2,4}.
target_sources(t5scale_base_mpi_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/mpi/test_batch_sampler_ranks.cpp)

target_sources(t5scale_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_collate.cpp)
t5scale_gtest(unit.data_collate unit "Collate.*")

include(${CMAKE_CURRENT_LIST_DIR}/prep_tests.cmake OPTIONAL)
