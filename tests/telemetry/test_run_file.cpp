// RunFile: rows and attributes read back with the HDF5 C API (the full schema check against the spec is
// check_run_file.py, with h5py), flushing, resume and its offsets, and every kind of bad input.
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "support/base_test_support.h"
#include "telemetry/run_file.h"
#include "telemetry/run_status.h"

namespace t5scale {
namespace {

using testing::error_of;
using testing::TempDir;

constexpr int kWorld = 4;

RunDescription attributes(int64_t world = kWorld, int64_t nodes = 2) {
  RunDescription d;
  d.run_id = "x";
  d.world_size = world;
  d.nodes = nodes;
  d.gpus_per_node = world / nodes;
  d.tp = 1;
  d.dp = world;
  d.carbon_intensity_g_per_kwh = 1.0;
  d.energy_source_gpu = "nvml_energy_counter";
  d.energy_source_cpu = "rapl";
  d.price_per_node_hour_usd = 3.0;
  d.node_share_fraction = 1.0;  // whole nodes
  d.pue = 1.5;
  return d;
}

StepRecord step(int64_t s, int world = kWorld) {
  StepRecord r;
  r.step = s;
  r.wall_time_s = 0.5 * static_cast<double>(s);
  r.loss = 10.0 - static_cast<double>(s);
  r.step_time_s = 0.25;
  r.samples = 8;
  r.source_tokens = 100;
  r.target_tokens = 20;
  for (int rank = 0; rank < world; ++rank) {
    for (auto* column : {&r.memory_allocated_bytes, &r.memory_reserved_bytes, &r.memory_peak_bytes,
                         &r.host_memory_bytes, &r.gpu_power_w}) {
      column->push_back(1000.0 + rank);
    }
    r.gpu_energy_j.push_back(10.0 * static_cast<double>(s) + rank);
    r.cpu_energy_j.push_back(5.0 * static_cast<double>(s) + rank);
  }
  return r;
}

EvalRecord evaluation(int64_t s, double loss) {
  EvalRecord r;
  r.step = s;
  r.wall_time_s = 0.5 * static_cast<double>(s) + 0.125;
  r.loss = loss;
  r.num_examples = 10;
  r.eval_time_s = 1.0;
  return r;
}

// ---- Reading back with the C API (SWMR read: works whether or not the writer closed the file) ----

class Reader {
 public:
  explicit Reader(const std::string& path) {
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT);
    EXPECT_GE(file_, 0) << path;
  }
  ~Reader() {
    if (file_ >= 0) H5Fclose(file_);
  }
  std::vector<double> doubles(const std::string& dataset) const {
    const hid_t d = H5Dopen2(file_, dataset.c_str(), H5P_DEFAULT);
    EXPECT_GE(d, 0) << dataset;
    const hid_t space = H5Dget_space(d);
    const auto count = static_cast<size_t>(H5Sget_simple_extent_npoints(space));
    std::vector<double> values(count);
    if (count > 0) EXPECT_GE(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    H5Sclose(space);
    H5Dclose(d);
    return values;
  }
  std::string string_attribute(const std::string& object, const std::string& name) const {
    const hid_t attribute = H5Aopen_by_name(file_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(attribute, 0) << object << " " << name;
    const hid_t type = H5Aget_type(attribute);
    std::string text(H5Tget_size(type), '\0');
    EXPECT_GE(H5Aread(attribute, type, text.data()), 0);
    H5Tclose(type);
    H5Aclose(attribute);
    return text.substr(0, text.find('\0'));
  }
  double number_attribute(const std::string& object, const std::string& name) const {
    const hid_t attribute = H5Aopen_by_name(file_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(attribute, 0) << object << " " << name;
    double value = std::nan("");
    EXPECT_GE(H5Aread(attribute, H5T_NATIVE_DOUBLE, &value), 0);
    H5Aclose(attribute);
    return value;
  }
  bool has(const std::string& object) const { return H5Lexists(file_, object.c_str(), H5P_DEFAULT) > 0; }

 private:
  hid_t file_ = -1;
};

std::vector<double> range_of(int64_t first, int64_t last) {
  std::vector<double> values;
  for (int64_t s = first; s <= last; ++s) values.push_back(static_cast<double>(s));
  return values;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// ---- Writing ----

TEST(RunFile, FlushesEveryNRowsAndOnDemand) {
  TempDir dir;
  const std::string path = dir / "run.h5";
  RunFile file = RunFile::create(path, attributes(), {3});
  EXPECT_EQ(file.attempt(), 0);
  EXPECT_EQ(file.resumed_from_step(), -1);
  for (int s = 1; s <= 7; ++s) file.append_step(step(s));
  EXPECT_EQ(file.steps_written(), 6);
  EXPECT_EQ(file.steps_buffered(), 1);
  file.flush();
  EXPECT_EQ(file.steps_written(), 7);
  EXPECT_EQ(file.steps_buffered(), 0);
  file.append_eval(evaluation(7, 2.5));  // at once
  EXPECT_EQ(file.evals_written(), 1);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(getpid())));
}

TEST(RunFile, AnUnfinishedFileIsClosedWithEveryRowAndStatusRunning) {
  TempDir dir;
  const std::string path = dir / "run.h5";
  {
    RunFile file = RunFile::create(path, attributes(), {100});
    for (int s = 1; s <= 5; ++s) file.append_step(step(s));
  }
  Reader reader(path);
  EXPECT_EQ(reader.doubles("/steps/step"), range_of(1, 5));
  EXPECT_EQ(reader.string_attribute("/", "status"), "running");
  const std::vector<double> energy = reader.doubles("/steps/gpu_energy_j");
  ASSERT_EQ(energy.size(), 5u * kWorld);
  EXPECT_EQ(energy[4 * kWorld + 3], 53.0);  // step 5, rank 3
  // /summary holds the figures of the rows written, as a running file's.
  EXPECT_EQ(reader.string_attribute("/summary", "status"), "running");
  EXPECT_EQ(reader.string_attribute("/summary", "end_time_utc"), "");
  EXPECT_EQ(reader.number_attribute("/summary", "steps_completed"), 5);
}

// The figures a running file holds after a flush are those finish() writes for the same rows without inputs:
// one computation, whenever the file is read.
TEST(RunFile, EveryFlushLeavesTheFiguresFinishWouldWrite) {
  TempDir dir;
  RunFile running = RunFile::create(dir / "running.h5", attributes(), {100});
  RunFile finished = RunFile::create(dir / "finished.h5", attributes(), {100});
  for (RunFile* file : {&running, &finished}) {
    for (int s = 1; s <= 6; ++s) file->append_step(step(s));
    file->append_eval(evaluation(3, 3.0));
    file->append_eval(evaluation(6, 2.5));
  }
  finished.finish({}, "completed");
  Reader live(dir / "running.h5"), done(dir / "finished.h5");
  size_t compared = 0;
  for (const SummaryFigure& figure : summary_figures()) {
    if (figure.dtype == "string") continue;
    const double a = live.number_attribute("/summary", figure.name), b = done.number_attribute("/summary", figure.name);
    EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << figure.name << ": " << a << " vs " << b;
    ++compared;
  }
  EXPECT_EQ(compared, summary_figures().size() - 3);  // all but end_time_utc, status, energy_estimate_method
  EXPECT_EQ(live.number_attribute("/summary", "best_loss_step"), 6);
  EXPECT_EQ(live.number_attribute("/summary", "final_loss"), 2.5);
  // A metric no evaluation computed: NaN, and step -1.
  EXPECT_TRUE(std::isnan(live.number_attribute("/summary", "final_rouge1")));
  EXPECT_EQ(live.number_attribute("/summary", "best_rouge1_step"), -1);
}

// /summary's cost: the node share of the price, recorded beside it; at a price per GPU-hour the GPUs held; without a
// price NaN, never 0.
TEST(RunFile, CostIsTheShareOfTheNodesHeldAndUnknownWithoutAPrice) {
  TempDir dir;
  auto cost_of = [&](const RunDescription& d, const std::string& name) {
    const std::string path = dir / name;
    RunFile file = RunFile::create(path, d, {2});
    file.append_step(step(1));
    RunSummaryInputs inputs;
    inputs.wall_time_s = 3600.0;
    file.finish(inputs, "completed");
    return Reader(path).number_attribute("/summary", "cost_usd");
  };
  RunDescription quarter = attributes();  // 2 nodes at 3 $/node-hour
  quarter.node_share_fraction = 0.25;
  quarter.node_share_basis = "1 of 4 GPUs (held: SLURM_GPUS_ON_NODE; the node's: cost.node_gpus)";
  quarter.allocated_gpus_per_node = 1;
  EXPECT_DOUBLE_EQ(cost_of(quarter, "quarter.h5"), 3.0 * 2 * 0.25);
  EXPECT_EQ(Reader(dir / "quarter.h5").number_attribute("/", "node_share_fraction"), 0.25);
  EXPECT_EQ(Reader(dir / "quarter.h5").string_attribute("/", "node_share_basis"), quarter.node_share_basis);
  RunDescription per_gpu = quarter;
  per_gpu.price_per_node_hour_usd = 0.0;
  per_gpu.price_per_gpu_hour_usd = 1.5;
  EXPECT_DOUBLE_EQ(cost_of(per_gpu, "per_gpu.h5"), 1.5 * 2 * 1);  // 2 nodes x 1 GPU x 1 h
  RunDescription unpriced = quarter;
  unpriced.price_per_node_hour_usd = 0.0;
  EXPECT_TRUE(std::isnan(cost_of(unpriced, "unpriced.h5")));
  RunDescription unknown_share = attributes();
  unknown_share.node_share_fraction = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(cost_of(unknown_share, "unknown_share.h5")));
}

TEST(RunFile, FinishWritesTheSummaryAndTheStatus) {
  TempDir dir;
  const std::string path = dir / "run.h5";
  RunFile file = RunFile::create(path, attributes(), {2});
  for (int s = 1; s <= 4; ++s) file.append_step(step(s));
  file.append_eval(evaluation(2, 3.0));
  file.append_eval(evaluation(4, 3.5));  // worse: best stays at step 2
  RunSummaryInputs inputs;
  inputs.wall_time_s = 7200.0;
  file.finish(inputs, "preempted");
  Reader reader(path);
  EXPECT_EQ(reader.string_attribute("/", "status"), "preempted");
  EXPECT_EQ(reader.string_attribute("/summary", "status"), "preempted");
  EXPECT_EQ(reader.number_attribute("/summary", "steps_completed"), 4);
  EXPECT_EQ(reader.number_attribute("/summary", "best_loss"), 3.0);
  EXPECT_EQ(reader.number_attribute("/summary", "best_loss_step"), 2);
  EXPECT_EQ(reader.number_attribute("/summary", "final_loss"), 3.5);
  // price 3 $/node-hour x 2 nodes x 2 h
  EXPECT_EQ(reader.number_attribute("/summary", "cost_usd"), 12.0);
  // GPU: ranks' last values 40+41+42+43 J; CPU: one per node, ranks 0 and 2: 20 + 22 J; PUE 1.5.
  EXPECT_DOUBLE_EQ(reader.number_attribute("/summary", "energy_kwh"), (166.0 + 42.0) / 3.6e6 * 1.5);
  EXPECT_NE(error_of([&] { file.append_step(step(5)); }).find("after the file was finished"), std::string::npos);
  EXPECT_NE(error_of([&] { file.finish({}, "completed"); }).find("after the file was finished"), std::string::npos);
}

// The statuses are one list (telemetry/run_status.h): each name reads back as its status, nothing else reads as one,
// and finish() takes the final ones only.
TEST(RunFile, TheStatusesAreOneListAndFinishTakesOnlyAFinalOne) {
  for (const RunStatus status : {RunStatus::kRunning, RunStatus::kCompleted, RunStatus::kPreempted,
                                 RunStatus::kDiverged, RunStatus::kFailed}) {
    EXPECT_EQ(parse_run_status(run_status_name(status)), status) << run_status_name(status);
  }
  for (const std::string other : {"", "Completed", "paused", "preempted (requeued)"}) {
    EXPECT_FALSE(parse_run_status(other).has_value()) << other;
  }
  EXPECT_EQ(final_run_status_names(), "completed, preempted, diverged, failed");
  TempDir dir;
  for (const std::string status : {"running", "paused"}) {
    RunFile file = RunFile::create(dir / (status + ".h5"), attributes(), {2});
    file.append_step(step(1));
    EXPECT_NE(error_of([&] { file.finish({}, status); })
                  .find("status '" + status + "' is not one of completed, preempted, diverged, failed"),
              std::string::npos);
  }
}

// A job going down: the status, the error and the step are written while SWMR is on (and /summary's status),
// the rows appended so far are flushed, and the file is closed; an error longer than the room for it is cut between
// characters.
TEST(RunFile, RecordFailureSetsStatusErrorAndStep) {
  TempDir dir;
  const std::string path = dir / "run.h5";
  RunFile file = RunFile::create(path, attributes(), {100});
  for (int s = 1; s <= 3; ++s) file.append_step(step(s));
  std::string error = "rank 1 stopped:";  // 15 bytes: the 1,024-byte cut would fall inside an "é"
  while (error.size() < kErrorCapacityBytes + 10) error += "\xc3\xa9";  // "é", two bytes
  file.record_failure(error, 3);
  {
    Reader reader(path);
    EXPECT_EQ(reader.string_attribute("/", "status"), "failed");
    EXPECT_EQ(reader.number_attribute("/", "error_step"), 3);
    const std::string recorded = reader.string_attribute("/", "error");
    EXPECT_EQ(recorded, error.substr(0, kErrorCapacityBytes - 1));
    EXPECT_EQ(reader.doubles("/steps/step"), range_of(1, 3));
    EXPECT_EQ(reader.string_attribute("/summary", "status"), "failed");
    EXPECT_EQ(reader.number_attribute("/summary", "steps_completed"), 3);
  }
  // Closed: a plain (not SWMR) open works, as for a finished file; the object refuses to write more.
  const hid_t plain = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(plain, 0);
  if (plain >= 0) H5Fclose(plain);
  EXPECT_NE(error_of([&] { file.append_step(step(4)); }).find("after the file was finished"), std::string::npos);
  // A fresh file says "" and -1.
  { RunFile other = RunFile::create(dir / "other.h5", attributes(), {100}); }
  Reader fresh(dir / "other.h5");
  EXPECT_EQ(fresh.string_attribute("/", "error"), "");
  EXPECT_EQ(fresh.number_attribute("/", "error_step"), -1);
}

TEST(RunFile, EnergyOfASourceThatIsNoneIsNotCounted) {
  TempDir dir;
  const std::string path = dir / "run.h5";
  RunDescription description = attributes();
  description.energy_source_cpu = "none";
  RunFile file = RunFile::create(path, description);
  StepRecord row = step(1);
  row.cpu_energy_j.assign(kWorld, kUnknownValue);
  file.append_step(row);
  file.finish({}, "completed");
  Reader reader(path);
  EXPECT_TRUE(std::isnan(reader.number_attribute("/summary", "cpu_energy_kwh")));
  EXPECT_DOUBLE_EQ(reader.number_attribute("/summary", "energy_kwh"), 46.0 / 3.6e6 * 1.5);
}

// An estimate is recorded only where nothing was measured, and never in the measured figures.
TEST(RunFile, AnEstimateIsKeptApartAndOnlyWhereNothingWasMeasured) {
  TempDir dir;
  RunSummaryInputs inputs;
  inputs.estimated_energy_j = 7.2e6;  // 2 kWh
  inputs.energy_estimate_method = "CodeCarbon constant mode, per node: ...";
  for (const bool measured_gpu : {false, true}) {
    const std::string path = dir / (measured_gpu ? "gpu.h5" : "none.h5");
    RunDescription description = attributes();
    description.energy_source_cpu = "none";
    if (!measured_gpu) description.energy_source_gpu = "none";
    RunFile file = RunFile::create(path, description);
    file.append_step(step(1));
    file.finish(inputs, "completed");
    Reader reader(path);
    if (measured_gpu) {
      EXPECT_TRUE(std::isnan(reader.number_attribute("/summary", "estimated_energy_kwh")));
      EXPECT_TRUE(std::isnan(reader.number_attribute("/summary", "estimated_co2_kg")));
      EXPECT_EQ(reader.string_attribute("/summary", "energy_estimate_method"), "");
      EXPECT_DOUBLE_EQ(reader.number_attribute("/summary", "energy_kwh"), 46.0 / 3.6e6 * 1.5);
    } else {
      EXPECT_TRUE(std::isnan(reader.number_attribute("/summary", "energy_kwh")));
      EXPECT_TRUE(std::isnan(reader.number_attribute("/summary", "co2_kg")));
      EXPECT_DOUBLE_EQ(reader.number_attribute("/summary", "estimated_energy_kwh"), 2.0 * 1.5);  // x PUE
      EXPECT_DOUBLE_EQ(reader.number_attribute("/summary", "estimated_co2_kg"), 2.0 * 1.5 * 1.0 / 1000.0);
      EXPECT_EQ(reader.string_attribute("/summary", "energy_estimate_method"), inputs.energy_estimate_method);
    }
  }
}

// ---- Resume ----

TEST(RunFile, ResumeKeepsTheRowsUpToTheCheckpointAndCountsTheAttempt) {
  TempDir dir;
  const std::string path = dir / "run.h5";
  std::string first_start;
  {
    RunFile file = RunFile::create(path, attributes(), {5});
    first_start = file.start_time_utc();
    for (int s = 1; s <= 20; ++s) {
      file.append_step(step(s));
      if (s % 10 == 0) file.append_eval(evaluation(s, 1.0));
    }
  }  // closed unfinished, as a preempted job's file
  std::string warning = "stale";
  RunFile file = RunFile::resume(path, attributes(), 12, {5}, &warning);
  EXPECT_EQ(warning, "");
  EXPECT_EQ(file.attempt(), 1);
  EXPECT_EQ(file.resumed_from_step(), 12);
  EXPECT_EQ(file.start_time_utc(), first_start);
  // Offsets: the newest row of the old file (step 20, and its evaluation at 10.125 s), not the last kept one.
  EXPECT_EQ(file.last_step(), 20);
  EXPECT_EQ(file.last_wall_time_s(), 10.125);
  EXPECT_EQ(file.last_gpu_energy_j(3), 203.0);
  EXPECT_EQ(file.last_cpu_energy_j(1), 101.0);
  EXPECT_NE(error_of([&] { file.last_gpu_energy_j(kWorld); }).find("rank 4"), std::string::npos);
  EXPECT_EQ(file.steps_written(), 12);
  for (int s = 13; s <= 15; ++s) file.append_step(step(s));
  file.finish({}, "completed");
  {
    Reader reader(path);
    EXPECT_EQ(reader.doubles("/steps/step"), range_of(1, 15));
    EXPECT_EQ(reader.doubles("/eval/step"), std::vector<double>{10});
    EXPECT_EQ(reader.number_attribute("/", "attempt"), 1);
    EXPECT_EQ(reader.number_attribute("/", "resumed_from_step"), 12);
    EXPECT_EQ(reader.string_attribute("/", "start_time_utc"), first_start);
  }
  // A finished file can be resumed too (training on with more steps): attempt 2, the old summary replaced by
  // the figures of the 16 rows, running again.
  {
    RunFile again = RunFile::resume(path, attributes(), 15, {5}, &warning);
    EXPECT_EQ(again.attempt(), 2);
    again.append_step(step(16));
  }
  Reader reader(path);
  EXPECT_EQ(reader.string_attribute("/summary", "status"), "running");
  EXPECT_EQ(reader.string_attribute("/summary", "end_time_utc"), "");
  EXPECT_EQ(reader.number_attribute("/summary", "steps_completed"), 16);
  EXPECT_EQ(reader.string_attribute("/", "status"), "running");
  EXPECT_EQ(reader.doubles("/steps/step"), range_of(1, 16));
}

TEST(RunFile, ResumeWithoutAFileStartsANewOneAndSaysSo) {
  TempDir dir;
  const std::string path = dir / "run.h5";
  std::string warning;
  RunFile file = RunFile::resume(path, attributes(), 40, {}, &warning);
  EXPECT_NE(warning.find("no run file at '" + path + "'"), std::string::npos) << warning;
  EXPECT_EQ(file.attempt(), 1);
  EXPECT_EQ(file.resumed_from_step(), 40);
  EXPECT_EQ(file.last_wall_time_s(), 0.0);
  EXPECT_EQ(file.last_step(), -1);
}

TEST(RunFile, AnUnreadableFileIsKeptAsideNotDeleted) {
  TempDir dir;
  const std::string path = dir / "run.h5";
  const std::string garbage = "this is not an HDF5 file\n";
  std::ofstream(path) << garbage;
  std::string warning;
  RunFile file = RunFile::resume(path, attributes(), 7, {}, &warning);
  std::vector<std::string> aside;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("run.h5.unreadable.", 0) == 0) aside.push_back(entry.path().string());
  }
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(file_bytes(aside[0]), garbage);
  EXPECT_NE(warning.find("kept as '" + aside[0] + "'"), std::string::npos) << warning;
  EXPECT_EQ(file.attempt(), 1);
  file.append_step(step(8));
  file.finish({}, "failed");
  Reader reader(path);
  EXPECT_EQ(reader.doubles("/steps/step"), std::vector<double>{8});
}

