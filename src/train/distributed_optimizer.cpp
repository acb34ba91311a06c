#include "train/distributed_optimizer.h"

#include <cmath>
#include <map>

#include "core/check.h"

namespace t5scale {

bool weight_decay_applies(const std::string& parameter_name) {
  return parameter_name.find("norm") == std::string::npos && parameter_name.find("bias") == std::string::npos;
}

DistributedOptimizer::DistributedOptimizer(GradientBuckets& gradients, const ProcessGrid& grid)
    : gradients_(gradients), tp_(grid.tp), world_(grid.world) {
  T5S_CHECK(tp_ != nullptr && world_ != nullptr, "the optimizer needs the grid's TP and world groups");
  torch::NoGradGuard no_grad;
  const auto& slots = gradients_.slots();
  for (size_t b = 0; b < gradients_.buckets().size(); ++b) {
    const GradientBucket& bucket = gradients_.buckets()[b];
    // Master weights in the main gradients' dtype: fp32, or fp64 for fp64 models. Padding stays zero.
    torch::Tensor full = torch::zeros_like(bucket.main_grad);
    torch::Tensor is_split = torch::zeros(full.sizes(), full.options().dtype(torch::kBool));
    for (size_t k : bucket.slots) {
      const ParameterSlot& slot = slots[k];
      full.narrow(0, slot.offset, slot.numel).copy_(slot.param.detach().reshape({-1}));
      is_split.narrow(0, slot.offset, slot.numel).fill_(slot.layout.is_split());
    }
    const auto [begin, end] = gradients_.owned_range(b);
    master_.push_back(full.narrow(0, begin, end - begin).clone());
    is_split_.push_back(is_split.narrow(0, begin, end - begin).clone());
  }
}

StepOutcome DistributedOptimizer::step(double learning_rate, const GradientScaling& scaling) {
  T5S_CHECK(scaling.loss_scale > 0.0 && std::isfinite(scaling.loss_scale), "the loss scale must be positive, got ",
            scaling.loss_scale);
  T5S_CHECK(scaling.max_grad_norm >= 0.0, "max_grad_norm must be >= 0 (0: no clipping), got ", scaling.max_grad_norm);
  StepOutcome outcome;
  if (scaling.skip_non_finite && found_non_finite(*world_)) {
    outcome.skipped = true;
    return outcome;
  }
  double grad_scale = 1.0 / scaling.loss_scale;
  outcome.grad_norm = grad_norm(grad_scale);
  if (scaling.max_grad_norm > 0.0) {
    grad_scale *= std::min(1.0, scaling.max_grad_norm / (outcome.grad_norm + 1e-6));
  }
  torch::NoGradGuard no_grad;
  ++step_count_;
  outcome.learning_rate = update(learning_rate, grad_scale);
  return outcome;
}

double DistributedOptimizer::grad_norm(double grad_scale) {
  torch::NoGradGuard no_grad;
  const auto device = master_.empty() ? torch::Device(torch::kCPU) : master_[0].device();
  torch::Tensor split_sq = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  torch::Tensor replicated_sq = torch::zeros_like(split_sq);
  for (size_t b = 0; b < master_.size(); ++b) {
    const torch::Tensor squares = gradients_.owned_grad(b).to(torch::kFloat64).square();
    split_sq += squares.masked_select(is_split_[b]).sum();
    replicated_sq += squares.masked_select(~is_split_[b]).sum();
  }
  tp_->all_reduce_sum(split_sq);  // each TP rank holds a different shard of the split parameters
  torch::Tensor total = split_sq + replicated_sq;
  if (gradients_.zero1()) gradients_.dp().all_reduce_sum(total);  // each DP rank holds a different chunk
  return std::sqrt(total.item<double>()) * std::abs(grad_scale);
}

bool DistributedOptimizer::found_non_finite(Communicator& world) {
  torch::NoGradGuard no_grad;
  // One flag on the device for all buckets: a single host synchronisation, after the all-reduce.
  torch::Tensor flag = torch::zeros({1}, master_.empty() ? torch::TensorOptions() : master_[0].options());
  for (size_t b = 0; b < master_.size(); ++b) {
    flag = torch::maximum(flag, (~torch::isfinite(gradients_.owned_grad(b))).any().to(flag.scalar_type()).reshape({1}));
  }
  world.all_reduce_max(flag);
  return flag.item<double>() > 0.0;
}

void DistributedOptimizer::write_back(size_t b) {
  torch::Tensor full = master_[b];
  if (gradients_.zero1()) full = gradients_.dp().all_gather(master_[b]).reshape({-1});
  for (size_t k : gradients_.buckets()[b].slots) {
    const ParameterSlot& slot = gradients_.slots()[k];
    slot.param.detach().copy_(full.narrow(0, slot.offset, slot.numel).view(slot.param.sizes()));
  }
}

OptimizerState DistributedOptimizer::state() {
  OptimizerState out;
  out.emplace_back("step", torch::tensor(step_count_, torch::kInt64));
  for (size_t b = 0; b < master_.size(); ++b) out.emplace_back(msg("master.", b), master_[b]);
  for (auto& entry : own_state()) out.push_back(std::move(entry));
  return out;
}

void DistributedOptimizer::load_state(const OptimizerState& saved) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> by_name(saved.begin(), saved.end());
  const OptimizerState live = state();
  T5S_CHECK(by_name.size() == live.size(), "the saved ", name(), " state has ", by_name.size(),
            " tensors, this optimizer has ", live.size());
  for (const auto& [entry_name, tensor] : live) {
    const auto found = by_name.find(entry_name);
    T5S_CHECK(found != by_name.end(), "the saved ", name(), " state has no tensor '", entry_name, "'");
    T5S_CHECK(found->second.sizes() == tensor.sizes(), "optimizer state '", entry_name, "' has shape ",
              found->second.sizes(), " in the checkpoint, ", tensor.sizes(), " here");
    if (entry_name == "step") {
      step_count_ = found->second.item<int64_t>();
    } else {
      tensor.copy_(found->second);
    }
  }
  for (size_t b = 0; b < master_.size(); ++b) write_back(b);
}

}  // namespace t5scale
