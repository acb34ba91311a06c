#include "telemetry/run_file.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <thread>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/hdf5_attributes.h"
#include "core/hdf5_check.h"
#include "core/set_aside.h"
#include "core/utc_time.h"
#include "telemetry/cost.h"

namespace t5scale {

namespace {

constexpr char kFormat[] = "t5scale-run";
constexpr int64_t kSchemaVersion = 1;
constexpr hsize_t kChunkRows = 256;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- The schema's columns ----

enum class ColumnKind { kInt64, kInt8, kFloat64, kPerRankFloat64 };

template <typename Record>
using Field = std::variant<int64_t Record::*, bool Record::*, double Record::*, std::vector<double> Record::*>;

// One dataset of /steps or /eval and the record field it is written from; the field's type gives the kind:
// int64_t -> int64, bool -> int8, double -> float64, vector<double> -> (rows, world_size) float64.
template <typename Record>
struct Column {
  const char* name;
  const char* unit;
  Field<Record> field;
};

const std::vector<Column<StepRecord>>& step_columns() {
  using R = StepRecord;
  static const std::vector<Column<StepRecord>> columns = {
      {"step", "step", &R::step},
      {"epoch", "epoch", &R::epoch},
      {"wall_time_s", "s", &R::wall_time_s},
      {"loss", "nat/token", &R::loss},
      {"lr", "1", &R::lr},
      {"grad_norm", "1", &R::grad_norm},
      {"loss_scale", "1", &R::loss_scale},
      {"skipped", "bool", &R::skipped},
      {"samples", "samples", &R::samples},
      {"source_tokens", "tokens", &R::source_tokens},
      {"target_tokens", "tokens", &R::target_tokens},
      {"step_time_s", "s", &R::step_time_s},
      {"data_time_s", "s", &R::data_time_s},
      {"forward_time_s", "s", &R::forward_time_s},
      {"backward_time_s", "s", &R::backward_time_s},
      {"optimizer_time_s", "s", &R::optimizer_time_s},
      {"comm_exposed_time_s", "s", &R::comm_exposed_time_s},
      {"tokens_per_s", "tokens/s", &R::tokens_per_s},
      {"samples_per_s", "samples/s", &R::samples_per_s},
      {"model_flops", "FLOP", &R::model_flops},
      {"mfu", "fraction", &R::mfu},
      {"memory_allocated_bytes", "B", &R::memory_allocated_bytes},
      {"memory_reserved_bytes", "B", &R::memory_reserved_bytes},
      {"memory_peak_bytes", "B", &R::memory_peak_bytes},
      {"host_memory_bytes", "B", &R::host_memory_bytes},
      {"gpu_power_w", "W", &R::gpu_power_w},
      {"gpu_energy_j", "J", &R::gpu_energy_j},
      {"cpu_energy_j", "J", &R::cpu_energy_j},
  };
  return columns;
}

const std::vector<Column<EvalRecord>>& eval_columns() {
  using R = EvalRecord;
  static const std::vector<Column<EvalRecord>> columns = {
      {"step", "step", &R::step},
      {"epoch", "epoch", &R::epoch},
      {"wall_time_s", "s", &R::wall_time_s},
      {"loss", "nat/token", &R::loss},
      {"rouge1", "fraction", &R::rouge1},
      {"rouge2", "fraction", &R::rouge2},
      {"rougeL", "fraction", &R::rougeL},
      {"rougeLsum", "fraction", &R::rougeLsum},
      {"exact_match", "fraction", &R::exact_match},
      {"f1", "fraction", &R::f1},
      {"accuracy", "fraction", &R::accuracy},
      {"macro_f1", "fraction", &R::macro_f1},
      {"num_examples", "examples", &R::num_examples},
      {"eval_time_s", "s", &R::eval_time_s},
      {"generated_ids_beyond_vocab", "tokens", &R::generated_ids_beyond_vocab},
  };
  return columns;
}

struct ColumnSpec {
  std::string name;
  std::string unit;
  ColumnKind kind;
};

template <typename Record>
std::vector<ColumnSpec> specs_of(const std::vector<Column<Record>>& columns) {
  std::vector<ColumnSpec> specs;
  for (const auto& column : columns) {
    specs.push_back({column.name, column.unit, static_cast<ColumnKind>(column.field.index())});
  }
  return specs;
}

hid_t file_type(ColumnKind kind) {
  switch (kind) {
    case ColumnKind::kInt64: return H5T_STD_I64LE;
    case ColumnKind::kInt8: return H5T_STD_I8LE;
    default: return H5T_IEEE_F64LE;
  }
}

hid_t memory_type(ColumnKind kind) {
  switch (kind) {
    case ColumnKind::kInt64: return H5T_NATIVE_INT64;
    case ColumnKind::kInt8: return H5T_NATIVE_INT8;
    default: return H5T_NATIVE_DOUBLE;
  }
}

// Values of one column, row-major (rows, width), in the column's own type.
struct ColumnData {
  ColumnKind kind = ColumnKind::kFloat64;
  size_t width = 1;
  std::vector<int64_t> i64;
  std::vector<int8_t> i8;
  std::vector<double> f64;

