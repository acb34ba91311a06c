// Data-parallel gradient reduction. Every parameter's gradient is accumulated in fp32 ("main gradients", whatever
// the compute dtype) in flat buckets of about bucket_bytes; a hook on each parameter's gradient accumulator adds the
// fresh gradient into its bucket and releases it. On the last micro-batch of an accumulation, a bucket whose
// parameters are all ready is reduced over the DP group at once, while backward still runs: all-reduced, or with
// ZeRO-1 reduce-scattered so that each DP rank keeps the summed gradient of its shard. finish() launches what is
// left and waits for all of it before the optimizer step.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "model/parameter_layout.h"

namespace t5scale {

struct ParameterSlot {
  std::string name;
  torch::Tensor param;     // the model's parameter (this TP rank's shard), any dtype
  ParameterLayout layout;  // full shape and split dimension over TP
  bool weight_decay = true;
  size_t bucket = 0;
  int64_t offset = 0;  // element offset inside the bucket
  int64_t numel = 0;
};

struct GradientBucket {
  torch::Tensor main_grad;   // (padded) fp32 (fp64 for fp64 models); numel divisible by the DP size
  torch::Tensor shard_grad;  // ZeRO-1: this DP rank's chunk of the summed main_grad, (padded / dp)
  std::vector<size_t> slots;
  size_t pending = 0;  // parameters whose gradient has not arrived yet in this backward
  std::unique_ptr<CollectiveWork> work;
};

class GradientBuckets {
 public:
  GradientBuckets(std::vector<ParameterSlot> slots, CommunicatorPtr dp, int64_t bucket_bytes, bool zero1);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  void zero();                                  // main gradients to zero, before the first micro-batch
  void begin_micro_batch(bool last_micro_batch);  // reductions launch only during the last one
  void finish();                                // launch what is left, wait for every reduction

  // The reduced gradient this rank holds for each element it owns: main_grad (all-reduced) without ZeRO,
  // shard_grad with it. The optimizer's step unscales and clips it in place.
  torch::Tensor owned_grad(size_t bucket) const { return zero1_ ? buckets_[bucket].shard_grad : buckets_[bucket].main_grad; }
  // [begin, end) of the bucket's elements this DP rank owns.
  std::pair<int64_t, int64_t> owned_range(size_t bucket) const;
  // The full reduced fp32 gradient of one slot (gathered over DP under ZeRO-1): for tests and checkpoints.
  torch::Tensor gathered_grad(size_t slot);

  const std::vector<ParameterSlot>& slots() const { return slots_; }
  std::vector<GradientBucket>& buckets() { return buckets_; }
  bool zero1() const { return zero1_; }
  Communicator& dp() { return *dp_; }

 private:
  void on_gradient(size_t slot);
  void launch(size_t bucket);

  std::vector<ParameterSlot> slots_;
  std::vector<GradientBucket> buckets_;
  CommunicatorPtr dp_;
  bool zero1_;
  bool last_micro_batch_ = true;
  std::vector<bool> arrived_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive so the hooks stay attached
  std::vector<uintptr_t> hook_keys_;
};

}  // namespace t5scale
