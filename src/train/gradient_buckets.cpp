#include "train/gradient_buckets.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/check.h"
#include "dist/cuda_backend.h"

namespace t5scale {

GradientBuckets::GradientBuckets(std::vector<ParameterSlot> slots, CommunicatorPtr dp, int64_t bucket_bytes,
                                 GradientSharding sharding)
    : slots_(std::move(slots)), dp_(std::move(dp)), sharding_(sharding) {
  T5S_CHECK(bucket_bytes > 0, "bucket size must be positive, got ", bucket_bytes);
  const int64_t bucket_elements = std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float)));
  // Gradients arrive roughly in the reverse of the forward order: fill buckets from the last parameter.
  std::vector<std::vector<size_t>> members(1);
  int64_t filled = 0;
  for (size_t k = slots_.size(); k-- > 0;) {
    ParameterSlot& slot = slots_[k];
    slot.numel = slot.param.numel();
    if (filled > 0 && filled + slot.numel > bucket_elements) {
      members.emplace_back();
      filled = 0;
    }
    slot.bucket = members.size() - 1;
    slot.offset = filled;
    filled += slot.numel;
    members.back().push_back(k);
  }
  const int64_t dp_size = dp_->size();
  for (auto& bucket_slots : members) {
    GradientBucket bucket;
    int64_t used = 0;
    for (size_t k : bucket_slots) used = std::max(used, slots_[k].offset + slots_[k].numel);
    const int64_t padded = (used + dp_size - 1) / dp_size * dp_size;  // equal chunks for reduce-scatter
    // fp32 for bf16/fp16/fp32 models; fp64 models (used to check exactness) keep fp64.
    const torch::Tensor& first = slots_[bucket_slots[0]].param;
    bucket.elements = padded;
    bucket.options =
        torch::TensorOptions().dtype(torch::promote_types(first.scalar_type(), torch::kFloat32)).device(first.device());
    // Zeros once: the padding stays zero (an all-reduce of zeros leaves it so), the rest is written every step.
    if (sharding_ != GradientSharding::kGradients) bucket.main_grad = torch::zeros({padded}, bucket.options);
    if (zero1()) bucket.shard_grad = torch::zeros({padded / dp_size}, bucket.options);
    bucket.slots = bucket_slots;
    buckets_.push_back(std::move(bucket));
  }
  arrived_.assign(slots_.size(), false);
  written_.assign(slots_.size(), false);

  for (size_t k = 0; k < slots_.size(); ++k) {
    auto accumulator = torch::autograd::impl::grad_accumulator(slots_[k].param);
    T5S_CHECK(accumulator != nullptr, "parameter ", slots_[k].name, " has no gradient accumulator (not a leaf, or "
              "requires_grad false: frozen parameters stay out of the buckets)");
    hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_gradient(k);
          return outputs;
        })));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradientBuckets::~GradientBuckets() {
  for (size_t k = 0; k < accumulators_.size(); ++k) accumulators_[k]->del_post_hook(hook_keys_[k]);
}

void GradientBuckets::begin_step() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    GradientBucket& bucket = buckets_[b];
    T5S_CHECK(bucket.work == nullptr, "begin_step() while a reduction is in flight");
    bucket.launched = false;
    bucket.shard_holds_sum = false;
    // No copy outstanding into a new step (after a skipped step none was waited on; otherwise they have landed).
    if (device_copies_ != nullptr) device_copies_->wait(b);
    bucket.host_copied = false;
  }
  written_.assign(slots_.size(), false);
}

void GradientBuckets::begin_micro_batch(bool last_micro_batch) {
  // ZeRO-2: the previous micro-batch's reductions end here, so that its buffers are gone before this backward.
  if (sharding_ == GradientSharding::kGradients) complete_micro_batch();
  last_micro_batch_ = last_micro_batch;
  arrived_.assign(slots_.size(), false);
  if (sharding_ == GradientSharding::kGradients) written_.assign(slots_.size(), false);  // a fresh buffer each time
  for (auto& bucket : buckets_) bucket.pending = bucket.slots.size();
}

void GradientBuckets::on_gradient(size_t k) {
  torch::Tensor& grad = slots_[k].param.mutable_grad();
  if (!grad.defined()) return;
  mark_arrived(k);
  accumulate(k, grad.detach());
  grad = torch::Tensor();  // released: the fp32 main gradient holds it now
  count_in(k);
}

void GradientBuckets::mark_arrived(size_t k) {
  T5S_CHECK(!arrived_[k], "the gradient of ", slots_[k].name, " arrived twice in one backward: a parameter used in "
            "several checkpointed regions cannot be reduced per bucket");
  arrived_[k] = true;
}

void GradientBuckets::count_in(size_t k) {
  const bool reduce_now = last_micro_batch_ || sharding_ == GradientSharding::kGradients;
  if (reduce_now && --buckets_[slots_[k].bucket].pending == 0) launch(slots_[k].bucket);
}

