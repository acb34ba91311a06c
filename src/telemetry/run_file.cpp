#include "telemetry/run_file.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/hdf5_attributes.h"
#include "core/hdf5_check.h"
#include "core/hdf5_superblock.h"
#include "core/set_aside.h"
#include "core/utc_time.h"
#include "telemetry/cost.h"
#include "telemetry/run_file_internal.h"
#include "telemetry/run_status.h"

namespace t5scale {

using namespace run_file_internal;

namespace {

// ---- Opening the file ----

H5Handle make_file_access(const std::string& path) {
  H5Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), path));
  // SWMR needs the 1.10 file format; (V110, LATEST) is the spec's pair of bounds.
  H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST), path);
  return fapl;
}

// Opens `path` read-write although readers may hold it: HDF5 locks a file for each open (flock), and a reader's
// shared lock makes a writer's open fail ("unable to lock file", EAGAIN) for as long as it keeps the file open.
// Status polls and analyses let go within moments, so the open is retried for up to `wait_s`; after that it is
// made without the lock (the reader may then see the file change under it, which SWMR-aware readers survive).
hid_t open_for_writing_despite_readers(const std::string& path, unsigned flags, double wait_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  for (;;) {
    H5Handle fapl = make_file_access(path);
    const hid_t id = H5Fopen(path.c_str(), flags, fapl.get());
    if (id >= 0) return id;
    const std::string error = detail::hdf5_error_stack_text();
    if (error.find("unable to lock file") == std::string::npos) {
      throw Error(msg("run file '", path, "': cannot open it for writing: ", error));
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::cerr << "[t5scale] run file '" << path << "': a reader has held it open for " << wait_s
            << " s; writing without HDF5's file lock" << std::endl;
  H5Handle fapl = make_file_access(path);
  H5_CHECK(H5Pset_file_locking(fapl.get(), false, true), path);
  return H5_CHECK(H5Fopen(path.c_str(), flags, fapl.get()), path);
}

// What create() and resume() refuse before they touch a file.
void check_run_file_arguments(const RunDescription& description, const RunFileOptions& options,
                              const std::string& path) {
  validate_caller_attributes(description, path);
  T5S_CHECK(options.flush_every_steps >= 1, "run file '", path, "': flush_every_steps must be >= 1, got ",
            options.flush_every_steps);
}

// Renames a run file that cannot be continued out of the way; returns the message that says where it is kept.
std::string set_aside_run_file(const std::string& path, const std::string& reason, const std::string& why) {
  std::string aside;
  try {
    aside = t5scale::set_aside(path, why);
  } catch (const Error& e) {
    throw Error(msg("run file '", path, "' cannot be read (", reason, "): ", e.what()));
  }
  return msg("run file '", path, "' cannot be read (", reason, "); it is kept as '", aside, "'");
}

// A file of another format or schema is not set aside but refused: it may be someone else's.
void check_is_current_run_file(hid_t file, const std::string& path) {
  const auto format = read_attribute(file, "format", path);
  T5S_CHECK(format && std::holds_alternative<std::string>(*format) && std::get<std::string>(*format) == kFormat,
            "run file '", path, "' is not a t5scale run file (no format='", kFormat,
            "' attribute); it is left as it is: move it away or choose another run name");
  const auto schema = read_attribute(file, "schema_version", path);
  T5S_CHECK(schema && std::holds_alternative<int64_t>(*schema) && std::get<int64_t>(*schema) == kSchemaVersion,
            "run file '", path, "' has another schema_version than ", kSchemaVersion, "; it is left as it is");
}

int64_t read_world_size(hid_t file, const std::string& path) {
  const auto world = read_attribute(file, "world_size", path);
  T5S_CHECK(world && std::holds_alternative<int64_t>(*world), "run file '", path,
            "' has no world_size attribute; it is left as it is");
  return std::get<int64_t>(*world);
}

// What a resumed run takes over from the file of the attempt before.
struct PreviousAttempt {
  TableRows step_rows, eval_rows;
  std::optional<AttributeValue> attempt, start_time_utc;
  std::optional<RunSummaryTotals> totals;  // where the file started after earlier grids: their totals
};

// The totals a file started on a new grid carries (/earlier_grids), when it has them.
std::optional<RunSummaryTotals> read_earlier_grids(hid_t file, const std::string& path) {
  if (H5Lexists(file, "earlier_grids", H5P_DEFAULT) <= 0) return std::nullopt;
  H5Handle group(H5_CHECK(H5Gopen2(file, "earlier_grids", H5P_DEFAULT), path));
  return RunSummaryTotals::from_earlier_grids_attributes([&](const std::string& name) {
    std::optional<Hdf5Value> value = read_attribute(group.get(), name, path);
    T5S_CHECK(value.has_value(), "run file '", path, "': /earlier_grids has no attribute '", name, "'");
    return *value;
  });
}

// What the summary needs of a file's root attributes.
SummaryTerms summary_terms_of(const RunAttributes& attributes) {
  auto attribute = [&](const std::string& name) -> const AttributeValue& {
    const AttributeValue* value = find_attribute(attributes, name);
    T5S_CHECK(value != nullptr, "run file: no root attribute '", name, "'");
    return *value;
  };
  SummaryTerms terms;
  terms.world_size = std::get<int64_t>(attribute("world_size"));
  terms.nodes = std::get<int64_t>(attribute("nodes"));
  terms.gpu_measured = std::get<std::string>(attribute("energy_source_gpu")) != "none";
  terms.cpu_measured = std::get<std::string>(attribute("energy_source_cpu")) != "none";
  terms.pue = std::get<double>(attribute("pue"));
  terms.carbon_intensity_g_per_kwh = std::get<double>(attribute("carbon_intensity_g_per_kwh"));
  Charging& charging = terms.charging;
  charging.nodes = terms.nodes;
  charging.price_per_node_hour_usd = std::get<double>(attribute("price_per_node_hour_usd"));
  // A file from before the node share (set aside by a resume on another grid) was charged whole nodes, and had no
  // price per GPU-hour: its grid's cost is reckoned as it was.
  const AttributeValue* share = find_attribute(attributes, "node_share_fraction");
  charging.node_share_fraction = share != nullptr ? std::get<double>(*share) : 1.0;
  if (const AttributeValue* price = find_attribute(attributes, "price_per_gpu_hour_usd")) {
    charging.price_per_gpu_hour_usd = std::get<double>(*price);
  }
  if (const AttributeValue* gpus = find_attribute(attributes, "allocated_gpus_per_node")) {
    charging.allocated_gpus_per_node = std::get<int64_t>(*gpus);
  }
  return terms;
}

// The totals a run file started on a new grid takes over from the file of the grid before (world size
// `old_world`): the rows through keep_through_step (and what that file carried), and what its grid spent over
// every row it wrote. See EarlierGrids.
RunSummaryTotals totals_after_another_grid(hid_t old, int64_t old_world, int64_t keep_through_step,
                                           const std::string& path) {
  Table old_steps("steps", specs_of(step_columns()), static_cast<size_t>(old_world));
  Table old_evals("eval", specs_of(eval_columns()), static_cast<size_t>(old_world));
  const TableRows step_rows = read_table(old, old_steps, path);
  const TableRows eval_rows = read_table(old, old_evals, path);
  RunSummaryTotals spent = read_earlier_grids(old, path).value_or(RunSummaryTotals{});
  RunSummaryTotals kept = spent;
  for (size_t row = 0; row < step_rows.rows; ++row) {
    const StepRecord record = record_of_row(step_columns(), step_rows, row);
    if (record.step < 0) continue;  // allocated by a flush that a kill interrupted
    spent.add(record);
    if (record.step <= keep_through_step) kept.add(record);
  }
  for (size_t row = 0; row < eval_rows.rows; ++row) {
    const EvalRecord record = record_of_row(eval_columns(), eval_rows, row);
    if (record.step < 0) continue;
    spent.add(record);
    if (record.step <= keep_through_step) kept.add(record);
  }
  RunAttributes root;
  for (const char* name : {"world_size", "nodes", "energy_source_gpu", "energy_source_cpu", "pue",
                           "price_per_node_hour_usd", "carbon_intensity_g_per_kwh"}) {
    std::optional<AttributeValue> value = read_attribute(old, name, path);
    T5S_CHECK(value.has_value(), "run file '", path, "' has no attribute '", name, "'");
    root.emplace_back(name, *value);
  }
  for (const char* name : {"price_per_gpu_hour_usd", "node_share_fraction", "allocated_gpus_per_node"}) {
    if (std::optional<AttributeValue> value = read_attribute(old, name, path)) root.emplace_back(name, *value);
  }
  const SummaryTerms terms = summary_terms_of(root);
  std::map<std::string, AttributeValue> figures;
  for (auto& [name, value] : spent.figures(terms, {}, run_status_name(RunStatus::kRunning), "")) figures[name] = value;
  // An estimate exists only in the final /summary of a file whose job ended: that of the file, where it has one.
  if (H5Lexists(old, "summary", H5P_DEFAULT) > 0) {
    H5Handle summary(H5_CHECK(H5Gopen2(old, "summary", H5P_DEFAULT), path));
    for (const char* name : {"estimated_energy_kwh", "estimated_co2_kg"}) {
      const std::optional<AttributeValue> value = read_attribute(summary.get(), name, path);
      if (value && std::holds_alternative<double>(*value) && std::isfinite(std::get<double>(*value))) {
        figures[name] = *value;
      }
    }
  }
  EarlierGrids earlier;
  earlier.through_step = keep_through_step;
  earlier.wall_time_s = std::get<double>(figures.at("wall_time_s"));
  if (std::isnan(earlier.wall_time_s)) earlier.wall_time_s = 0.0;  // no row: nothing known was spent
  earlier.cost_usd = std::get<double>(figures.at("cost_usd"));
  earlier.gpu_energy_kwh = std::get<double>(figures.at("gpu_energy_kwh"));
  earlier.cpu_energy_kwh = std::get<double>(figures.at("cpu_energy_kwh"));
  earlier.energy_kwh = std::get<double>(figures.at("energy_kwh"));
  earlier.co2_kg = std::get<double>(figures.at("co2_kg"));
  earlier.estimated_energy_kwh = std::get<double>(figures.at("estimated_energy_kwh"));
  earlier.estimated_co2_kg = std::get<double>(figures.at("estimated_co2_kg"));
  earlier.peak_memory_bytes = std::get<double>(figures.at("peak_memory_bytes"));
  earlier.peak_host_memory_bytes = std::get<double>(figures.at("peak_host_memory_bytes"));
  RunSummaryTotals carried;
  carried.carry_over(kept, earlier);
  return carried;
}

}  // namespace

// ---- RunFile ----

struct RunFile::Impl {
  std::string path;
  RunAttributes attributes;  // the caller's
  size_t world = 1;
  int64_t flush_every_steps = 10;
  double reader_lock_wait_s = 10.0;
  int64_t attempt = 0;
  int64_t resumed_from_step = -1;
  std::string start_time_utc;
  Table steps;
  Table evals;
  H5Handle file;  // the SWMR writer; invalid once closed
  bool open = false;
  double last_wall_time_s = 0;
  std::vector<double> last_gpu_energy_j, last_cpu_energy_j;
  int64_t last_step = -1;
  RunSummaryTotals totals;  // over every row in the file: /summary's arithmetic
  std::optional<RunSummaryTotals> carried;  // what the grids before left this file (/earlier_grids)

  Impl(const std::string& path_, const RunAttributes& attributes_, const RunFileOptions& options)
      : path(path_),
        attributes(attributes_),
        world(static_cast<size_t>(std::get<int64_t>(*find_attribute(attributes_, "world_size")))),
        flush_every_steps(options.flush_every_steps),
        reader_lock_wait_s(options.reader_lock_wait_s),
        start_time_utc(utc_iso_time()),
        steps("steps", specs_of(step_columns()), world),
        evals("eval", specs_of(eval_columns()), world),
        last_gpu_energy_j(world, 0.0),
        last_cpu_energy_j(world, 0.0) {}

  ~Impl() {
    if (!open) return;
    try {
      Hdf5Quiet quiet;
      write_pending(steps, path);
      write_pending(evals, path);
      rewrite_summary_figures();
      close();
    } catch (const std::exception& e) {
      std::cerr << "t5scale: run file '" << path << "' was not closed cleanly: " << e.what() << std::endl;
    }
  }

  const AttributeValue& attribute(const std::string& name) const { return *find_attribute(attributes, name); }

  // The root attributes in the order the spec lists them.
  RunAttributes root_attributes() const {
    RunAttributes root = {{"format", std::string(kFormat)}, {"schema_version", kSchemaVersion}};
    for (const auto& [name, kind] : run_file_caller_attributes()) {
      root.emplace_back(name, attribute(name));
      if (name == "study") {
        root.emplace_back("start_time_utc", start_time_utc);
        root.emplace_back("status", std::string(run_status_name(RunStatus::kRunning)));
        root.emplace_back("attempt", attempt);
        root.emplace_back("resumed_from_step", resumed_from_step);
        // Written by record_failure() while SWMR is on, when only existing attributes can change: so they
        // exist from the start, the text with room for the message.
        root.emplace_back("error", std::string(kErrorCapacityBytes, '\0'));
        root.emplace_back("error_step", int64_t{-1});
      }
    }
    return root;
  }

  // Writes the whole file (attributes, datasets, the pending rows) under a temporary name, renames it to
  // `path` and opens it as the SWMR writer.
  void build_and_open() {
    const std::filesystem::path parent = std::filesystem::absolute(path).parent_path();
    T5S_CHECK(std::filesystem::is_directory(parent), "run file '", path, "': folder '", parent.string(),
              "' does not exist");
    const std::string temporary = path + ".tmp." + std::to_string(getpid());
    H5Handle fapl = make_file_access(path);
    try {
      H5Handle file_tmp(H5_CHECK(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), temporary));
      for (const auto& [name, value] : root_attributes()) write_attribute(file_tmp.get(), name, value, temporary);
      {
        // Every figure exists from the start: under SWMR only existing attributes can change.
        H5Handle group(H5_CHECK(H5Gcreate2(file_tmp.get(), "summary", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                temporary));
        for (const auto& [name, value] : summary({}, run_status_name(RunStatus::kRunning))) {
          write_attribute(group.get(), name, value, temporary);
        }
      }
      if (carried) {
        H5Handle group(H5_CHECK(
            H5Gcreate2(file_tmp.get(), "earlier_grids", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), temporary));
        for (const auto& [name, value] : carried->earlier_grids_attributes()) {
          write_attribute(group.get(), name, value, temporary);
        }
      }
      for (Table* table : {&steps, &evals}) {
        create_table(file_tmp.get(), *table, temporary);
        open_table(file_tmp.get(), *table, temporary);
        write_pending(*table, temporary);
        table->datasets.clear();
      }
      H5_CHECK(file_tmp.reset(), temporary);
    } catch (...) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      throw;
    }
    std::error_code error;
    std::filesystem::rename(temporary, path, error);
    if (error) {
      std::filesystem::remove(temporary, error);
      throw Error(msg("run file '", path, "': cannot rename '", temporary, "' to it: ", error.message()));
    }
    // A status poll may already have opened the new file.
    file = H5Handle(open_for_writing_despite_readers(path, H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE, reader_lock_wait_s));
    open_table(file.get(), steps, path);
    open_table(file.get(), evals, path);
    open = true;
  }

  // Continues the file of the attempt before at `path`: its rows through `keep_through_step`, its attempt count
  // and start time. Returns why a fresh file is started instead (the old one set aside), or nothing.
  std::optional<std::string> take_over_previous_file(int64_t keep_through_step) {
    if (!std::filesystem::exists(path)) return msg("no run file at '", path, "' to continue");
    PreviousAttempt previous;
    std::optional<std::string> why_not = read_previous_attempt(previous, keep_through_step);
    if (previous.totals) {
      carried = previous.totals;
      totals = *previous.totals;
      const int64_t through = totals.earlier_grids()->through_step;
      if (why_not.has_value()) {
        *why_not += msg("; the steps through ", through, " and what the earlier grid spent are carried over");
      } else if (keep_through_step < through) {
        std::cerr << "[t5scale] run file '" << path << "': resuming from step " << keep_through_step
                  << ", before step " << through << " where the grid last changed: the earlier grids' totals "
                  << "still count their steps through " << through << std::endl;
      }
    }
    if (why_not) return why_not;
    keep_rows_through(previous.step_rows, steps, keep_through_step);
    keep_rows_through(previous.eval_rows, evals, keep_through_step);
    attempt = previous.attempt && std::holds_alternative<int64_t>(*previous.attempt)
                  ? std::get<int64_t>(*previous.attempt) + 1
                  : 1;
    if (previous.start_time_utc && std::holds_alternative<std::string>(*previous.start_time_utc)) {
      start_time_utc = std::get<std::string>(*previous.start_time_utc);
    }
    return std::nullopt;
  }

  // Reads the file at `path` into `previous`. One that cannot be read, or whose rows have another world size, is
  // set aside, and the text returned says so.
  std::optional<std::string> read_previous_attempt(PreviousAttempt& previous, int64_t keep_through_step) const {
    // A truncated file is set aside before HDF5 opens it: under SWMR read HDF5 would retry its reads for minutes
    // while the other ranks wait in a collective (core/hdf5_superblock.h).
    const Hdf5SuperblockCheck superblock = check_hdf5_superblock(path);
    if (!superblock.damage.empty()) return set_aside_run_file(path, superblock.damage, "unreadable");
    // SWMR read opens a file whose writer was killed (its superblock still says "open for SWMR write").
    H5Handle read_access(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), path));
    limit_swmr_read_attempts(read_access.get(), path);
    const hid_t old_id = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, read_access.get());
    if (old_id < 0) {
      const std::string reason = detail::hdf5_error_stack_text();
      return set_aside_run_file(path, reason, "unreadable");
    }
    H5Handle old(old_id);
    check_is_current_run_file(old.get(), path);
    const int64_t old_world = read_world_size(old.get(), path);
    if (old_world != static_cast<int64_t>(world)) {
      // A checkpoint resumed on another grid: the per-rank columns have another width. The file is kept whole;
      // the new one starts from its totals.
      try {
        previous.totals = totals_after_another_grid(old.get(), old_world, keep_through_step, path);
      } catch (const Error& e) {
        std::cerr << "[t5scale] run file '" << path << "': its totals cannot be carried over (" << e.what()
                  << "); the new file's figures start from this grid" << std::endl;
      }
      old.reset();
      return set_aside_run_file(
          path, msg("its rows have a column per rank of world size ", old_world, ", this run has ", world),
          msg("world", old_world));
    }
    try {
      previous.step_rows = read_table(old.get(), steps, path);
      previous.eval_rows = read_table(old.get(), evals, path);
      previous.attempt = read_attribute(old.get(), "attempt", path);
      previous.start_time_utc = read_attribute(old.get(), "start_time_utc", path);
      previous.totals = read_earlier_grids(old.get(), path);
    } catch (const Error& e) {
      old.reset();
      return set_aside_run_file(path, e.what(), "unreadable");
    }
    return std::nullopt;
  }

  // Queues the rows through `keep_through_step` for the new file. Rows with a step below 0 were allocated by a
  // flush that a kill interrupted: their step was never written.
  void keep_rows_through(const TableRows& rows, Table& table, int64_t keep_through_step) {
    const ColumnData& step = rows.columns[0];
    for (size_t row = 0; row < rows.rows; ++row) {
      if (step.i64[row] < 0) continue;
      note_newest_values(rows, table, row);
      if (step.i64[row] > keep_through_step) continue;
      for (size_t c = 0; c < table.specs.size(); ++c) table.pending[c].append_row_of(rows.columns[c], row);
      ++table.pending_rows;
      if (table.group == "steps") {
        totals.add(record_of_row(step_columns(), rows, row));
      } else {
        totals.add(record_of_row(eval_columns(), rows, row));
      }
    }
  }

  // The newest wall time, step and cumulative energies of every written row, rows beyond the kept ones included.
  void note_newest_values(const TableRows& rows, const Table& table, size_t row) {
    const double wall = rows.columns[table.column_index("wall_time_s")].value(row);
    if (!std::isnan(wall)) last_wall_time_s = std::max(last_wall_time_s, wall);
    if (table.group != "steps") return;
    last_step = std::max(last_step, rows.columns[0].i64[row]);
    for (size_t r = 0; r < world; ++r) {
      last_gpu_energy_j[r] = rows.columns[table.column_index("gpu_energy_j")].value(row, r);
      last_cpu_energy_j[r] = rows.columns[table.column_index("cpu_energy_j")].value(row, r);
    }
  }

  void close() {
    open = false;
    steps.datasets.clear();
    evals.datasets.clear();
    H5_CHECK(file.reset(), path);
  }

  void check_open(const char* what) const {
    T5S_CHECK(open, "run file '", path, "': ", what, " after the file was finished or closed");
  }

  SummaryTerms summary_terms() const {
    return summary_terms_of(attributes);
  }

  // /summary's attributes over the rows added so far (flushed or about to be).
  RunAttributes summary(const RunSummaryInputs& inputs, const std::string& status,
                        const std::string& end_time_utc = "") const {
    return totals.figures(summary_terms(), inputs, status, end_time_utc);
  }

  // Rewrites /summary's figures in place (what SWMR allows): the numbers, not the texts, which stay those of a
  // running file until finish().
  void rewrite_summary_figures() {
    H5Handle group(H5_CHECK(H5Gopen2(file.get(), "summary", H5P_DEFAULT), path));
    for (const auto& [name, value] : summary({}, run_status_name(RunStatus::kRunning))) {
      if (!std::holds_alternative<std::string>(value)) overwrite_attribute(group.get(), name, value, path);
    }
  }
};

