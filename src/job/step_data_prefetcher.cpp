#include "job/step_data_prefetcher.h"

#include <chrono>

#include "core/ignore_index.h"
#include "plan/cost_model.h"

namespace t5scale {

namespace {

// Each row's tokens: the source's unmasked positions, the target's labels that count (kIgnoreIndex pads them).
std::vector<int64_t> row_counts(const torch::Tensor& counted) {
  const torch::Tensor per_row = counted.sum(1).to(torch::kInt64).contiguous();
  return std::vector<int64_t>(per_row.data_ptr<int64_t>(), per_row.data_ptr<int64_t>() + per_row.numel());
}

}  // namespace

StepDataPrefetcher::StepDataPrefetcher(DistributedBatchSampler& sampler, ExampleSource& source, CollateOptions collate,
                                       bool pin_memory, const ModelConfig& model)
    : sampler_(sampler),
      source_(source),
      collate_(collate),
      pin_memory_(pin_memory),
      model_(model),
      handed_position_(sampler.position()),
      handed_epoch_(sampler.epoch_fraction()) {}

StepDataPrefetcher::~StepDataPrefetcher() { drop_prepared(); }

std::future<StepData> StepDataPrefetcher::prepare_next() {
  std::vector<std::vector<int64_t>> indices = sampler_.next_step();
  StepData data;
  data.position_after = sampler_.position();
  data.epoch_after = sampler_.epoch_fraction();
  return std::async(std::launch::async, [this, indices = std::move(indices), data = std::move(data)]() mutable {
    for (const auto& micro_batch : indices) {
      Seq2SeqBatch batch = collate(source_.fetch(micro_batch), collate_);
      data.samples += batch.input_ids.size(0);
      const std::vector<int64_t> source_lengths = row_counts(batch.attention_mask);
      for (const int64_t n : source_lengths) data.source_tokens += n;
      data.model_flops += unpadded_training_flops(model_, source_lengths, row_counts(batch.labels != kIgnoreIndex));
      if (pin_memory_) batch = pinned(batch);
      data.micro_batches.push_back(std::move(batch));
    }
    return std::move(data);
  });
}

StepData StepDataPrefetcher::next(double* wait_s) {
  const auto start = std::chrono::steady_clock::now();
  if (!prepared_.valid()) prepared_ = prepare_next();
  StepData data = prepared_.get();  // rethrows this step's read or collation error
  if (wait_s != nullptr) *wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  handed_position_ = data.position_after;
  handed_epoch_ = data.epoch_after;
  prepared_ = prepare_next();
  return data;
}

void StepDataPrefetcher::drop_prepared() {
  if (!prepared_.valid()) return;
  try {
    prepared_.get();
  } catch (...) {
    // A step that is not taken: its error does not matter.
  }
}

void StepDataPrefetcher::restore(const SamplerPosition& position) {
  drop_prepared();
  sampler_.restore(position);
  handed_position_ = sampler_.position();
  handed_epoch_ = sampler_.epoch_fraction();
}

}  // namespace t5scale