  ColumnData(ColumnKind kind_, size_t width_) : kind(kind_), width(width_) {}
  void resize_rows(size_t rows) {
    if (kind == ColumnKind::kInt64) i64.resize(rows * width);
    else if (kind == ColumnKind::kInt8) i8.resize(rows * width);
    else f64.resize(rows * width);
  }
  void clear() {
    i64.clear();
    i8.clear();
    f64.clear();
  }
  void* data() {
    if (kind == ColumnKind::kInt64) return i64.data();
    if (kind == ColumnKind::kInt8) return i8.data();
    return f64.data();
  }
  double value(size_t row, size_t column = 0) const {
    const size_t index = row * width + column;
    if (kind == ColumnKind::kInt64) return static_cast<double>(i64[index]);
    if (kind == ColumnKind::kInt8) return i8[index];
    return f64[index];
  }
  void append_row_of(const ColumnData& other, size_t row) {
    const size_t begin = row * width, end = begin + width;
    if (kind == ColumnKind::kInt64) i64.insert(i64.end(), other.i64.begin() + begin, other.i64.begin() + end);
    else if (kind == ColumnKind::kInt8) i8.insert(i8.end(), other.i8.begin() + begin, other.i8.begin() + end);
    else f64.insert(f64.end(), other.f64.begin() + begin, other.f64.begin() + end);
  }
};

// A group of the file (/steps or /eval): its columns, the rows waiting for the next flush, and the open datasets.
struct Table {
  std::string group;
  std::vector<ColumnSpec> specs;
  size_t world = 1;
  std::vector<ColumnData> pending;
  size_t pending_rows = 0;
  std::vector<H5Handle> datasets;
  hsize_t rows_written = 0;

  Table(std::string group_, std::vector<ColumnSpec> specs_, size_t world_)
      : group(std::move(group_)), specs(std::move(specs_)), world(world_) {
    pending = empty_columns();
  }
  size_t width(size_t column) const { return specs[column].kind == ColumnKind::kPerRankFloat64 ? world : 1; }
  std::vector<ColumnData> empty_columns() const {
    std::vector<ColumnData> columns;
    for (size_t i = 0; i < specs.size(); ++i) columns.emplace_back(specs[i].kind, width(i));
    return columns;
  }
  size_t column_index(const std::string& name) const {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].name == name) return i;
    }
    throw Error(msg("run file: no column '", name, "' in /", group));
  }
};

// Rows read back from a file.
struct TableRows {
  size_t rows = 0;
  std::vector<ColumnData> columns;
};

template <typename Record>
void append_record(const std::vector<Column<Record>>& columns, const Record& record, Table& table,
                   const std::string& path) {
  // Every check before the first push, so a refused row leaves the buffers as they were.
  T5S_CHECK(record.step >= 0, "run file '", path, "': /", table.group, " row with step ", record.step,
            "; steps are >= 0");
  for (const auto& column : columns) {
    if (const auto* member = std::get_if<std::vector<double> Record::*>(&column.field)) {
      const size_t count = (record.**member).size();
      T5S_CHECK(count == table.world, "run file '", path, "': /", table.group, "/", column.name, " of step ",
                record.step, " has ", count, " values; one per rank is expected (world_size ", table.world, ")");
    }
  }
  for (size_t i = 0; i < columns.size(); ++i) {
    ColumnData& out = table.pending[i];
    std::visit(
        [&](auto member) {
          const auto& value = record.*member;
          using Value = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<Value, int64_t>) {
            out.i64.push_back(value);
          } else if constexpr (std::is_same_v<Value, bool>) {
            out.i8.push_back(value ? 1 : 0);
          } else if constexpr (std::is_same_v<Value, double>) {
            out.f64.push_back(value);
          } else {
            out.f64.insert(out.f64.end(), value.begin(), value.end());
          }
        },
        columns[i].field);
  }
  ++table.pending_rows;
}

// ---- Attributes ----