RunFile::RunFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunFile::RunFile(RunFile&&) noexcept = default;
RunFile& RunFile::operator=(RunFile&&) noexcept = default;
RunFile::~RunFile() = default;

RunFile RunFile::create(const std::string& path, const RunDescription& description, const RunFileOptions& options) {
  Hdf5Quiet quiet;
  check_run_file_arguments(description, options, path);
  auto impl = std::make_unique<Impl>(path, description_attributes(description), options);
  impl->build_and_open();
  return RunFile(std::move(impl));
}

RunFile RunFile::resume(const std::string& path, const RunDescription& description, int64_t keep_through_step,
                        const RunFileOptions& options, std::string* warning) {
  Hdf5Quiet quiet;
  check_run_file_arguments(description, options, path);
  if (warning != nullptr) warning->clear();
  auto impl = std::make_unique<Impl>(path, description_attributes(description), options);
  impl->resumed_from_step = keep_through_step;
  // A resumed run had at least one attempt before; without a readable file that is all that is known.
  impl->attempt = 1;
  const std::optional<std::string> why_fresh = impl->take_over_previous_file(keep_through_step);
  if (why_fresh && warning != nullptr) {
    *warning = msg(*why_fresh, "; a new run file is started (attempt 1, resumed from step ", keep_through_step,
                   ") without the rows of the steps before");
  }
  impl->build_and_open();
  return RunFile(std::move(impl));
}

