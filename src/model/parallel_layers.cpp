#include "model/parallel_layers.h"

#include "core/check.h"
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
  torch::Tensor output = sinking_linear(region_input, weight, weight_gradient_sink);
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

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& input) {
  torch::Tensor local_input = options.input_is_parallel() ? input : scatter_to_tensor_parallel_region(input, *tp);
  return reduce_from_tensor_parallel_region(sinking_linear(local_input, weight, weight_gradient_sink), *tp);
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

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& token_ids) {
  if (tp->size() == 1) return torch::embedding(weight, token_ids);
  const torch::Tensor outside = (token_ids < vocab_start_) | (token_ids >= vocab_start_ + vocab_per_rank());
  const torch::Tensor local_ids = (token_ids - vocab_start_).masked_fill(outside, 0);
  const torch::Tensor local = torch::embedding(weight, local_ids).masked_fill(outside.unsqueeze(-1), 0.0);
  return reduce_from_tensor_parallel_region(local, *tp);
}

std::vector<ParameterLayout> VocabParallelEmbeddingImpl::parameter_layouts() const {
  return {{"weight", {options.vocab_size(), options.embedding_dim()}, 0}};
}

void VocabParallelEmbeddingImpl::pretty_print(std::ostream& stream) const {
  stream << "t5scale::VocabParallelEmbedding(vocab=" << options.vocab_size() << ", dim=" << options.embedding_dim()
         << ", tp=" << tp->size() << ")";
}

}  // namespace t5scale
