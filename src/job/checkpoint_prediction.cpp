#include "job/checkpoint_prediction.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>

#include "core/check.h"
#include "core/text_file.h"
#include "data/hf_tokenizer_files.h"
#include "data/tokenized_dataset.h"
#include "job/checkpoint_tools.h"
#include "job/evaluation.h"

namespace t5scale {
namespace fs = std::filesystem;

namespace {

bool has_text(const std::string& line) {
  return std::any_of(line.begin(), line.end(), [](unsigned char c) { return !std::isspace(c); });
}

// One output line: the newlines a generation may hold (a tokenizer can have pieces with them) become spaces.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  return text;
}

// The batch of encoded inputs, padded to the longest: input_ids and attention_mask (B, S).
std::pair<torch::Tensor, torch::Tensor> padded_batch(const std::vector<std::vector<int32_t>>& encoded,
                                                     const std::vector<size_t>& rows, int64_t pad_id) {
  size_t longest = 0;
  for (size_t row : rows) longest = std::max(longest, encoded[row].size());
  const int64_t batch = static_cast<int64_t>(rows.size()), length = static_cast<int64_t>(longest);
  torch::Tensor ids = torch::full({batch, length}, pad_id, torch::kLong);
  torch::Tensor mask = torch::zeros({batch, length}, torch::kLong);
  for (int64_t r = 0; r < batch; ++r) {
    const std::vector<int32_t>& source = encoded[rows[static_cast<size_t>(r)]];
    const int64_t n = static_cast<int64_t>(source.size());
    ids[r].narrow(0, 0, n).copy_(torch::tensor(std::vector<int64_t>(source.begin(), source.end()), torch::kLong));
    mask[r].narrow(0, 0, n).fill_(1);
  }
  return {ids, mask};
}

// The literal text a recipe's source_template puts before its first placeholder ("summarize: " of
// "summarize: {text}"), or "" where the dataset or its recipe cannot be read.
std::string recipe_source_prefix(const RunConfig& run, std::string* template_text) {
  std::error_code ec;
  if (run.data.dataset == "synthetic" || !fs::is_regular_file(run.data.dataset, ec)) return "";
  try {
    const std::unique_ptr<TokenizedDataset> dataset = TokenizedDataset::open(run.data.dataset);
    const YAML::Node recipe = YAML::Load(dataset->info().recipe_yaml);
    if (!recipe.IsMap() || !recipe["source_template"] || !recipe["source_template"].IsScalar()) return "";
    *template_text = recipe["source_template"].as<std::string>();
  } catch (const std::exception&) {
    return "";  // only a note depends on it
  }
  std::string prefix;
  const std::string& t = *template_text;
  for (size_t i = 0; i < t.size(); ++i) {
    if ((t[i] == '{' || t[i] == '}') && i + 1 < t.size() && t[i + 1] == t[i]) {
      prefix += t[i++];  // {{ and }}: a literal brace
    } else if (t[i] == '{') {
      break;
    } else {
      prefix += t[i];
    }
  }
  return prefix;
}

}  // namespace

Predictions predict_texts(T5ModelImpl& model, const Tokenizer& tokenizer, const std::vector<std::string>& inputs,
                          const PredictionSettings& settings) {
  T5S_CHECK(settings.num_beams >= 1 && settings.batch_size >= 1 && settings.max_new_tokens >= 1,
            "beams, batch size and max new tokens must be at least 1, got ", settings.num_beams, ", ",
            settings.batch_size, " and ", settings.max_new_tokens);
  const ModelConfig& config = model.config();
  Predictions result;
  result.lines.assign(inputs.size(), "");
  std::vector<std::vector<int32_t>> encoded(inputs.size());
  std::vector<size_t> order;  // the inputs with text, longest first: a batch too large for memory fails at once
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!has_text(inputs[i])) continue;
    if (tokenizer.encode_truncated(inputs[i], settings.max_source_length, &encoded[i])) ++result.cut;
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return encoded[a].size() > encoded[b].size(); });
  model.eval();
  const size_t batch_size = static_cast<size_t>(settings.batch_size);
  for (size_t first = 0; first < order.size(); first += batch_size) {
    const size_t last = std::min(order.size(), first + batch_size);
    const std::vector<size_t> rows(order.begin() + static_cast<std::ptrdiff_t>(first),
                                   order.begin() + static_cast<std::ptrdiff_t>(last));
    const auto [ids, mask] = padded_batch(encoded, rows, config.pad_token_id);
    const torch::Tensor generated =
        settings.num_beams == 1
            ? model.generate_greedy(ids, mask, settings.max_new_tokens)
            : model.generate_beam(ids, mask, settings.max_new_tokens, settings.num_beams, settings.length_penalty);
    for (size_t r = 0; r < rows.size(); ++r) {
      const std::vector<int32_t> tokens =
          generated_ids(generated[static_cast<int64_t>(r)], config.eos_token_id, config.pad_token_id);
      result.lines[rows[r]] = one_line(tokenizer.decode(tokens));
    }
    result.generated += static_cast<int64_t>(rows.size());
    if (settings.on_batch) settings.on_batch(result.generated, static_cast<int64_t>(order.size()));
  }
  return result;
}

