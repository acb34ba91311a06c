#include "model/vocab_parallel_cross_entropy.h"

#include "core/check.h"

namespace t5scale {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  // logits (N, Vl), labels (N) -> loss (N)
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits_in, const torch::Tensor& labels,
                               int64_t vocab_start, Communicator* tp) {
    const int64_t vocab_per_rank = logits_in.size(-1);
    // bf16 and fp16 logits are upcast; fp32 and fp64 keep their precision.
    const auto compute_dtype = torch::promote_types(logits_in.scalar_type(), torch::kFloat32);
    torch::Tensor logits = logits_in.to(compute_dtype);
    torch::Tensor row_max = std::get<0>(logits.max(-1));  // (N)
    tp->all_reduce_max(row_max);
    logits = logits - row_max.unsqueeze(-1);

    const torch::Tensor ignored = labels == kIgnoreIndex;
    const torch::Tensor not_here = ignored | (labels < vocab_start) | (labels >= vocab_start + vocab_per_rank);
    const torch::Tensor local_labels = (labels - vocab_start).masked_fill(not_here, 0);
    torch::Tensor target_logit = logits.gather(-1, local_labels.unsqueeze(-1)).squeeze(-1).masked_fill(not_here, 0.0);
    tp->all_reduce_sum(target_logit);

    torch::Tensor exp_logits = logits.exp();
    torch::Tensor sum_exp = exp_logits.sum(-1);
    tp->all_reduce_sum(sum_exp);

    const torch::Tensor loss = (sum_exp.log() - target_logit).masked_fill(ignored, 0.0);
    const torch::Tensor softmax = exp_logits / sum_exp.unsqueeze(-1);
    ctx->save_for_backward({softmax, local_labels, not_here, ignored});
    ctx->saved_data["input_dtype"] = static_cast<int64_t>(logits_in.scalar_type());
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& softmax = saved[0];
    const torch::Tensor& local_labels = saved[1];
    const torch::Tensor& not_here = saved[2];
    const torch::Tensor& ignored = saved[3];
    // d loss / d logits = softmax - one_hot(label), for the label's column on the rank that holds it.
    torch::Tensor grad = softmax.clone();
    grad.scatter_add_(-1, local_labels.unsqueeze(-1), -(~not_here).to(grad.scalar_type()).unsqueeze(-1));
    grad = grad * grads[0].masked_fill(ignored, 0.0).unsqueeze(-1);
    const auto input_dtype = static_cast<torch::ScalarType>(ctx->saved_data["input_dtype"].toInt());
    return {grad.to(input_dtype), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& local_logits, const torch::Tensor& labels,
                                           int64_t vocab_start, Communicator& tp) {
  T5S_CHECK(local_logits.sizes().slice(0, local_logits.dim() - 1) == labels.sizes(), "logits ", local_logits.sizes(),
            " and labels ", labels.sizes(), " disagree");
  const int64_t vocab_per_rank = local_logits.size(-1);
  const torch::Tensor flat_logits = local_logits.reshape({-1, vocab_per_rank});
  const torch::Tensor flat_labels = labels.reshape({-1});
  return VocabParallelCrossEntropy::apply(flat_logits, flat_labels, vocab_start, &tp).view(labels.sizes());
}

torch::Tensor vocab_parallel_argmax(const torch::Tensor& local_logits, int64_t vocab_start, Communicator& tp) {
  auto [local_max, local_index] = local_logits.max(-1);
  if (tp.size() == 1) return local_index + vocab_start;
  const torch::Tensor all_max = tp.all_gather(local_max.contiguous());                   // (tp, ...)
  const torch::Tensor all_index = tp.all_gather((local_index + vocab_start).contiguous());  // (tp, ...)
  // torch::argmax over the rank axis returns the first maximum, i.e. the lowest rank, i.e. the lowest token id.
  const torch::Tensor best_rank = all_max.argmax(0, /*keepdim=*/true);
  return all_index.gather(0, best_rank).squeeze(0);
}

torch::Tensor vocab_parallel_log_softmax(const torch::Tensor& local_logits, Communicator& tp) {
  if (tp.size() == 1) return torch::log_softmax(local_logits, -1);
  torch::Tensor row_max = std::get<0>(local_logits.max(-1, /*keepdim=*/true));  // (..., 1)
  tp.all_reduce_max(row_max);
  const torch::Tensor shifted = local_logits - row_max;
  torch::Tensor sum_exp = shifted.exp().sum(-1, /*keepdim=*/true);
  tp.all_reduce_sum(sum_exp);
  return shifted - sum_exp.log();
}

std::tuple<torch::Tensor, torch::Tensor> vocab_parallel_topk(const torch::Tensor& local_scores, int64_t k,
                                                             int64_t vocab_start, Communicator& tp) {
  const int64_t vocab_per_rank = local_scores.size(-1);
  T5S_CHECK(k >= 1 && k <= vocab_per_rank * tp.size(), "top-", k, " of a vocabulary of ", vocab_per_rank * tp.size(),
            " ids");
  // A rank may hold fewer than k ids; the k largest of the whole are among the ranks' own largest.
  auto [values, local_ids] = local_scores.topk(std::min(k, vocab_per_rank), -1);
  torch::Tensor ids = local_ids + vocab_start;
  if (tp.size() == 1) return {values, ids};
  // (tp, ..., k') -> (..., tp * k'), in rank order
  const torch::Tensor all_values = tp.all_gather(values.contiguous()).movedim(0, -2).flatten(-2);
  const torch::Tensor all_ids = tp.all_gather(ids.contiguous()).movedim(0, -2).flatten(-2);
  auto [best_values, best] = all_values.topk(k, -1);
  return {best_values, all_ids.gather(-1, best)};
}

}  // namespace t5scale
