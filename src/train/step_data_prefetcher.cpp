#include "train/step_data_prefetcher.h"

#include <chrono>

namespace t5scale {

StepDataPrefetcher::StepDataPrefetcher(DistributedBatchSampler& sampler, ExampleSource& source, CollateOptions collate,
                                       bool pin_memory)
    : sampler_(sampler),
      source_(source),
      collate_(collate),
      pin_memory_(pin_memory),
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
      data.source_tokens += batch.attention_mask.sum().item<int64_t>();
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