void RunFile::append_step(const StepRecord& record) {
  impl_->check_open("append_step");
  append_record(step_columns(), record, impl_->steps, impl_->path);
  impl_->totals.add(record);
  if (static_cast<int64_t>(impl_->steps.pending_rows) >= impl_->flush_every_steps) flush();
}

void RunFile::append_eval(const EvalRecord& record) {
  impl_->check_open("append_eval");
  append_record(eval_columns(), record, impl_->evals, impl_->path);
  impl_->totals.add(record);
  flush();
}

void RunFile::flush() {
  impl_->check_open("flush");
  Hdf5Quiet quiet;
  write_pending(impl_->steps, impl_->path);
  write_pending(impl_->evals, impl_->path);
  impl_->rewrite_summary_figures();
  H5_CHECK(H5Fflush(impl_->file.get(), H5F_SCOPE_LOCAL), impl_->path);
}

RunAttributes RunFile::finish(const RunSummaryInputs& inputs, const std::string& status) {
  Impl& impl = *impl_;
  impl.check_open("finish");
  const std::optional<RunStatus> final_status = parse_run_status(status);
  T5S_CHECK(final_status && *final_status != RunStatus::kRunning, "run file '", impl.path, "': status '", status,
            "' is not one of ", final_run_status_names());
  const std::pair<const char*, const std::vector<double>*> per_rank_inputs[] = {
      {"gpu_energy_j", &inputs.gpu_energy_j},
      {"cpu_energy_j", &inputs.cpu_energy_j},
      {"host_memory_bytes", &inputs.host_memory_bytes}};
  for (const auto& [name, given] : per_rank_inputs) {
    T5S_CHECK(given->empty() || given->size() == impl.world, "run file '", impl.path, "': summary input ", name,
              " has ", given->size(), " values; one per rank (world_size ", impl.world, ") or none is expected");
  }
  flush();
  Hdf5Quiet quiet;
  impl.close();
  // SWMR is over: the file is reopened plainly, which allows new groups and attributes.
  H5Handle file(open_for_writing_despite_readers(impl.path, H5F_ACC_RDWR, impl.reader_lock_wait_s));
  const RunAttributes summary = impl.summary(inputs, status, utc_iso_time());
  {
    // The texts get their final lengths: the group is written anew.
    H5_CHECK(H5Ldelete(file.get(), "summary", H5P_DEFAULT), impl.path);
    H5Handle group(H5_CHECK(H5Gcreate2(file.get(), "summary", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), impl.path));
    for (const auto& [name, value] : summary) write_attribute(group.get(), name, value, impl.path);
  }
  // The fixed-length string "running" is too short for the final status: the attribute is replaced.
  H5_CHECK(H5Adelete(file.get(), "status"), impl.path);
  write_attribute(file.get(), "status", status, impl.path);
  H5_CHECK(file.reset(), impl.path);
  return summary;
}

