#include "model/tensor_parallel_mappings.h"

#include "core/check.h"
#include "model/autograd_saved_object.h"

namespace t5scale {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

void save_group(AutogradContext* ctx, Communicator& tp) { save_object(ctx, "tp", &tp); }
Communicator& saved_group(AutogradContext* ctx) { return *saved_object<Communicator>(ctx, "tp"); }

// Sums over the group in place, as Megatron does: the tensors reduced here (the gradient arriving at the entry of a
// column-parallel region, the fresh output of a row-parallel product) are read by no one else, so a copy would
// only cost memory traffic.
torch::Tensor all_reduce_in_place(torch::Tensor tensor, Communicator& tp) {
  if (!tensor.is_contiguous()) tensor = tensor.contiguous();
  tp.all_reduce_sum(tensor);
  return tensor;
}

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, Communicator* tp) {
    save_group(ctx, *tp);
    return input.view_as(input);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduce_in_place(grads[0], saved_group(ctx)), torch::Tensor()};
  }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, Communicator* tp) {
    if (!input.is_contiguous()) return all_reduce_in_place(input.contiguous(), *tp);
    ctx->mark_dirty({input});
    return all_reduce_in_place(input, *tp);
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

// A mapping whose forward is one collective (or split) and whose backward is its twin on the gradient (the helpers of
// the header, defined below).
template <torch::Tensor (*Forward)(const torch::Tensor&, Communicator&),
          torch::Tensor (*Backward)(const torch::Tensor&, Communicator&)>
struct PairedMapping : torch::autograd::Function<PairedMapping<Forward, Backward>> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, Communicator* tp) {
    save_group(ctx, *tp);
    return Forward(input, *tp);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {Backward(grads[0], saved_group(ctx)), torch::Tensor()};
  }
};

using ScatterToRegion = PairedMapping<split_last_dim, gather_last_dim>;
using GatherFromRegion = PairedMapping<gather_last_dim, split_last_dim>;
using GatherFromSequenceRegion = PairedMapping<gather_sequence, reduce_scatter_sequence>;
using ReduceScatterToSequenceRegion = PairedMapping<reduce_scatter_sequence, gather_sequence>;

}  // namespace

torch::Tensor gather_sequence(const torch::Tensor& split, Communicator& tp) {
  T5S_CHECK(split.dim() == 3, "gather_sequence: expected a (B, T / tp, C) tensor, got ", split.sizes());
  // all_gather stacks the runs in rank order: (tp, B, T / tp, C) holds the B x T tokens in order.
  return tp.all_gather(split.contiguous()).view({split.size(0), split.size(1) * tp.size(), split.size(2)});
}

torch::Tensor reduce_scatter_sequence(const torch::Tensor& full, Communicator& tp) {
  T5S_CHECK(full.dim() == 3, "reduce_scatter_sequence: expected a (B, T, C) tensor, got ", full.sizes());
  T5S_CHECK(full.size(1) % tp.size() == 0, "sequence parallelism: the sequence length ", full.size(1),
            " is not divisible by the ", tp.name(), " group size ", tp.size());
  return tp.reduce_scatter_sum(full.contiguous().view({-1}))
      .view({full.size(0), full.size(1) / tp.size(), full.size(2)});
}

torch::Tensor split_last_dim(const torch::Tensor& input, Communicator& tp) {
  const int64_t full = input.size(-1);
  T5S_CHECK(full % tp.size() == 0, "last dimension ", full, " is not divisible by the ", tp.name(), " group size ",
            tp.size());
  const int64_t part = full / tp.size();
  return input.narrow(-1, tp.rank() * part, part).contiguous();
}

torch::Tensor gather_last_dim(const torch::Tensor& input, Communicator& tp) {
  torch::Tensor stacked = tp.all_gather(input.contiguous());  // (tp, ..., part)
  return torch::cat(stacked.unbind(0), -1);
}

torch::Tensor copy_to_tensor_parallel_region(const torch::Tensor& input, Communicator& tp) {
  return tp.size() == 1 ? input : CopyToRegion::apply(input, &tp);
}
torch::Tensor reduce_from_tensor_parallel_region(const torch::Tensor& input, Communicator& tp) {
  return tp.size() == 1 ? input : ReduceFromRegion::apply(input, &tp);
}
torch::Tensor scatter_to_tensor_parallel_region(const torch::Tensor& input, Communicator& tp) {
  return tp.size() == 1 ? input : ScatterToRegion::apply(input, &tp);
}
torch::Tensor gather_from_tensor_parallel_region(const torch::Tensor& input, Communicator& tp) {
  return tp.size() == 1 ? input : GatherFromRegion::apply(input, &tp);
}
torch::Tensor gather_from_sequence_parallel_region(const torch::Tensor& split, Communicator& tp) {
  return tp.size() == 1 ? split : GatherFromSequenceRegion::apply(split, &tp);
}
torch::Tensor reduce_scatter_to_sequence_parallel_region(const torch::Tensor& full, Communicator& tp) {
  return tp.size() == 1 ? full : ReduceScatterToSequenceRegion::apply(full, &tp);
}

}  // namespace t5scale