TEST(RunFile, ResumeRefusesAnotherFormatAndLeavesTheFile) {
  TempDir dir;
  const std::string other = dir / "other.h5";
  H5Fclose(H5Fcreate(other.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  const std::string before = file_bytes(other);
  EXPECT_NE(error_of([&] { RunFile::resume(other, attributes(), 3); }).find("is not a t5scale run file"),
            std::string::npos);
  EXPECT_EQ(file_bytes(other), before);
}

// A checkpoint resumed on another grid: the old file's rows have a column per rank of the old world size. It is
// kept whole under another name, and a new file starts from the checkpoint's step.
TEST(RunFile, ResumeOnAnotherWorldSizeKeepsTheOldFileAsideAndStartsANewOne) {
  TempDir dir;
  const std::string path = dir / "run.h5";
  { RunFile::create(path, attributes()).append_step(step(1)); }
  const std::string before = file_bytes(path);
  std::string warning;
  {
    RunFile resumed = RunFile::resume(path, attributes(2, 1), 3, {}, &warning);
    EXPECT_EQ(resumed.resumed_from_step(), 3);
  }
  EXPECT_NE(warning.find("world size 4, this run has 2"), std::string::npos) << warning;
  std::vector<std::string> aside;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("run.h5.world4.", 0) == 0) aside.push_back(entry.path().string());
  }
  ASSERT_EQ(aside.size(), 1u) << warning;
  EXPECT_NE(warning.find(aside[0]), std::string::npos) << warning;
  EXPECT_EQ(file_bytes(aside[0]), before);
  Reader reader(path);
  EXPECT_TRUE(reader.doubles("/steps/step").empty());
}

