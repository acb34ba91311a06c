// The CUDA backend on any machine (dist/cuda_backend.h): a program maps none of LibTorch's CUDA side until it
// loads the backend, and loading it brings that side in (CUDA kernels in the dispatcher, the runtime answering).
// Run alone (ctest's unit.cuda_backend_loads): the backend is loaded once per process, at the first call.
#include <gtest/gtest.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/program_folder.h"
#include "dist/build_id.h"
#include "dist/cuda_backend.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

// Whether this process has mapped a file whose name contains `name`.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(name) != std::string::npos;
}

// The library and the program come from one build, and a library of another build is refused before dlopen, with
// both builds named and what to do; so is one without an id (an older t5scale's). Nothing is loaded here.
TEST(CudaBackend, ALibraryOfAnotherBuildIsRefusedBeforeItLoads) {
  // Where the loader looks: lib/ beside the program's folder (the build tree's tests/), or one higher (a bundle's
  // tests/bin/).
  std::string library;
  for (const char* up : {"..", "../.."}) {
    const auto candidate = (program_folder() / up / "lib" / "libt5scale_cuda.so").lexically_normal();
    if (std::filesystem::exists(candidate)) library = candidate.string();
    if (!library.empty()) break;
  }
  ASSERT_FALSE(library.empty()) << "no lib/libt5scale_cuda.so above " << program_folder();
  EXPECT_EQ(build_id_in_file(library), build_id());
  EXPECT_EQ(backend_build_mismatch(library), "");
  EXPECT_NE(std::string(build_id()).find('/'), std::string::npos) << build_id();  // "<revision>/<token>"

  testing::TempDir dir;
  std::ifstream in(library, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t id_at = bytes.find("T5SCALE-BUILD-ID:") + std::string("T5SCALE-BUILD-ID:").size();
  bytes[id_at] = bytes[id_at] == 'x' ? 'y' : 'x';  // another build's revision
  const std::string other = dir / "libt5scale_cuda.so";
  std::ofstream(other, std::ios::binary) << bytes;
  const std::string refused = backend_build_mismatch(other);
  EXPECT_NE(refused.find("comes from another build than this program"), std::string::npos) << refused;
  EXPECT_NE(refused.find(build_id_in_file(other)), std::string::npos) << refused;
  EXPECT_NE(refused.find(std::string("the program's ") + build_id()), std::string::npos) << refused;
  EXPECT_NE(refused.find("rebuild t5scale"), std::string::npos) << refused;
  EXPECT_NE(refused.find("reinstall the bundle"), std::string::npos) << refused;

  const std::string older = dir / "older.so";
  std::ofstream(older, std::ios::binary) << "an ELF file of a t5scale without build ids";
  EXPECT_NE(backend_build_mismatch(older).find("carries no id"), std::string::npos);
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
