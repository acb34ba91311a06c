// The run file: one HDF5 file per training run (schema 1 of the project's interface spec), written by rank 0.
//
//   RunFile file = RunFile::create("results/demo/run.h5", attributes, {.flush_every_steps = 10});
//   file.append_step(step_record);        // buffered in memory; every 10th row flushes
//   file.append_eval(eval_record);        // flushed at once: evaluations are rare and expensive
//   file.finish({}, "completed");         // the final /summary and status
//
// Why it is built like this: the file must survive a SIGKILL with every flushed row readable, without
// h5clear. So it is created complete under a temporary name (every attribute, every dataset), renamed, and
// reopened as a SWMR writer; from then on HDF5 only sees dataset extends, writes, rewrites of existing
// attributes and flushes (what SWMR allows), and only inside flush(): between flushes no HDF5 call is in flight,
// so a kill loses at most the buffered rows. Readers open it with SWMR read (h5py: File(path, "r", swmr=True)).
// At the end the SWMR writer is closed, the file reopened plainly and the final /summary written; a kill inside that short window leaves a file that needs
// `h5clear -s` (HDF5 1.10 has no public call to open it otherwise).
//
// Layout (every dataset has a `unit` attribute; chunks of 256 rows; floats unknown at write time are NaN):
//   /            root attributes: the caller's (see run_file_caller_attributes()) plus format, schema_version,
//                start_time_utc, status, attempt, resumed_from_step, error, error_step, which this class owns
//   /steps/<c>   one row per optimizer step; scalars (rows,), per-rank columns (rows, world_size)
//   /eval/<c>    one row per evaluation
//   /summary     attributes: the run's figures, current at every flush (run_summary.h)
// Per-rank columns (memory, power, energy) are float64 so that "not measured" can be NaN (a CPU rank has no
// allocator statistics); the integer columns named int64/int8 in the spec are integers. A kill inside a flush
// can leave the columns of a group at different lengths, and rows allocated but not written read as fill values
// (NaN for floats, -1 for integers; `step` is written last): readers take the shortest column's length and drop
// rows whose step is -1. The trainer flushes at every checkpoint, so that a resume finds every row it keeps.
//
// /summary: the run's figures over every row in the file (all attempts), declared and computed in
// telemetry/run_summary.h. Every attribute exists from the file's creation; each flush rewrites the figures
// (status "running"), so a file whose job was killed holds those of its flushed rows; record_failure() sets its
// status to "failed"; finish() writes the final figures and status.
//
// Not thread-safe (serial HDF5 builds are not): one thread of rank 0 writes.
//
// Resume (RunFile::resume): the old file is read with SWMR read (it works after a SIGKILL), the rows with
// 0 <= step <= keep_through_step of /steps and /eval are copied into a new temporary file that replaces it,
// `attempt` is the old one + 1 and `resumed_from_step` = keep_through_step. `start_time_utc` stays the first
// start's. Offsets for the new attempt (last_wall_time_s(), last_gpu_energy_j(rank), last_cpu_energy_j(rank))
// come from the NEWEST row the old file held, kept or not: the steps that are redone after the checkpoint were
// computed and paid for once already, so wall time and energy since the first start (and the cost figures
// built on them) include them. Time and energy after the old file's last flush are not known and not counted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/hdf5_attributes.h"
#include "telemetry/run_description.h"
#include "telemetry/run_summary.h"
#include "telemetry/step_record.h"