// The file started on the new grid holds the whole run's figures: the old grid's rows through the checkpoint
// (their totals carried over), what the old grid spent over all its rows, and its own rows counted from its start;
// a later resume on the new grid carries them on.
TEST(RunFile, AFileOnANewGridCarriesTheFiguresOfTheGridBefore) {
  TempDir dir;
  const std::string path = dir / "run.h5";
  {
    RunFile old = RunFile::create(path, attributes());  // 4 ranks on 2 nodes, 3 USD per node-hour
    for (int s = 1; s <= 10; ++s) old.append_step(step(s));
    old.append_eval(evaluation(4, 3.0));
    old.append_eval(evaluation(8, 2.0));  // after the checkpoint of step 6: redone, not kept
  }  // the job ends without finishing (killed after its last flush)
  std::string warning;
  {
    RunFile resumed = RunFile::resume(path, attributes(2, 1), 6, {}, &warning);  // 2 ranks on 1 node
    for (int s = 7; s <= 9; ++s) {
      StepRecord row = step(s - 6, 2);  // its own clock and counters from 0
      row.step = s;
      resumed.append_step(row);
    }
  }
  EXPECT_NE(warning.find("carried over"), std::string::npos) << warning;
  {
    RunFile again = RunFile::resume(path, attributes(2, 1), 8, {}, &warning);  // same grid: goes on in the file
    RunSummaryInputs inputs;
    inputs.wall_time_s = 2.0;  // this grid's clock at the end
    again.finish(inputs, "completed");
  }
  Reader reader(path);
  EXPECT_EQ(reader.number_attribute("/earlier_grids", "through_step"), 6);
  EXPECT_EQ(reader.number_attribute("/earlier_grids", "rows_steps"), 6);  // as carried: not this grid's rows
  EXPECT_DOUBLE_EQ(reader.number_attribute("/earlier_grids", "wall_time_s"), 5.0);
  EXPECT_EQ(reader.number_attribute("/summary", "steps_completed"), 6 + 2);  // old 1-6, new 7-8 (9 redone later)
  EXPECT_EQ(reader.number_attribute("/summary", "samples_total"), 8 * 8);
  EXPECT_DOUBLE_EQ(reader.number_attribute("/summary", "train_time_s"), 8 * 0.25);
  EXPECT_EQ(reader.number_attribute("/summary", "final_loss"), 3.0);  // the evaluation of step 8 was not kept
  // Spent: the old grid's 10 rows (5 s of wall time, energy at its newest row), then this grid's 2 s.
  EXPECT_DOUBLE_EQ(reader.number_attribute("/summary", "wall_time_s"), 5.0 + 2.0);
  EXPECT_DOUBLE_EQ(reader.number_attribute("/summary", "cost_usd"), 3.0 * 2 * 5.0 / 3600 + 3.0 * 1 * 2.0 / 3600);
  const double old_gpu_j = 100 + 101 + 102 + 103, new_gpu_j = 20 + 21;  // newest rows: step 10 / step 8 (2nd)
  EXPECT_DOUBLE_EQ(reader.number_attribute("/summary", "gpu_energy_kwh"), (old_gpu_j + new_gpu_j) / 3.6e6);
  const double old_cpu_j = 50 + 52, new_cpu_j = 10;  // per node: ranks 0 and 2 of the old grid, rank 0 now
  EXPECT_DOUBLE_EQ(reader.number_attribute("/summary", "energy_kwh"),
                   (old_gpu_j + old_cpu_j) / 3.6e6 * 1.5 + (new_gpu_j + new_cpu_j) / 3.6e6 * 1.5);
  EXPECT_EQ(reader.number_attribute("/summary", "peak_memory_bytes"), 1003.0);  // the old grid's rank 3
}

