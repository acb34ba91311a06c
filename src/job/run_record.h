// The training job's record of itself: every rank measures each step (its StepMeter: memory, GPU and CPU energy,
// job/step_meter.h) into a local buffer; one all-gather over the grid brings the buffered rows to rank 0 at the
// steps that need them (a log line, a flush of the run file, a checkpoint, the end), and rank 0 appends them to
// the HDF5 run file (telemetry/run_file.h) with throughput and MFU. Gathering every flush_every_steps rather than
// every step keeps the recording's cost, collectives included, a small fraction of a step. At the end it writes the
// summary and returns the resource card (telemetry/resource_card.h) of its figures.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>

#include "config/run_config.h"
#include "dist/process_grid.h"
#include "job/evaluation.h"
#include "job/failure_note.h"
#include "job/step_meter.h"
#include "plan/lr_schedule.h"
#include "telemetry/energy_meter.h"
#include "telemetry/resource_card.h"
#include "telemetry/run_file.h"

namespace t5scale {

struct RunRecordInputs {
  const RunConfig* config = nullptr;
  ModelConfig model;
  int world_size = 1;
  BatchPlan batch;
  LrPlan lr_plan;
  int64_t steps_per_epoch = 0;
  torch::Device device = torch::kCPU;
  int64_t predicted_memory_bytes = 0;
  int64_t predicted_host_memory_bytes = 0;  // parallel.offload_optimizer's host-resident state per rank; 0 without
  double predicted_flops_per_step = 0.0;
  double predicted_step_time_s = 0.0;  // the step-time model's median step (NaN: no rates for this device)
  int64_t checkpoint_every_blocks = 0;  // activation checkpointing as run (auto resolved): 0 none
  std::string recomputation = "none";   // the recomputation as run, in words (CheckpointingChoice::describe)
  std::string attention_kernels;        // T5Model::attention_kernels()
};

// Figures for the log line (rank 0; NaN or "n/a" elsewhere).
struct StepSummary {
  double tokens_per_s = 0.0, samples_per_s = 0.0, mean_step_time_s = 0.0;
  std::string mfu_text = "n/a", memory_text = "n/a";
};

struct RunOutcome {
  std::string status;  // completed, preempted, diverged, failed
  double telemetry_time_s = 0.0;  // spent in observe_step over every attempt (the overhead of recording)
};

class RunRecord {
 public:
  RunRecord(const RunRecordInputs& inputs, const ProcessGrid& grid);
  ~RunRecord();

  // A failure that every rank knows and rank 0 records: this rank's record_failure() then writes nothing.
  void leave_failure_to_rank0() { recording_ = false; }

  // Collective. Creates the run file, or, after a resume, keeps its rows up to resumed_from_step (-1: fresh).
  // `config_changes`: every change of the config on a resume so far ("step N: key: before -> after"), recorded as
  // the root attribute config_changes (one a line).
  void start(int64_t resumed_from_step, const std::vector<std::string>& config_changes = {});
  const std::string& path() const { return path_; }

  // Measures this rank's step into the buffer: `step` as the trainer and the job filled it (step_record.h says
  // who fills what); the gather completes it. With gather_now (every rank alike), gathers the buffered rows
  // (one all-gather over the world), appends them to the run file and returns the figures of the last one;
  // otherwise returns an empty summary and runs no collective.
  StepSummary observe_step(const StepRecord& step, bool gather_now);
  // Rank 0 appends the evaluation row (the figures are the same on every rank).
  void observe_evaluation(int64_t step, double epoch, const EvaluationResult& result);
  // Collective: gathers what is buffered and flushes the run file (before a checkpoint, so that every step up to
  // it is on disk).
  void flush();
  // Collective. Writes the summary and the final status; returns the resource card (rank 0; "" elsewhere).
  std::string finish(const RunOutcome& outcome);
  // Not collective: this rank is going down with `error` after `step` optimizer steps (between start() and
  // finish(); elsewhere nothing is recorded). Rank 0 records it in the run file (status failed, error,
  // error_step: RunFile::record_failure). Another rank cannot reach the file, and rank 0 may be waiting in a
  // collective that will never complete: it writes failure_note_path() beside the run file, unless another rank
  // wrote one first. Rows gathered but not yet flushed are written; rows not yet gathered are lost.
  void record_failure(const std::string& error, int64_t step);
  // "<run>.failed.json": {"rank", "error", "step", "host", "time_utc"} of the first rank other than 0 that failed
  // in this attempt (start() removes an older one). The analysis reads it for a run file still saying "running".
  std::string failure_note_path() const;

 private:
  std::vector<double> gather(const std::vector<double>& mine);  // (world x n) row-major on every rank
  StepSummary gather_buffered_steps();                           // collective; appends on rank 0
  void complete_row(StepRecord& row, const std::vector<double>& gathered, size_t rows, size_t k);
  void note_newest_energy(const StepRecord& row);
  StepSummary log_figures(const StepRecord& row) const;

  // This rank's rows since the last gather, and their values to gather (kGatheredPerRow per row, run_record.cpp).
  std::vector<StepRecord> pending_rows_;
  std::vector<double> pending_values_;
  RunDescription description() const;  // the run file's root attributes
  NodeShareInputs node_share_inputs() const;
  double wall_time_s() const;

  RunRecordInputs in_;
  const RunConfig& config_;
  ProcessGrid grid_;
  std::string path_;
  std::chrono::steady_clock::time_point attempt_start_ = std::chrono::steady_clock::now();
  std::unique_ptr<StepMeter> meter_;  // this rank's memory and energy readings
  std::string device_names_, hosts_, driver_version_, cuda_version_;
  std::string config_changes_;  // the run file's config_changes attribute
  int64_t nodes_ = 1;
  NodeShare node_share_;  // the share of its nodes the job holds, as rank 0's node tells it
  double peak_flops_per_device_ = 0.0;
  std::optional<RunFile> file_;  // rank 0
  std::unique_ptr<ReservedFailureNote> note_;  // this rank's note, its space reserved at start()
  bool recording_ = false;       // between start() and finish() or record_failure()

  // Rank 0's offsets of a resumed run and newest energy readings (the run file holds the totals).
  double wall_offset_s_ = 0.0;
  std::vector<double> gpu_energy_offset_j_, cpu_energy_offset_j_;
  std::vector<double> last_gpu_energy_j_, last_cpu_energy_j_;
};

}  // namespace t5scale
