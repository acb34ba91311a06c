// Dataset recipes: a small YAML file per dataset that says how each input record becomes one (source, target)
// text pair for a sequence-to-sequence model, which input files or hash ratios make the splits, and which symbols
// the tokenizer must keep whole. data_prep/README.md is the user's reference; data_prep/recipes/ has examples.
//
// Recipe keys (all but source_template and target_template optional; an unknown key is an error):
//   name               text; default: the file name without extension
//   format             jsonl | csv (default jsonl)
//   csv_columns        [a, b, c]: the CSV file has no header row, these are its columns
//   source_template    text with {field} placeholders, e.g. "summarize: {dialogue}"
//   target_template    e.g. "{summary}"
//   id_field           a field path (as inside a placeholder) giving each record's id; "" = the line number
//   label_words        {raw value: word}, e.g. {0: negative, 1: positive}; needs target_template to be exactly one
//                      placeholder (see render_example)
//   special_tokens     [<question>, <context>]: user symbols the tokenizer keeps as single pieces
//   split_files        {split: file}; a path inside the recipe's folder ("train.jsonl", "raw/train.jsonl"; never
//                      absolute or with "..": a recipe travels, t5scale-prep --data-dir reads the names elsewhere)
//   split_ratios       {split: fraction} for a seeded hash split of one input; fractions in (0, 1], sum 1
//   split_seed         integer seed of that hash (default 0)
//   max_source_length  tokens, >= 0, 0 = no limit (default 512)
//   max_target_length  tokens, >= 0, 0 = no limit (default 128)
//   on_malformed       fail | skip (default fail)
// split_files and split_ratios exclude each other; with neither, the t5scale-prep command line decides.
//
// Template syntax:
//   {field}             a top-level field
//   {a.b}               a field of an object
//   {answers[0]}        an element of an array; {answers.text[0]} the first element of answers.text;
//                       indices chain: {m[1][0]}
//   {{ and }}           a literal { and }
// Inside the braces the text is taken exactly (no trimming). A record that has a top-level key equal to the whole
// placeholder text ("{a.b}" with a CSV column named "a.b") uses that key. Strings render as they are; numbers and
// booleans as their JSON text (1, 0.5, true); objects and arrays as compact JSON. A missing field, an index out of
// range, indexing something that is not an array, or a null value is a missing field.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data_prep/text_records.h"

namespace t5scale {

struct Recipe {
  std::string name, yaml_text;  // yaml_text: the file as read (stored in the dataset)
  std::string path;             // the recipe file as given to load() ("" for a recipe built in code)
  std::string dir;              // the recipe's folder: relative split_files are read from there
  InputFormat format = InputFormat::kJsonl;
  std::vector<std::string> csv_columns;                // headerless CSV: the column names; empty = header row
  std::string source_template, target_template;        // "summarize: {dialogue}", "{summary}"
  std::string id_field;                                // "" = no id (hash split then uses the line number)
  std::map<std::string, std::string> label_words;      // classification: raw label value -> target word
  std::vector<std::string> special_tokens;             // e.g. <question>, <context>: user symbols for tokenizer training
  std::map<std::string, std::string> split_files;      // split name -> input file under the recipe's folder (`dir`)
  std::map<std::string, std::string> split_files_as_written;  // the same as the recipe file has them
  std::map<std::string, double> split_ratios;          // for hash splits, e.g. train .9 validation .05 test .05
  int64_t split_seed = 0;                              // seed of the hash split
  int64_t max_source_length = 512, max_target_length = 128;  // 0 = no limit
  MalformedPolicy on_malformed = MalformedPolicy::kFail;

  // Reads and validates a recipe file; every error names the file and the key.
  static Recipe load(const std::string& path);
  // The same from YAML text; `name_for_errors` stands in for the file in messages, `base_dir` becomes `dir`, and
  // the default name is `default_name`.
  static Recipe parse(const std::string& yaml_text, const std::string& name_for_errors, const std::string& base_dir,
                      const std::string& default_name);
  // The input file of a split in split_files: split_files[split] when `data_dir` is "", else the path as written
  // under `data_dir`. Error when the split is not in split_files.
  std::string split_file_path(const std::string& split, const std::string& data_dir = "") const;
  // Checks the fields (templates parse, label_words rule, ratios, lengths); throws naming `where` and the key.
  void validate(const std::string& where) const;
};

// A reader for `path` in the recipe's format, policy and CSV columns.
TextRecordReader open_records(const Recipe& recipe, const std::string& path);

// kUnknownLabel: label_words is set and the record's label is not one of its keys (a data/recipe mismatch).
enum class RenderOutcome { kOk, kMissingField, kEmptyTarget, kInvalidUtf8, kUnknownLabel };
const char* render_outcome_name(RenderOutcome outcome);  // "ok", "missing_field", ...

struct RenderedExample {
  std::string id, source, target;
};

// Renders one record. `id` is the id_field's value as text, or the record's line number in decimal when
// id_field is "". With label_words set (the target template is then exactly one placeholder, "{label}"), the
// target is label_words[value] where value is the placeholder's rendered text ("0" for the number 0 and for the
// string "0"); a value not in the map gives kUnknownLabel. A target that is empty or only whitespace gives
// kEmptyTarget; a missing field (in source, target or id) kMissingField; output that is not valid UTF-8
// kInvalidUtf8. On anything but kOk, `problem` (if not null) says what, naming the field; `out` is unspecified.
// A template that does not parse throws t5scale::Error (load() refuses such recipes). Thread-safe: it reads the
// recipe only.
RenderOutcome render_example(const Recipe& recipe, const TextRecord& record, RenderedExample* out,
                             std::string* problem);

// Renders one template against a JSON object (the building block of render_example). Returns false and sets
// `missing` to the placeholder text when a field is missing. Throws t5scale::Error when the template is invalid.
bool render_template(const std::string& template_text, const nlohmann::json& fields, std::string* out,
                     std::string* missing);

// The placeholders of a template in order ("summarize: {dialogue}" -> {"dialogue"}); throws when it is invalid.
std::vector<std::string> template_fields(const std::string& template_text);

}  // namespace t5scale