// Writes a new value into an attribute that exists, keeping its type: what SWMR allows. A string longer than the
// attribute's fixed length is cut at a UTF-8 character boundary.
void overwrite_attribute(hid_t location, const std::string& name, const AttributeValue& value,
                         const std::string& path) {
  H5Handle attribute(H5_CHECK(H5Aopen(location, name.c_str(), H5P_DEFAULT), path));
  if (const auto* integer = std::get_if<int64_t>(&value)) {
    H5_CHECK(H5Awrite(attribute.get(), H5T_NATIVE_INT64, integer), path);
    return;
  }
  H5Handle type(H5_CHECK(H5Aget_type(attribute.get()), path));
  T5S_CHECK(H5Tget_class(type.get()) == H5T_STRING && std::holds_alternative<std::string>(value), "run file '", path,
            "': attribute '", name, "' is not a text attribute");
  const size_t size = H5Tget_size(type.get());
  std::string text = std::get<std::string>(value);
  if (text.size() > size) {
    size_t cut = size;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
    text.resize(cut);
  }
  text.resize(size, '\0');
  H5_CHECK(H5Awrite(attribute.get(), type.get(), text.data()), path);
}

const char* kind_name(AttributeKind kind) {
  switch (kind) {
    case AttributeKind::kInt64: return "int64";
    case AttributeKind::kFloat64: return "float64";
    case AttributeKind::kString: return "string";
  }
  return "?";
}

AttributeKind kind_of(const AttributeValue& value) {
  if (std::holds_alternative<int64_t>(value)) return AttributeKind::kInt64;
  if (std::holds_alternative<double>(value)) return AttributeKind::kFloat64;
  return AttributeKind::kString;
}

// The root attributes that the run file sets itself.
const std::vector<std::string>& own_attribute_names() {
  static const std::vector<std::string> names = {"format",  "schema_version",    "start_time_utc", "status",
                                                 "attempt", "resumed_from_step", "error",          "error_step"};
  return names;
}

// The kinds of the root attributes the run file sets itself, in own_attribute_names()' order.
const std::vector<AttributeKind>& own_attribute_kinds() {
  using K = AttributeKind;
  static const std::vector<AttributeKind> kinds = {K::kString, K::kInt64, K::kString, K::kString,
                                                   K::kInt64,  K::kInt64, K::kString, K::kInt64};
  return kinds;
}

const AttributeValue* find_attribute(const RunAttributes& attributes, const std::string& name) {
  for (const auto& [key, value] : attributes) {
    if (key == name) return &value;
  }
  return nullptr;
}

// Every problem of the caller's attributes at once, each naming the attribute.
void validate_caller_attributes(const RunAttributes& attributes, const std::string& path) {
  std::vector<std::string> errors;
  std::set<std::string> seen;
  const auto& expected = run_file_caller_attributes();
  for (const auto& [name, value] : attributes) {
    if (!seen.insert(name).second) {
      errors.push_back(msg("attribute '", name, "' is given twice"));
      continue;
    }
    const auto& own = own_attribute_names();
    if (std::find(own.begin(), own.end(), name) != own.end()) {
      errors.push_back(msg("attribute '", name, "' is set by the run file itself"));
      continue;
    }
    auto it = std::find_if(expected.begin(), expected.end(), [&](const auto& entry) { return entry.first == name; });
    if (it == expected.end()) {
      errors.push_back(msg("attribute '", name, "' is not in schema ", kSchemaVersion));
    } else if (kind_of(value) != it->second) {
      errors.push_back(msg("attribute '", name, "' must be ", kind_name(it->second), ", got ",
                           kind_name(kind_of(value))));
    }
  }
  for (const auto& [name, kind] : expected) {
    if (!seen.count(name)) errors.push_back(msg("attribute '", name, "' (", kind_name(kind), ") is missing"));
  }
  if (errors.empty()) {
    const int64_t world = std::get<int64_t>(*find_attribute(attributes, "world_size"));
    const int64_t nodes = std::get<int64_t>(*find_attribute(attributes, "nodes"));
    const int64_t tp = std::get<int64_t>(*find_attribute(attributes, "tp"));
    const int64_t dp = std::get<int64_t>(*find_attribute(attributes, "dp"));
    if (world < 1) errors.push_back(msg("attribute 'world_size' must be >= 1, got ", world));
    if (nodes < 1) errors.push_back(msg("attribute 'nodes' must be >= 1, got ", nodes));
    if (world >= 1 && nodes >= 1 && world % nodes != 0) {
      errors.push_back(msg("attribute 'world_size' ", world, " is not divisible by 'nodes' ", nodes,
                           " (ranks are placed node by node, world_size / nodes on each)"));
    }
    if (tp * dp != world) {
      errors.push_back(msg("attributes 'tp' ", tp, " x 'dp' ", dp, " != 'world_size' ", world));
    }
    const auto& gpu = std::get<std::string>(*find_attribute(attributes, "energy_source_gpu"));
    if (gpu != "nvml_energy_counter" && gpu != "nvml_power_integrated" && gpu != "none") {
      errors.push_back(msg("attribute 'energy_source_gpu' is '", gpu,
                           "'; one of nvml_energy_counter, nvml_power_integrated, none is expected"));
    }
    const auto& cpu = std::get<std::string>(*find_attribute(attributes, "energy_source_cpu"));
    if (cpu != "rapl" && cpu != "none") {
      errors.push_back(msg("attribute 'energy_source_cpu' is '", cpu, "'; one of rapl, none is expected"));
    }
  }
  if (errors.empty()) return;
  std::string text = msg("run file '", path, "': ", errors.size(), " problem(s) with the root attributes:");
  for (const auto& error : errors) text += "\n  " + error;
  throw Error(text);
}

