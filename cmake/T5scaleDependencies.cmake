# Finds t5scale's dependencies. Every location can be given explicitly, as on a cluster with modules:
#   Torch_DIR or CMAKE_PREFIX_PATH   LibTorch (a libtorch download or a torch wheel's share/cmake/Torch)
#   T5SCALE_PYTHON                   a python whose torch provides LibTorch (used when Torch_DIR is unset)
#   T5SCALE_NCCL_ROOT                NCCL (include/nccl.h, lib/libnccl.so*); default: the torch wheel's nvidia-nccl
#   T5SCALE_CUDNN_ROOT               cuDNN's headers (include/cudnn.h); default: the torch wheel's nvidia-cudnn
#   T5SCALE_CUDNN_FRONTEND_ROOT      cuDNN's header-only frontend (include/cudnn_frontend.h); default: the folder
#                                    scripts/setup.sh installed it in (~/.cache/t5scale/cudnn-frontend-path)
#   MPI_HOME / MPI_CXX_COMPILER      MPI (FindMPI)
#   nlohmann_json_DIR                nlohmann/json (header only)
#   HDF5_ROOT                        HDF5 (C library; serial is enough: rank 0 writes the run file)
#   yaml-cpp_DIR                     yaml-cpp
#   PKG_CONFIG_PATH                  SentencePiece (sentencepiece.pc)

# ---- LibTorch ----
if(NOT Torch_DIR)
  if(NOT T5SCALE_PYTHON)
    find_program(T5SCALE_PYTHON NAMES python3 python REQUIRED)
  endif()
  execute_process(
    COMMAND ${T5SCALE_PYTHON} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _torch_rc)
  if(NOT _torch_rc EQUAL 0)
    message(FATAL_ERROR "t5scale: '${T5SCALE_PYTHON}' cannot import torch; set T5SCALE_PYTHON to the venv "
                        "python that scripts/setup.sh made, or Torch_DIR to a LibTorch's share/cmake/Torch")
  endif()
  list(APPEND CMAKE_PREFIX_PATH ${_torch_prefix})
endif()
find_package(Torch REQUIRED)
# Torch's own flags carry the C++ ABI define; the library path is needed for the rpath of our binaries.
set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} ${TORCH_CXX_FLAGS}")
get_filename_component(T5SCALE_TORCH_LIB_DIR "${TORCH_LIBRARY}" DIRECTORY)

# The torch wheel's libtorch.so exports a statically linked copy of std::filesystem that is not ABI-compatible with
# the system's (its remove_all jumps to a null pointer). Libraries are searched in DT_NEEDED order, so
# libstdc++ must be needed before libtorch for our own std::filesystem calls to reach the system's C++ runtime.
set(T5SCALE_CXX_RUNTIME_FIRST -Wl,--push-state,--no-as-needed stdc++ -Wl,--pop-state)

# The CUDA path (streams, NCCL) is compiled whenever this LibTorch was built with CUDA, GPU or not.
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(T5SCALE_WITH_CUDA ON)
else()
  set(T5SCALE_WITH_CUDA OFF)
endif()
message(STATUS "t5scale: LibTorch ${Torch_VERSION} at ${T5SCALE_TORCH_LIB_DIR}, CUDA path: ${T5SCALE_WITH_CUDA}")

# ---- NCCL: the one that ships with the torch wheel, so one process never loads two ----
if(T5SCALE_WITH_CUDA)
  if(NOT T5SCALE_NCCL_ROOT)
    # wheel layout: site-packages/torch/lib -> site-packages/nvidia/nccl
    get_filename_component(_site_packages "${T5SCALE_TORCH_LIB_DIR}/../.." ABSOLUTE)
    set(T5SCALE_NCCL_ROOT "${_site_packages}/nvidia/nccl")
  endif()
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${T5SCALE_NCCL_ROOT}/include NO_DEFAULT_PATH)
  # The wheel has only libnccl.so.2 (no unversioned .so), so name the file itself.
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${T5SCALE_NCCL_ROOT}/lib NO_DEFAULT_PATH)
  if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    message(FATAL_ERROR "t5scale: LibTorch has CUDA but NCCL was not found under T5SCALE_NCCL_ROOT="
                        "'${T5SCALE_NCCL_ROOT}' (want include/nccl.h and lib/libnccl.so*)")
  endif()
  message(STATUS "t5scale: NCCL ${NCCL_LIBRARY}")
endif()

# ---- cuDNN's fused attention (dist/cudnn_attention.cpp): cuDNN 9's headers from the torch wheel (the library itself is
# the one LibTorch loads, found at run time) and the header-only cuDNN frontend that scripts/setup.sh installs. Without
# them the CUDA backend is built without the fused attention, and a run that asks for it falls back and says why.
if(T5SCALE_WITH_CUDA)
  if(NOT T5SCALE_CUDNN_ROOT)
    set(T5SCALE_CUDNN_ROOT "${_site_packages}/nvidia/cudnn")
  endif()
  if(NOT T5SCALE_CUDNN_FRONTEND_ROOT)
    set(_t5scale_cache "$ENV{T5SCALE_CACHE}")
    if(NOT _t5scale_cache)
      set(_t5scale_cache "$ENV{HOME}/.cache/t5scale")
    endif()
    if(EXISTS "${_t5scale_cache}/cudnn-frontend-path")
      file(STRINGS "${_t5scale_cache}/cudnn-frontend-path" T5SCALE_CUDNN_FRONTEND_ROOT LIMIT_COUNT 1)
    endif()
  endif()
  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${T5SCALE_CUDNN_ROOT}/include NO_DEFAULT_PATH)
  find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${T5SCALE_CUDNN_FRONTEND_ROOT}/include NO_DEFAULT_PATH)
  if(CUDNN_INCLUDE_DIR AND CUDNN_FRONTEND_INCLUDE_DIR)
    set(T5SCALE_WITH_CUDNN_ATTENTION ON)
    message(STATUS "t5scale: cuDNN fused attention: cuDNN ${CUDNN_INCLUDE_DIR}, frontend ${CUDNN_FRONTEND_INCLUDE_DIR}")
  else()
    set(T5SCALE_WITH_CUDNN_ATTENTION OFF)
    message(STATUS "t5scale: cuDNN fused attention not built (cudnn.h: '${CUDNN_INCLUDE_DIR}', cudnn_frontend.h: "
                   "'${CUDNN_FRONTEND_INCLUDE_DIR}'; scripts/setup.sh installs the frontend)")
  endif()
endif()

# ---- MPI, JSON ----
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Threads REQUIRED)

# ---- HDF5, YAML, SentencePiece: the parts without LibTorch (config, data, eval, telemetry, plan) ----
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(yaml-cpp REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SentencePiece REQUIRED IMPORTED_TARGET sentencepiece)
message(STATUS "t5scale: HDF5 ${HDF5_VERSION}, yaml-cpp ${yaml-cpp_VERSION}, SentencePiece ${SentencePiece_VERSION}")
