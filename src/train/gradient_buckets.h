// Data-parallel gradient reduction. Every parameter's gradient is accumulated in fp32 ("main gradients", whatever
// the compute dtype) in flat buckets of about bucket_bytes; a hook on each parameter's gradient accumulator adds the
// fresh gradient into its bucket and releases it. The first gradient of a step (under ZeRO-2: of a micro-batch) is
// copied rather than added, so that no pass zeroes the buckets; what no gradient reached (a parameter unused in the
// step) is zeroed when its bucket is reduced. On the last micro-batch of an accumulation, a bucket whose
// parameters are all ready is reduced over the DP group at once, while backward still runs: all-reduced, or with
// ZeRO-1 reduce-scattered so that each DP rank keeps the summed gradient of its shard. finish() launches what is
// left and waits for all of it before the optimizer step.
//
// ZeRO-2 (DeepSpeed's stage 2; Megatron's distributed optimizer does the same) keeps no full bucket between
// micro-batches: a bucket's buffer exists from the first gradient of a micro-batch that lands in it until its
// reduce-scatter has finished, and the owned chunk of every micro-batch is added into shard_grad. So each rank
// holds 1 / dp of the fp32 gradients plus the few buckets being filled or reduced (at most kZero2BucketsInFlight
// reductions are outstanding; a further launch first completes the oldest). Summing over micro-batches after the
// reduction instead of before changes the order of fp32 additions, not the result beyond rounding.
//
// Host copies (keep_host_copies(), for the offloaded optimizer): each bucket's owned reduced gradient is copied to
// host memory as soon as its reduction is done, while backward goes on, once per step. On CUDA the copy is started
// where the reduction is launched, on a side stream ordered after the reduction (an event of the reduction's stream
// waited on by the copy stream) and after the compute stream's writes to the bucket, into pinned memory, with an
// event per bucket that host_grad() waits on; so the copies hide behind the rest of backward. Where a reduction's
// result is there only once it is waited on (MPI on the CPU) the copy is made, synchronously, right after that wait.
// Only the step's final gradient is copied: without ZeRO-2 a bucket is reduced (and copied) only on the last
// micro-batch; under ZeRO-2 its owned chunk is copied when the last micro-batch's reduction has been added in.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "model/parameter_layout.h"
#include "model/weight_gradient_sink.h"
#include "plan/cost_model.h"

namespace t5scale {

class CudaHostCopies;  // dist/cuda_backend.h

struct ParameterSlot {
  std::string name;
  torch::Tensor param;     // the model's parameter (this TP rank's shard), any dtype
  ParameterLayout layout;  // full shape and split dimension over TP
  bool weight_decay = true;
  size_t bucket = 0;
  int64_t offset = 0;  // element offset inside the bucket
  int64_t numel = 0;
};

enum class GradientSharding {
  kNone,       // every DP rank holds the all-reduced gradients
  kOptimizer,  // ZeRO-1: gradients accumulated whole, reduce-scattered once per step; the optimizer owns a chunk
  kGradients,  // ZeRO-2: reduce-scattered every micro-batch; only the owned chunk is kept
};

// Reductions a ZeRO-2 rank leaves outstanding before it waits for the oldest (each holds one bucket's buffer): the
// buckets the cost model counts, less the one being filled.
constexpr size_t kZero2BucketsInFlight = kZero2BucketsHeld - 1;

struct GradientBucket {
  int64_t elements = 0;          // padded to a multiple of the DP size
  torch::TensorOptions options;  // fp32 (fp64 for fp64 models) on the parameters' device
  torch::Tensor main_grad;       // (elements,); under ZeRO-2 only while a micro-batch fills or reduces it
  torch::Tensor shard_grad;      // ZeRO-1/2: this DP rank's chunk of the summed gradient, (elements / dp)
  torch::Tensor chunk;           // ZeRO-2: where a reduction lands when shard_grad already holds a micro-batch
  std::vector<size_t> slots;
  size_t pending = 0;  // parameters whose gradient has not arrived yet in this backward
  bool launched = false;          // reduced (or being reduced) in this micro-batch (ZeRO-2) or step
  bool shard_holds_sum = false;   // ZeRO-2: shard_grad holds an earlier micro-batch of this step
  std::unique_ptr<CollectiveWork> work;
  torch::Tensor host_grad;  // host copies: the owned reduced gradient, (owned elements,); pinned off the CPU
  bool host_copied = false; // host copies: this step's copy has been started (or made)
};

class GradientBuckets {
 public:
  GradientBuckets(std::vector<ParameterSlot> slots, CommunicatorPtr dp, int64_t bucket_bytes,
                  GradientSharding sharding);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  void begin_step();                            // before the first micro-batch: the buckets hold no gradient yet
  void begin_micro_batch(bool last_micro_batch);  // reductions launch during the last one (ZeRO-2: during each)
  void finish();                                // launch what is left, wait for every reduction