torch::Tensor GradientBuckets::main_gradient_of(size_t k) {
  const ParameterSlot& slot = slots_[k];
  GradientBucket& bucket = buckets_[slot.bucket];
  if (!bucket.main_grad.defined()) {  // ZeRO-2: this micro-batch's buffer, its padding zero
    bucket.main_grad = torch::empty({bucket.elements}, bucket.options);
    int64_t used = 0;
    for (size_t j : bucket.slots) used = std::max(used, slots_[j].offset + slots_[j].numel);
    bucket.main_grad.narrow(0, used, bucket.elements - used).zero_();
  }
  return bucket.main_grad.narrow(0, slot.offset, slot.numel);
}

void GradientBuckets::accumulate(size_t k, const torch::Tensor& grad) {
  // Copied or added in the main gradient's dtype straight from the compute dtype (on a GPU the cast happens inside
  // the kernel: no fp32 temporary per gradient).
  torch::Tensor target = main_gradient_of(k);
  if (written_[k]) {
    target.add_(grad.reshape({-1}));
  } else {
    target.copy_(grad.reshape({-1}));
    written_[k] = true;
  }
}

void GradientBuckets::accumulate_product(size_t k, const torch::Tensor& grad_output_2d, const torch::Tensor& input_2d) {
  const ParameterSlot& slot = slots_[k];
  torch::Tensor target = main_gradient_of(k).view(slot.param.sizes());  // (out, in)
  const torch::Tensor grad_output_t = grad_output_2d.t();
  const bool first = !written_[k];
  written_[k] = true;
  if (target.scalar_type() == grad_output_2d.scalar_type()) {  // fp32 or fp64 training: one GEMM, no temporary
    if (first) {
      at::mm_out(target, grad_output_t, input_2d);
    } else {
      target.addmm_(grad_output_t, input_2d);
    }
  } else if (target.is_cuda()) {  // bf16 or fp16 operands, an fp32 product (cuBLAS accumulates in fp32 anyway)
    if (first) {
      at::mm_out(target, grad_output_t, input_2d, target.scalar_type());
    } else {
      target.add_(at::mm(grad_output_t, input_2d, target.scalar_type()));
    }
  } else {  // half precision on the CPU, which has no mixed-dtype GEMM: the product rounded, then accumulated
    const torch::Tensor product = at::mm(grad_output_t, input_2d);
    if (first) {
      target.copy_(product);
    } else {
      target.add_(product);
    }
  }
}

WeightGradientSink GradientBuckets::weight_gradient_sink(size_t k) {
  T5S_CHECK(slots_[k].param.dim() == 2, "a weight-gradient sink needs a 2-D weight; ", slots_[k].name, " is ",
            slots_[k].param.sizes());
  return [this, k](const torch::Tensor& grad_output_2d, const torch::Tensor& input_2d) {
    torch::NoGradGuard no_grad;
    mark_arrived(k);
    accumulate_product(k, grad_output_2d, input_2d);
    count_in(k);
  };
}

void GradientBuckets::launch(size_t b) {
  GradientBucket& bucket = buckets_[b];
  if (bucket.launched) return;
  bucket.launched = true;
  if (!bucket.main_grad.defined()) bucket.main_grad = torch::zeros({bucket.elements}, bucket.options);  // ZeRO-2
  for (size_t k : bucket.slots) {
    if (written_[k]) continue;
    bucket.main_grad.narrow(0, slots_[k].offset, slots_[k].numel).zero_();  // no gradient reached it this step
    written_[k] = true;
  }
  switch (sharding_) {
    case GradientSharding::kNone:
      bucket.work = dp_->all_reduce_sum_async(bucket.main_grad);
      if (keeps_host_copies()) copy_to_host(b, bucket.work.get());  // else after complete()'s wait
      return;
    case GradientSharding::kOptimizer:
      bucket.work = dp_->reduce_scatter_sum_async(bucket.main_grad, bucket.shard_grad);
      if (keeps_host_copies()) copy_to_host(b, bucket.work.get());
      return;
    case GradientSharding::kGradients:
      // The first micro-batch of a step lands in shard_grad itself, a later one beside it to be added.
      if (bucket.shard_holds_sum && !bucket.chunk.defined()) bucket.chunk = torch::empty_like(bucket.shard_grad);
      bucket.work = dp_->reduce_scatter_sum_async(bucket.main_grad,
                                                  bucket.shard_holds_sum ? bucket.chunk : bucket.shard_grad);
      in_flight_.push_back(b);
      if (in_flight_.size() > kZero2BucketsInFlight) {
        const size_t oldest = in_flight_.front();
        in_flight_.erase(in_flight_.begin());
        complete(oldest);
      }
      return;
  }
}