// ---- Datasets ----

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

void create_table(hid_t file, const Table& table, const std::string& path) {
  H5Handle group(H5_CHECK(H5Gcreate2(file, table.group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path));
  for (size_t i = 0; i < table.specs.size(); ++i) {
    const ColumnSpec& spec = table.specs[i];
    const bool per_rank = spec.kind == ColumnKind::kPerRankFloat64;
    const int rank = per_rank ? 2 : 1;
    const hsize_t dims[2] = {0, table.world};
    const hsize_t max_dims[2] = {H5S_UNLIMITED, table.world};
    const hsize_t chunk[2] = {kChunkRows, table.world};
    H5Handle space(H5_CHECK(H5Screate_simple(rank, dims, max_dims), path));
    H5Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), path));
    H5_CHECK(H5Pset_chunk(dcpl.get(), rank, chunk), path);
    // What a reader sees in a row that was allocated but not written (a kill inside a flush).
    const int64_t fill_int64 = -1;
    const int8_t fill_int8 = -1;
    const double fill_float = kNaN;
    const void* fill = spec.kind == ColumnKind::kInt64  ? static_cast<const void*>(&fill_int64)
                       : spec.kind == ColumnKind::kInt8 ? static_cast<const void*>(&fill_int8)
                                                        : static_cast<const void*>(&fill_float);
    H5_CHECK(H5Pset_fill_value(dcpl.get(), memory_type(spec.kind), fill), path);
    H5Handle dataset(H5_CHECK(H5Dcreate2(group.get(), spec.name.c_str(), file_type(spec.kind), space.get(),
                                         H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                              path));
    write_attribute(dataset.get(), "unit", spec.unit, path);
  }
}

void open_table(hid_t file, Table& table, const std::string& path) {
  table.datasets.clear();
  for (size_t i = 0; i < table.specs.size(); ++i) {
    // A chunk cache that holds the chunk being appended to, however wide (256 rows x world_size doubles), so
    // a flush never reads a chunk back from disk.
    const size_t chunk_bytes = kChunkRows * table.width(i) * sizeof(double);
    const size_t cache_bytes = std::max<size_t>(size_t{1} << 20, chunk_bytes + chunk_bytes / 8);
    H5Handle dapl(H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS), path));
    H5_CHECK(H5Pset_chunk_cache(dapl.get(), H5D_CHUNK_CACHE_NSLOTS_DEFAULT, cache_bytes,
                                H5D_CHUNK_CACHE_W0_DEFAULT),
             path);
    const std::string name = "/" + table.group + "/" + table.specs[i].name;
    table.datasets.emplace_back(H5_CHECK(H5Dopen2(file, name.c_str(), dapl.get()), path));
  }
}

void write_pending(Table& table, const std::string& path) {
  if (table.pending_rows == 0) return;
  const hsize_t start = table.rows_written, count = table.pending_rows;
  // Backwards: `step` (column 0) is extended and written last, after every other column of these rows.
  for (size_t i = table.specs.size(); i-- > 0;) {
    const int rank = table.specs[i].kind == ColumnKind::kPerRankFloat64 ? 2 : 1;
    const hsize_t new_dims[2] = {start + count, table.world};
    const hsize_t offset[2] = {start, 0};
    const hsize_t block[2] = {count, table.world};
    const hid_t dataset = table.datasets[i].get();
    H5_CHECK(H5Dset_extent(dataset, new_dims), path);
    H5Handle file_space(H5_CHECK(H5Dget_space(dataset), path));
    H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, offset, nullptr, block, nullptr), path);
    H5Handle memory_space(H5_CHECK(H5Screate_simple(rank, block, nullptr), path));
    H5_CHECK(H5Dwrite(dataset, memory_type(table.specs[i].kind), memory_space.get(), file_space.get(),
                      H5P_DEFAULT, table.pending[i].data()),
             path);
    table.pending[i].clear();
  }
  table.rows_written += count;
  table.pending_rows = 0;
}

