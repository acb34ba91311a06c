#include "train/distributed_adafactor.h"

#include <cmath>

#include "core/check.h"

namespace t5scale {
namespace {

// Replaces each tensor by its sum over the TP group, all of them in one all-reduce (same dtype).
// `device`: where the communicator's tensors live (host-resident state reduces on the gradients' device: NCCL
// takes CUDA tensors).
void sum_over_tp(Communicator& tp, const std::vector<torch::Tensor*>& parts, torch::Device device) {
  if (tp.size() == 1 || parts.empty()) return;
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor* part : parts) flat.push_back(part->reshape({-1}));
  const torch::Device home = parts.front()->device();
  torch::Tensor buffer = torch::cat(flat).to(device);
  tp.all_reduce_sum(buffer);
  buffer = buffer.to(home);
  int64_t offset = 0;
  for (torch::Tensor* part : parts) {
    *part = buffer.narrow(0, offset, part->numel()).view(part->sizes());
    offset += part->numel();
  }
}

}  // namespace

DistributedAdafactor::DistributedAdafactor(GradientBuckets& gradients, const ProcessGrid& grid,
                                           AdafactorOptions options, bool host_resident)
    : DistributedOptimizer(gradients, grid, host_resident), options_(options) {
  T5S_CHECK(!gradients_.zero1(), "optimizer.name: adafactor keeps factored second moments per matrix; ZeRO-1 "
            "(parallel.zero1) shards a flat buffer — use adamw with zero1");
  T5S_CHECK(!options_.warmup_init || options_.relative_step,
            "optimizer.adafactor_warmup_init needs optimizer.adafactor_relative_step (the warmup is of the relative "
            "step size)");
  T5S_CHECK(options_.decay_rate <= 0.0, "optimizer.adafactor_decay_rate must be <= 0 (beta2_t = 1 - step^decay_rate), "
            "got ", options_.decay_rate);
  T5S_CHECK(options_.clip_threshold > 0.0, "optimizer.adafactor_clip_threshold must be > 0, got ",
            options_.clip_threshold);
  T5S_CHECK(options_.beta1 >= 0.0 && options_.beta1 < 1.0, "optimizer.adafactor_beta1 must lie in [0, 1) (0: no "
            "first moment), got ", options_.beta1);
  T5S_CHECK(options_.eps1 >= 0.0 && options_.eps2 >= 0.0, "optimizer.adafactor_eps1 and adafactor_eps2 must be >= 0, "
            "got ", options_.eps1, " and ", options_.eps2);
  T5S_CHECK(options_.weight_decay >= 0.0, "optimizer.weight_decay must be >= 0, got ", options_.weight_decay);

  const auto& slots = gradients_.slots();
  for (size_t k = 0; k < slots.size(); ++k) {
    const ParameterSlot& slot = slots[k];
    SlotState s;
    s.slot = k;
    const std::vector<int64_t> shape = slot.param.sizes().vec();  // this rank's shard
    s.master = master_[slot.bucket].narrow(0, slot.offset, slot.numel).view(shape);
    const auto& full = slot.layout.full_shape;
    T5S_CHECK(full.size() == shape.size(), "parameter ", slot.name, ": layout has ", full.size(),
              " dimensions, the tensor ", shape.size());
    const int64_t dims = static_cast<int64_t>(shape.size());
    s.split = slot.layout.is_split();
    s.factored = dims >= 2;
    s.full_numel = 1;
    for (int64_t d : full) s.full_numel *= d;
    const auto options = s.master.options();
    if (s.factored) {
      s.rows_split = s.split && slot.layout.split_dim == dims - 2;
      s.cols_split = s.split && slot.layout.split_dim == dims - 1;
      s.full_rows = full[dims - 2];
      s.full_cols = full[dims - 1];
      std::vector<int64_t> row_shape(shape.begin(), shape.end() - 1);
      std::vector<int64_t> col_shape(shape.begin(), shape.end() - 2);
      col_shape.push_back(shape.back());
      s.exp_avg_sq_row = torch::zeros(row_shape, options);
      s.exp_avg_sq_col = torch::zeros(col_shape, options);
    } else {
      s.exp_avg_sq = torch::zeros(shape, options);
    }
    if (options_.beta1 > 0.0) s.exp_avg = torch::zeros(shape, options);
    slots_.push_back(std::move(s));
  }
}

double DistributedAdafactor::relative_step_size(int64_t step, double learning_rate) const {
  if (!options_.relative_step) return learning_rate;
  const double min_step = options_.warmup_init ? 1e-6 * static_cast<double>(step) : 1e-2;
  return std::min(min_step, 1.0 / std::sqrt(static_cast<double>(step)));
}

