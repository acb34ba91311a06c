// The training loop's data: each step's micro-batches are read and collated on a thread of their own while the step
// before runs, so that the step does not wait for the disk or the collation. The sampler stays on the caller's
// thread and is advanced in step order, one step ahead of what has been handed out; position() is the position of the
// next step to hand out, what a checkpoint saves, so a step prepared but not taken is served again after a resume.
// A read or collation error surfaces from next() at the step whose data it is.
#pragma once

#include <future>
#include <vector>

#include "data/batch_sampler.h"
#include "data/example_source.h"
#include "model/t5_model.h"
#include "train/collate.h"

namespace t5scale {

// One step's data: this replica's micro-batches on the host (in page-locked memory where a GPU reads them, so that
// their copies to it run asynchronously), and what the step's record counts of them.
struct StepData {
  std::vector<Seq2SeqBatch> micro_batches;
  int64_t samples = 0;
  int64_t source_tokens = 0;  // unpadded
  double model_flops = 0.0;   // of a training step on these examples, unpadded (plan/cost_model.h)
  SamplerPosition position_after;  // the sampler's position once this step is taken
  double epoch_after = 0.0;        // the epoch fraction once this step is taken
};

class StepDataPrefetcher {
 public:
  // pin_memory: page-locked host memory for the batches (a CUDA device reads them); false on the CPU. `model`: what
  // a step's model FLOPs are counted for.
  StepDataPrefetcher(DistributedBatchSampler& sampler, ExampleSource& source, CollateOptions collate, bool pin_memory,
                     const ModelConfig& model);
  ~StepDataPrefetcher();  // waits for a preparation in flight
  StepDataPrefetcher(const StepDataPrefetcher&) = delete;
  StepDataPrefetcher& operator=(const StepDataPrefetcher&) = delete;

  // The next step's data (prepared while the previous step ran, else now), and the preparation of the one after
  // it starts. *wait_s: how long this call waited for it.
  StepData next(double* wait_s = nullptr);
  // The position of the next step to hand out, and the epoch fraction of the steps handed out so far.
  SamplerPosition position() const { return handed_position_; }
  double epoch_fraction() const { return handed_epoch_; }
  // Continue from a saved position: a prepared step is dropped.
  void restore(const SamplerPosition& position);

 private:
  std::future<StepData> prepare_next();  // advances the sampler here, reads and collates on another thread
  void drop_prepared();

  DistributedBatchSampler& sampler_;
  ExampleSource& source_;
  CollateOptions collate_;
  bool pin_memory_;
  ModelConfig model_;
  std::future<StepData> prepared_;
  SamplerPosition handed_position_;
  double handed_epoch_ = 0.0;
};

}  // namespace t5scale