// Every column of /<group> with as many rows as its shortest column (a kill between two columns' extends can
// leave them of different lengths).
TableRows read_table(hid_t file, const Table& table, const std::string& path) {
  std::vector<H5Handle> datasets;
  hsize_t rows = std::numeric_limits<hsize_t>::max();
  for (size_t i = 0; i < table.specs.size(); ++i) {
    const std::string name = "/" + table.group + "/" + table.specs[i].name;
    T5S_CHECK(H5Lexists(file, table.group.c_str(), H5P_DEFAULT) > 0 && H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0,
              path, ": no dataset ", name, " (not a schema ", kSchemaVersion, " run file)");
    datasets.emplace_back(H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT), path));
    H5Handle space(H5_CHECK(H5Dget_space(datasets.back().get()), path));
    const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space.get()), path);
    const int expected_rank = table.specs[i].kind == ColumnKind::kPerRankFloat64 ? 2 : 1;
    hsize_t dims[2] = {0, 0};
    T5S_CHECK(rank == expected_rank, path, ": ", name, " has ", rank, " dimensions, ", expected_rank,
              " expected");
    H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims, nullptr), path);
    if (rank == 2) {
      T5S_CHECK(dims[1] == table.world, path, ": ", name, " has ", dims[1],
                " ranks per row; this run has world_size ", table.world);
    }
    rows = std::min(rows, dims[0]);
  }
  TableRows result;
  result.rows = rows;
  result.columns = table.empty_columns();
  if (rows == 0) return result;
  for (size_t i = 0; i < table.specs.size(); ++i) {
    const int rank = table.specs[i].kind == ColumnKind::kPerRankFloat64 ? 2 : 1;
    const hsize_t offset[2] = {0, 0};
    const hsize_t block[2] = {rows, table.world};
    H5Handle file_space(H5_CHECK(H5Dget_space(datasets[i].get()), path));
    H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, offset, nullptr, block, nullptr), path);
    H5Handle memory_space(H5_CHECK(H5Screate_simple(rank, block, nullptr), path));
    result.columns[i].resize_rows(rows);
    H5_CHECK(H5Dread(datasets[i].get(), memory_type(table.specs[i].kind), memory_space.get(), file_space.get(),
                     H5P_DEFAULT, result.columns[i].data()),
             path);
  }
  return result;
}

// ---- Summary arithmetic ----

double sum_of(const TableRows& rows, const Table& table, const std::string& name) {
  const ColumnData& column = rows.columns[table.column_index(name)];
  double sum = 0;
  for (size_t row = 0; row < rows.rows; ++row) {
    for (size_t c = 0; c < column.width; ++c) sum += column.value(row, c);
  }
  return sum;
}

int64_t integer_sum_of(const TableRows& rows, const Table& table, const std::string& name) {
  const ColumnData& column = rows.columns[table.column_index(name)];
  int64_t sum = 0;
  for (size_t row = 0; row < rows.rows; ++row) sum += column.i64[row];
  return sum;
}

// NaN for no rows; NaN values propagate (an unknown value makes the mean unknown).
double mean_of(const TableRows& rows, const Table& table, const std::string& name) {
  const size_t width = rows.columns[table.column_index(name)].width;
  return sum_of(rows, table, name) / static_cast<double>(rows.rows * width);
}

double max_of(const TableRows& rows, const Table& table, const std::string& name) {
  const ColumnData& column = rows.columns[table.column_index(name)];
  if (rows.rows == 0) return kNaN;
  double result = -std::numeric_limits<double>::infinity();
  for (size_t row = 0; row < rows.rows; ++row) {
    for (size_t c = 0; c < column.width; ++c) {
      const double value = column.value(row, c);
      if (std::isnan(value)) return kNaN;
      result = std::max(result, value);
    }
  }
  return result;
}

const std::vector<std::string>& valid_statuses() {
  static const std::vector<std::string> statuses = {"completed", "preempted", "diverged", "failed"};
  return statuses;
}

// What create() and resume() refuse before they touch a file.
void check_run_file_arguments(const RunAttributes& attributes, const RunFileOptions& options,
                              const std::string& path) {
  validate_caller_attributes(attributes, path);
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
};

}  // namespace

// ---- Public tables ----