void GradientBuckets::complete(size_t b) {
  GradientBucket& bucket = buckets_[b];
  bucket.work->wait();
  bucket.work.reset();
  if (sharding_ != GradientSharding::kGradients) {
    if (keeps_host_copies()) copy_to_host(b, nullptr);  // where the launch could not start it
    return;
  }
  if (bucket.shard_holds_sum) bucket.shard_grad.add_(bucket.chunk);
  bucket.shard_holds_sum = true;
  bucket.main_grad = torch::Tensor();  // the buffer goes back to the allocator
  bucket.chunk = torch::Tensor();
  // The last micro-batch's chunk is in: the step's owned gradient is final.
  if (keeps_host_copies() && last_micro_batch_) copy_to_host(b, nullptr);
}

void GradientBuckets::keep_host_copies() {
  if (keeps_host_copies()) return;
  const torch::Device device = buckets_.empty() ? torch::Device(torch::kCPU) : buckets_[0].options.device();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const auto [begin, end] = owned_range(b);
    buckets_[b].host_grad = torch::zeros(
        {end - begin}, buckets_[b].options.device(torch::kCPU).pinned_memory(device.is_cuda()));  // (owned,)
  }
  if (device.is_cuda()) {
    device_copies_ = required_cuda_backend("host copies of gradients on a GPU").host_copies(device.index(),
                                                                                           buckets_.size());
  }
}

bool GradientBuckets::copy_to_host(size_t b, CollectiveWork* after) {
  GradientBucket& bucket = buckets_[b];
  if (bucket.host_copied) return true;
  if (device_copies_ != nullptr) {
    if (!device_copies_->start(b, owned_grad(b), bucket.host_grad, after)) return false;
  } else {
    // On the CPU a collective that has finished (a one-rank group's) gives its result now; another one only
    // after its wait.
    if (after != nullptr && !after->order_current_stream()) return false;
    bucket.host_grad.copy_(owned_grad(b));
  }
  bucket.host_copied = true;
  return true;
}

torch::Tensor GradientBuckets::host_grad(size_t b) {
  GradientBucket& bucket = buckets_.at(b);
  T5S_CHECK(bucket.host_grad.defined(), "gradient bucket ", b, " keeps no host copy (keep_host_copies())");
  T5S_CHECK(bucket.host_copied, "the host copy of gradient bucket ", b, " was read before the bucket was reduced "
            "(GradientBuckets::finish())");
  if (device_copies_ != nullptr) device_copies_->wait(b);
  return bucket.host_grad;
}

void GradientBuckets::refresh_host_copy(size_t b, int64_t begin, int64_t length) {
  if (!keeps_host_copies()) return;
  GradientBucket& bucket = buckets_.at(b);
  T5S_CHECK(bucket.host_copied && begin >= 0 && length >= 0 && begin + length <= bucket.host_grad.numel(),
            "refresh_host_copy(", b, ", ", begin, ", ", length, ") outside the ", bucket.host_grad.numel(),
            " owned elements of a reduced bucket");
  const torch::Tensor source = owned_grad(b).narrow(0, begin, length);
  const torch::Tensor target = bucket.host_grad.narrow(0, begin, length);
  if (device_copies_ != nullptr) {
    // Numbered as the bucket's first copy, on the same stream: its event stands for both.
    device_copies_->start(b, source, target, nullptr);
  } else {
    target.copy_(source);
  }
}

void GradientBuckets::complete_micro_batch() {
  // Buckets of parameters that took no part in this backward (unused in it) are reduced all the same: every DP
  // rank launches the same reductions in the same order.
  bool any = false;
  for (const auto& bucket : buckets_) any = any || bucket.main_grad.defined() || bucket.launched;
  if (!any) return;  // the step's first micro-batch: nothing yet
  for (size_t b = 0; b < buckets_.size(); ++b) launch(b);
  for (size_t b : in_flight_) complete(b);
  in_flight_.clear();
  for (auto& bucket : buckets_) bucket.launched = false;
}

void GradientBuckets::finish() {
  if (sharding_ == GradientSharding::kGradients) {
    complete_micro_batch();
    return;
  }
  // Parameters that took no part in this backward (frozen or unused) leave their bucket incomplete: launch it.
  for (size_t b = 0; b < buckets_.size(); ++b) launch(b);
  for (size_t b = 0; b < buckets_.size(); ++b) complete(b);
}

std::pair<int64_t, int64_t> GradientBuckets::owned_range(size_t b) const {
  const int64_t padded = buckets_[b].elements;
  if (!zero1()) return {0, padded};
  const int64_t chunk = padded / dp_->size();
  return {dp_->rank() * chunk, (dp_->rank() + 1) * chunk};
}

torch::Tensor GradientBuckets::gathered_grad(size_t k) {
  const ParameterSlot& slot = slots_[k];
  const GradientBucket& bucket = buckets_[slot.bucket];
  torch::Tensor full = bucket.main_grad;
  if (zero1()) full = dp_->all_gather(bucket.shard_grad).reshape({-1});
  return full.narrow(0, slot.offset, slot.numel).view(slot.param.sizes()).clone();
}

}  // namespace t5scale