void RunFile::record_failure(const std::string& error, int64_t step) {
  Impl& impl = *impl_;
  impl.check_open("record_failure");
  flush();
  Hdf5Quiet quiet;
  overwrite_attribute(impl.file.get(), "error", error, impl.path);
  overwrite_attribute(impl.file.get(), "error_step", step, impl.path);
  const std::string failed = run_status_name(RunStatus::kFailed);  // fits "running"'s length
  overwrite_attribute(impl.file.get(), "status", failed, impl.path);
  {
    H5Handle summary(H5_CHECK(H5Gopen2(impl.file.get(), "summary", H5P_DEFAULT), impl.path));
    overwrite_attribute(summary.get(), "status", failed, impl.path);
  }
  H5_CHECK(H5Fflush(impl.file.get(), H5F_SCOPE_LOCAL), impl.path);
  impl.close();
}

const std::string& RunFile::path() const { return impl_->path; }
int64_t RunFile::world_size() const { return static_cast<int64_t>(impl_->world); }
int64_t RunFile::attempt() const { return impl_->attempt; }
int64_t RunFile::resumed_from_step() const { return impl_->resumed_from_step; }
const std::string& RunFile::start_time_utc() const { return impl_->start_time_utc; }
int64_t RunFile::steps_written() const { return static_cast<int64_t>(impl_->steps.rows_written); }
int64_t RunFile::steps_buffered() const { return static_cast<int64_t>(impl_->steps.pending_rows); }
int64_t RunFile::evals_written() const { return static_cast<int64_t>(impl_->evals.rows_written); }
double RunFile::last_wall_time_s() const { return impl_->last_wall_time_s; }
int64_t RunFile::last_step() const { return impl_->last_step; }
double RunFile::mean_step_time_s() const { return impl_->totals.mean_step_time_s(); }