const std::vector<std::pair<std::string, AttributeKind>>& run_file_caller_attributes() {
  using K = AttributeKind;
  static const std::vector<std::pair<std::string, AttributeKind>> attributes = {
      {"run_id", K::kString},
      {"study", K::kString},
      {"git_revision", K::kString},
      {"slurm_job_id", K::kString},         // "" outside Slurm
      {"slurm_array_task_id", K::kString},  // "" outside a job array
      {"hosts", K::kString},
      {"nodes", K::kInt64},
      {"gpus_per_node", K::kInt64},
      {"world_size", K::kInt64},
      {"tp", K::kInt64},
      {"dp", K::kInt64},
      {"model_name", K::kString},
      {"parameter_count", K::kInt64},
      {"global_batch", K::kInt64},
      {"micro_batch", K::kInt64},
      {"grad_accumulation", K::kInt64},
      {"base_lr", K::kFloat64},
      {"effective_lr", K::kFloat64},
      {"lr_scaling_rule", K::kString},
      {"reference_global_batch", K::kInt64},
      {"warmup_steps", K::kInt64},
      {"max_steps", K::kInt64},
      {"steps_per_epoch", K::kInt64},
      {"epochs", K::kFloat64},  // max_steps / steps_per_epoch: fractional
      {"precision", K::kString},
      {"optimizer", K::kString},
      {"device_names", K::kString},
      {"driver_version", K::kString},
      {"cuda_version", K::kString},
      {"nccl_version", K::kString},
      {"torch_version", K::kString},
      {"peak_flops_per_device", K::kFloat64},
      {"price_per_node_hour_usd", K::kFloat64},
      {"carbon_intensity_g_per_kwh", K::kFloat64},
      {"pue", K::kFloat64},
      {"predicted_memory_bytes_per_device", K::kInt64},
      {"predicted_flops_per_step", K::kFloat64},
      {"checkpoint_every_blocks", K::kInt64},  // activation checkpointing as run: 0 none, k every k-th block
      {"attention_kernels", K::kString},       // "explicit", or each call site's SDPA kernel (T5Model::attention_kernels)
      {"energy_source_gpu", K::kString},
      {"energy_source_cpu", K::kString},
      {"config_yaml", K::kString},
      {"config_changes", K::kString},  // on resume, "step N: key: before -> after", one a line; "" when none
  };
  return attributes;
}

