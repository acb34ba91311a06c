// The CUDA backend (dist/cuda_backend.h) as libt5scale_cuda.so builds it: LibTorch's CUDA API, the CUDA runtime
// and NCCL.
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <torch/cuda.h>

#include <cstdio>
#include <vector>

#include "dist/cuda_backend.h"
#include "dist/cudnn_attention.h"
#include "dist/nccl_communicator.h"

namespace t5scale {

namespace {

c10::DeviceIndex index_of(int device) { return static_cast<c10::DeviceIndex>(device); }

// The caching allocator's per-device state exists only after CUDA's lazy initialisation (the first CUDA tensor
// does it); before that its statistics calls refuse the device ("Invalid device argument").
void initialise_cuda() { at::globalContext().lazyInitDevice(at::kCUDA); }

class EventStreamClock final : public CudaStreamClock {
 public:
  explicit EventStreamClock(int device) : device_(index_of(device)) {}
  void mark() override {
    events_.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));  // with timing
    events_.back()->record(c10::cuda::getCurrentCUDAStream(device_));
  }
  double seconds_between(size_t from_mark, size_t to_mark) const override {
    return events_.at(from_mark)->elapsed_time(*events_.at(to_mark)) / 1000.0;  // ms
  }

 private:
  c10::DeviceIndex device_;
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events_;
};

class SideStreamHostCopies final : public CudaHostCopies {
 public:
  SideStreamHostCopies(int device, size_t copies)
      : device_(index_of(device)),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_)),
        done_(copies),
        outstanding_(copies, false) {}
  // Every copy has finished before its target or source can go away.
  ~SideStreamHostCopies() override { stream_.synchronize(); }

  bool start(size_t copy, const torch::Tensor& source, const torch::Tensor& target, CollectiveWork* after) override {
    T5S_CHECK(source.is_cuda() && source.get_device() == device_ && target.is_pinned() && source.is_contiguous() &&
                  target.is_contiguous() && source.numel() == target.numel() &&
                  source.scalar_type() == target.scalar_type(),
              "a host copy takes a contiguous tensor on CUDA device ", static_cast<int>(device_),
              " into pinned host memory of its size and dtype; got ", source.device(), " ", source.sizes(), " into ",
              target.device(), target.is_pinned() ? " pinned " : " pageable ", target.sizes());
    const c10::cuda::CUDAGuard device_guard(device_);
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_);
    {
      // The side stream current while the collective orders it, so that the compute stream keeps no wait of it.
      const c10::cuda::CUDAStreamGuard on_side(stream_);
      if (after != nullptr && !after->order_current_stream()) return false;
    }
    // The source's earlier writers on the compute stream (the gradients accumulated into the bucket; for a
    // collective that has finished, or a one-rank group's, the compute stream is all there is).
    at::cuda::CUDAEvent produced;
    produced.record(compute);
    produced.block(stream_);
    // The allocator must not hand the source's memory out again before the copy has read it.
    c10::cuda::CUDACachingAllocator::recordStream(source.storage().data_ptr(), stream_);
    {
      const c10::cuda::CUDAStreamGuard on_side(stream_);
      target.copy_(source, /*non_blocking=*/true);
    }
    done_.at(copy).record(stream_);
    outstanding_.at(copy) = true;
    return true;
  }

  void wait(size_t copy) override {
    if (!outstanding_.at(copy)) return;
    done_[copy].synchronize();
    outstanding_[copy] = false;
  }

 private:
  c10::DeviceIndex device_;
  c10::cuda::CUDAStream stream_;
  std::vector<at::cuda::CUDAEvent> done_;  // per copy number, recorded after its latest copy
  std::vector<bool> outstanding_;
};

class LibTorchCudaBackend final : public CudaBackend {
 public:
  std::string unusable_reason() const override {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) return msg("cudaGetDeviceCount: ", cudaGetErrorString(status));
    if (count == 0) return "CUDA sees no device";
    if (!torch::cuda::is_available()) return "LibTorch reports CUDA unavailable";
    return "";
  }

  void set_device(int device) const override { c10::cuda::set_device(index_of(device)); }

  CudaDeviceFacts device_facts(int device) const override {
    const cudaDeviceProp* properties = at::cuda::getDeviceProperties(index_of(device));
    CudaDeviceFacts facts;
    facts.name = properties->name;
    facts.memory_bytes = static_cast<int64_t>(properties->totalGlobalMem);
    facts.compute_capability_major = properties->major;
    char bus_id[32];
    std::snprintf(bus_id, sizeof(bus_id), "%08X:%02X:%02X.0", properties->pciDomainID, properties->pciBusID,
                  properties->pciDeviceID);
    facts.nvml_pci_bus_id = bus_id;
    return facts;
  }

  std::string device_bus_id(int device) const override {
    char bus_id[32] = {};
    const cudaError_t status = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device);
    T5S_CHECK(status == cudaSuccess, "cudaDeviceGetPCIBusId for CUDA device ", device, ": ",
              cudaGetErrorString(status));
    return bus_id;
  }

  CudaAllocatorStats allocator_stats(int device) const override {
    initialise_cuda();
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device));
    const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    return CudaAllocatorStats{stats.allocated_bytes[aggregate].current, stats.reserved_bytes[aggregate].current,
                              stats.allocated_bytes[aggregate].peak, stats.reserved_bytes[aggregate].peak};
  }

  void reset_peak_allocator_stats(int device) const override {
    initialise_cuda();
    c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device));
  }

  std::string runtime_version() const override {
    int runtime = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) return "";
    return msg(runtime / 1000, ".", runtime % 1000 / 10);
  }

  std::string nccl_version() const override {
    int version = 0;
    return ncclGetVersion(&version) == ncclSuccess ? std::to_string(version) : "";
  }

  CommunicatorPtr nccl_communicator(MPI_Comm group, std::string name, int device, double timeout_s) const override {
    return std::make_shared<NcclCommunicator>(group, std::move(name), device, timeout_s);
  }

  std::unique_ptr<CudaStreamClock> stream_clock(int device) const override {
    return std::make_unique<EventStreamClock>(device);
  }

  std::unique_ptr<CudaHostCopies> host_copies(int device, size_t copies) const override {
    return std::make_unique<SideStreamHostCopies>(device, copies);
  }

  std::string fused_attention_unavailable() const override { return cudnn_attention_unavailable(); }

  FusedAttentionForwardResult fused_attention_forward(const FusedAttentionInputs& in,
                                                      at::Generator generator, bool with_backward,
                                                      bool bias_gradient) const override {
    return cudnn_attention_forward(in, std::move(generator), with_backward, bias_gradient);
  }

  FusedAttentionGradients fused_attention_backward(const FusedAttentionInputs& in,
                                                   const FusedAttentionForwardResult& forward,
                                                   const torch::Tensor& grad_output,
                                                   bool bias_gradient) const override {
    return cudnn_attention_backward(in, forward, grad_output, bias_gradient);
  }
};

}  // namespace

}  // namespace t5scale

// What the loader looks up (dist/cuda_backend.cpp).
extern "C" __attribute__((visibility("default"))) const t5scale::CudaBackend* t5scale_cuda_backend() {
  static const t5scale::LibTorchCudaBackend backend;
  return &backend;
}
