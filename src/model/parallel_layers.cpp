#include "model/parallel_layers.h"

#include "core/check.h"
#include "model/autograd_saved_object.h"
#include "model/parameter_allocation.h"
#include "model/tensor_parallel_mappings.h"

namespace t5scale {

std::pair<int64_t, int64_t> shard_range(const ParameterLayout& layout, int tp_rank, int tp_size) {
  if (!layout.is_split()) return {0, layout.full_shape.at(0)};
  const int64_t full = layout.full_shape.at(layout.split_dim);
  T5S_CHECK(full % tp_size == 0, layout.name, ": dimension ", layout.split_dim, " of size ", full,
            " is not divisible by tp ", tp_size);
  const int64_t part = full / tp_size;
  return {tp_rank * part, part};
}

torch::Tensor shard_of(const torch::Tensor& full, const ParameterLayout& layout, int tp_rank, int tp_size) {
  T5S_CHECK(full.sizes().vec() == layout.full_shape, layout.name, ": expected full shape ",
            c10::IntArrayRef(layout.full_shape), ", got ", full.sizes());
  if (!layout.is_split()) return full.contiguous().clone();
  const auto [offset, length] = shard_range(layout, tp_rank, tp_size);
  return full.narrow(layout.split_dim, offset, length).contiguous().clone();
}

// ---- ColumnParallelLinear ----

ColumnParallelLinearImpl::ColumnParallelLinearImpl(ColumnParallelLinearOptions options_, CommunicatorPtr tp_)
    : options(std::move(options_)), tp(std::move(tp_)) {
  reset();
}

void ColumnParallelLinearImpl::reset() {
  T5S_CHECK(options.out_features() % tp->size() == 0, "ColumnParallelLinear: out_features ", options.out_features(),
            " is not divisible by tp ", tp->size());
  weight = register_parameter("weight", allocate_parameter("a column-parallel weight",
                                                          {options.out_features() / tp->size(), options.in_features()},
                                                          options.param_options()));
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& input) {
  const torch::Tensor region_input = options.copy_input() ? copy_to_tensor_parallel_region(input, *tp) : input;
  torch::Tensor output = sinking_linear(region_input, weight, &weight_gradient_sink);
  return options.gather_output() ? gather_from_tensor_parallel_region(output, *tp) : output;
}

std::vector<ParameterLayout> ColumnParallelLinearImpl::parameter_layouts() const {
  return {{"weight", {options.out_features(), options.in_features()}, 0}};
}

void ColumnParallelLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "t5scale::ColumnParallelLinear(in=" << options.in_features() << ", out=" << options.out_features()
         << ", tp=" << tp->size() << ", gather_output=" << options.gather_output()
         << ", copy_input=" << options.copy_input() << ")";
}

// ---- column-parallel layers reading a sequence-split input ----

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SequenceGatheredLinears : torch::autograd::Function<SequenceGatheredLinears> {
  // weights[i] and sinks[i] (an address, 0 for none) belong together; the weights travel as tensors so that autograd
  // sees them as inputs.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& split_input, Communicator* tp,
                               c10::List<int64_t> sinks, torch::TensorList weights) {
    save_object(ctx, "tp", tp);
    ctx->saved_data["sinks"] = sinks;
    std::vector<torch::Tensor> saved{split_input};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    const torch::Tensor gathered = gather_sequence(split_input, *tp);
    variable_list outputs;
    for (const torch::Tensor& weight : weights) outputs.push_back(torch::nn::functional::linear(gathered, weight));
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator& tp = *saved_object<Communicator>(ctx, "tp");
    const auto saved = ctx->get_saved_variables();
    const c10::List<int64_t> sinks = ctx->saved_data["sinks"].toIntList();
    const torch::Tensor gathered = gather_sequence(saved[0], tp);  // gathered again rather than kept
    const torch::Tensor gathered_2d = gathered.reshape({-1, gathered.size(-1)});
    torch::Tensor grad_gathered;
    variable_list weight_grads;
    for (size_t i = 0; i < sinks.size(); ++i) {
      const torch::Tensor& weight = saved[1 + i];
      const torch::Tensor& grad = grads[i];
      weight_grads.emplace_back();
      if (!grad.defined()) continue;
      const torch::Tensor part = grad.matmul(weight);
      grad_gathered = grad_gathered.defined() ? grad_gathered.add_(part) : part;
      if (!weight.requires_grad()) continue;
      const torch::Tensor grad_2d = grad.reshape({-1, grad.size(-1)});
      const auto* sink = reinterpret_cast<const WeightGradientSink*>(static_cast<intptr_t>(sinks.get(i)));
      weight_grads.back() = weight_gradient_into(sink, grad_2d, gathered_2d);
    }
    variable_list result{grad_gathered.defined() ? reduce_scatter_sequence(grad_gathered, tp) : torch::Tensor(),
                         torch::Tensor(), torch::Tensor()};
    result.insert(result.end(), weight_grads.begin(), weight_grads.end());
    return result;
  }
};

}  // namespace

