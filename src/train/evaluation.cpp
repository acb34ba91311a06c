#include "train/evaluation.h"

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

// Token ids of a generated row: after the decoder start token, up to (not including) the first eos.
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

std::vector<int32_t> without_eos(std::vector<int32_t> ids, int64_t eos_id) {
  if (!ids.empty() && ids.back() == eos_id) ids.pop_back();
  return ids;
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
  const int64_t n = options.max_examples > 0 ? std::min(options.max_examples, examples.size()) : examples.size();
  T5S_CHECK(n > 0, examples.name(), ": no examples to evaluate");
  model.eval();
  torch::NoGradGuard no_grad;
  const int64_t eos_id = model.config().eos_token_id, pad_id = model.config().pad_token_id;

  // This replica's examples: every dp-th, starting at its dp rank.
  std::vector<int64_t> mine;
  for (int64_t i = grid.dp_rank; i < n; i += grid.dp_size) mine.push_back(i);
  const int64_t rows_per_replica = (n + grid.dp_size - 1) / grid.dp_size;
  const int64_t width = 2 + options.max_new_tokens;  // example index, decoder start, generated tokens
  torch::Tensor generated = torch::full({rows_per_replica, width}, int64_t{-1}, torch::kInt64);

  double loss_sum = 0.0, token_count = 0.0;
  CollateOptions collate_options;
  collate_options.pad_to_multiple_of = options.pad_to_multiple_of;
  collate_options.pad_id = pad_id;
  for (size_t first = 0; first < mine.size(); first += static_cast<size_t>(options.batch_size)) {
    const size_t last = std::min(mine.size(), first + static_cast<size_t>(options.batch_size));
    const std::vector<int64_t> indices(mine.begin() + static_cast<std::ptrdiff_t>(first),
                                       mine.begin() + static_cast<std::ptrdiff_t>(last));
    const Seq2SeqBatch batch = collate(examples.fetch(indices), collate_options);
    const torch::Tensor input_ids = batch.input_ids.to(device), mask = batch.attention_mask.to(device);
    if (options.loss) {
      const torch::Tensor labels = batch.labels.to(device);
      const torch::Tensor logits = model.forward(input_ids, mask, model.shift_right(labels));
      loss_sum += model.token_losses(logits, labels).to(torch::kFloat64).sum().item<double>();
      token_count += static_cast<double>((batch.labels != kIgnoreIndex).sum().item<int64_t>());
    }
    if (generate) {
      const torch::Tensor ids = model.generate_greedy(input_ids, mask, options.max_new_tokens).to(torch::kCPU);
      for (int64_t r = 0; r < ids.size(0); ++r) {
        const int64_t row = static_cast<int64_t>(first) + r;
        generated[row][0] = indices[static_cast<size_t>(r)];
        generated[row].slice(0, 1, 1 + ids.size(1)).copy_(ids[r]);
      }
    }
  }

  EvaluationResult result;
  result.num_examples = n;
  if (options.loss) {
    torch::Tensor sums = torch::tensor({loss_sum, token_count}, torch::kFloat64).to(device);
    grid.dp->all_reduce_sum(sums);
    sums = sums.cpu();
    result.metrics["eval_loss"] = sums[0].item<double>() / sums[1].item<double>();
  }
  if (generate) {
    const torch::Tensor everyone = grid.dp->all_gather(generated.to(device)).cpu();  // (dp, rows_per_replica, width)
    torch::Tensor figures = torch::full({static_cast<int64_t>(generation_metric_names().size())},
                                        std::numeric_limits<double>::quiet_NaN(), torch::kFloat64);
    if (grid.world_rank() == 0) {
      std::vector<std::pair<int64_t, torch::Tensor>> rows;
      for (int64_t d = 0; d < everyone.size(0); ++d) {
        for (int64_t r = 0; r < everyone.size(1); ++r) {
          if (everyone[d][r][0].item<int64_t>() >= 0) rows.emplace_back(everyone[d][r][0].item<int64_t>(), everyone[d][r]);
        }
      }
      std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      std::vector<int64_t> indices;
      for (const auto& row : rows) indices.push_back(row.first);
      const std::vector<TokenSequences> references = examples.fetch(indices);
      std::vector<std::string> predictions, reference_texts;
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
        predictions.push_back(g.prediction);
        reference_texts.push_back(g.reference);
        result.generations.push_back(std::move(g));
      }
      auto set = [&](const std::string& name, double value) {
        const auto& names = generation_metric_names();
        figures[std::find(names.begin(), names.end(), name) - names.begin()] = value;
      };
      if (options.rouge) {
        const RougeScores r = mean_rouge(predictions, reference_texts);
        set("rouge1", r.rouge1.fmeasure);
        set("rouge2", r.rouge2.fmeasure);
        set("rougeL", r.rougeL.fmeasure);
        set("rougeLsum", r.rougeLsum.fmeasure);
      }
      if (options.squad) {
        std::vector<std::vector<std::string>> answers;
        for (const auto& t : reference_texts) answers.push_back({t});
        const SquadScore s = mean_squad(predictions, answers);
        set("exact_match", s.exact_match);
        set("f1", s.f1);
      }
      if (options.classification) {
        const ClassificationScores c = classification_scores(predictions, reference_texts);
        set("accuracy", c.accuracy);
        set("macro_f1", c.macro_f1);
      }
    }
    figures = figures.to(device);
    grid.world->broadcast(figures, 0);
    figures = figures.cpu();
    for (size_t i = 0; i < generation_metric_names().size(); ++i) {
      const double value = figures[static_cast<int64_t>(i)].item<double>();
      if (!std::isnan(value)) result.metrics[generation_metric_names()[i]] = value;
    }
  }
  result.eval_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace t5scale
