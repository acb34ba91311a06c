#include "model/activation_checkpoint.h"

#include "model/autograd_saved_object.h"

namespace t5scale {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

struct CheckpointedBlock : torch::autograd::Function<CheckpointedBlock> {
  // Custom functions take no undefined tensors: an encoder block gets empty placeholders for the cross-attention
  // inputs and has_cross = false; a decoder block of an unpadded batch one for its cross mask, has_cross_bias false.
  static torch::Tensor forward(AutogradContext* ctx, T5BlockImpl* block, ParallelRng* rng, bool has_cross,
                               bool has_cross_bias, bool sequence_split, const torch::Tensor& hidden,
                               const torch::Tensor& self_bias, const torch::Tensor& encoder_output,
                               const torch::Tensor& cross_bias) {
    const ParallelRng::State state = rng->get_state();
    save_object(ctx, "block", block);
    save_object(ctx, "rng", rng);
    ctx->saved_data["default_generator"] = state.default_generator;
    ctx->saved_data["tensor_parallel_generator"] = state.tensor_parallel;
    ctx->saved_data["has_cross"] = has_cross;
    ctx->saved_data["has_cross_bias"] = has_cross_bias;
    ctx->saved_data["sequence_split"] = sequence_split;
    // Which inputs the forward saw requiring grad: the recompute gives them exactly these flags (a mask that
    // required grad in the recompute only would send SDPA to another backend, with other dropout masks).
    ctx->saved_data["requires_grad"] = c10::List<bool>({hidden.requires_grad(), self_bias.requires_grad(),
                                                        encoder_output.requires_grad(), cross_bias.requires_grad()});
    ctx->save_for_backward({hidden, self_bias, encoder_output, cross_bias});
    torch::NoGradGuard no_grad;
    const SequenceLayout layout = sequence_split ? SequenceLayout::kSplit : SequenceLayout::kReplicated;
    if (!has_cross) return block->forward(hidden, self_bias, {}, {}, layout);
    return block->forward(hidden, self_bias, encoder_output, has_cross_bias ? cross_bias : torch::Tensor(), layout);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* block = saved_object<T5BlockImpl>(ctx, "block");
    auto* rng = saved_object<ParallelRng>(ctx, "rng");
    const bool has_cross = ctx->saved_data["has_cross"].toBool();
    auto saved = ctx->get_saved_variables();
    if (!has_cross) saved[2] = saved[3] = torch::Tensor();
    if (!ctx->saved_data["has_cross_bias"].toBool()) saved[3] = torch::Tensor();

    // Recompute with the forward's RNG states, then give the generators back the states they have now.
    const ParallelRng::State now = rng->get_state();
    rng->set_state({ctx->saved_data["default_generator"].toTensor(),
                    ctx->saved_data["tensor_parallel_generator"].toTensor()});
    const c10::List<bool> requires_grad = ctx->saved_data["requires_grad"].toBoolList();
    std::vector<torch::Tensor> inputs;
    for (size_t i = 0; i < saved.size(); ++i) {
      inputs.push_back(saved[i].defined() ? saved[i].detach().requires_grad_(requires_grad.get(i)) : saved[i]);
    }
    torch::Tensor output;
    {
      torch::AutoGradMode enable_grad(true);
      output = block->forward(inputs[0], inputs[1], inputs[2], inputs[3],
                              ctx->saved_data["sequence_split"].toBool() ? SequenceLayout::kSplit
                                                                         : SequenceLayout::kReplicated);
    }
    rng->set_state(now);

    // Parameters' gradients accumulate as in any backward; the inputs' gradients are returned.
    torch::autograd::backward({output}, {grad_outputs[0]});
    variable_list grads = {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    for (const auto& t : inputs) grads.push_back(t.defined() ? t.grad() : torch::Tensor());
    return grads;
  }
};

struct RecomputedAttentionCore : torch::autograd::Function<RecomputedAttentionCore> {
  // A core without a bias (cross-attention of an unpadded batch) gets an empty placeholder and has_bias false.
  static torch::Tensor forward(AutogradContext* ctx, T5AttentionImpl* attention, bool has_bias,
                               const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                               const torch::Tensor& bias) {
    const ParallelRng::State state = attention->rng->get_state();
    save_object(ctx, "attention", attention);
    ctx->saved_data["default_generator"] = state.default_generator;
    ctx->saved_data["tensor_parallel_generator"] = state.tensor_parallel;
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["requires_grad"] = c10::List<bool>(
        {query.requires_grad(), key.requires_grad(), value.requires_grad(), has_bias && bias.requires_grad()});
    ctx->save_for_backward({query, key, value, bias});
    torch::NoGradGuard no_grad;
    return attention->core_kept(query, key, value, has_bias ? bias : torch::Tensor());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* attention = saved_object<T5AttentionImpl>(ctx, "attention");
    ParallelRng& rng = *attention->rng;
    auto saved = ctx->get_saved_variables();
    if (!ctx->saved_data["has_bias"].toBool()) saved[3] = torch::Tensor();
    const c10::List<bool> requires_grad = ctx->saved_data["requires_grad"].toBoolList();
    std::vector<torch::Tensor> inputs, wanted;
    for (size_t i = 0; i < saved.size(); ++i) {
      inputs.push_back(saved[i].defined() ? saved[i].detach().requires_grad_(requires_grad.get(i)) : saved[i]);
      if (requires_grad.get(i)) wanted.push_back(inputs.back());
    }
    // Recompute with the forward's RNG states, then give the generators back the states they have now.
    const ParallelRng::State now = rng.get_state();
    rng.set_state({ctx->saved_data["default_generator"].toTensor(),
                   ctx->saved_data["tensor_parallel_generator"].toTensor()});
    torch::Tensor output;
    {
      torch::AutoGradMode enable_grad(true);
      output = attention->core_kept(inputs[0], inputs[1], inputs[2], inputs[3]);
    }
    rng.set_state(now);
    const variable_list grads =
        torch::autograd::grad({output}, wanted, {grad_outputs[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
    variable_list result = {torch::Tensor(), torch::Tensor()};
    size_t next = 0;
    for (size_t i = 0; i < inputs.size(); ++i) result.push_back(requires_grad.get(i) ? grads[next++] : torch::Tensor());
    return result;
  }
};

}  // namespace

torch::Tensor recomputed_attention_core(T5AttentionImpl& attention, const torch::Tensor& query,
                                        const torch::Tensor& key, const torch::Tensor& value,
                                        const torch::Tensor& bias) {
  const torch::Tensor absent = torch::empty({0}, query.options());
  return RecomputedAttentionCore::apply(&attention, bias.defined(), query, key, value, bias.defined() ? bias : absent);
}

torch::Tensor checkpointed_block_forward(T5BlockImpl& block, ParallelRng& rng, const torch::Tensor& hidden,
                                         const torch::Tensor& self_bias, const torch::Tensor& encoder_output,
                                         const torch::Tensor& cross_bias, SequenceLayout layout) {
  const bool has_cross = encoder_output.defined(), has_cross_bias = has_cross && cross_bias.defined();
  const torch::Tensor absent = torch::empty({0}, hidden.options());
  return CheckpointedBlock::apply(&block, &rng, has_cross, has_cross_bias, layout == SequenceLayout::kSplit, hidden,
                                  self_bias, has_cross ? encoder_output : absent,
                                  has_cross_bias ? cross_bias : absent);
}

}  // namespace t5scale
