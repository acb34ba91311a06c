// The run file's inside, shared by its source files (include it from telemetry/run_file*.cpp only; the interface
// is telemetry/run_file.h): the schema's columns, declared once here, from which the tables, the generated JSON
// schema and the writer all follow; the tables' buffers and their HDF5 I/O (run_file_tables.cpp); the rules of
// the root attributes (run_file_attributes.cpp).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/check.h"
#include "core/hdf5_check.h"
#include "telemetry/run_file.h"

namespace t5scale::run_file_internal {

inline constexpr char kFormat[] = "t5scale-run";
inline constexpr int64_t kSchemaVersion = 1;
inline constexpr hsize_t kChunkRows = 256;
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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

#define T5SCALE_COLUMN_OF_FIELD(name, type, unit, initial, ...) {#name, unit, &R::name},

inline const std::vector<Column<StepRecord>>& step_columns() {
  using R = StepRecord;
  static const std::vector<Column<StepRecord>> columns = {T5SCALE_STEP_FIELDS(T5SCALE_COLUMN_OF_FIELD)};
  return columns;
}

inline const std::vector<Column<EvalRecord>>& eval_columns() {
  using R = EvalRecord;
  static const std::vector<Column<EvalRecord>> columns = {T5SCALE_EVAL_FIELDS(T5SCALE_COLUMN_OF_FIELD)};
  return columns;
}

#undef T5SCALE_COLUMN_OF_FIELD

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

inline hid_t file_type(ColumnKind kind) {
  switch (kind) {
    case ColumnKind::kInt64: return H5T_STD_I64LE;
    case ColumnKind::kInt8: return H5T_STD_I8LE;
    default: return H5T_IEEE_F64LE;
  }
}

inline hid_t memory_type(ColumnKind kind) {
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

// Row `row` of rows read back from a file, as the record it was written from (append_record's inverse).
template <typename Record>
Record record_of_row(const std::vector<Column<Record>>& columns, const TableRows& rows, size_t row) {
  Record record;
  for (size_t i = 0; i < columns.size(); ++i) {
    const ColumnData& in = rows.columns[i];
    std::visit(
        [&](auto member) {
          auto& value = record.*member;
          using Value = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<Value, int64_t>) {
            value = in.i64[row];
          } else if constexpr (std::is_same_v<Value, bool>) {
            value = in.i8[row] != 0;
          } else if constexpr (std::is_same_v<Value, double>) {
            value = in.f64[row];
          } else {
            const auto begin = in.f64.begin() + static_cast<std::ptrdiff_t>(row * in.width);
            value.assign(begin, begin + static_cast<std::ptrdiff_t>(in.width));
          }
        },
        columns[i].field);
  }
  return record;
}

// ---- The tables in the file (run_file_tables.cpp) ----

void create_table(hid_t file, const Table& table, const std::string& path);
void open_table(hid_t file, Table& table, const std::string& path);
void write_pending(Table& table, const std::string& path);
TableRows read_table(hid_t file, const Table& table, const std::string& path);

// The summary's arithmetic over the rows of a column (NaN-aware as each says).
double sum_of(const TableRows& rows, const Table& table, const std::string& name);
int64_t integer_sum_of(const TableRows& rows, const Table& table, const std::string& name);
double mean_of(const TableRows& rows, const Table& table, const std::string& name);
double max_of(const TableRows& rows, const Table& table, const std::string& name);

// ---- The root attributes (run_file_attributes.cpp) ----

// Writes a new value into an attribute that exists, keeping its type (what SWMR allows); a longer string is cut at
// a UTF-8 character boundary.
void overwrite_attribute(hid_t location, const std::string& name, const AttributeValue& value, const std::string& path);
const char* kind_name(AttributeKind kind);
// The root attributes that the run file sets itself, and their kinds in the same order.
const std::vector<std::string>& own_attribute_names();
const std::vector<AttributeKind>& own_attribute_kinds();
// Every problem of the caller's attributes at once, each naming the attribute.
void validate_caller_attributes(const RunDescription& description, const std::string& path);

}  // namespace t5scale::run_file_internal
