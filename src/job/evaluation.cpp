#include "job/evaluation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/check.h"
#include "eval/classification.h"
#include "eval/rouge.h"
#include "eval/squad.h"
#include "model/vocab_parallel_cross_entropy.h"
#include "train/collate.h"

namespace t5scale {
namespace {

// The metrics that generation produces, in the order they travel in the broadcast tensor.
const std::vector<std::string>& generation_metric_names() {
  static const std::vector<std::string> names = {"rouge1",      "rouge2", "rougeL",   "rougeLsum",
                                                 "exact_match", "f1",     "accuracy", "macro_f1"};
  return names;
}

std::vector<int32_t> without_eos(std::vector<int32_t> ids, int64_t eos_id) {
  if (!ids.empty() && ids.back() == eos_id) ids.pop_back();
  return ids;
}

// This replica's examples: every dp-th, starting at its dp rank.
std::vector<int64_t> replica_example_indices(int64_t num_examples, const ProcessGrid& grid) {
  std::vector<int64_t> mine;
  for (int64_t i = grid.dp_rank; i < num_examples; i += grid.dp_size) mine.push_back(i);
  return mine;
}

// What one replica's batches leave: the sums behind the mean loss, and a row per example it generated for.
struct ReplicaOutputs {
  double loss_sum = 0.0, token_count = 0.0;
  torch::Tensor generated;  // (rows per replica, 2 + max_new_tokens): example index, decoder start, tokens; -1 unused
};

void add_batch_loss(T5ModelImpl& model, const Seq2SeqBatch& batch, const torch::Tensor& input_ids,
                    const torch::Tensor& mask, torch::Device device, ReplicaOutputs& outputs) {
  const torch::Tensor labels = batch.labels.to(device);
  const torch::Tensor logits = model.forward(input_ids, mask, model.shift_right(labels));
  outputs.loss_sum += model.token_losses(logits, labels).to(torch::kFloat64).sum().item<double>();
  outputs.token_count += static_cast<double>((batch.labels != kIgnoreIndex).sum().item<int64_t>());
}

// Writes the batch's generations into `generated` from row `first_row` on, each after its example index.
void store_generations(const torch::Tensor& ids, const std::vector<int64_t>& indices, size_t first_row,
                       torch::Tensor& generated) {
  for (int64_t r = 0; r < ids.size(0); ++r) {
    const int64_t row = static_cast<int64_t>(first_row) + r;
    generated[row][0] = indices[static_cast<size_t>(r)];
    generated[row].slice(0, 1, 1 + ids.size(1)).copy_(ids[r]);
  }
}

// Runs this replica's examples in batches: the loss sums, and the greedy generations when `generate`.
ReplicaOutputs run_replica_batches(T5ModelImpl& model, const ProcessGrid& grid, ExampleSource& examples,
                                   int64_t num_examples, const EvaluationOptions& options, bool generate,
                                   torch::Device device) {
  const std::vector<int64_t> mine = replica_example_indices(num_examples, grid);
  const int64_t rows_per_replica = (num_examples + grid.dp_size - 1) / grid.dp_size;
  const int64_t width = 2 + options.max_new_tokens;  // example index, decoder start, generated tokens
  ReplicaOutputs outputs;
  outputs.generated = torch::full({rows_per_replica, width}, int64_t{-1}, torch::kInt64);
  CollateOptions collate_options;
  collate_options.pad_to_multiple_of = options.pad_to_multiple_of;
  collate_options.pad_id = model.config().pad_token_id;
  for (size_t first = 0; first < mine.size(); first += static_cast<size_t>(options.batch_size)) {
    const size_t last = std::min(mine.size(), first + static_cast<size_t>(options.batch_size));
    const std::vector<int64_t> indices(mine.begin() + static_cast<std::ptrdiff_t>(first),
                                       mine.begin() + static_cast<std::ptrdiff_t>(last));
    const Seq2SeqBatch batch = collate(examples.fetch(indices), collate_options);
    const torch::Tensor input_ids = batch.input_ids.to(device), mask = batch.attention_mask.to(device);
    if (options.loss) add_batch_loss(model, batch, input_ids, mask, device, outputs);
    if (generate) {
      const torch::Tensor ids = model.generate_greedy(input_ids, mask, options.max_new_tokens).to(torch::kCPU);
      store_generations(ids, indices, first, outputs.generated);
    }
  }
  return outputs;
}

// The mean token loss over every replica's examples.
double grid_mean_loss(const ReplicaOutputs& outputs, const ProcessGrid& grid, torch::Device device) {
  torch::Tensor sums = torch::tensor({outputs.loss_sum, outputs.token_count}, torch::kFloat64).to(device);
  grid.dp->all_reduce_sum(sums);
  sums = sums.cpu();
  return sums[0].item<double>() / sums[1].item<double>();
}

// The gathered rows (dp, rows per replica, width) that hold a generation, as (example index, row) in example order.
std::vector<std::pair<int64_t, torch::Tensor>> generated_rows_in_example_order(const torch::Tensor& everyone) {
  std::vector<std::pair<int64_t, torch::Tensor>> rows;
  for (int64_t d = 0; d < everyone.size(0); ++d) {
    for (int64_t r = 0; r < everyone.size(1); ++r) {
      if (everyone[d][r][0].item<int64_t>() >= 0) rows.emplace_back(everyone[d][r][0].item<int64_t>(), everyone[d][r]);
    }
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return rows;
}

struct GeneratedTexts {
  std::vector<std::string> predictions, references;
};

// Decodes each generation and its example, records them in `result` and returns the texts to score.
GeneratedTexts decode_generations(const std::vector<std::pair<int64_t, torch::Tensor>>& rows, ExampleSource& examples,
                                  const EvaluationOptions& options, const DecodeFunction& decode, int64_t eos_id,
                                  int64_t pad_id, EvaluationResult& result) {
  std::vector<int64_t> indices;
  for (const auto& row : rows) indices.push_back(row.first);
  const std::vector<TokenSequences> references = examples.fetch(indices);
  GeneratedTexts texts;
  for (size_t i = 0; i < rows.size(); ++i) {
    Generation g;
    g.index = rows[i].first;
    const std::vector<int32_t> ids = generated_ids(rows[i].second.slice(0, 1), eos_id, pad_id);
    if (options.data_vocab_size > 0) {
      result.generated_ids_beyond_vocab +=
          std::count_if(ids.begin(), ids.end(), [&](int32_t id) { return id >= options.data_vocab_size; });
    }
    g.prediction = decode(ids);
    g.reference = decode(without_eos(references[i].target, eos_id));
    g.source = decode(without_eos(references[i].source, eos_id));
    texts.predictions.push_back(g.prediction);
    texts.references.push_back(g.reference);
    result.generations.push_back(std::move(g));
  }
  return texts;
}

// The generation metrics in broadcast order, NaN for those not computed.
torch::Tensor unscored_figures() {
  return torch::full({static_cast<int64_t>(generation_metric_names().size())}, std::numeric_limits<double>::quiet_NaN(),
                     torch::kFloat64);
}

void set_figure(torch::Tensor& figures, const std::string& name, double value) {
  const auto& names = generation_metric_names();
  figures[std::find(names.begin(), names.end(), name) - names.begin()] = value;
}

// Scores the texts with the metrics the options ask for.
void score_texts(const GeneratedTexts& texts, const EvaluationOptions& options, torch::Tensor& figures) {
  if (options.rouge) {
    const RougeScores r = mean_rouge(texts.predictions, texts.references);
    set_figure(figures, "rouge1", r.rouge1.fmeasure);
    set_figure(figures, "rouge2", r.rouge2.fmeasure);
    set_figure(figures, "rougeL", r.rougeL.fmeasure);
    set_figure(figures, "rougeLsum", r.rougeLsum.fmeasure);
  }
  if (options.squad) {
    std::vector<std::vector<std::string>> answers;
    for (const auto& t : texts.references) answers.push_back({t});
    const SquadScore s = mean_squad(texts.predictions, answers);
    set_figure(figures, "exact_match", s.exact_match);
    set_figure(figures, "f1", s.f1);
  }
  if (options.classification) {
    const ClassificationScores c = classification_scores(texts.predictions, texts.references);
    set_figure(figures, "accuracy", c.accuracy);
    set_figure(figures, "macro_f1", c.macro_f1);
  }
}

// Rank 0's figures reach every rank, so that all take the same early-stopping decision.
void broadcast_figures(torch::Tensor figures, const ProcessGrid& grid, torch::Device device,
                       EvaluationResult& result) {
  figures = figures.to(device);
  grid.world->broadcast(figures, 0);
  figures = figures.cpu();
  for (size_t i = 0; i < generation_metric_names().size(); ++i) {
    const double value = figures[static_cast<int64_t>(i)].item<double>();
    if (!std::isnan(value)) result.metrics[generation_metric_names()[i]] = value;
  }
}

// Gathers every replica's generations to rank 0, which decodes and scores them; every rank gets the figures.
void score_generations(const torch::Tensor& generated, T5ModelImpl& model, const ProcessGrid& grid,
                       ExampleSource& examples, const EvaluationOptions& options, const DecodeFunction& decode,
                       torch::Device device, EvaluationResult& result) {
  const torch::Tensor everyone = grid.dp->all_gather(generated.to(device)).cpu();  // (dp, rows_per_replica, width)
  torch::Tensor figures = unscored_figures();
  if (grid.world_rank() == 0) {
    const GeneratedTexts texts =
        decode_generations(generated_rows_in_example_order(everyone), examples, options, decode,
                           model.config().eos_token_id, model.config().pad_token_id, result);
    score_texts(texts, options, figures);
  }
  broadcast_figures(figures, grid, device, result);
}

}  // namespace

void set_metrics_from_list(EvaluationOptions& options, const std::string& comma_list) {
  options.loss = options.rouge = options.squad = options.classification = false;
  std::stringstream stream(comma_list);
  std::string name;
  while (std::getline(stream, name, ',')) {
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    if (name == "loss") options.loss = true;
    else if (name == "rouge") options.rouge = true;
    else if (name == "squad") options.squad = true;
    else if (name == "classification") options.classification = true;
    else if (!name.empty()) {
      throw Error(msg("eval.metrics: '", name, "' is not one of loss, rouge, squad, classification"));
    }
  }
}

bool higher_is_better(const std::string& metric) { return metric != "eval_loss"; }

EvaluationResult evaluate(T5ModelImpl& model, const ProcessGrid& grid, ExampleSource& examples,
                          const EvaluationOptions& options, const DecodeFunction& decode, torch::Device device) {
  const auto start = std::chrono::steady_clock::now();
  T5S_CHECK(options.batch_size > 0, "eval.batch_size must be positive, got ", options.batch_size);
  const bool generate = options.generate && (options.rouge || options.squad || options.classification);
  const int64_t num_examples =
      options.max_examples > 0 ? std::min(options.max_examples, examples.size()) : examples.size();
  T5S_CHECK(num_examples > 0, examples.name(), ": no examples to evaluate");
  model.eval();
  torch::NoGradGuard no_grad;

  const ReplicaOutputs outputs = run_replica_batches(model, grid, examples, num_examples, options, generate, device);
  EvaluationResult result;
  result.num_examples = num_examples;
  if (options.loss) result.metrics["eval_loss"] = grid_mean_loss(outputs, grid, device);
  if (generate) score_generations(outputs.generated, model, grid, examples, options, decode, device, result);
  result.eval_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::vector<int32_t> generated_ids(const torch::Tensor& row, int64_t eos_id, int64_t pad_id) {
  std::vector<int32_t> ids;
  const auto values = row.accessor<int64_t, 1>();
  for (int64_t j = 1; j < values.size(0); ++j) {
    if (values[j] == eos_id || values[j] < 0) break;
    if (values[j] == pad_id) continue;
    ids.push_back(static_cast<int32_t>(values[j]));
  }
  return ids;
}

}  // namespace t5scale
