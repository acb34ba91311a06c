// Live and peak bytes of every CPU tensor of this process: a wrapper around c10's CPU allocator that counts what
// each allocation asks for and gives back. On the CPU a training step holds the same tensors the GPU would (the
// weights, the gradient buckets, the optimizer state, what autograd saves for backward), so its peak is the
// measurement the memory planner is checked against (t5scale-bench's measured_peak_bytes, unit.memory_model).
//
//   CpuMemoryTracker::install();           // before the tensors to be counted are made
//   CpuMemoryTracker::start_window();      // a window's peak starts at what is live now
//   ... a step ...
//   int64_t peak = CpuMemoryTracker::window_peak_bytes();
//
// Counted: the bytes each allocation asked for (not the allocator's rounding, the pages it touched or the tracker's
// own 64-byte header per allocation), of tensors made after install(); tensors made before it are neither counted nor
// uncounted when freed. The cost is two atomic additions per allocation and free: t5scale-bench times its CPU steps
// with it installed.
#pragma once

#include <cstdint>

namespace t5scale {

class CpuMemoryTracker {
 public:
  // Makes the tracker LibTorch's CPU allocator (once; later calls do nothing). Returns false when LibTorch's CPU
  // allocator is one of a higher priority that cannot be replaced.
  static bool install();
  static bool installed();
  static int64_t live_bytes();
  static int64_t peak_bytes();  // since install()
  // A second peak, over a window the caller opens (the phases of a training step), apart from peak_bytes().
  static void start_window();
  static int64_t window_peak_bytes();
  // Whether LibTorch's CPU GEMM on bf16 operands makes an fp32 buffer of its product's size (MemoryInputs::
  // half_products_through_fp32): a product of the LM head's weight-gradient layout measured in a window of its own.
  // Needs the tracker installed (false otherwise); opens a window, as start_window() does.
  static bool half_products_through_fp32();
};

}  // namespace t5scale
