#include "train/distributed_optimizer.h"

#include <cmath>
#include <map>

#include "core/check.h"

namespace t5scale {

bool weight_decay_applies(const std::string& parameter_name) {
  return parameter_name.find("norm") == std::string::npos && parameter_name.find("bias") == std::string::npos;
}

StateName parse_state_name(const std::string& name) {
  if (name == "step") return {"step", -1, ""};
  const size_t dot = name.rfind('.');
  T5S_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < name.size(), "optimizer state name '", name,
            "' is neither 'step', '<kind>.<bucket>' nor '<parameter>.<kind>'");
  const std::string head = name.substr(0, dot), tail = name.substr(dot + 1);
  if (tail.find_first_not_of("0123456789") == std::string::npos) return {head, std::stoll(tail), ""};
  return {tail, -1, head};
}

ParameterLayout DistributedOptimizer::state_layout(const ParameterLayout& parameter, const std::string&) const {
  return parameter;
}

namespace {

// Host memory for state and staging: pinned where the gradients are on CUDA (so that the copies run at the link's
// rate and asynchronously), plain on the CPU (a CPU-only process has no pinned allocator).
torch::Tensor host_zeros(int64_t elements, torch::ScalarType dtype, torch::Device gradients_device) {
  return torch::zeros({elements}, torch::TensorOptions().dtype(dtype).pinned_memory(gradients_device.is_cuda()));
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(GradientBuckets& gradients, const ProcessGrid& grid, bool host_resident)
    : gradients_(gradients), tp_(grid.tp), world_(grid.world), host_resident_(host_resident) {
  T5S_CHECK(tp_ != nullptr && world_ != nullptr, "the optimizer needs the grid's TP and world groups");
  torch::NoGradGuard no_grad;
  if (host_resident_) gradients_.keep_host_copies();  // what the update reads
  const auto& slots = gradients_.slots();
  for (size_t b = 0; b < gradients_.buckets().size(); ++b) {
    const GradientBucket& bucket = gradients_.buckets()[b];
    // Master weights in the main gradients' dtype: fp32, or fp64 for fp64 models. Padding stays zero.
    torch::Tensor full = torch::zeros({bucket.elements}, bucket.options);
    for (size_t k : bucket.slots) {
      const ParameterSlot& slot = slots[k];
      full.narrow(0, slot.offset, slot.numel).copy_(slot.param.detach().reshape({-1}));
    }
    const auto [begin, end] = gradients_.owned_range(b);
    if (host_resident_) {
      master_.push_back(host_zeros(end - begin, full.scalar_type(), full.device()));
      master_.back().copy_(full.narrow(0, begin, end - begin));
    } else {
      master_.push_back(full.narrow(0, begin, end - begin).clone());
    }
    // Where every parameter of the bucket has the masters' dtype and the rank owns the whole bucket, the
    // parameters become views of the master buffer: the copy back after each update (a full pass over the
    // weights) disappears.
    const auto param_dtype = slots[bucket.slots.front()].param.scalar_type();
    for (size_t k : bucket.slots) {
      T5S_CHECK(slots[k].param.scalar_type() == param_dtype, "parameter ", slots[k].name, " is ",
                c10::toString(slots[k].param.scalar_type()), " beside ", c10::toString(param_dtype),
                " parameters in its gradient bucket: a model trains in one dtype");
    }
    // (Host-resident state never aliases: the parameters stay where the model is, written back once per step.)
    const bool alias = !host_resident_ && !gradients_.zero1() && param_dtype == full.scalar_type();
    // Otherwise the parameters become views of one flat buffer in their own dtype, so that the write-back after
    // each update is one copy per bucket rather than one per parameter. (Without ZeRO-1 the owned range is the
    // whole bucket.) The Variables stay the same objects, so hooks and module references hold.
    torch::Tensor buffer = alias ? master_.back() : full.to(param_dtype);
    for (size_t k : bucket.slots) {
      const ParameterSlot& slot = slots[k];
      slot.param.set_data(buffer.narrow(0, slot.offset, slot.numel).view(slot.param.sizes()));
    }
    parameters_are_masters_.push_back(alias);
    parameter_buffers_.push_back(alias ? torch::Tensor() : buffer);
    if (host_resident_) {
      host_staging_.push_back(buffer.is_cpu() ? torch::Tensor() : host_zeros(end - begin, param_dtype, full.device()));
    }
    // The owned range as runs of TP-split or replicated elements (slots sit back to back; neighbours merged).
    for (size_t k : bucket.slots) {
      const ParameterSlot& slot = slots[k];
      const int64_t from = std::max(slot.offset, begin), to = std::min(slot.offset + slot.numel, end);
      if (from >= to) continue;
      NormRun run{b, from - begin, to - from, slot.layout.is_split()};
      if (!norm_runs_.empty() && norm_runs_.back().bucket == b && norm_runs_.back().split == run.split &&
          norm_runs_.back().begin + norm_runs_.back().length == run.begin) {
        norm_runs_.back().length += run.length;
      } else {
        norm_runs_.push_back(run);
      }
    }
  }
}

StepOutcome DistributedOptimizer::step(double learning_rate, const GradientScaling& scaling) {
  T5S_CHECK(scaling.loss_scale > 0.0 && std::isfinite(scaling.loss_scale), "the loss scale must be positive, got ",
            scaling.loss_scale);
  T5S_CHECK(scaling.max_grad_norm >= 0.0, "max_grad_norm must be >= 0 (0: no clipping), got ", scaling.max_grad_norm);
  torch::NoGradGuard no_grad;
  StepOutcome outcome;
  if (scaling.skip_non_finite && found_non_finite(*world_)) {
    outcome.skipped = true;
    outcome.grad_norm = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device()));
    return outcome;
  }
  const double unscale = 1.0 / scaling.loss_scale;
  outcome.grad_norm = grad_norm(unscale);
  // Unscaled and clipped as clip_grad_norm_ does (no scaled copy of every gradient), by a factor that stays on the
  // device: the norm is not read on the host here.
  torch::Tensor grad_scale;
  if (unscale != 1.0 || scaling.max_grad_norm > 0.0) {
    grad_scale = torch::full({}, unscale, outcome.grad_norm.options());
    if (scaling.max_grad_norm > 0.0) {
      grad_scale = grad_scale * (scaling.max_grad_norm / (outcome.grad_norm + 1e-6)).clamp_max(1.0);
    }
    grad_scale = grad_scale.to(master_.empty() ? torch::kFloat32 : gradients_.owned_grad(0).scalar_type());
    if (host_resident_) grad_scale = grad_scale.to(torch::kCPU);
  }
  ++step_count_;
  outcome.learning_rate = update(learning_rate, grad_scale);
  return outcome;
}

