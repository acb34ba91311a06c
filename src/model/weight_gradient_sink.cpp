#include "model/weight_gradient_sink.h"

#include "model/autograd_saved_object.h"

namespace t5scale {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct LinearIntoWeightGradientSink : torch::autograd::Function<LinearIntoWeightGradientSink> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& weight,
                               const WeightGradientSink* sink) {
    ctx->save_for_backward({input, weight});
    save_object(ctx, "sink", sink);
    return torch::nn::functional::linear(input, weight);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& grad_output = grads[0];
    const torch::Tensor grad_input = ctx->needs_input_grad(0) ? grad_output.matmul(weight) : torch::Tensor();
    const torch::Tensor grad_2d = grad_output.reshape({-1, grad_output.size(-1)});
    const torch::Tensor input_2d = input.reshape({-1, input.size(-1)});
    return {grad_input, weight_gradient_into(saved_object<const WeightGradientSink>(ctx, "sink"), grad_2d, input_2d),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor weight_gradient_into(const WeightGradientSink* sink, const torch::Tensor& grad_output_2d,
                                   const torch::Tensor& input_2d) {
  if (sink == nullptr) return grad_output_2d.t().mm(input_2d);
  (*sink)(grad_output_2d, input_2d);
  return torch::Tensor();
}

torch::Tensor sinking_linear(const torch::Tensor& input, const torch::Tensor& weight, const WeightGradientSink* sink) {
  if (weight.requires_grad() && torch::GradMode::is_enabled()) {
    return LinearIntoWeightGradientSink::apply(input, weight, sink != nullptr && *sink ? sink : nullptr);
  }
  return torch::nn::functional::linear(input, weight);
}

}  // namespace t5scale
