// Gradient-accumulation fusion (Megatron's gradient_accumulation_fusion): a linear layer whose weight has a sink
// hands the weight's gradient to it as the two factors of one GEMM, and the sink computes it straight into its fp32
// gradient buffer (writing the step's first gradient, adding later ones). No compute-dtype weight gradient is made and
// then added into the buffer: one tensor and one pass fewer per weight and micro-batch. The trainer's gradient
// buckets install the sinks (GradientBuckets::weight_gradient_sink); without one the gradient goes to the weight's .grad.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace t5scale {

// grad_output_2d (rows, out) and input_2d (rows, in): the weight's gradient is grad_output_2d^T input_2d (out, in).
using WeightGradientSink = std::function<void(const torch::Tensor& grad_output_2d, const torch::Tensor& input_2d)>;

// input (..., in) W^T for weight (out, in). Where the weight's gradient is wanted, backward gives the input's gradient
// as torch::nn::functional::linear does and the weight's to `sink` where one is set (`sink` must outlive the graph;
// the weight gets no .grad), else as the weight's .grad, made in the weight's own layout (out, in): linear's backward
// makes it transposed, which .grad then copies, one weight-sized tensor more at that moment. Without a gradient it is
// torch::nn::functional::linear.
torch::Tensor sinking_linear(const torch::Tensor& input, const torch::Tensor& weight, const WeightGradientSink* sink);

// A weight's gradient grad_output_2d^T input_2d handed to `sink` (then undefined is returned), or without one returned
// in the weight's layout (out, in), for backward to give autograd. sinking_linear's backward and other linear
// backwards of the model (column_parallel_from_sequence_split) share it.
torch::Tensor weight_gradient_into(const WeightGradientSink* sink, const torch::Tensor& grad_output_2d,
                                   const torch::Tensor& input_2d);

}  // namespace t5scale
