#include "train/distributed_adamw.h"

#include <cmath>

#include "core/check.h"

namespace t5scale {

DistributedAdamW::DistributedAdamW(GradientBuckets& gradients, CommunicatorPtr tp, AdamWOptions options)
    : gradients_(gradients), tp_(std::move(tp)), options_(options) {
  torch::NoGradGuard no_grad;
  const auto& slots = gradients_.slots();
  for (size_t b = 0; b < gradients_.buckets().size(); ++b) {
    const GradientBucket& bucket = gradients_.buckets()[b];
    const auto options_f32 = bucket.main_grad.options();
    torch::Tensor full = torch::zeros_like(bucket.main_grad);
    torch::Tensor decays = torch::zeros(full.sizes(), options_f32.dtype(torch::kBool));
    torch::Tensor is_split = torch::zeros(full.sizes(), options_f32.dtype(torch::kBool));
    for (size_t k : bucket.slots) {
      const ParameterSlot& slot = slots[k];
      full.narrow(0, slot.offset, slot.numel).copy_(slot.param.detach().reshape({-1}));
      decays.narrow(0, slot.offset, slot.numel).fill_(slot.weight_decay);
      is_split.narrow(0, slot.offset, slot.numel).fill_(slot.layout.is_split());
    }
    const auto [begin, end] = gradients_.owned_range(b);
    BucketState state;
    state.master = full.narrow(0, begin, end - begin).clone();
    state.exp_avg = torch::zeros_like(state.master);
    state.exp_avg_sq = torch::zeros_like(state.master);
    state.decays = decays.narrow(0, begin, end - begin).clone();
    state.is_split = is_split.narrow(0, begin, end - begin).clone();
    state_.push_back(std::move(state));
  }
}

double DistributedAdamW::grad_norm(double grad_scale) {
  torch::NoGradGuard no_grad;
  const auto device = state_.empty() ? torch::Device(torch::kCPU) : state_[0].master.device();
  torch::Tensor split_sq = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  torch::Tensor replicated_sq = torch::zeros_like(split_sq);
  for (size_t b = 0; b < state_.size(); ++b) {
    const torch::Tensor squares = gradients_.owned_grad(b).to(torch::kFloat64).square();
    split_sq += squares.masked_select(state_[b].is_split).sum();
    replicated_sq += squares.masked_select(~state_[b].is_split).sum();
  }
  tp_->all_reduce_sum(split_sq);  // each TP rank holds a different shard of the split parameters
  torch::Tensor total = split_sq + replicated_sq;
  if (gradients_.zero1()) gradients_.dp().all_reduce_sum(total);  // each DP rank holds a different chunk
  return std::sqrt(total.item<double>()) * std::abs(grad_scale);
}

bool DistributedAdamW::found_non_finite(Communicator& world) {
  torch::NoGradGuard no_grad;
  // One flag on the device for all buckets: a single host synchronisation, after the all-reduce.
  torch::Tensor flag = torch::zeros({1}, state_.empty() ? torch::TensorOptions() : state_[0].master.options());
  for (size_t b = 0; b < state_.size(); ++b) {
    flag = torch::maximum(flag, (~torch::isfinite(gradients_.owned_grad(b))).any().to(flag.scalar_type()).reshape({1}));
  }
  world.all_reduce_max(flag);
  return flag.item<float>() > 0.0f;
}

void DistributedAdamW::step(double learning_rate, double grad_scale) {
  torch::NoGradGuard no_grad;
  ++step_count_;
  const double bias_correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_count_));
  const double bias_correction2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step_count_));
  for (size_t b = 0; b < state_.size(); ++b) {
    BucketState& s = state_[b];
    torch::Tensor grad = gradients_.owned_grad(b);
    if (grad_scale != 1.0) grad = grad * grad_scale;
    if (options_.weight_decay != 0.0) {
      s.master.mul_(torch::where(s.decays, 1.0 - learning_rate * options_.weight_decay, 1.0).to(s.master.scalar_type()));
    }
    s.exp_avg.mul_(options_.beta1).add_(grad, 1.0 - options_.beta1);
    s.exp_avg_sq.mul_(options_.beta2).addcmul_(grad, grad, 1.0 - options_.beta2);
    const torch::Tensor denom = (s.exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(options_.eps);
    s.master.addcdiv_(s.exp_avg, denom, -learning_rate / bias_correction1);
    write_back(b);
  }
}

void DistributedAdamW::write_back(size_t b) {
  torch::Tensor full = state_[b].master;
  if (gradients_.zero1()) full = gradients_.dp().all_gather(state_[b].master).reshape({-1});
  for (size_t k : gradients_.buckets()[b].slots) {
    const ParameterSlot& slot = gradients_.slots()[k];
    torch::Tensor param = slot.param;
    param.detach().copy_(full.narrow(0, slot.offset, slot.numel).view(param.sizes()));
  }
}

}  // namespace t5scale
