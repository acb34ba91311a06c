#include <algorithm>
#include <cmath>

#include "telemetry/run_file_internal.h"

namespace t5scale::run_file_internal {

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

}  // namespace t5scale::run_file_internal
