// A process's CUDA side, in a library of its own that is loaded only where a GPU can be: libt5scale_cuda.so, built
// into lib/ beside the programs' bin/ (and the test programs' tests/). It holds every call into the CUDA runtime,
// NCCL and LibTorch's CUDA API; loading it maps LibTorch's CUDA libraries (libtorch_cuda, cuBLAS, cuDNN, NCCL),
// whose kernels, caching allocator and hooks register as they load, so that torch::cuda:: and CUDA tensors then
// work as in a program linked against them. A process without the NVIDIA driver never maps them, nor pays their
// start-up.
//
// The library is built from dist/cuda_backend_library.cpp and dist/nccl_communicator.cpp. It resolves the t5scale
// functions it calls from the program that loads it (the programs export them: exported_symbols.list), so there is
// one copy of each, its error types and the job's abort path included. So the library and the program must come
// from one build: the loader compares their build ids (dist/build_id.h) before it loads the library.
//
// T5SCALE_CUDA_BACKEND=load loads it even where the driver is missing: a machine without a GPU then checks that
// the library and LibTorch's CUDA side load into each program (the tests do).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "dist/fused_attention.h"

namespace t5scale {

// What a CUDA device says about itself.
struct CudaDeviceFacts {
  std::string name;                // "NVIDIA H100 80GB HBM3"
  int64_t memory_bytes = 0;        // total
  int compute_capability_major = 0;
  std::string nvml_pci_bus_id;     // "00000000:1B:00.0", as NVML names the device
};

// The caching allocator's counters of a device, in bytes.
struct CudaAllocatorStats {
  int64_t allocated_bytes = 0, reserved_bytes = 0;            // now
  int64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;  // since the last reset
};

// Timing events on a device's current (compute) stream: mark() records one; seconds_between() reads the time
// between two marks once the work up to the later one has finished (after the step's host synchronisation).
class CudaStreamClock {
 public:
  virtual ~CudaStreamClock() = default;
  virtual void mark() = 0;
  virtual double seconds_between(size_t from_mark, size_t to_mark) const = 0;
};

// Device-to-host copies on a stream of their own, so that they overlap the compute stream's work: the offloaded
// optimizer's reduced gradient buckets, each copied as soon as it is reduced while backward goes on. Copies are
// numbered by the caller (a bucket); each number has the event of its latest copy, which the host waits on before
// it reads the target.
class CudaHostCopies {
 public:
  virtual ~CudaHostCopies() = default;
  // Copies `source` (on the device) into `target` (pinned host memory of the same size and dtype) once the work
  // queued so far on the current stream has finished, and `after` too where it is given (the collective that writes
  // the source, ordered by CollectiveWork::order_current_stream()), without blocking the host. False, with nothing
  // started, where `after` cannot order a stream (its result is there only after its wait()).
  virtual bool start(size_t copy, const torch::Tensor& source, const torch::Tensor& target,
                     CollectiveWork* after) = 0;
  // Blocks the host until the latest copy numbered `copy` has landed (at once when none is outstanding).
  virtual void wait(size_t copy) = 0;
};

class CudaBackend {
 public:
  virtual ~CudaBackend() = default;
  // Why LibTorch cannot use a GPU in this process ("" when it can): the runtime's error, or no device.
  virtual std::string unusable_reason() const = 0;
  // Makes `device` the calling thread's current device.
  virtual void set_device(int device) const = 0;
  virtual CudaDeviceFacts device_facts(int device) const = 0;
  // The device's PCI bus id as the runtime writes it, read without creating a context on the device.
  virtual std::string device_bus_id(int device) const = 0;
  virtual CudaAllocatorStats allocator_stats(int device) const = 0;
  virtual void reset_peak_allocator_stats(int device) const = 0;
  virtual std::string runtime_version() const = 0;  // the CUDA runtime's, "13.0"
  virtual std::string nccl_version() const = 0;     // ncclGetVersion's number, "22805"; "" when NCCL cannot say
  // The NCCL communicator of `group` (taken over and freed) on `device` (dist/nccl_communicator.h).
  virtual CommunicatorPtr nccl_communicator(MPI_Comm group, std::string name, int device, double timeout_s) const = 0;
  virtual std::unique_ptr<CudaStreamClock> stream_clock(int device) const = 0;
  // Device-to-host copies of `device` on a side stream, numbered 0 .. copies - 1.
  virtual std::unique_ptr<CudaHostCopies> host_copies(int device, size_t copies) const = 0;
  // cuDNN's fused attention (dist/fused_attention.h): "" when this backend can run it, else why not (a build without
  // cuDNN's frontend, a cuDNN too old).
  virtual std::string fused_attention_unavailable() const = 0;
  // Forward; with dropout its seed and offset are taken from `generator` (a CUDA generator: the TP stream), which is
  // advanced past them. with_backward: the backward's graph (with the bias's gradient if bias_gradient) is built
  // too, before anything runs. A graph cuDNN refuses is an Error with cuDNN's message, thrown before any work.
  virtual FusedAttentionForwardResult fused_attention_forward(const FusedAttentionInputs& in, at::Generator generator,
                                                              bool with_backward, bool bias_gradient) const = 0;
  // Backward of that forward (the same inputs; its result; grad_output (B, Sq, H, D) as its output); the bias's
  // gradient only when bias_gradient.
  virtual FusedAttentionGradients fused_attention_backward(const FusedAttentionInputs& in,
                                                           const FusedAttentionForwardResult& forward,
                                                           const torch::Tensor& grad_output,
                                                           bool bias_gradient) const = 0;
};

// This process's CUDA backend, loaded at the first call: nullptr where it cannot be, with the reason in *why_not
// (no NVIDIA driver, or a build without CUDA). A library that is there but does not load is an Error naming the
// file and the loader's message.
const CudaBackend* cuda_backend(std::string* why_not = nullptr);

// The backend of a process that drives a GPU: an Error naming `what` needed it where there is none.
const CudaBackend& required_cuda_backend(const char* what);

// Whether LibTorch can use a GPU in this process (loading the backend when the driver is there), and if not, why.
bool cuda_usable(std::string* why_not = nullptr);

}  // namespace t5scale