const std::vector<std::string>& run_file_eval_metrics() {
  static const std::vector<std::string> metrics = {"loss",        "rouge1", "rouge2",   "rougeL",  "rougeLsum",
                                                   "exact_match", "f1",     "accuracy", "macro_f1"};
  return metrics;
}

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
  KeptStepTotals kept;  // the kept /steps rows' sums

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
        root.emplace_back("status", std::string("running"));
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
    if (std::optional<std::string> why_not = read_previous_attempt(previous)) return why_not;
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
  std::optional<std::string> read_previous_attempt(PreviousAttempt& previous) const {
    // SWMR read opens a file whose writer was killed (its superblock still says "open for SWMR write").
    const hid_t old_id = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT);
    if (old_id < 0) {
      const std::string reason = detail::hdf5_error_stack_text();
      return set_aside_run_file(path, reason, "unreadable");
    }
    H5Handle old(old_id);
    check_is_current_run_file(old.get(), path);
    const int64_t old_world = read_world_size(old.get(), path);
    if (old_world != static_cast<int64_t>(world)) {
      // A checkpoint resumed on another grid: the per-rank columns have another width. The file is kept whole.
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
      if (table.group == "steps") add_to_kept_totals(rows, table, row);
    }
  }

  void add_to_kept_totals(const TableRows& rows, const Table& table, size_t row) {
    auto value = [&](const char* column, size_t rank = 0) {
      return rows.columns[table.column_index(column)].value(row, rank);
    };
    kept.steps += 1;
    kept.samples += static_cast<int64_t>(value("samples"));
    kept.tokens += static_cast<int64_t>(value("source_tokens") + value("target_tokens"));
    kept.step_time_s += value("step_time_s");
    kept.model_flops += value("model_flops");
    if (std::isfinite(value("mfu"))) kept.mfu_sum += value("mfu");
    if (std::isfinite(value("memory_allocated_bytes"))) kept.memory_allocated_sum_bytes += value("memory_allocated_bytes");
    for (size_t r = 0; r < world; ++r) {
      const double peak = value("memory_peak_bytes", r);
      if (std::isfinite(peak)) kept.peak_memory_bytes = std::max(kept.peak_memory_bytes, peak);
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

  RunAttributes summary(const TableRows& step_rows, const TableRows& eval_rows, const RunSummaryInputs& inputs,
                        const std::string& status) const;
};

RunAttributes RunFile::Impl::summary(const TableRows& step_rows, const TableRows& eval_rows,
                                     const RunSummaryInputs& inputs, const std::string& status) const {
  RunAttributes out;
  out.emplace_back("end_time_utc", utc_iso_time());
  out.emplace_back("status", status);

  double wall_time_s = inputs.wall_time_s;
  if (std::isnan(wall_time_s)) {
    const double steps_wall = max_of(step_rows, steps, "wall_time_s");
    const double evals_wall = max_of(eval_rows, evals, "wall_time_s");
    wall_time_s = std::isnan(steps_wall) ? evals_wall : std::isnan(evals_wall) ? steps_wall
                                                                                : std::max(steps_wall, evals_wall);
  }
  out.emplace_back("wall_time_s", wall_time_s);
  out.emplace_back("train_time_s", sum_of(step_rows, steps, "step_time_s"));
  out.emplace_back("eval_time_s", sum_of(eval_rows, evals, "eval_time_s"));
  out.emplace_back("steps_completed", static_cast<int64_t>(step_rows.rows));
  out.emplace_back("samples_total", integer_sum_of(step_rows, steps, "samples"));
  out.emplace_back("tokens_total", integer_sum_of(step_rows, steps, "source_tokens") +
                                       integer_sum_of(step_rows, steps, "target_tokens"));

  // Cumulative joules per rank at the end: given, or the newest step row's (NaN without rows).
  auto final_energy = [&](const std::vector<double>& given, const std::string& column) {
    if (!given.empty()) return given;
    std::vector<double> values(world, kNaN);
    if (step_rows.rows == 0) return values;
    const ColumnData& data = step_rows.columns[steps.column_index(column)];
    for (size_t r = 0; r < world; ++r) values[r] = data.value(step_rows.rows - 1, r);
    return values;
  };
  const std::vector<double> gpu_j = final_energy(inputs.gpu_energy_j, "gpu_energy_j");
  const std::vector<double> cpu_j = final_energy(inputs.cpu_energy_j, "cpu_energy_j");
  // GPU energy is per device: the sum over ranks. CPU energy is per node (every rank on a node reads the same
  // package counters): one value per node, the lowest rank on it that has one.
  double gpu_total_j = 0;
  for (double value : gpu_j) gpu_total_j += value;
  const int64_t nodes = std::get<int64_t>(attribute("nodes"));
  const size_t ranks_per_node = world / static_cast<size_t>(nodes);
  double cpu_total_j = 0;
  for (int64_t node = 0; node < nodes; ++node) {
    double node_j = kNaN;
    for (size_t r = node * ranks_per_node; r < (node + 1) * ranks_per_node && std::isnan(node_j); ++r) {
      node_j = cpu_j[r];
    }
    cpu_total_j += node_j;
  }
  // A source that was "none" was not measured: it adds nothing to energy_kwh, and its own figure is NaN.
  const bool gpu_measured = std::get<std::string>(attribute("energy_source_gpu")) != "none";
  const bool cpu_measured = std::get<std::string>(attribute("energy_source_cpu")) != "none";
  out.emplace_back("gpu_energy_kwh", gpu_measured ? gpu_total_j / kJoulesPerKwh : kNaN);
  out.emplace_back("cpu_energy_kwh", cpu_measured ? cpu_total_j / kJoulesPerKwh : kNaN);
  const double pue = std::get<double>(attribute("pue"));
  const double total_kwh = gpu_measured || cpu_measured
                               ? energy_kwh(gpu_measured ? gpu_total_j : 0.0, cpu_measured ? cpu_total_j : 0.0, pue)
                               : kNaN;
  out.emplace_back("energy_kwh", total_kwh);
  out.emplace_back("cost_usd", cost_usd(std::get<double>(attribute("price_per_node_hour_usd")), nodes, wall_time_s));
  out.emplace_back("co2_kg", co2_kg(total_kwh, std::get<double>(attribute("carbon_intensity_g_per_kwh"))));
  out.emplace_back("mean_step_time_s", mean_of(step_rows, steps, "step_time_s"));
  out.emplace_back("mean_tokens_per_s", mean_of(step_rows, steps, "tokens_per_s"));
  out.emplace_back("mean_mfu", mean_of(step_rows, steps, "mfu"));
  out.emplace_back("peak_memory_bytes", max_of(step_rows, steps, "memory_peak_bytes"));
  out.emplace_back("mean_memory_allocated_bytes", mean_of(step_rows, steps, "memory_allocated_bytes"));
  // The resident set only grows: the end's value is the peak, and the rows cover the attempts before this one.
  double host_peak = step_rows.rows > 0 ? max_of(step_rows, steps, "host_memory_bytes") : kNaN;
  for (const double bytes : inputs.host_memory_bytes) {
    if (!std::isnan(bytes)) host_peak = std::isnan(host_peak) ? bytes : std::max(host_peak, bytes);
  }
  out.emplace_back("peak_host_memory_bytes", host_peak);
  out.emplace_back("total_flops", sum_of(step_rows, steps, "model_flops"));

  // Eval metrics: final = the newest evaluation that computed it, best = min (loss) or max (the rest), at the
  // earliest step that reached it. Metrics never computed get no attributes.
  const ColumnData& eval_step = eval_rows.columns[evals.column_index("step")];
  for (const std::string& metric : run_file_eval_metrics()) {
    const ColumnData& values = eval_rows.columns[evals.column_index(metric)];
    const bool lower_is_better = metric == "loss";
    double final_value = kNaN, best_value = kNaN;
    int64_t best_step = -1;
    for (size_t row = 0; row < eval_rows.rows; ++row) {
      const double value = values.value(row);
      if (std::isnan(value)) continue;
      final_value = value;
      if (std::isnan(best_value) || (lower_is_better ? value < best_value : value > best_value)) {
        best_value = value;
        best_step = eval_step.i64[row];
      }
    }
    if (std::isnan(final_value)) continue;
    out.emplace_back("final_" + metric, final_value);
    out.emplace_back("best_" + metric, best_value);
    out.emplace_back("best_" + metric + "_step", best_step);
  }
  return out;
}

RunFile::RunFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunFile::RunFile(RunFile&&) noexcept = default;
RunFile& RunFile::operator=(RunFile&&) noexcept = default;
RunFile::~RunFile() = default;

RunFile RunFile::create(const std::string& path, const RunAttributes& attributes, const RunFileOptions& options) {
  Hdf5Quiet quiet;
  check_run_file_arguments(attributes, options, path);
  auto impl = std::make_unique<Impl>(path, attributes, options);
  impl->build_and_open();
  return RunFile(std::move(impl));
}

RunFile RunFile::resume(const std::string& path, const RunAttributes& attributes, int64_t keep_through_step,
                        const RunFileOptions& options, std::string* warning) {
  Hdf5Quiet quiet;
  check_run_file_arguments(attributes, options, path);
  if (warning != nullptr) warning->clear();
  auto impl = std::make_unique<Impl>(path, attributes, options);
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
  if (static_cast<int64_t>(impl_->steps.pending_rows) >= impl_->flush_every_steps) flush();
}

void RunFile::append_eval(const EvalRecord& record) {
  impl_->check_open("append_eval");
  append_record(eval_columns(), record, impl_->evals, impl_->path);
  flush();
}

void RunFile::flush() {
  impl_->check_open("flush");
  Hdf5Quiet quiet;
  write_pending(impl_->steps, impl_->path);
  write_pending(impl_->evals, impl_->path);
  H5_CHECK(H5Fflush(impl_->file.get(), H5F_SCOPE_LOCAL), impl_->path);
}

void RunFile::finish(const RunSummaryInputs& inputs, const std::string& status) {
  Impl& impl = *impl_;
  impl.check_open("finish");
  const auto& statuses = valid_statuses();
  T5S_CHECK(std::find(statuses.begin(), statuses.end(), status) != statuses.end(), "run file '", impl.path,
            "': status '", status, "' is not one of completed, preempted, diverged, failed");
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
  const TableRows step_rows = read_table(file.get(), impl.steps, impl.path);
  const TableRows eval_rows = read_table(file.get(), impl.evals, impl.path);
  const RunAttributes summary = impl.summary(step_rows, eval_rows, inputs, status);
  {
    H5Handle group(H5_CHECK(H5Gcreate2(file.get(), "summary", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), impl.path));
    for (const auto& [name, value] : summary) write_attribute(group.get(), name, value, impl.path);
  }
  // The fixed-length string "running" is too short for the final status: the attribute is replaced.
  H5_CHECK(H5Adelete(file.get(), "status"), impl.path);
  write_attribute(file.get(), "status", status, impl.path);
  H5_CHECK(file.reset(), impl.path);
}

void RunFile::record_failure(const std::string& error, int64_t step) {
  Impl& impl = *impl_;
  impl.check_open("record_failure");
  flush();
  Hdf5Quiet quiet;
  overwrite_attribute(impl.file.get(), "error", error, impl.path);
  overwrite_attribute(impl.file.get(), "error_step", step, impl.path);
  overwrite_attribute(impl.file.get(), "status", std::string("failed"), impl.path);  // fits "running"'s length
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
const KeptStepTotals& RunFile::kept_step_totals() const { return impl_->kept; }

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
  return schema.dump(1) + "\n";
}

}  // namespace t5scale