std::vector<torch::Tensor> column_parallel_from_sequence_split(const torch::Tensor& split_input,
                                                               const std::vector<SequenceSplitColumnWeight>& weights,
                                                               Communicator& tp) {
  std::vector<torch::Tensor> tensors;
  c10::List<int64_t> sinks;
  for (const SequenceSplitColumnWeight& w : weights) {
    tensors.push_back(w.weight);
    // A sink takes the gradient only where it would in sinking_linear: an empty one is no sink.
    const bool use_sink = w.sink != nullptr && static_cast<bool>(*w.sink);
    sinks.push_back(use_sink ? static_cast<int64_t>(reinterpret_cast<intptr_t>(w.sink)) : 0);
  }
  return SequenceGatheredLinears::apply(split_input, &tp, sinks, torch::TensorList(tensors));
}

std::vector<torch::Tensor> column_parallel_from_sequence_split(const torch::Tensor& split_input,
                                                               const std::vector<ColumnParallelLinearImpl*>& layers,
                                                               Communicator& tp) {
  std::vector<SequenceSplitColumnWeight> weights;
  for (ColumnParallelLinearImpl* layer : layers) {
    T5S_CHECK(!layer->options.copy_input() && !layer->options.gather_output(),
              "column_parallel_from_sequence_split takes layers made with copy_input(false), gather_output(false)");
    T5S_CHECK(layer->tp.get() == &tp, "column_parallel_from_sequence_split: a layer of another TP group");
    weights.push_back({layer->weight, &layer->weight_gradient_sink});
  }
  return column_parallel_from_sequence_split(split_input, weights, tp);
}

// ---- RowParallelLinear ----

RowParallelLinearImpl::RowParallelLinearImpl(RowParallelLinearOptions options_, CommunicatorPtr tp_)
    : options(std::move(options_)), tp(std::move(tp_)) {
  reset();
}

void RowParallelLinearImpl::reset() {
  T5S_CHECK(options.in_features() % tp->size() == 0, "RowParallelLinear: in_features ", options.in_features(),
            " is not divisible by tp ", tp->size());
  weight = register_parameter("weight", allocate_parameter("a row-parallel weight",
                                                          {options.out_features(), options.in_features() / tp->size()},
                                                          options.param_options()));
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& input, SequenceLayout output) {
  torch::Tensor local_input = options.input_is_parallel() ? input : scatter_to_tensor_parallel_region(input, *tp);
  const torch::Tensor partial = sinking_linear(local_input, weight, &weight_gradient_sink);
  return output == SequenceLayout::kSplit ? reduce_scatter_to_sequence_parallel_region(partial, *tp)
                                          : reduce_from_tensor_parallel_region(partial, *tp);
}

std::vector<ParameterLayout> RowParallelLinearImpl::parameter_layouts() const {
  return {{"weight", {options.out_features(), options.in_features()}, 1}};
}

void RowParallelLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "t5scale::RowParallelLinear(in=" << options.in_features() << ", out=" << options.out_features()
         << ", tp=" << tp->size() << ", input_is_parallel=" << options.input_is_parallel() << ")";
}

// ---- VocabParallelEmbedding ----

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(VocabParallelEmbeddingOptions options_, CommunicatorPtr tp_)
    : options(std::move(options_)), tp(std::move(tp_)) {
  reset();
}

void VocabParallelEmbeddingImpl::reset() {
  T5S_CHECK(options.vocab_size() % tp->size() == 0, "VocabParallelEmbedding: vocab_size ", options.vocab_size(),
            " is not divisible by tp ", tp->size());
  vocab_start_ = tp->rank() * vocab_per_rank();
  weight = register_parameter("weight", allocate_parameter("the vocabulary-parallel embedding",
                                                          {vocab_per_rank(), options.embedding_dim()},
                                                          options.param_options()));
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& token_ids, SequenceLayout output) {
  if (tp->size() == 1) return torch::embedding(weight, token_ids);
  const torch::Tensor outside = (token_ids < vocab_start_) | (token_ids >= vocab_start_ + vocab_per_rank());
  const torch::Tensor local_ids = (token_ids - vocab_start_).masked_fill(outside, 0);
  const torch::Tensor local = torch::embedding(weight, local_ids).masked_fill(outside.unsqueeze(-1), 0.0);
  return output == SequenceLayout::kSplit ? reduce_scatter_to_sequence_parallel_region(local, *tp)
                                          : reduce_from_tensor_parallel_region(local, *tp);
}

std::vector<ParameterLayout> VocabParallelEmbeddingImpl::parameter_layouts() const {
  return {{"weight", {options.vocab_size(), options.embedding_dim()}, 0}};
}

void VocabParallelEmbeddingImpl::pretty_print(std::ostream& stream) const {
  stream << "t5scale::VocabParallelEmbedding(vocab=" << options.vocab_size() << ", dim=" << options.embedding_dim()
         << ", tp=" << tp->size() << ")";
}

}  // namespace t5scale
