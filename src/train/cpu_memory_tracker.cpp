#include "train/cpu_memory_tracker.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>

#include <atomic>
#include <mutex>

namespace t5scale {
namespace {

std::atomic<int64_t> live{0};
std::atomic<int64_t> peak{0};
std::atomic<int64_t> window_peak{0};

void raise_to(std::atomic<int64_t>& maximum, int64_t now) {
  int64_t seen = maximum.load();
  while (now > seen && !maximum.compare_exchange_weak(seen, now)) {
  }
}

void add(int64_t bytes) {
  const int64_t now = live.fetch_add(bytes) + bytes;
  raise_to(peak, now);
  raise_to(window_peak, now);
}

// Each counted allocation carries its size in a header just before the data: the inner allocator's block is the header
// plus the data, and the data stays its own context (as LibTorch's default CPU allocator makes them), so that code
// which frees through raw_deleter() works unchanged. No lock and no table: counting costs two atomic additions.
// The header is as long as the inner allocator's alignment, so the data keeps it.
constexpr size_t kHeaderBytes = c10::gAlignment;
c10::DeleterFnPtr inner_deleter = nullptr;

void free_counted(void* data) {
  if (data == nullptr) return;
  void* block = static_cast<char*>(data) - kHeaderBytes;
  live.fetch_sub(*static_cast<const int64_t*>(block));
  inner_deleter(block);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return inner_->allocate(0);  // nothing to count
    c10::DataPtr inner = inner_->allocate(n + kHeaderBytes);
    void* block = inner.get();
    const c10::Device device = inner.device();
    (void)inner.release_context();  // freed by free_counted through the inner allocator's raw deleter
    *static_cast<int64_t*>(block) = static_cast<int64_t>(n);
    add(static_cast<int64_t>(n));
    void* data = static_cast<char*>(block) + kHeaderBytes;
    return c10::DataPtr(data, data, &free_counted, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_counted; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

 private:
  c10::Allocator* inner_;
};

std::atomic<bool> is_installed{false};

}  // namespace

bool CpuMemoryTracker::install() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* inner = c10::GetCPUAllocator();
    // Counting needs allocations whose data is their context, freed by one raw deleter (LibTorch's default).
    inner_deleter = inner->raw_deleter();
    if (inner_deleter == nullptr) return;
    static TrackingAllocator tracking(inner);
    // The highest priority: an allocator set later with a lower one (none in LibTorch itself) does not replace it.
    c10::SetCPUAllocator(&tracking, /*priority=*/255);
    is_installed = c10::GetCPUAllocator() == &tracking;
  });
  return is_installed;
}

bool CpuMemoryTracker::installed() { return is_installed; }
int64_t CpuMemoryTracker::live_bytes() { return live.load(); }
int64_t CpuMemoryTracker::peak_bytes() { return peak.load(); }
void CpuMemoryTracker::start_window() { window_peak.store(live.load()); }
int64_t CpuMemoryTracker::window_peak_bytes() { return window_peak.load(); }

bool CpuMemoryTracker::half_products_through_fp32() {
  if (!installed()) return false;
  // The LM head's weight gradient: the logits' gradient transposed, (V, tokens), times the tokens' states,
  // (tokens, d_model), here (1024, 64) x (64, 512): a 1 MiB bf16 product and, where the buffer is made, 2 MiB in fp32.
  const auto bf16 = c10::TensorOptions().dtype(c10::kBFloat16);
  const at::Tensor grad_output = at::ones({64, 1024}, bf16);
  const at::Tensor input = at::ones({64, 512}, bf16);
  const int64_t product_bytes = 1024 * 512 * 2;
  start_window();
  const int64_t before = live_bytes();
  const at::Tensor product = at::mm(grad_output.t(), input);
  return window_peak_bytes() - before >= product_bytes + 2 * product_bytes;  // the bf16 result and its fp32 buffer
}

}  // namespace t5scale
