// The training job's class and helpers, shared by its source files (include it from job/training_job*.cpp only;
// the interface is job/training_job.h): training_job.cpp sets the job up, trains and evaluates;
// training_job_checkpoints.cpp saves, resumes and checks what a checkpoint may change.
#pragma once

#include <mpi.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>

#include "config/config_registry.h"
#include "core/check.h"
#include "core/text_file.h"
#include "core/units.h"
#include "data/batch_sampler.h"
#include "data/example_source.h"
#include "data/hf_tokenizer_files.h"
#include "data/synthetic_examples.h"
#include "data/tokenized_dataset.h"
#include "data/tokenizer.h"
#include "dist/cuda_backend.h"
#include "dist/lowest_rank_text.h"
#include "dist/mpi_runtime.h"
#include "dist/process_grid.h"
#include "io/hf_checkpoint.h"
#include "io/sharded_checkpoint.h"
#include "job/evaluation.h"
#include "job/failure_note.h"
#include "job/preemption.h"
#include "job/run_lock.h"
#include "job/run_record.h"
#include "job/step_data_prefetcher.h"
#include "plan/cost_model.h"
#include "plan/lr_schedule.h"
#include "plan/memory_advice.h"
#include "plan/resolved_run.h"
#include "train/collate.h"
#include "train/device_probe.h"
#include "telemetry/probes.h"
#include "train/optimizer_resharding.h"
#include "train/parallel_trainer.h"

namespace t5scale::training_job_internal {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f s", seconds);
  return text;
}

inline std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds);
  char text[32];
  std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return text;
}

// Early stopping on one evaluation metric: patience evaluations without an improvement larger than min_delta.
struct EarlyStopping {
  std::string metric;
  bool higher_better = false;
  double min_delta = 0.0;
  int64_t patience = 0;
  double best = std::numeric_limits<double>::quiet_NaN();
  int64_t best_step = -1;
  int64_t evaluations_without_improvement = 0;

  // Returns true when training should stop.
  bool observe(double value, int64_t step) {
    const bool improved = std::isnan(best) || (higher_better ? value > best + min_delta : value < best - min_delta);
    if (improved) {
      best = value;
      best_step = step;
      evaluations_without_improvement = 0;
      return false;
    }
    return ++evaluations_without_improvement >= patience;
  }
  nlohmann::json to_json() const {
    return {{"best", std::isnan(best) ? nlohmann::json(nullptr) : nlohmann::json(best)},
            {"best_step", best_step},
            {"evaluations_without_improvement", evaluations_without_improvement}};
  }
  void from_json(const nlohmann::json& j) {
    best = j.at("best").is_null() ? std::numeric_limits<double>::quiet_NaN() : j.at("best").get<double>();
    best_step = j.at("best_step").get<int64_t>();
    evaluations_without_improvement = j.at("evaluations_without_improvement").get<int64_t>();
  }
};

class TrainingJob {
 public:
  TrainingJob(const RunConfig& config, std::string source) : config_(config), source_(std::move(source)) {}
  ~TrainingJob() { set_failure_recorder(nullptr); }
  int run();
  // An allocation that failed, with the phase and step it failed in, the prediction and the device's figures.
  std::string out_of_memory_report(const std::string& allocator_message) const {
    const std::string predicted =
        resolved_.memory_inputs ? resolved_.checkpointing.memory.describe() : std::string("not made");
    return msg("out of memory ", phase_, " (step ", step_, "): ", allocator_message, "\n  predicted per rank: ",
               predicted, "\n  ", memory_figures(device_),
               "\n  the memory model did not foresee this; to make it fit, see parallel.activation_checkpointing, "
               "parallel.zero1 / zero2, parallel.tp and train.micro_batch (jobs/CONFIG_REFERENCE.md)");
  }

  // This rank is going down with `error`: the run record keeps what it can (RunRecord::record_failure).
  void record_failure(const std::string& error) {
    record_exit_code(2);
    if (record_) record_->record_failure(error, step_);
    if (lock_) lock_->release();
  }