double DistributedAdafactor::update(double learning_rate, const torch::Tensor& grad_scale) {
  scale_gradients(grad_scale);
  const auto& slots = gradients_.slots();
  const double step_size = relative_step_size(step_count_, learning_rate);
  const double beta2t = 1.0 - std::pow(static_cast<double>(step_count_), options_.decay_rate);
  const size_t n = slots_.size();

  // 1. Per parameter: the gradient, RMS(parameter) partial sums, the row and column sums of grad^2 + eps1.
  std::vector<torch::Tensor> grads(n), param_sq(n), row_sums(n), col_sums(n), squares(n);
  std::vector<torch::Tensor*> first_reduction;
  for (size_t i = 0; i < n; ++i) {
    SlotState& s = slots_[i];
    const ParameterSlot& slot = slots[s.slot];
    grads[i] = update_grad(slot.bucket).narrow(0, slot.offset, slot.numel).view(s.master.sizes());
    if (options_.scale_parameter) {
      param_sq[i] = s.master.square().sum();
      if (s.split) first_reduction.push_back(&param_sq[i]);
    }
    squares[i] = grads[i].square().add_(options_.eps1);
    if (s.factored) {
      row_sums[i] = squares[i].sum(-1);
      col_sums[i] = squares[i].sum(-2);
      if (s.cols_split) first_reduction.push_back(&row_sums[i]);
      if (s.rows_split) first_reduction.push_back(&col_sums[i]);
    }
  }
  sum_over_tp(*tp_, first_reduction, device());

  // 2. The running averages; factored: the mean of the row averages over all rows (spans TP when rows are split).
  std::vector<torch::Tensor> row_totals(n), updates(n), update_sq(n);
  std::vector<torch::Tensor*> second_reduction, third_reduction;
  for (size_t i = 0; i < n; ++i) {
    SlotState& s = slots_[i];
    if (s.factored) {
      s.exp_avg_sq_row.mul_(beta2t).add_(row_sums[i].div_(static_cast<double>(s.full_cols)), 1.0 - beta2t);
      s.exp_avg_sq_col.mul_(beta2t).add_(col_sums[i].div_(static_cast<double>(s.full_rows)), 1.0 - beta2t);
      row_totals[i] = s.exp_avg_sq_row.sum(-1, /*keepdim=*/true);
      if (s.rows_split) second_reduction.push_back(&row_totals[i]);
    } else {
      s.exp_avg_sq.mul_(beta2t).add_(squares[i], 1.0 - beta2t);
    }
  }
  sum_over_tp(*tp_, second_reduction, device());

  // 3. The unclipped update g / sqrt(v) and its RMS partial sums.
  for (size_t i = 0; i < n; ++i) {
    SlotState& s = slots_[i];
    if (s.factored) {
      const torch::Tensor row_mean = row_totals[i].div_(static_cast<double>(s.full_rows));
      const torch::Tensor r_factor = (s.exp_avg_sq_row / row_mean).rsqrt_().unsqueeze(-1);
      const torch::Tensor c_factor = s.exp_avg_sq_col.unsqueeze(-2).rsqrt();
      updates[i] = torch::mul(r_factor, c_factor).mul_(grads[i]);
    } else {
      updates[i] = s.exp_avg_sq.rsqrt().mul_(grads[i]);
    }
    update_sq[i] = updates[i].square().sum();
    if (s.split) third_reduction.push_back(&update_sq[i]);
  }
  sum_over_tp(*tp_, third_reduction, device());

  // 4. Clip by RMS, scale by the step size, momentum, weight decay, apply.
  for (size_t i = 0; i < n; ++i) {
    SlotState& s = slots_[i];
    const double sqrt_numel = std::sqrt(static_cast<double>(s.full_numel));
    torch::Tensor& update = updates[i];
    update.div_((update_sq[i].sqrt().div_(sqrt_numel).div_(options_.clip_threshold)).clamp_min_(1.0));
    // The step size: a number, or with scale_parameter a 0-d tensor (RMS of the parameter before this step).
    torch::Tensor scaled_lr;
    if (options_.scale_parameter) {
      scaled_lr = param_sq[i].sqrt().div_(sqrt_numel).clamp_min_(options_.eps2).mul_(step_size);
      update.mul_(scaled_lr);
    } else {
      update.mul_(step_size);
    }
    if (options_.beta1 > 0.0) {
      s.exp_avg.mul_(options_.beta1).add_(update, 1.0 - options_.beta1);
      update = s.exp_avg;
    }
    if (options_.weight_decay != 0.0 && slots[s.slot].weight_decay) {
      if (options_.scale_parameter) {
        s.master.addcmul_(s.master, scaled_lr * -options_.weight_decay);
      } else {
        s.master.add_(s.master, -options_.weight_decay * step_size);
      }
    }
    s.master.sub_(update);
  }
  for (size_t b = 0; b < master_.size(); ++b) write_back(b);
  return step_size;
}

ParameterLayout DistributedAdafactor::state_layout(const ParameterLayout& parameter, const std::string& kind) const {
  int64_t dropped = -1;
  const int64_t dims = static_cast<int64_t>(parameter.full_shape.size());
  if (kind == "exp_avg_sq_row") dropped = dims - 1;
  if (kind == "exp_avg_sq_col") dropped = dims - 2;
  if (dropped < 0) return parameter;
  ParameterLayout layout = parameter;
  layout.full_shape.erase(layout.full_shape.begin() + dropped);
  if (parameter.split_dim == dropped) layout.split_dim = -1;
  if (parameter.split_dim > dropped) layout.split_dim = parameter.split_dim - 1;
  return layout;
}

OptimizerState DistributedAdafactor::own_state() {
  OptimizerState out;
  const auto& slots = gradients_.slots();
  for (SlotState& s : slots_) {
    const std::string prefix = slots[s.slot].name + ".";
    if (s.factored) {
      out.emplace_back(prefix + "exp_avg_sq_row", s.exp_avg_sq_row);
      out.emplace_back(prefix + "exp_avg_sq_col", s.exp_avg_sq_col);
    } else {
      out.emplace_back(prefix + "exp_avg_sq", s.exp_avg_sq);
    }
    if (s.exp_avg.defined()) out.emplace_back(prefix + "exp_avg", s.exp_avg);
  }
  return out;
}

}  // namespace t5scale