void DistributedOptimizer::scale_gradients(const torch::Tensor& grad_scale) {
  if (!grad_scale.defined()) return;
  for (size_t b = 0; b < master_.size(); ++b) update_grad(b).mul_(grad_scale);
}

torch::Device DistributedOptimizer::device() const {
  return gradients_.buckets().empty() ? torch::Device(torch::kCPU) : gradients_.buckets()[0].options.device();
}

torch::Tensor DistributedOptimizer::grad_norm(double grad_scale) {
  torch::NoGradGuard no_grad;
  const auto fp64 = torch::TensorOptions().dtype(torch::kFloat64).device(device());
  // One norm per run of the owned gradients, read in place (views, no copies): a single multi-tensor kernel on
  // a GPU. Each run's norm comes in the gradients' dtype (fp32 accumulation is accurate over one run); the
  // squares are summed in fp64.
  std::vector<torch::Tensor> runs[2];  // [0] replicated, [1] TP-split
  for (const NormRun& run : norm_runs_) {
    runs[run.split].push_back(gradients_.owned_grad(run.bucket).narrow(0, run.begin, run.length));
  }
  auto sum_of_squares = [&](const std::vector<torch::Tensor>& views) {
    if (views.empty()) return torch::zeros({1}, fp64);
    return torch::stack(at::_foreach_norm(views, 2)).to(torch::kFloat64).square().sum().reshape({1});
  };
  torch::Tensor split_sq = sum_of_squares(runs[1]);
  const torch::Tensor replicated_sq = sum_of_squares(runs[0]);
  tp_->all_reduce_sum(split_sq);  // each TP rank holds a different shard of the split parameters
  torch::Tensor total = split_sq + replicated_sq;
  if (gradients_.zero1()) gradients_.dp().all_reduce_sum(total);  // each DP rank holds a different chunk
  return total.sqrt().reshape({}) * std::abs(grad_scale);
}

bool DistributedOptimizer::found_non_finite(Communicator& world) {
  torch::NoGradGuard no_grad;
  // One flag on the device for all buckets: a single host synchronisation, after the all-reduce.
  torch::Tensor flag = torch::zeros({1}, master_.empty() ? torch::TensorOptions() : gradients_.owned_grad(0).options());
  for (size_t b = 0; b < master_.size(); ++b) {
    flag = torch::maximum(flag, (~torch::isfinite(gradients_.owned_grad(b))).any().to(flag.scalar_type()).reshape({1}));
  }
  world.all_reduce_max(flag);
  return flag.item<double>() > 0.0;
}

void DistributedOptimizer::write_back(size_t b) {
  if (parameters_are_masters_[b]) return;  // the update wrote them
  torch::Tensor& buffer = parameter_buffers_[b];
  // The owned new weights in the parameters' dtype where the parameters are: host-resident state rounds them on
  // the host (into pinned staging off the CPU) and sends them in one copy.
  // (The staging is written again only after the next step's update has waited for the host copies of its
  // gradients, each of which is ordered after the compute stream's work at its start, so after this copy, which
  // precedes the next forward on that stream: it has finished by then.)
  torch::Tensor owned = master_[b];
  if (host_resident_ && host_staging_[b].defined()) {
    host_staging_[b].copy_(master_[b]);
    if (!gradients_.zero1()) {
      buffer.copy_(host_staging_[b], /*non_blocking=*/true);
      return;
    }
    owned = host_staging_[b].to(buffer.device(), /*non_blocking=*/true);
  }
  if (gradients_.zero1()) {
    // Gathered in the parameters' dtype (rounding is per element, so rounding before the gather gives the same
    // parameters): half the traffic of fp32 masters for bf16 and fp16 models.
    buffer.copy_(gradients_.dp().all_gather(owned.to(buffer.scalar_type())).reshape({-1}));
  } else {
    buffer.copy_(owned);
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
