#include "data_prep/recipe.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/nearest_word.h"
#include "core/file_names.h"
#include "core/number_text.h"

namespace t5scale {
namespace {

// ---- Field paths: "a.b[0].c" ----------------------------------------------------------------------------------

struct PathStep {
  std::string key;    // an object key, or
  int64_t index = -1;  // an array index (>= 0)
};

// Parses a placeholder's text into steps; throws a message without location (the caller adds it).
std::vector<PathStep> parse_path(const std::string& text) {
  std::vector<PathStep> steps;
  size_t i = 0;
  const size_t n = text.size();
  if (n == 0) throw Error("an empty placeholder {}");
  for (;;) {
    // A name: everything up to '.', '[' or the end.
    size_t start = i;
    while (i < n && text[i] != '.' && text[i] != '[') {
      if (text[i] == ']') throw Error(msg("a ']' without '[' in '", text, "'"));
      ++i;
    }
    if (i == start) throw Error(msg("an empty field name in '", text, "'"));
    steps.push_back({text.substr(start, i - start), -1});
    while (i < n && text[i] == '[') {
      size_t digits_start = ++i;
      int64_t index = 0;
      while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) {
        if (i - digits_start >= 12) throw Error(msg("an index too large in '", text, "'"));
        index = index * 10 + (text[i] - '0');
        ++i;
      }
      if (i == digits_start || i >= n || text[i] != ']') {
        throw Error(msg("a bad index in '", text, "' (write [0], [1], ...)"));
      }
      ++i;
      steps.push_back({"", index});
    }
    if (i == n) break;
    if (text[i] != '.') throw Error(msg("unexpected '", text[i], "' in '", text, "'"));
    ++i;
    if (i == n) throw Error(msg("a field path ending in '.' in '", text, "'"));
  }
  return steps;
}

// The value a placeholder names, or null when it is missing (a missing key, an index out of range, a step into
// something that is not an object or array, or a null value).
const nlohmann::json* resolve(const nlohmann::json& fields, const std::string& text,
                              const std::vector<PathStep>& steps) {
  if (fields.is_object()) {  // a top-level key equal to the whole text wins ("a.b" as a CSV column name)
    auto whole = fields.find(text);
    if (whole != fields.end()) return whole->is_null() ? nullptr : &*whole;
  }
  const nlohmann::json* value = &fields;
  for (const PathStep& step : steps) {
    if (step.index < 0) {
      if (!value->is_object()) return nullptr;
      auto it = value->find(step.key);
      if (it == value->end()) return nullptr;
      value = &*it;
    } else {
      if (!value->is_array() || static_cast<size_t>(step.index) >= value->size()) return nullptr;
      value = &(*value)[static_cast<size_t>(step.index)];
    }
  }
  return value->is_null() ? nullptr : value;
}

void append_value(const nlohmann::json& value, std::string* out) {
  if (value.is_string()) {
    out->append(value.get_ref<const std::string&>());
  } else {
    // Numbers and booleans as JSON text; objects and arrays as compact JSON. "replace" keeps a string with bad
    // UTF-8 (possible only in a record built in code) from throwing; the result is checked afterwards anyway.
    out->append(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
}

// ---- Templates ------------------------------------------------------------------------------------------------

struct TemplatePart {
  bool is_field = false;
  std::string text;  // literal text, or the placeholder's text
  std::vector<PathStep> path;
};

std::vector<TemplatePart> parse_template(const std::string& t) {
  std::vector<TemplatePart> parts;
  std::string literal;
  const size_t n = t.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = t[i];
    if (c == '{') {
      if (i + 1 < n && t[i + 1] == '{') {
        literal.push_back('{');
        ++i;
        continue;
      }
      const size_t close = t.find('}', i + 1);
      if (close == std::string::npos) {
        throw Error(msg("the '{' at character ", i + 1, " is never closed (write '{{' for a literal brace)"));
      }
      const std::string inner = t.substr(i + 1, close - i - 1);
      if (inner.find('{') != std::string::npos) {
        throw Error(msg("a '{' inside the placeholder at character ", i + 1, " (placeholders do not nest)"));
      }
      if (!literal.empty()) parts.push_back({false, std::move(literal), {}});
      literal.clear();
      parts.push_back({true, inner, parse_path(inner)});
      i = close;
    } else if (c == '}') {
      if (i + 1 < n && t[i + 1] == '}') {
        literal.push_back('}');
        ++i;
        continue;
      }
      throw Error(msg("a lone '}' at character ", i + 1, " (write '}}' for a literal brace)"));
    } else {
      literal.push_back(c);
    }
  }
  if (!literal.empty()) parts.push_back({false, std::move(literal), {}});
  return parts;
}

bool render_parts(const std::vector<TemplatePart>& parts, const nlohmann::json& fields, std::string* out,
                  std::string* missing) {
  out->clear();
  for (const TemplatePart& part : parts) {
    if (!part.is_field) {
      out->append(part.text);
      continue;
    }
    const nlohmann::json* value = resolve(fields, part.text, part.path);
    if (value == nullptr) {
      if (missing != nullptr) *missing = part.text;
      return false;
    }
    append_value(*value, out);
  }
  return true;
}

bool is_blank(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

// ---- YAML -----------------------------------------------------------------------------------------------------

const std::vector<std::string>& known_keys() {
  static const std::vector<std::string> keys = {
      "name",           "format",       "csv_columns",  "source_template", "target_template",
      "id_field",       "label_words",  "special_tokens", "split_files",   "split_ratios",
      "split_seed",     "max_source_length", "max_target_length", "on_malformed"};
  return keys;
}

class KeyReader {
 public:
  KeyReader(std::string where, std::string key) : where_(std::move(where)), key_(std::move(key)) {}

  [[noreturn]] void fail(const std::string& reason) const {
    throw Error(msg(where_, ": key '", key_, "': ", reason));
  }

  std::string scalar(const YAML::Node& node) const {
    if (node.IsNull()) fail("has no value");
    if (!node.IsScalar()) fail("expected a single value, got a list or mapping");
    return node.Scalar();
  }

  int64_t integer(const YAML::Node& node) const {
    const std::string text = scalar(node);
    if (const std::optional<int64_t> value = parse_integer(text)) return *value;
    fail(msg("expected an integer, got '", text, "'"));
  }

  double number(const YAML::Node& node, const std::string& what) const {
    const std::string text = scalar(node);
    if (const std::optional<double> value = parse_finite_number(text)) return *value;
    fail(msg(what, ": expected a number, got '", text, "'"));
  }

  std::vector<std::string> list(const YAML::Node& node) const {
    if (!node.IsSequence()) fail("expected a list, e.g. [a, b]");
    std::vector<std::string> values;
    for (const YAML::Node& item : node) {
      if (!item.IsScalar()) fail("every list entry must be a single value");
      values.push_back(item.Scalar());
    }
    return values;
  }

  // A mapping of single values, in file order, refusing duplicate keys.
  std::vector<std::pair<std::string, YAML::Node>> mapping(const YAML::Node& node) const {
    if (!node.IsMap()) fail("expected a mapping, e.g. {a: b}");
    std::vector<std::pair<std::string, YAML::Node>> entries;
    std::set<std::string> seen;
    for (const auto& entry : node) {
      if (!entry.first.IsScalar()) fail("every key must be a single value");
      const std::string k = entry.first.Scalar();
      if (!seen.insert(k).second) fail(msg("'", k, "' appears twice"));
      entries.emplace_back(k, entry.second);
    }
    return entries;
  }

 private:
  std::string where_, key_;
};

// `file` under `base` (as it is when `base` is "").
std::string resolve_under(const std::string& base, const std::string& file) {
  const std::filesystem::path path(file);
  if (base.empty() || file.empty() || path.is_absolute()) return file;
  return (std::filesystem::path(base) / path).lexically_normal().string();
}

}  // namespace

// ---- Recipe ---------------------------------------------------------------------------------------------------

Recipe Recipe::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path)) throw Error(msg("cannot read recipe '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  const std::filesystem::path file(path);
  Recipe recipe = parse(text.str(), path, file.parent_path().string(), file.stem().string());
  recipe.path = path;
  return recipe;
}

Recipe Recipe::parse(const std::string& yaml_text, const std::string& where, const std::string& base_dir,
                     const std::string& default_name) {
  Recipe recipe;
  recipe.yaml_text = yaml_text;
  recipe.dir = base_dir;
  recipe.name = default_name;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw Error(msg(where, ": not valid YAML: ", e.what()));
  }
  if (root.IsNull()) throw Error(msg(where, ": the recipe is empty (it needs source_template and target_template)"));
  if (!root.IsMap()) throw Error(msg(where, ": a recipe is a mapping of keys (name: ..., source_template: ...)"));

  std::set<std::string> seen;
  for (const auto& entry : root) {
    if (!entry.first.IsScalar()) throw Error(msg(where, ": every top-level key must be a single word"));
    const std::string key = entry.first.Scalar();
    const YAML::Node& node = entry.second;
    const KeyReader r(where, key);
    if (!seen.insert(key).second) r.fail("appears twice");
    if (key == "name") {
      recipe.name = r.scalar(node);
    } else if (key == "format") {
      const std::string value = r.scalar(node);
      if (value != "jsonl" && value != "csv") r.fail(msg("unknown format '", value, "' (expected jsonl or csv)"));
      recipe.format = input_format_from_name(value);
    } else if (key == "csv_columns") {
      recipe.csv_columns = r.list(node);
    } else if (key == "source_template") {
      recipe.source_template = r.scalar(node);
    } else if (key == "target_template") {
      recipe.target_template = r.scalar(node);
    } else if (key == "id_field") {
      recipe.id_field = node.IsNull() ? "" : r.scalar(node);
    } else if (key == "label_words") {
      for (const auto& [raw, word] : r.mapping(node)) {
        recipe.label_words[raw] = KeyReader(where, "label_words." + raw).scalar(word);
      }
    } else if (key == "special_tokens") {
      recipe.special_tokens = r.list(node);
    } else if (key == "split_files") {
      for (const auto& [split, file_node] : r.mapping(node)) {
        const KeyReader file_key(where, "split_files." + split);
        const std::string file = file_key.scalar(file_node);
        // A recipe travels between users: what it names stays in its folder (or in the --data-dir a user gives).
        const std::string problem = inside_path_problem(file);
        if (!problem.empty()) {
          file_key.fail(msg("'", printable_name(file), "' is not a path inside the recipe's folder (", problem,
                            "); nothing outside it is opened. Put the file in the recipe's folder or below it, give "
                            "t5scale-prep --data-dir DIR to read the recipe's names from DIR, or --input-split ",
                            split, "=FILE for a file elsewhere"));
        }
        recipe.split_files_as_written[split] = file;
        recipe.split_files[split] = resolve_under(base_dir, file);
      }
    } else if (key == "split_ratios") {
      for (const auto& [split, ratio] : r.mapping(node)) recipe.split_ratios[split] = r.number(ratio, split);
    } else if (key == "split_seed") {
      recipe.split_seed = r.integer(node);
    } else if (key == "max_source_length") {
      recipe.max_source_length = r.integer(node);
    } else if (key == "max_target_length") {
      recipe.max_target_length = r.integer(node);
    } else if (key == "on_malformed") {
      const std::string value = r.scalar(node);
      if (value != "fail" && value != "skip") r.fail(msg("unknown policy '", value, "' (expected fail or skip)"));
      recipe.on_malformed = malformed_policy_from_name(value);
    } else {
      const std::string best = nearest_word(key, known_keys(), 3);  // suggest only near misses
      throw Error(msg(where, ": unknown key '", key, "'",
                      best.empty() ? msg(" (known keys: ", join(known_keys(), ", "), ")")
                                   : msg(" (did you mean '", best, "'?)")));
    }
  }
  recipe.validate(where);
  return recipe;
}

