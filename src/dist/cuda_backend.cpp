#include "dist/cuda_backend.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/program_folder.h"
#include "dist/build_id.h"

namespace t5scale {

namespace {

namespace fs = std::filesystem;

constexpr const char* kLibraryName = "libt5scale_cuda.so";
constexpr const char* kFactoryName = "t5scale_cuda_backend";  // extern "C" const CudaBackend* (), in the library

struct LoadedBackend {
  const CudaBackend* backend = nullptr;
  std::string why_not;
};

// Where the library is looked for: lib/ beside the program's folder (bin/, or the build tree's tests/), or one
// folder higher (a bundle's tests/bin/).
std::vector<fs::path> library_candidates() {
  const fs::path folder = program_folder();
  return {folder / ".." / "lib" / kLibraryName, folder / ".." / ".." / "lib" / kLibraryName};
}

LoadedBackend load_backend() {
#ifndef T5SCALE_CUDA_BACKEND_BUILT
  return {nullptr, "this build's LibTorch has no CUDA"};
#else
  const char* setting = std::getenv("T5SCALE_CUDA_BACKEND");
  const std::string mode = setting == nullptr ? "auto" : setting;
  T5S_CHECK(mode == "auto" || mode == "load", "T5SCALE_CUDA_BACKEND: '", mode, "' is not auto (load the CUDA "
            "backend where the NVIDIA driver is) or load (load it in any case)");
  if (mode == "auto") {
    // The driver's library is small; the CUDA runtime loads it anyway, so this handle is kept.
    if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) {
      return {nullptr, msg("the NVIDIA driver is not installed: ", dlerror())};
    }
  }
  std::vector<std::string> looked_in;
  for (const fs::path& candidate : library_candidates()) {
    std::error_code error;
    if (!fs::exists(candidate, error)) {
      looked_in.push_back(candidate.lexically_normal().string());
      continue;
    }
    const std::string path = fs::canonical(candidate, error).string();
    // Before dlopen: a library of another build fails there with an undefined symbol that says nothing of why.
    if (const std::string mismatch = backend_build_mismatch(path); !mismatch.empty()) throw Error(mismatch);
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) throw Error(msg("the CUDA backend ", path, " does not load: ", dlerror()));
    using Factory = const CudaBackend* (*)();
    const auto factory = reinterpret_cast<Factory>(dlsym(library, kFactoryName));
    if (factory == nullptr) throw Error(msg("the CUDA backend ", path, " has no ", kFactoryName, ": ", dlerror()));
    return {factory(), ""};
  }
  const std::string why = msg("t5scale's CUDA backend ", kLibraryName, " is missing (looked for ",
                              join(looked_in, " and "), "): reinstall t5scale");
  if (mode == "load") throw Error("T5SCALE_CUDA_BACKEND=load: " + why);
  return {nullptr, why};
#endif
}

}  // namespace

const CudaBackend* cuda_backend(std::string* why_not) {
  static const LoadedBackend loaded = load_backend();  // once per process, thread-safe
  if (why_not != nullptr) *why_not = loaded.why_not;
  return loaded.backend;
}

const CudaBackend& required_cuda_backend(const char* what) {
  std::string why_not;
  const CudaBackend* backend = cuda_backend(&why_not);
  T5S_CHECK(backend != nullptr, what, " needs CUDA, and this process has none: ", why_not);
  return *backend;
}

bool cuda_usable(std::string* why_not) {
  std::string reason;
  if (const CudaBackend* backend = cuda_backend(&reason)) reason = backend->unusable_reason();
  if (why_not != nullptr) *why_not = reason;
  return reason.empty();
}

}  // namespace t5scale