std::vector<std::string> read_input_lines(const std::string& path) {
  const std::string text = read_text_file(path, "the inputs (--input)");
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

PredictResult predict_checkpoint(const OpenedCheckpoint& checkpoint, const PredictOptions& options) {
  const RunConfig run = checkpoint_run_config(checkpoint);
  PredictResult result;
  result.max_new_tokens = options.max_new_tokens > 0 ? options.max_new_tokens : run.eval.max_new_tokens;
  result.max_source_length = run.data.max_source_length;
  T5S_CHECK(options.num_beams >= 1, "--beams must be at least 1, got ", options.num_beams);
  T5S_CHECK(options.batch_size >= 1, "--batch must be at least 1, got ", options.batch_size);
  T5S_CHECK(result.max_new_tokens >= 1, "--max-new-tokens must be at least 1, got ", result.max_new_tokens);
  std::error_code ec;
  T5S_CHECK(!fs::exists(options.out, ec) || !fs::equivalent(options.input, options.out, ec),
            "--out ", options.out, " is the input file; write the outputs to another file");
  const std::vector<std::string> inputs = read_input_lines(options.input);

  RunTokenizer found;
  try {
    found = find_run_tokenizer(run, options.tokenizer);
  } catch (const Error& e) {
    throw Error(msg(e.what(), ". Give the SentencePiece model that made the run's data with --tokenizer FILE"));
  }
  T5S_CHECK(!found.model_path.empty(), "predict needs a tokenizer to encode the inputs and decode the outputs, and ",
            found.description, ". Give the SentencePiece model with --tokenizer FILE");
  const Tokenizer tokenizer = Tokenizer::load(found.model_path, found.added_tokens);
  result.tokenizer = found.description;
  const ModelConfig model_config = checkpoint_model_config(checkpoint);
  T5S_CHECK(tokenizer.vocab_size() <= model_config.vocab_size, found.model_path, ": the tokenizer has ",
            tokenizer.vocab_size(), " ids, more than the model's ", model_config.vocab_size,
            " embedding rows: it is not the tokenizer of this model");

  std::string source_template;
  const std::string prefix = recipe_source_prefix(run, &source_template);
  if (!prefix.empty()) {
    const int64_t lacking = std::count_if(inputs.begin(), inputs.end(), [&](const std::string& line) {
      return has_text(line) && line.rfind(prefix, 0) != 0;
    });
    if (lacking > 0) {
      result.prefix_note = msg(lacking, " of ", inputs.size(), " input lines do not begin with '", prefix,
                               "', which the run's recipe put before every source (source_template '",
                               source_template, "'); each line is used as written");
    }
  }

  T5Model model = checkpoint_model(checkpoint);
  PredictionSettings settings;
  settings.num_beams = options.num_beams;
  settings.length_penalty = options.length_penalty;
  settings.max_new_tokens = result.max_new_tokens;
  settings.batch_size = options.batch_size;
  settings.max_source_length = run.data.max_source_length;
  const auto start = std::chrono::steady_clock::now();
  auto last_report = start;
  settings.on_batch = [&](int64_t done, int64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (!options.progress || done == total || now - last_report < std::chrono::seconds(10)) return;
    last_report = now;
    const double elapsed_s = std::chrono::duration<double>(now - start).count();
    options.progress(msg("predict: ", done, " of ", total, " inputs in ", static_cast<int64_t>(elapsed_s),
                         " s, about ", static_cast<int64_t>(elapsed_s * static_cast<double>(total - done) /
                                                            static_cast<double>(done)),
                         " s left"));
  };
  const Predictions predictions = predict_texts(*model, tokenizer, inputs, settings);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string text;
  for (const std::string& line : predictions.lines) text += line + "\n";
  write_text_file_atomically(options.out, text);
  result.lines = static_cast<int64_t>(inputs.size());
  result.generated = predictions.generated;
  result.cut = predictions.cut;
  return result;
}

}  // namespace t5scale