double RunFile::last_gpu_energy_j(int rank) const {
  T5S_CHECK(rank >= 0 && static_cast<size_t>(rank) < impl_->world, "rank ", rank, " is not in world_size ",
            impl_->world);
  return impl_->last_gpu_energy_j[rank];
}

double RunFile::last_cpu_energy_j(int rank) const {
  T5S_CHECK(rank >= 0 && static_cast<size_t>(rank) < impl_->world, "rank ", rank, " is not in world_size ",
            impl_->world);
  return impl_->last_cpu_energy_j[rank];
}

std::string run_file_schema_json() {
  nlohmann::ordered_json schema;
  schema["format"] = kFormat;
  schema["schema_version"] = kSchemaVersion;
  nlohmann::ordered_json attributes = nlohmann::ordered_json::array();
  T5S_CHECK(own_attribute_kinds().size() == own_attribute_names().size(),
            "a root attribute of the run file has no kind");
  for (size_t i = 0; i < own_attribute_names().size(); ++i) {
    attributes.push_back({{"name", own_attribute_names()[i]}, {"dtype", kind_name(own_attribute_kinds()[i])},
                          {"set_by", "run file"}});
  }
  for (const auto& [name, kind] : run_file_caller_attributes()) {
    attributes.push_back({{"name", name}, {"dtype", kind_name(kind)}, {"set_by", "caller"}});
  }
  schema["root_attributes"] = attributes;
  auto columns_json = [](const std::vector<ColumnSpec>& specs) {
    nlohmann::ordered_json columns = nlohmann::ordered_json::array();
    for (const auto& spec : specs) {
      const char* dtype = spec.kind == ColumnKind::kInt64  ? "int64"
                          : spec.kind == ColumnKind::kInt8 ? "int8"
                                                           : "float64";
      columns.push_back({{"name", spec.name}, {"dtype", dtype}, {"unit", spec.unit},
                         {"per_rank", spec.kind == ColumnKind::kPerRankFloat64}});
    }
    return columns;
  };
  schema["steps"] = columns_json(specs_of(step_columns()));
  schema["eval"] = columns_json(specs_of(eval_columns()));
  nlohmann::ordered_json summary = nlohmann::ordered_json::array();
  for (const SummaryFigure& figure : summary_figures()) {
    summary.push_back({{"name", figure.name}, {"dtype", figure.dtype}, {"unit", figure.unit}});
  }
  schema["summary"] = summary;
  return schema.dump(1) + "\n";
}

}  // namespace t5scale
