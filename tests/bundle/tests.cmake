# The relocatable bundle (scripts/bundle.sh): made with the test programs, unpacked elsewhere and run with a
# cleared environment and the build machine's clone, build tree, Open MPI and CUDA folders hidden: t5scale-train on
# 1 rank and on 2 under the bundle's mpirun, the loaded files checked, the bundle's unit and parity tests on the
# reference files the Python fixtures had made in the build tree by then (ctest runs it after them; the others are
# listed as not run). RUN_SERIAL: it copies those references, which fixtures may be rewriting under ctest -j.
add_test(NAME bundle.relocated
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/check_relocated_bundle.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}
                 ${T5SCALE_PYTHON})
set_tests_properties(bundle.relocated PROPERTIES LABELS bundle TIMEOUT 300 RUN_SERIAL TRUE)
