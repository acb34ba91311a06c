#include "model/activation_checkpoint.h"

#include "model/autograd_saved_object.h"

namespace t5scale {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// What a recomputing function keeps of its forward: the RNG states, and which inputs required a gradient (the
// recompute gives them exactly these flags: a mask that required grad in the recompute only would send SDPA to
// another backend, with other dropout masks).
void save_forward_state(AutogradContext* ctx, ParallelRng& rng, const std::vector<torch::Tensor>& inputs) {
  const ParallelRng::State state = rng.get_state();
  ctx->saved_data["default_generator"] = state.default_generator;
  ctx->saved_data["tensor_parallel_generator"] = state.tensor_parallel;
  c10::List<bool> requires_grad;
  for (const torch::Tensor& input : inputs) requires_grad.push_back(input.requires_grad());
  ctx->saved_data["requires_grad"] = requires_grad;
}

// The saved inputs, detached, with the forward's requires-grad flags (undefined ones stay undefined).
std::vector<torch::Tensor> recompute_inputs(AutogradContext* ctx, const std::vector<torch::Tensor>& saved) {
  const c10::List<bool> requires_grad = ctx->saved_data["requires_grad"].toBoolList();
  std::vector<torch::Tensor> inputs;
  for (size_t i = 0; i < saved.size(); ++i) {
    inputs.push_back(saved[i].defined() ? saved[i].detach().requires_grad_(requires_grad.get(i)) : saved[i]);
  }
  return inputs;
}

// A masking in saved_data under `name` ("<name>_causal", "<name>_key_lengths" when it has them), and back.
void save_masking(AutogradContext* ctx, const std::string& name, const AttentionMasking& masking) {
  ctx->saved_data[name + "_causal"] = masking.causal;
  if (masking.key_lengths.defined()) ctx->saved_data[name + "_key_lengths"] = masking.key_lengths;
}

AttentionMasking saved_masking(AutogradContext* ctx, const std::string& name) {
  AttentionMasking masking;
  masking.causal = ctx->saved_data[name + "_causal"].toBool();
  const auto lengths = ctx->saved_data.find(name + "_key_lengths");
  if (lengths != ctx->saved_data.end()) masking.key_lengths = lengths->second.toTensor();
  return masking;
}

// While alive, the generators draw as in the forward; after, they continue from the states they had before.
class ForwardRngRestored {
 public:
  ForwardRngRestored(AutogradContext* ctx, ParallelRng& rng) : rng_(rng), now_(rng.get_state()) {
    rng_.set_state({ctx->saved_data["default_generator"].toTensor(),
                    ctx->saved_data["tensor_parallel_generator"].toTensor()});
  }
  ~ForwardRngRestored() { rng_.set_state(now_); }
  ForwardRngRestored(const ForwardRngRestored&) = delete;
  ForwardRngRestored& operator=(const ForwardRngRestored&) = delete;

