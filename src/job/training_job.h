// The training job that t5scale-train runs on every rank, top to bottom:
//   set-up    the grid, the data and the model from the resolved config; everything that can be refused is
//             refused before the first tensor is allocated; resume from the newest valid checkpoint;
//   the loop  per step: agree on signals and timed checkpoints, sample and collate this replica's micro-batches,
//             one ParallelTrainer step, telemetry gathered to rank 0 and appended to the run file, a log line,
//             evaluation and early stopping, checkpoints;
//   the end   the last checkpoint, the Hugging Face export, the run file's summary and status.
// The exit code tells the sbatch script what happened: 0 completed (or stopped early), kRequeueExitCode
// preempted (checkpoint written: requeue), kDivergedExitCode diverged (the last good checkpoint is kept).
#pragma once

#include <string>
#include <vector>

#include "config/run_config.h"

namespace t5scale {

constexpr int kDivergedExitCode = 3;

// Every problem that keeps `config` from starting on `world_size` processes before anything is read: validate()'s,
// the world's (tp, the batch split, a study's planned world size) and the files' (dataset, tokenizer, init_from).
// t5scale-train lists them with the config's own before it prints the resolved config; the job refuses on them.
std::vector<ConfigError> problems_before_start(const RunConfig& config, int64_t world_size);

// Collective over MPI_COMM_WORLD (MPI must be initialised). `config` has passed validate(); `config_source` names
// where it came from in messages. Returns the process exit code.
int run_training_job(const RunConfig& config, const std::string& config_source);

}  // namespace t5scale
