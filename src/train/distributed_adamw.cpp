#include "train/distributed_adamw.h"

#include <ATen/ops/_fused_adamw.h>

#include <cmath>

#include "core/check.h"

namespace t5scale {

bool fused_adamw_supported(torch::Device device, torch::ScalarType dtype) {
  return (device.is_cpu() || device.is_cuda()) && (dtype == torch::kFloat32 || dtype == torch::kFloat64);
}

DistributedAdamW::DistributedAdamW(GradientBuckets& gradients, const ProcessGrid& grid, AdamWOptions options,
                                   bool host_resident)
    : DistributedOptimizer(gradients, grid, host_resident), options_(options) {
  T5S_CHECK(options_.beta1 >= 0.0 && options_.beta1 < 1.0 && options_.beta2 >= 0.0 && options_.beta2 < 1.0,
            "optimizer.beta1 and optimizer.beta2 must lie in [0, 1), got ", options_.beta1, " and ", options_.beta2);
  T5S_CHECK(options_.eps >= 0.0 && options_.weight_decay >= 0.0, "optimizer.eps and optimizer.weight_decay must be "
            ">= 0, got ", options_.eps, " and ", options_.weight_decay);
  torch::NoGradGuard no_grad;
  const auto& slots = gradients_.slots();
  for (size_t b = 0; b < master_.size(); ++b) {
    const auto [begin, end] = gradients_.owned_range(b);
    torch::Tensor decays = torch::zeros({end - begin}, master_[b].options().dtype(torch::kBool));
    for (size_t k : gradients_.buckets()[b].slots) {
      const ParameterSlot& slot = slots[k];
      // The slot's elements inside the owned range (all of them without ZeRO-1).
      const int64_t from = std::max(slot.offset, begin), to = std::min(slot.offset + slot.numel, end);
      if (from >= to) continue;
      decays.narrow(0, from - begin, to - from).fill_(slot.weight_decay);
      segments_.push_back({b, from - begin, to - from, slot.weight_decay});
    }
    exp_avg_.push_back(torch::zeros_like(master_[b]));
    exp_avg_sq_.push_back(torch::zeros_like(master_[b]));
    decays_.push_back(std::move(decays));
  }
  // Slots sit back to back in a bucket: merge neighbours with the same setting, fewer tensors for the kernel.
  std::vector<Segment> merged;
  for (const Segment& s : segments_) {
    if (!merged.empty() && merged.back().bucket == s.bucket && merged.back().decays == s.decays &&
        merged.back().begin + merged.back().length == s.begin) {
      merged.back().length += s.length;
    } else {
      merged.push_back(s);
    }
  }
  segments_ = std::move(merged);

  const torch::Device device = master_.empty() ? torch::Device(torch::kCPU) : master_[0].device();
  const torch::ScalarType dtype = master_.empty() ? torch::kFloat32 : master_[0].scalar_type();
  const bool supported = fused_adamw_supported(device, dtype);
  T5S_CHECK(options_.fused != FusedMode::kOn || supported, "optimizer.fused: on, but at::_fused_adamw_ has no kernel ",
            "for ", c10::toString(dtype), " master weights on ", device.str(), " (use fused: auto or off)");
  fused_ = options_.fused != FusedMode::kOff && supported;
  if (fused_) {
    fused_steps_ = torch::zeros({static_cast<int64_t>(segments_.size())}, torch::TensorOptions().device(device));
  }
}

double DistributedAdamW::update(double learning_rate, const torch::Tensor& grad_scale) {
  // The fused kernel divides the gradients by a fp32 grad_scale as it reads them (and stores the quotient back):
  // the clipping factor and 1 / loss scale ride in that pass. fp64 masters keep the multiplication in fp64.
  const bool fold = fused_ && !master_.empty() && master_[0].scalar_type() == torch::kFloat32;
  if (!fold) scale_gradients(grad_scale);
  if (fused_) {
    update_fused(learning_rate, fold && grad_scale.defined() ? grad_scale.reciprocal() : torch::Tensor());
  } else {
    update_whole_buckets(learning_rate);
  }
  for (size_t b = 0; b < master_.size(); ++b) write_back(b);
  return learning_rate;
}

void DistributedAdamW::update_fused(double learning_rate, const torch::Tensor& grad_divisor) {
  fused_steps_.fill_(static_cast<double>(step_count_));
  std::vector<torch::Tensor> params[2], grad_views[2], exp_avgs[2], exp_avg_sqs[2], steps[2];
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    const int group = s.decays ? 0 : 1;
    params[group].push_back(master_[s.bucket].narrow(0, s.begin, s.length));
    grad_views[group].push_back(update_grad(s.bucket).narrow(0, s.begin, s.length));
    exp_avgs[group].push_back(exp_avg_[s.bucket].narrow(0, s.begin, s.length));
    exp_avg_sqs[group].push_back(exp_avg_sq_[s.bucket].narrow(0, s.begin, s.length));
    steps[group].push_back(fused_steps_[static_cast<int64_t>(i)]);
  }
  for (int group = 0; group < 2; ++group) {
    if (params[group].empty()) continue;
    at::_fused_adamw_(params[group], grad_views[group], exp_avgs[group], exp_avg_sqs[group], /*max_exp_avg_sqs=*/{},
                      steps[group], learning_rate, options_.beta1, options_.beta2,
                      group == 0 ? options_.weight_decay : 0.0, options_.eps, /*amsgrad=*/false, /*maximize=*/false,
                      grad_divisor.defined() ? std::optional<torch::Tensor>(grad_divisor) : std::nullopt,
                      /*found_inf=*/std::nullopt);
  }
}

void DistributedAdamW::update_whole_buckets(double learning_rate) {
  const double bias_correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_count_));
  const double bias_correction2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step_count_));
  for (size_t b = 0; b < master_.size(); ++b) {
    torch::Tensor& master = master_[b];
    const torch::Tensor grad = update_grad(b);
    if (options_.weight_decay != 0.0) {
      // The factor in the master weights' dtype (a where() of two plain numbers would round it to fp32).
      const auto options = master.options();
      master.mul_(torch::where(decays_[b], torch::full({}, 1.0 - learning_rate * options_.weight_decay, options),
                               torch::full({}, 1.0, options)));
    }
    exp_avg_[b].mul_(options_.beta1).add_(grad, 1.0 - options_.beta1);
    exp_avg_sq_[b].mul_(options_.beta2).addcmul_(grad, grad, 1.0 - options_.beta2);
    const torch::Tensor denom = (exp_avg_sq_[b].sqrt() / std::sqrt(bias_correction2)).add_(options_.eps);
    master.addcdiv_(exp_avg_[b], denom, -learning_rate / bias_correction1);
  }
}

OptimizerState DistributedAdamW::own_state() {
  OptimizerState out;
  for (size_t b = 0; b < master_.size(); ++b) {
    out.emplace_back(msg("exp_avg.", b), exp_avg_[b]);
    out.emplace_back(msg("exp_avg_sq.", b), exp_avg_sq_[b]);
  }
  return out;
}

}  // namespace t5scale