 private:
  ParallelRng& rng_;
  ParallelRng::State now_;
};

struct CheckpointedBlock : torch::autograd::Function<CheckpointedBlock> {
  // Custom functions take no undefined tensors: an encoder block gets empty placeholders for the cross-attention
  // inputs and has_cross = false; a decoder block of an unpadded batch one for its cross mask, has_cross_bias false.
  static torch::Tensor forward(AutogradContext* ctx, T5BlockImpl* block, ParallelRng* rng, bool has_cross,
                               bool has_cross_bias, bool sequence_split, AttentionMasking self_masking,
                               AttentionMasking cross_masking, const torch::Tensor& hidden,
                               const torch::Tensor& self_bias, const torch::Tensor& encoder_output,
                               const torch::Tensor& cross_bias) {
    save_object(ctx, "block", block);
    save_object(ctx, "rng", rng);
    ctx->saved_data["has_cross"] = has_cross;
    ctx->saved_data["has_cross_bias"] = has_cross_bias;
    ctx->saved_data["sequence_split"] = sequence_split;
    save_masking(ctx, "self_masking", self_masking);
    save_masking(ctx, "cross_masking", cross_masking);
    save_forward_state(ctx, *rng, {hidden, self_bias, encoder_output, cross_bias});
    ctx->save_for_backward({hidden, self_bias, encoder_output, cross_bias});
    torch::NoGradGuard no_grad;
    const SequenceLayout layout = sequence_split ? SequenceLayout::kSplit : SequenceLayout::kReplicated;
    if (!has_cross) return block->forward(hidden, self_bias, {}, {}, layout, self_masking);
    return block->forward(hidden, self_bias, encoder_output, has_cross_bias ? cross_bias : torch::Tensor(), layout,
                          self_masking, cross_masking);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* block = saved_object<T5BlockImpl>(ctx, "block");
    auto* rng = saved_object<ParallelRng>(ctx, "rng");
    const bool has_cross = ctx->saved_data["has_cross"].toBool();
    auto saved = ctx->get_saved_variables();
    if (!has_cross) saved[2] = saved[3] = torch::Tensor();
    if (!ctx->saved_data["has_cross_bias"].toBool()) saved[3] = torch::Tensor();

    const std::vector<torch::Tensor> inputs = recompute_inputs(ctx, saved);
    torch::Tensor output;
    {
      ForwardRngRestored forward_rng(ctx, *rng);
      torch::AutoGradMode enable_grad(true);
      output = block->forward(inputs[0], inputs[1], inputs[2], inputs[3],
                              ctx->saved_data["sequence_split"].toBool() ? SequenceLayout::kSplit
                                                                         : SequenceLayout::kReplicated,
                              saved_masking(ctx, "self_masking"), saved_masking(ctx, "cross_masking"));
    }

    // Parameters' gradients accumulate as in any backward; the inputs' gradients are returned.
    torch::autograd::backward({output}, {grad_outputs[0]});
    variable_list grads(7);  // the block, the RNG, the flags and the maskings: no gradient
    for (const auto& t : inputs) grads.push_back(t.defined() ? t.grad() : torch::Tensor());
    return grads;
  }
};

struct RecomputedAttentionCore : torch::autograd::Function<RecomputedAttentionCore> {
  // A core without a bias (cross-attention of an unpadded batch) gets an empty placeholder and has_bias false.
  static torch::Tensor forward(AutogradContext* ctx, T5AttentionImpl* attention, bool has_bias,
                               AttentionMasking masking, const torch::Tensor& query, const torch::Tensor& key,
                               const torch::Tensor& value, const torch::Tensor& bias) {
    save_object(ctx, "attention", attention);
    ctx->saved_data["has_bias"] = has_bias;
    save_masking(ctx, "masking", masking);
    save_forward_state(ctx, *attention->rng, {query, key, value, bias});
    ctx->save_for_backward({query, key, value, bias});
    torch::NoGradGuard no_grad;
    return attention->core_kept(query, key, value, has_bias ? bias : torch::Tensor(), masking);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* attention = saved_object<T5AttentionImpl>(ctx, "attention");
    auto saved = ctx->get_saved_variables();
    if (!ctx->saved_data["has_bias"].toBool()) saved[3] = torch::Tensor();
    const std::vector<torch::Tensor> inputs = recompute_inputs(ctx, saved);
    torch::Tensor output;
    {
      ForwardRngRestored forward_rng(ctx, *attention->rng);
      torch::AutoGradMode enable_grad(true);
      output = attention->core_kept(inputs[0], inputs[1], inputs[2], inputs[3], saved_masking(ctx, "masking"));
    }
    std::vector<torch::Tensor> wanted;  // the inputs whose gradients autograd asks for
    for (const torch::Tensor& input : inputs) {
      if (input.defined() && input.requires_grad()) wanted.push_back(input);
    }
    const variable_list grads =
        torch::autograd::grad({output}, wanted, {grad_outputs[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
    variable_list result = {torch::Tensor(), torch::Tensor(), torch::Tensor()};
    size_t next = 0;
    for (const torch::Tensor& input : inputs) {
      result.push_back(input.defined() && input.requires_grad() ? grads[next++] : torch::Tensor());
    }
    return result;
  }
};

}  // namespace

torch::Tensor recomputed_attention_core(T5AttentionImpl& attention, const torch::Tensor& query,
                                        const torch::Tensor& key, const torch::Tensor& value,
                                        const torch::Tensor& bias, const AttentionMasking& masking) {
  const torch::Tensor absent = torch::empty({0}, query.options());
  return RecomputedAttentionCore::apply(&attention, bias.defined(), masking, query, key, value,
                                        bias.defined() ? bias : absent);
}

torch::Tensor checkpointed_block_forward(T5BlockImpl& block, ParallelRng& rng, const torch::Tensor& hidden,
                                         const torch::Tensor& self_bias, const torch::Tensor& encoder_output,
                                         const torch::Tensor& cross_bias, SequenceLayout layout,
                                         const AttentionMasking& self_masking, const AttentionMasking& cross_masking) {
  const bool has_cross = encoder_output.defined(), has_cross_bias = has_cross && cross_bias.defined();
  const torch::Tensor absent = torch::empty({0}, hidden.options());
  return CheckpointedBlock::apply(&block, &rng, has_cross, has_cross_bias, layout == SequenceLayout::kSplit,
                                  self_masking, cross_masking, hidden,
                                  self_bias, has_cross ? encoder_output : absent,
                                  has_cross_bias ? cross_bias : absent);
}

}  // namespace t5scale