// ---- Bad input ----

TEST(RunFile, ARowWithTheWrongNumberOfRanksIsRefusedAndNotWritten) {
  TempDir dir;
  const std::string path = dir / "run.h5";
  RunFile file = RunFile::create(path, attributes(), {1});
  StepRecord bad = step(1);
  bad.gpu_energy_j.pop_back();
  const std::string message = error_of([&] { file.append_step(bad); });
  EXPECT_NE(message.find("/steps/gpu_energy_j of step 1 has 3 values"), std::string::npos) << message;
  EXPECT_NE(message.find("world_size 4"), std::string::npos) << message;
  EXPECT_NE(error_of([&] { file.append_step(step(2, 5)); }).find("has 5 values"), std::string::npos);
  StepRecord negative = step(-3);
  EXPECT_NE(error_of([&] { file.append_step(negative); }).find("steps are >= 0"), std::string::npos);
  file.append_step(step(3));
  file.finish({}, "completed");
  Reader reader(path);
  EXPECT_EQ(reader.doubles("/steps/step"), std::vector<double>{3});
  EXPECT_EQ(reader.doubles("/steps/memory_allocated_bytes").size(), size_t{kWorld});
}

TEST(RunFile, AttributesAreCheckedAllAtOnce) {
  TempDir dir;
  // Names and kinds are RunDescription's (the compiler checks them); the values are checked all at once.
  RunDescription description = attributes(4, 3);
  description.dp = 3;
  description.energy_source_gpu = "nvml";
  description.energy_source_cpu = "powercap";
  const std::string message = error_of([&] { RunFile::create(dir / "run.h5", description); });
  for (const char* expected :
       {"4 problem(s)", "attribute 'world_size' 4 is not divisible by 'nodes' 3", "attributes 'tp' 1 x 'dp' 3 != 'world_size' 4",
        "attribute 'energy_source_gpu' is 'nvml'", "attribute 'energy_source_cpu' is 'powercap'"}) {
    EXPECT_NE(message.find(expected), std::string::npos) << expected << "\n" << message;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "run.h5"));
  description = attributes();
  description.world_size = description.nodes = 0;
  const std::string empty_world = error_of([&] { RunFile::create(dir / "run.h5", description); });
  EXPECT_NE(empty_world.find("'world_size' must be >= 1, got 0"), std::string::npos) << empty_world;
  EXPECT_NE(empty_world.find("'nodes' must be >= 1, got 0"), std::string::npos) << empty_world;
  EXPECT_FALSE(std::filesystem::exists(dir / "run.h5"));
}

