// Evaluation on a held-out split, over the whole grid: each DP replica takes every dp-th example, the TP ranks of
// a replica run the same batches together. Validation loss is the mean token cross-entropy over every target
// token of the evaluated examples (the training loss's convention); generations are greedy, gathered to rank 0,
// decoded to text and scored there (ROUGE as rouge-score computes it, SQuAD EM/F1, classification accuracy and
// macro-F1), and the figures are broadcast so that every rank takes the same early-stopping decision.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/example_source.h"
#include "dist/process_grid.h"
#include "model/t5_model.h"

namespace t5scale {

struct EvaluationOptions {
  int64_t max_examples = 0;  // 0: the whole split
  int64_t batch_size = 16;   // rows per batch and replica
  bool loss = true;
  bool generate = false;
  int64_t max_new_tokens = 64;
  bool rouge = false, squad = false, classification = false;
  int64_t pad_to_multiple_of = 0;
  // Ids at or above this (the data's vocabulary: the tokenizer's ids) are generated ids no text holds, counted in
  // the result; the model's embedding may have more rows. 0: none is counted.
  int64_t data_vocab_size = 0;
};

struct Generation {
  int64_t index = 0;  // example index in the split
  std::string source, prediction, reference;
};

struct EvaluationResult {
  std::map<std::string, double> metrics;  // eval_loss, rouge1, rouge2, rougeL, rougeLsum, exact_match, f1, ...
  int64_t num_examples = 0;
  double eval_time_s = 0.0;
  std::vector<Generation> generations;  // rank 0 only, in example order
  int64_t generated_ids_beyond_vocab = 0;  // rank 0 only: generated ids >= data_vocab_size, over all generations
};

// Token ids of a generated row (1 + n): after the decoder start token, up to (not including) the first eos, pad
// skipped.
std::vector<int32_t> generated_ids(const torch::Tensor& row, int64_t eos_id, int64_t pad_id);

// Text of token ids (pad and eos skipped): the tokenizer's decode, or the ids themselves for the synthetic task.
using DecodeFunction = std::function<std::string(const std::vector<int32_t>&)>;

// Collective over the grid. Leaves the model in eval mode; the caller restores train mode.
EvaluationResult evaluate(T5ModelImpl& model, const ProcessGrid& grid, ExampleSource& examples,
                          const EvaluationOptions& options, const DecodeFunction& decode, torch::Device device);

// "loss,rouge" -> the switches of EvaluationOptions; an unknown name is an error naming eval.metrics.
void set_metrics_from_list(EvaluationOptions& options, const std::string& comma_list);

// Whether a higher value of the metric is better (everything but eval_loss).
bool higher_is_better(const std::string& metric);

}  // namespace t5scale