void Recipe::validate(const std::string& where) const {
  auto fail = [&](const std::string& key, const std::string& reason) {
    throw Error(msg(where, ": key '", key, "': ", reason));
  };
  if (name.empty()) fail("name", "must not be empty");
  if (source_template.empty()) fail("source_template", "missing (every recipe needs one, e.g. \"summarize: {dialogue}\")");
  if (target_template.empty()) fail("target_template", "missing (every recipe needs one, e.g. \"{summary}\")");
  std::vector<std::string> target_fields;
  for (const auto& [key, text] : {std::pair<std::string, const std::string*>{"source_template", &source_template},
                                  {"target_template", &target_template}}) {
    try {
      const auto fields = template_fields(*text);
      if (key == "target_template") target_fields = fields;
    } catch (const Error& e) {
      fail(key, e.what());
    }
  }
  if (!id_field.empty()) {
    if (id_field.find_first_of("{}") != std::string::npos) fail("id_field", "a field path has no braces: write id, not {id}");
    try {
      parse_path(id_field);
    } catch (const Error& e) {
      fail("id_field", e.what());
    }
  }
  if (!label_words.empty()) {
    if (target_fields.size() != 1 || target_template != "{" + target_fields[0] + "}") {
      fail("label_words", msg("needs target_template to be exactly one placeholder such as \"{label}\", got \"",
                              target_template, "\""));
    }
    for (const auto& [raw, word] : label_words) {
      if (is_blank(word)) fail("label_words", msg("the word for '", raw, "' is empty"));
    }
  }
  std::set<std::string> tokens;
  for (const std::string& token : special_tokens) {
    if (token.empty()) fail("special_tokens", "an entry is empty");
    if (std::any_of(token.begin(), token.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
      fail("special_tokens", msg("'", token, "' contains whitespace (a token is one symbol)"));
    }
    if (!is_valid_utf8(token)) fail("special_tokens", "an entry is not valid UTF-8");
    if (!tokens.insert(token).second) fail("special_tokens", msg("'", token, "' appears twice"));
  }
  if (!csv_columns.empty()) {
    if (format != InputFormat::kCsv) fail("csv_columns", "is only for format: csv");
    std::set<std::string> columns;
    for (const std::string& column : csv_columns) {
      if (column.empty()) fail("csv_columns", "a column has no name");
      if (!columns.insert(column).second) fail("csv_columns", msg("'", column, "' appears twice"));
    }
  }
  if (!split_files.empty() && !split_ratios.empty()) {
    fail("split_files", "give split_files (one input file per split) or split_ratios (a hash split of one input), "
                        "not both");
  }
  for (const auto& [split, file] : split_files) {
    if (split.empty()) fail("split_files", "a split has no name");
    if (file.empty()) fail("split_files." + split, "has no file");
  }
  double total = 0.0;
  for (const auto& [split, ratio] : split_ratios) {
    if (split.empty()) fail("split_ratios", "a split has no name");
    if (!(ratio > 0.0 && ratio <= 1.0)) fail("split_ratios." + split, msg("must be in (0, 1], got ", ratio));
    total += ratio;
  }
  if (!split_ratios.empty() && std::abs(total - 1.0) > 1e-6) {
    fail("split_ratios", msg("the ratios sum to ", total, "; they must sum to 1"));
  }
  if (max_source_length < 0) fail("max_source_length", msg("must be >= 0 (0 = no limit), got ", max_source_length));
  if (max_target_length < 0) fail("max_target_length", msg("must be >= 0 (0 = no limit), got ", max_target_length));
}

std::string Recipe::split_file_path(const std::string& split, const std::string& data_dir) const {
  auto it = split_files.find(split);
  if (it == split_files.end()) {
    std::vector<std::string> known;
    for (const auto& entry : split_files) known.push_back(entry.first);
    throw Error(msg(path.empty() ? name : path, ": key 'split_files': no split '", split, "' (",
                    known.empty() ? std::string("none given") : "has " + join(known, ", "), ")"));
  }
  if (data_dir.empty()) return it->second;
  auto written = split_files_as_written.find(split);
  return resolve_under(data_dir, written != split_files_as_written.end() ? written->second : it->second);
}

TextRecordReader open_records(const Recipe& recipe, const std::string& path) {
  return TextRecordReader(path, recipe.format, recipe.on_malformed, recipe.csv_columns);
}

const char* render_outcome_name(RenderOutcome outcome) {
  switch (outcome) {
    case RenderOutcome::kOk: return "ok";
    case RenderOutcome::kMissingField: return "missing_field";
    case RenderOutcome::kEmptyTarget: return "empty_target";
    case RenderOutcome::kInvalidUtf8: return "invalid_utf8";
    case RenderOutcome::kUnknownLabel: return "unknown_label";
  }
  return "unknown";
}

std::vector<std::string> template_fields(const std::string& template_text) {
  std::vector<std::string> fields;
  for (const TemplatePart& part : parse_template(template_text)) {
    if (part.is_field) fields.push_back(part.text);
  }
  return fields;
}

bool render_template(const std::string& template_text, const nlohmann::json& fields, std::string* out,
                     std::string* missing) {
  return render_parts(parse_template(template_text), fields, out, missing);
}

RenderOutcome render_example(const Recipe& recipe, const TextRecord& record, RenderedExample* out,
                             std::string* problem) {
  auto report = [&](RenderOutcome outcome, const std::string& what) {
    if (problem != nullptr) *problem = what;
    return outcome;
  };
  std::string missing;
  if (!render_template(recipe.source_template, record.fields, &out->source, &missing)) {
    return report(RenderOutcome::kMissingField, msg("missing field '", missing, "' (source_template)"));
  }
  if (!render_template(recipe.target_template, record.fields, &out->target, &missing)) {
    return report(RenderOutcome::kMissingField, msg("missing field '", missing, "' (target_template)"));
  }
  if (!recipe.label_words.empty()) {
    // validate() made the target template exactly "{field}", so the rendered target is the raw label value.
    auto word = recipe.label_words.find(out->target);
    if (word == recipe.label_words.end()) {
      std::vector<std::string> known;
      for (const auto& entry : recipe.label_words) known.push_back(entry.first);
      return report(RenderOutcome::kUnknownLabel,
                    msg("label value '", out->target, "' is not in label_words (", join(known, ", "), ")"));
    }
    out->target = word->second;
  }
  if (recipe.id_field.empty()) {
    out->id = std::to_string(record.line_number);
  } else {
    const nlohmann::json* id = resolve(record.fields, recipe.id_field, parse_path(recipe.id_field));
    if (id == nullptr) {
      return report(RenderOutcome::kMissingField, msg("missing field '", recipe.id_field, "' (id_field)"));
    }
    out->id.clear();
    append_value(*id, &out->id);
  }
  if (!is_valid_utf8(out->source) || !is_valid_utf8(out->target) || !is_valid_utf8(out->id)) {
    return report(RenderOutcome::kInvalidUtf8, "the rendered text is not valid UTF-8");
  }
  if (is_blank(out->target)) return report(RenderOutcome::kEmptyTarget, "the target is empty");
  return RenderOutcome::kOk;
}

}  // namespace t5scale