namespace t5scale {

// The room for the text of root attribute `error` (longer messages are cut).
inline constexpr size_t kErrorCapacityBytes = 1024;

using AttributeValue = Hdf5Value;  // core/hdf5_attributes.h
// Root attributes in the order they are written.
using RunAttributes = Hdf5Attributes;

enum class AttributeKind { kInt64, kFloat64, kString };

// The root attributes the caller gives to create()/resume() (RunDescription's fields), with their kinds, in the
// order they are written. (format, schema_version, start_time_utc, status, attempt, resumed_from_step are the run
// file's own.)
const std::vector<std::pair<std::string, AttributeKind>>& run_file_caller_attributes();

// The schema as data, generated from the tables the writer uses: format and schema_version, the root attributes
// (name, dtype, set by the run file or its caller), and the columns of /steps and /eval (name, dtype int64 /
// int8 / float64, unit, per_rank). Its checked-in copy, analysis/t5scale_analyze/run_file_schema.json, is what
// the analysis and the Python test writers read (regenerate it: cmake --build build --target
// update_run_file_schema).
std::string run_file_schema_json();

struct RunFileOptions {
  int64_t flush_every_steps = 10;  // >= 1
  // finish() reopens the file after SWMR; a reader holding it open (h5py, a status poll) holds HDF5's file lock.
  // The reopen waits this long for readers to let go, then goes on without the lock: no reader may end a run.
  double reader_lock_wait_s = 10.0;
};

class RunFile {
 public:
  // Creates `path` (replacing a file there) with attempt 0. Throws t5scale::Error naming every attribute at fault
  // (world_size or nodes < 1, nodes not dividing world_size, tp x dp != world_size, an unknown energy source) or
  // the folder that does not exist.
  static RunFile create(const std::string& path, const RunDescription& description,
                        const RunFileOptions& options = {});
  // Continues the run file at `path` after resuming training from the checkpoint of step keep_through_step
  // (see the header comment). When `path` cannot be opened at all it is renamed to
  // `<path>.unreadable.<UTC time>` (never deleted) and a new file is started with attempt 1; when there is no
  // file, a new one is started with attempt 1; both are described in *warning (empty otherwise). A file of
  // another format or schema, or made for another world size, is refused with an Error and left as it is.
  static RunFile resume(const std::string& path, const RunDescription& description, int64_t keep_through_step,
                        const RunFileOptions& options = {}, std::string* warning = nullptr);

  RunFile(RunFile&&) noexcept;
  RunFile& operator=(RunFile&&) noexcept;
  // Flushes and closes a file that was not finished; its status stays "running" (a killed run's). Errors are
  // printed, not thrown.
  ~RunFile();

  // Buffers the row (throws on per-rank vectors whose length is not world_size, or after finish()); flushes
  // when flush_every_steps rows are waiting.
  void append_step(const StepRecord& record);
  // Buffers the row and flushes at once.
  void append_eval(const EvalRecord& record);
  // Writes every buffered row and flushes the file to disk: after it returns, a SWMR reader sees those rows
  // even if this process is killed.
  void flush();
  // Flushes, ends SWMR, writes the final /summary (over every row in the file, this attempt's and the kept
  // ones, with `inputs`) and sets the root status: one of completed, preempted, diverged, failed. The object is then closed.
  // Returns the figures written.
  RunAttributes finish(const RunSummaryInputs& inputs, const std::string& status);
  // The job is going down with an error: flushes the rows, sets status "failed", `error` (the message, cut to
  // kErrorCapacityBytes) and `error_step` (optimizer steps completed), all while SWMR is still on, so that a
  // kill at any moment leaves a file that opens; then closes it. /summary holds the flushed rows' figures, with
  // status "failed".
  void record_failure(const std::string& error, int64_t step);

  const std::string& path() const;
  int64_t world_size() const;
  int64_t attempt() const;
  int64_t resumed_from_step() const;
  const std::string& start_time_utc() const;
  int64_t steps_written() const;   // /steps rows in the file (flushed)
  int64_t steps_buffered() const;  // appended, not yet flushed
  int64_t evals_written() const;

  // Resume offsets (0 for a new file): the newest row of the file resumed from, kept or not.
  double last_wall_time_s() const;        // largest wall_time_s of its /steps and /eval rows
  double last_gpu_energy_j(int rank) const;  // its newest /steps row's value (NaN if it was unknown)
  double last_cpu_energy_j(int rank) const;
  int64_t last_step() const;              // its largest step (-1 when it had none)
  // The mean step time over every /steps row of the run so far (kept, appended, and an earlier grid's): the
  // log line's figure, /summary's arithmetic.
  double mean_step_time_s() const;

 private:
  struct Impl;
  explicit RunFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace t5scale
