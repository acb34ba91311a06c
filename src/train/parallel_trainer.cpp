#include "train/parallel_trainer.h"

#include "core/check.h"
#include "model/vocab_parallel_cross_entropy.h"

namespace t5scale {

torch::ScalarType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return torch::kFloat32;
    case Precision::kBf16: return torch::kBFloat16;
    case Precision::kFp16: return torch::kHalf;
  }
  return torch::kFloat32;
}

std::vector<Seq2SeqBatch> replica_micro_batches(const Seq2SeqBatch& global, const ProcessGrid& grid,
                                                int64_t micro_batches) {
  const int64_t rows = global.input_ids.size(0);
  T5S_CHECK(micro_batches >= 1 && rows % (grid.dp_size * micro_batches) == 0, "a global batch of ", rows,
            " sequences does not split into dp ", grid.dp_size, " x ", micro_batches, " micro-batches");
  const int64_t per_replica = rows / grid.dp_size, per_micro = per_replica / micro_batches;
  std::vector<Seq2SeqBatch> out;
  for (int64_t m = 0; m < micro_batches; ++m) {
    const int64_t begin = grid.dp_rank * per_replica + m * per_micro;
    out.push_back({global.input_ids.narrow(0, begin, per_micro), global.attention_mask.narrow(0, begin, per_micro),
                   global.labels.narrow(0, begin, per_micro)});
  }
  return out;
}

ParallelTrainer::ParallelTrainer(T5Model model, ProcessGrid grid, ParallelTrainingOptions options)
    : model_(std::move(model)), grid_(std::move(grid)), options_(options) {
  T5S_CHECK(&model_->tp() == grid_.tp.get(), "the model must be built over the grid's TP group");
  auto params = model_->named_parameters();
  std::vector<ParameterSlot> slots;
  for (const ParameterLayout& layout : model_->parameter_layouts()) {
    torch::Tensor param = params[layout.name];
    if (!param.requires_grad()) continue;  // frozen
    ParameterSlot slot;
    slot.name = layout.name;
    slot.param = param;
    slot.layout = layout;
    slot.weight_decay = layout.name.find("norm") == std::string::npos && layout.name.find("bias") == std::string::npos;
    slots.push_back(std::move(slot));
  }
  T5S_CHECK(!slots.empty(), "every parameter is frozen: nothing to train");
  gradients_ = std::make_unique<GradientBuckets>(std::move(slots), grid_.dp, options_.bucket_bytes, options_.zero1);
  optimizer_ = std::make_unique<DistributedAdamW>(*gradients_, grid_.tp, options_.adamw);
  loss_scale_ = options_.precision == Precision::kFp16 ? options_.initial_loss_scale : 1.0;
}

StepResult ParallelTrainer::step(const std::vector<Seq2SeqBatch>& micro_batches, double learning_rate) {
  T5S_CHECK(!micro_batches.empty(), "a step needs at least one micro-batch");
  model_->train();
  const torch::Device device = model_->shared->weight.device();
  const auto count_options = torch::TensorOptions().dtype(torch::kFloat64).device(device);

  // 1. The global number of target tokens: the denominator of the mean loss on every rank.
  torch::Tensor global_tokens = torch::zeros({1}, count_options);
  for (const auto& batch : micro_batches) global_tokens += (batch.labels != kIgnoreIndex).sum().to(torch::kFloat64);
  grid_.dp->all_reduce_sum(global_tokens);
  const double token_count = std::max(global_tokens.item<double>(), 1.0);

  // 2. Forward and backward per micro-batch; the DP reduction starts during the last backward.
  gradients_->zero();
  torch::Tensor loss_sum = torch::zeros({1}, count_options);
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const Seq2SeqBatch& batch = micro_batches[i];
    gradients_->begin_micro_batch(i + 1 == micro_batches.size());
    const torch::Tensor logits =
        model_->forward(batch.input_ids.to(device), batch.attention_mask.to(device),
                        model_->shift_right(batch.labels).to(device));
    const torch::Tensor summed = model_->token_losses(logits, batch.labels.to(device)).sum();
    (summed * (loss_scale_ / token_count)).backward();
    loss_sum += summed.detach().to(torch::kFloat64);
  }
  // 3. Gradients reduced over DP; in fp16, agree on overflow.
  gradients_->finish();
  grid_.dp->all_reduce_sum(loss_sum);

  StepResult result;
  result.loss = loss_sum.item<double>() / token_count;
  result.target_tokens = static_cast<int64_t>(token_count);
  result.loss_scale = loss_scale_;
  double grad_scale = 1.0 / loss_scale_;
  if (options_.precision == Precision::kFp16) {
    if (optimizer_->found_non_finite(*grid_.world)) {
      loss_scale_ *= 0.5;
      steps_since_overflow_ = 0;
      result.skipped = true;
      return result;
    }
    if (++steps_since_overflow_ % options_.loss_scale_growth_interval == 0) loss_scale_ *= 2.0;
  }
  // 4. Clipping as torch::nn::utils::clip_grad_norm_ does it: scale by max_norm / (norm + 1e-6) when below 1.
  result.grad_norm = optimizer_->grad_norm(grad_scale);
  if (options_.max_grad_norm > 0.0) {
    grad_scale *= std::min(1.0, options_.max_grad_norm / (result.grad_norm + 1e-6));
  }
  // 5. The update.
  optimizer_->step(learning_rate, grad_scale);
  return result;
}

}  // namespace t5scale