  // The reduced gradient this rank holds for each element it owns: main_grad (all-reduced) without ZeRO,
  // shard_grad with it. The optimizer's step unscales and clips it in place.
  torch::Tensor owned_grad(size_t bucket) const {
    return zero1() ? buckets_[bucket].shard_grad : buckets_[bucket].main_grad;
  }
  // [begin, end) of the bucket's elements this DP rank owns.
  std::pair<int64_t, int64_t> owned_range(size_t bucket) const;

  // From now on every step copies each bucket's owned reduced gradient to host memory as it is reduced (see the
  // top of the file).
  void keep_host_copies();
  bool keeps_host_copies() const { return !buckets_.empty() && buckets_[0].host_grad.defined(); }
  // This step's host copy of the bucket's owned reduced gradient, once it has landed (waits for it). An error
  // before finish() has reduced the bucket.
  torch::Tensor host_grad(size_t bucket);
  // Copies owned elements [begin, begin + length) of the bucket to its host copy again, after the work queued so far
  // (a change made to the reduced gradients after the reduction: the norms' TP sum under sequence parallelism).
  // Nothing without host copies.
  void refresh_host_copy(size_t bucket, int64_t begin, int64_t length);
  // Adds `grad` (any floating dtype, the parameter's shape) into the slot's main gradient, as the gradient hook does.
  void accumulate(size_t slot, const torch::Tensor& grad);
  // The sink of a linear layer's weight (model/weight_gradient_sink.h): its gradient computed into the slot's main
  // gradient by one GEMM (the step's first written, later ones added; bf16 on a GPU straight into fp32), then
  // counted in as the hook counts a .grad. The slot's parameter must be a 2-D weight used once per backward.
  WeightGradientSink weight_gradient_sink(size_t slot);
  // The full reduced fp32 gradient of one slot (gathered over DP under ZeRO-1): for tests and checkpoints.
  torch::Tensor gathered_grad(size_t slot);

  const std::vector<ParameterSlot>& slots() const { return slots_; }
  std::vector<GradientBucket>& buckets() { return buckets_; }
  bool zero1() const { return sharding_ != GradientSharding::kNone; }  // the optimizer state is sharded
  GradientSharding sharding() const { return sharding_; }
  Communicator& dp() { return *dp_; }

 private:
  void on_gradient(size_t slot);
  void mark_arrived(size_t slot);  // refuses a second gradient in one backward
  void count_in(size_t slot);      // the bucket's pending count; a complete bucket is reduced at once
  torch::Tensor main_gradient_of(size_t slot);  // the slot's range of its bucket (made first under ZeRO-2)
  void accumulate_product(size_t slot, const torch::Tensor& grad_output_2d, const torch::Tensor& input_2d);
  void launch(size_t bucket);         // zeroes what no gradient reached, then starts the reduction
  void complete(size_t bucket);        // waits for its reduction; ZeRO-2: adds the chunk, frees the buffer
  void complete_micro_batch();         // ZeRO-2: launches what is left of this micro-batch, completes it all
  // Host copies: starts (or makes) the bucket's copy once per step; `after`: the reduction still in flight, which
  // the copy is ordered after where the device allows, else (returns false, nothing done) it waits for complete().
  bool copy_to_host(size_t bucket, CollectiveWork* after);

  std::vector<ParameterSlot> slots_;
  std::vector<GradientBucket> buckets_;
  CommunicatorPtr dp_;
  GradientSharding sharding_;
  std::vector<size_t> in_flight_;  // ZeRO-2: buckets whose reduction is outstanding, oldest first
  bool last_micro_batch_ = true;
  std::vector<bool> arrived_;  // per slot: its gradient came in this backward
  std::vector<bool> written_;  // per slot: its main gradient holds a gradient of this step (ZeRO-2: micro-batch)
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive so the hooks stay attached
  std::vector<uintptr_t> hook_keys_;
  std::unique_ptr<CudaHostCopies> device_copies_;  // host copies of CUDA gradients: the side stream and its events
};

}  // namespace t5scale
