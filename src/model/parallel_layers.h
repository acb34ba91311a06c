// Tensor-parallel building blocks (Megatron-LM style): column- and row-parallel linear layers and a
// vocab-parallel embedding. With a one-rank group each is exactly its ordinary counterpart.
//
//   ColumnParallelLinear(ColumnParallelLinearOptions(4096, 10240), tp, options)
//     Y = X A, A split along its output dimension: weight (out / tp, in); input replicated, output split.
//     Several layers reading one input (q, k, v; wi_0, wi_1) take it through one copy_to_tensor_parallel_region
//     made by their caller, with copy_input(false): one backward all-reduce for all of them, not one each.
//     Under sequence parallelism such a group reads its split input through column_parallel_from_sequence_split.
//   RowParallelLinear(RowParallelLinearOptions(10240, 4096), tp, options)
//     Y = X A, A split along its input dimension: weight (out, in / tp); input split, output all-reduced
//     (sequence parallelism: reduce-scattered to the sequence split).
//   VocabParallelEmbedding(VocabParallelEmbeddingOptions(32128, 4096), tp, options)
//     rows split by vocabulary: weight (vocab / tp, d_model); lookups outside the rank's range give zero,
//     then one all-reduce (sequence parallelism: one reduce-scatter).
//
// Parameters are allocated uninitialised with `param_options` (dtype, device; the meta device counts
// parameters without memory); the model fills them (seeded init or a checkpoint) through their layouts.
#pragma once

#include <torch/torch.h>

#include "dist/communicator.h"
#include "model/parameter_layout.h"
#include "model/tensor_parallel_mappings.h"
#include "model/weight_gradient_sink.h"

namespace t5scale {

struct ColumnParallelLinearOptions {
  ColumnParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);
  TORCH_ARG(bool, gather_output) = false;  // true: all-gather the output to every rank
  TORCH_ARG(bool, copy_input) = true;      // false: the caller put the input in the TP region already
  TORCH_ARG(torch::TensorOptions, param_options) = torch::kFloat32;
};

class ColumnParallelLinearImpl : public torch::nn::Cloneable<ColumnParallelLinearImpl>, public ShardedModule {
 public:
  ColumnParallelLinearImpl(ColumnParallelLinearOptions options, CommunicatorPtr tp);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);
  std::vector<ParameterLayout> parameter_layouts() const override;
  void pretty_print(std::ostream& stream) const override;

  ColumnParallelLinearOptions options;
  CommunicatorPtr tp;
  torch::Tensor weight;  // (out / tp, in)
  WeightGradientSink weight_gradient_sink;  // where backward puts the weight's gradient (none: its .grad)
};
TORCH_MODULE(ColumnParallelLinear);

// Column-parallel weights (out / tp, C) reading one sequence-split input (B, T / tp, C): each weight's output
// (B, T, out / tp) of the all-gathered input. Megatron's sequence-parallel linear: only the split input is kept for
// backward, which all-gathers it again for the weights' gradients (into their sinks where set, else their .grad) and
// reduce-scatters the input's gradient; keeping the gathered (B, T, C) instead would keep tp times the bytes.
struct SequenceSplitColumnWeight {
  torch::Tensor weight;                          // (out / tp, C)
  const WeightGradientSink* sink = nullptr;      // the layer's, which must outlive the graph; none: .grad
};
std::vector<torch::Tensor> column_parallel_from_sequence_split(const torch::Tensor& split_input,
                                                               const std::vector<SequenceSplitColumnWeight>& weights,
                                                               Communicator& tp);
// The same for column-parallel layers made with copy_input(false) (several reading one input: q, k, v; wi_0, wi_1).
std::vector<torch::Tensor> column_parallel_from_sequence_split(const torch::Tensor& split_input,
                                                               const std::vector<ColumnParallelLinearImpl*>& layers,
                                                               Communicator& tp);

struct RowParallelLinearOptions {
  RowParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);
  TORCH_ARG(bool, input_is_parallel) = true;  // false: split the (replicated) input first
  TORCH_ARG(torch::TensorOptions, param_options) = torch::kFloat32;
};

class RowParallelLinearImpl : public torch::nn::Cloneable<RowParallelLinearImpl>, public ShardedModule {
 public:
  RowParallelLinearImpl(RowParallelLinearOptions options, CommunicatorPtr tp);
  void reset() override;
  // output: kReplicated all-reduces the partial products (B, T, out); kSplit reduce-scatters them to this rank's
  // sequence split (B, T / tp, out).
  torch::Tensor forward(const torch::Tensor& input, SequenceLayout output = SequenceLayout::kReplicated);
  std::vector<ParameterLayout> parameter_layouts() const override;
  void pretty_print(std::ostream& stream) const override;

  RowParallelLinearOptions options;
  CommunicatorPtr tp;
  torch::Tensor weight;  // (out, in / tp)
  WeightGradientSink weight_gradient_sink;  // where backward puts the weight's gradient (none: its .grad)
};
TORCH_MODULE(RowParallelLinear);

struct VocabParallelEmbeddingOptions {
  VocabParallelEmbeddingOptions(int64_t vocab_size, int64_t embedding_dim)
      : vocab_size_(vocab_size), embedding_dim_(embedding_dim) {}
  TORCH_ARG(int64_t, vocab_size);
  TORCH_ARG(int64_t, embedding_dim);
  TORCH_ARG(torch::TensorOptions, param_options) = torch::kFloat32;
};

class VocabParallelEmbeddingImpl : public torch::nn::Cloneable<VocabParallelEmbeddingImpl>, public ShardedModule {
 public:
  VocabParallelEmbeddingImpl(VocabParallelEmbeddingOptions options, CommunicatorPtr tp);
  void reset() override;
  // token_ids (B, T) -> (B, T, C), or with output kSplit this rank's sequence split (B, T / tp, C).
  torch::Tensor forward(const torch::Tensor& token_ids, SequenceLayout output = SequenceLayout::kReplicated);
  std::vector<ParameterLayout> parameter_layouts() const override;
  void pretty_print(std::ostream& stream) const override;
  int64_t vocab_start() const { return vocab_start_; }  // first token id held by this rank
  int64_t vocab_per_rank() const { return options.vocab_size() / tp->size(); }

  VocabParallelEmbeddingOptions options;
  CommunicatorPtr tp;
  torch::Tensor weight;  // (vocab / tp, d_model)

 private:
  int64_t vocab_start_ = 0;
};
TORCH_MODULE(VocabParallelEmbedding);

}  // namespace t5scale
