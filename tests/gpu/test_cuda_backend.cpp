// The CUDA backend on any machine (dist/cuda_backend.h): a program maps none of LibTorch's CUDA side until it
// loads the backend, and loading it brings that side in (CUDA kernels in the dispatcher, the runtime answering).
// Run alone (ctest's unit.cuda_backend_loads): the backend is loaded once per process, at the first call.
#include <gtest/gtest.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "dist/cuda_backend.h"

namespace t5scale {
namespace {

// Whether this process has mapped a file whose name contains `name`.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(name) != std::string::npos;
}

TEST(CudaBackend, LoadsLibTorchsCudaSideOnlyWhenLoaded) {
  EXPECT_FALSE(mapped("libtorch_cuda.so")) << "a program on the CPU maps LibTorch's CUDA side at start";
  EXPECT_FALSE(mapped("libnccl.so")) << "a program on the CPU maps NCCL at start";
  const auto add = c10::Dispatcher::singleton().findSchema({"aten::add", "Tensor"});
  ASSERT_TRUE(add.has_value());
  EXPECT_FALSE(add->hasKernelForDispatchKey(c10::DispatchKey::CUDA));

  setenv("T5SCALE_CUDA_BACKEND", "load", 1);  // here, where there may be no NVIDIA driver
  std::string why_not;
  const CudaBackend* backend = cuda_backend(&why_not);
  ASSERT_NE(backend, nullptr) << why_not;
  EXPECT_TRUE(mapped("libt5scale_cuda.so"));
  EXPECT_TRUE(mapped("libtorch_cuda.so"));
  EXPECT_TRUE(mapped("libnccl.so"));
  EXPECT_TRUE(add->hasKernelForDispatchKey(c10::DispatchKey::CUDA)) << "LibTorch's CUDA kernels did not register";
  EXPECT_FALSE(backend->nccl_version().empty());
  EXPECT_FALSE(backend->runtime_version().empty());
  // The backend's answer is LibTorch's, now that its CUDA hooks are in; without a GPU it says why.
  const bool usable = cuda_usable(&why_not);
  EXPECT_EQ(usable, torch::cuda::is_available()) << why_not;
  EXPECT_EQ(usable, why_not.empty()) << why_not;
  EXPECT_EQ(cuda_backend(), backend) << "loaded once per process";
}

}  // namespace
}  // namespace t5scale