TEST(RunFile, OtherBadInput) {
  TempDir dir;
  const std::string missing = (dir.path() / "no-such-folder" / "run.h5").string();
  EXPECT_NE(error_of([&] { RunFile::create(missing, attributes()); }).find("does not exist"), std::string::npos);
  EXPECT_NE(error_of([&] { RunFile::resume(missing, attributes(), 1); }).find("does not exist"), std::string::npos);
  EXPECT_NE(error_of([&] { RunFile::create(dir / "run.h5", attributes(), {0}); }).find("flush_every_steps"),
            std::string::npos);
  RunFile file = RunFile::create(dir / "run.h5", attributes());
  EXPECT_NE(error_of([&] { file.finish({}, "done"); }).find("status 'done' is not one of"), std::string::npos);
  RunSummaryInputs short_inputs;
  short_inputs.gpu_energy_j = {1.0};
  EXPECT_NE(error_of([&] { file.finish(short_inputs, "completed"); }).find("gpu_energy_j has 1 values"),
            std::string::npos);
  file.finish({}, "completed");  // still possible after the refusals
}


// The schema the analysis and the Python test writers read is the writer's own (the h5py checks hold the files it
// writes to that schema: tests/telemetry/check_run_file.py).
TEST(RunFileSchema, CheckedInFileIsCurrent) {
  testing::expect_checked_in_file_current("analysis/t5scale_analyze/run_file_schema.json", run_file_schema_json(),
                                          "update_run_file_schema");
}

}  // namespace
}  // namespace t5scale
