// t5scale_run_file_writer: the run file written by t5scale's own RunFile from a script of JSON lines on stdin,
// one operation a line, each answered "ok" (or "error: <message>", and the program ends with status 1). The
// analysis tests (analysis/tests/runfile_writer.py) write their run files through it, so that every figure they
// read, /summary included, is the one the trainer's writer computes.
//
//   {"op": "create", "path": P, "attributes": {...}, "flush_every": N}     RunDescription's fields by name
//   {"op": "resume", "path": P, "attributes": {...}, "keep_through_step": K, "flush_every": N}
//                                                                          answers "ok" or "ok <warning>"
//   {"op": "steps", "rows": [{...}, ...]}   StepRecord's fields by name; null for an unknown (NaN) float
//   {"op": "eval", "rows": [{...}, ...]}    EvalRecord's fields
//   {"op": "flush"}
//   {"op": "finish", "status": S, "inputs": {"wall_time_s": ..., "gpu_energy_j": [...], ...}}
//   {"op": "fail", "error": E, "step": N}   record_failure
//   {"op": "close"}                          closes the file unfinished (a job that ended without finishing)
// Missing fields keep their defaults; unknown names are refused, so that a test cannot misspell a column.
#include <cstdio>
#include <iostream>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "telemetry/run_file.h"

namespace {

using nlohmann::json;
using namespace t5scale;

double real_of(const json& value) { return value.is_null() ? kUnknownValue : value.get<double>(); }

void set_value(int64_t& out, const json& value) { out = value.get<int64_t>(); }
void set_value(bool& out, const json& value) { out = value.is_boolean() ? value.get<bool>() : value.get<int64_t>() != 0; }
void set_value(double& out, const json& value) { out = real_of(value); }
void set_value(std::string& out, const json& value) { out = value.get<std::string>(); }
void set_value(std::vector<double>& out, const json& value) {
  out.clear();
  for (const json& v : value) out.push_back(real_of(v));
}

// Fills `record`'s fields named in `object`; refuses names it does not have.
template <typename Record>
Record record_of(const json& object, const std::set<std::string>& names, Record record,
                 void (*fill)(Record&, const std::string&, const json&)) {
  for (const auto& [name, value] : object.items()) {
    T5S_CHECK(names.count(name) == 1, "no field '", name, "'");
    fill(record, name, value);
  }
  return record;
}

#define T5SCALE_NAME(name, ...) #name,
#define T5SCALE_FILL(name, ...) \
  if (key == #name) set_value(record.name, value);

const std::set<std::string> kStepNames = {T5SCALE_STEP_FIELDS(T5SCALE_NAME)};
const std::set<std::string> kEvalNames = {T5SCALE_EVAL_FIELDS(T5SCALE_NAME)};
const std::set<std::string> kDescriptionNames = {T5SCALE_RUN_DESCRIPTION_FIELDS(T5SCALE_NAME)};

void fill_step(StepRecord& record, const std::string& key, const json& value) { T5SCALE_STEP_FIELDS(T5SCALE_FILL) }
void fill_eval(EvalRecord& record, const std::string& key, const json& value) { T5SCALE_EVAL_FIELDS(T5SCALE_FILL) }
void fill_description(RunDescription& record, const std::string& key, const json& value) {
  T5SCALE_RUN_DESCRIPTION_FIELDS(T5SCALE_FILL)
}

RunFileOptions options_of(const json& line) {
  RunFileOptions options;
  options.flush_every_steps = line.value("flush_every", int64_t{1000000});  // the script says when to flush
  return options;
}

int run() {
  std::optional<RunFile> file;
  std::string text;
  while (std::getline(std::cin, text)) {
    if (text.empty()) continue;
    try {
      const json line = json::parse(text);
      const std::string op = line.at("op").get<std::string>();
      std::string answer = "ok";
      if (op == "create" || op == "resume") {
        file.reset();
        const RunDescription description =
            record_of(line.at("attributes"), kDescriptionNames, RunDescription{}, &fill_description);
        if (op == "create") {
          file.emplace(RunFile::create(line.at("path").get<std::string>(), description, options_of(line)));
        } else {
          std::string warning;
          file.emplace(RunFile::resume(line.at("path").get<std::string>(), description,
                                       line.at("keep_through_step").get<int64_t>(), options_of(line), &warning));
          if (!warning.empty()) answer += " " + warning;
        }
      } else {
        T5S_CHECK(file.has_value(), "'", op, "' before create or resume");
        if (op == "steps") {
          for (const json& row : line.at("rows")) file->append_step(record_of(row, kStepNames, StepRecord{}, &fill_step));
        } else if (op == "eval") {
          for (const json& row : line.at("rows")) file->append_eval(record_of(row, kEvalNames, EvalRecord{}, &fill_eval));
        } else if (op == "flush") {
          file->flush();
        } else if (op == "finish") {
          RunSummaryInputs inputs;
          const json given = line.value("inputs", json::object());
          if (given.contains("wall_time_s")) inputs.wall_time_s = real_of(given["wall_time_s"]);
          if (given.contains("gpu_energy_j")) set_value(inputs.gpu_energy_j, given["gpu_energy_j"]);
          if (given.contains("cpu_energy_j")) set_value(inputs.cpu_energy_j, given["cpu_energy_j"]);
          if (given.contains("host_memory_bytes")) set_value(inputs.host_memory_bytes, given["host_memory_bytes"]);
          if (given.contains("estimated_energy_j")) inputs.estimated_energy_j = real_of(given["estimated_energy_j"]);
          if (given.contains("energy_estimate_method")) set_value(inputs.energy_estimate_method, given["energy_estimate_method"]);
          file->finish(inputs, line.at("status").get<std::string>());
          file.reset();
        } else if (op == "fail") {
          file->record_failure(line.at("error").get<std::string>(), line.at("step").get<int64_t>());
          file.reset();
        } else if (op == "close") {
          file.reset();
        } else {
          throw Error(msg("unknown op '", op, "'"));
        }
      }
      std::printf("%s\n", answer.c_str());
      std::fflush(stdout);
    } catch (const std::exception& e) {
      std::printf("error: %s\n", e.what());
      std::fflush(stdout);
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main() { return run(); }