 private:
  void refuse_what_cannot_work(int world_size);
  void set_up_grid();
  void take_run_lock();
  void set_up_data();
  void set_up_tokenizer();
  void resolve();
  void set_up_sampler();
  void set_up_model_and_trainer();
  void set_up_records();
  int64_t device_share_bytes() const;
  std::string memory_refusal(int64_t share_bytes, int64_t ranks_per_node) const;
  // false: the run was complete already and nothing was changed (the job ends there, exit 0).
  bool resume_or_start();
  void accept_config_changes(const LoadedCheckpoint& loaded);
  void restore_rng(const LoadedCheckpoint& loaded);
  // One optimizer step, its log line when due (every log_every steps, or when the step's agreed flags say the clock
  // has made one due: flags[2]). False: stop (diverged).
  bool train_step(torch::Tensor& flags);
  void evaluate_now(bool final_evaluation);
  void save_checkpoint();
  void export_model();  // export.hf_dir: the Hugging Face folder and the tokenizer beside it
  int finish(const std::string& status);  // the exit code of that ending
  void write_generations(const EvaluationResult& result);
  void checkpoint_then_fail_if_any_rank(const std::string& mine);
  std::string exit_code_path() const;
  void record_exit_code(int code) const;
  NamedTensors checkpoint_tensors();
  CheckpointIdentity checkpoint_identity() const;
  nlohmann::json run_state() const;
  std::string decode(const std::vector<int32_t>& ids) const;
  bool rank0() const { return grid_.world_rank() == 0; }
  void log(const std::string& line) const {
    if (rank0()) std::cout << line << std::endl;
  }

  RunConfig config_;
  std::string source_;
  int world_size_ = 1;

  // Grid and device.
  ProcessGrid grid_;
  torch::Device device_ = torch::kCPU;

  // Data.
  std::shared_ptr<TokenizedDataset> dataset_;
  std::optional<Tokenizer> tokenizer_;
  std::unique_ptr<ExampleSource> train_examples_, eval_examples_;
  int64_t vocab_size_ = 0;
  // What the run is (batch split, sampler options, model shape, LR plan, memory model), as the planner sees it too.
  ResolvedRun resolved_;
  BatchPlan batch_;
  std::unique_ptr<DistributedBatchSampler> sampler_;
  CollateOptions collate_options_;
  std::unique_ptr<StepDataPrefetcher> prefetcher_;  // owns the sampler's stepping once made

  // Model and optimisation.
  ModelConfig model_config_;
  std::shared_ptr<ParallelRng> rng_;
  std::unique_ptr<ParallelTrainer> trainer_;
  LrPlan lr_plan_;
  int64_t total_steps_ = 0;
  int64_t checkpoint_every_blocks_ = 0;  // activation checkpointing as resolved: 0 none, k every k-th block
  std::string attention_kernels_;        // what the model's attention runs (T5Model::attention_kernels)

  // Progress.
  int64_t step_ = 0;  // optimizer steps completed
  double telemetry_time_s_ = 0.0;  // the recording's cost over every attempt (the checkpoint carries it)
  std::optional<EarlyStopping> early_stopping_;
  Clock::time_point last_checkpoint_ = Clock::now();
  Clock::time_point last_step_line_ = Clock::now();  // rank 0's last step line (or the training's start)
  int64_t first_step_ = 0;                           // the step this attempt's training starts from
  int64_t last_checkpoint_step_ = -1;

  std::vector<std::string> config_changes_;  // "step N: key: before -> after", every attempt's, oldest first
  std::string phase_ = "at start-up";  // what the job is doing, for a report of an allocation that fails

  // Records: the checkpoint store on every rank, the run record (HDF5 run file, meters) on every rank, writing on
  // rank 0.
  std::unique_ptr<RunLock> lock_;  // rank 0: this job owns the run's place (run file, checkpoints)
  std::unique_ptr<ShardedCheckpointStore> checkpoints_;
  std::unique_ptr<RunRecord> record_;
  std::unique_ptr<std::ofstream> generations_;
};

}  // namespace t5scale::training_job_internal
