// ROUGE as rouge-score 0.1.2 computes it (rouge_scorer.py): the same tokens, the same LCS tables and backtracking
// order (which decides the union LCS of ROUGE-Lsum), and the same floating-point operations in the same order,
// so the scores are equal to the last bit.
#include "eval/rouge.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>

#include "core/check.h"
#include "eval/porter_stemmer.h"
#include "eval/unicode_text.h"

namespace t5scale {
namespace {

// Tokens above this length are stemmed (rouge-score: "Only stem words more than 3 characters long").
constexpr std::size_t kMinStemmedLength = 4;

using TokenIds = std::vector<int>;

// Tokens as small integers, so that the LCS tables compare ints; ids are shared by every text of one example.
class Vocabulary {
 public:
  TokenIds ids(const std::vector<std::string>& tokens) {
    TokenIds out;
    out.reserve(tokens.size());
    for (const std::string& token : tokens) {
      out.push_back(ids_.emplace(token, static_cast<int>(ids_.size())).first->second);
    }
    return out;
  }

 private:
  std::unordered_map<std::string, int> ids_;
};

double fmeasure(double precision, double recall) {
  return precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
}

RougeScore make_score(double precision, double recall) {
  return {precision, recall, fmeasure(precision, recall)};
}

RougeScore score_ngrams(const TokenIds& target, const TokenIds& prediction, std::size_t n) {
  auto count_ngrams = [n](const TokenIds& tokens) {
    std::map<TokenIds, int64_t> counts;
    for (std::size_t i = 0; i + n <= tokens.size(); ++i) {
      ++counts[TokenIds(tokens.begin() + static_cast<std::ptrdiff_t>(i),
                        tokens.begin() + static_cast<std::ptrdiff_t>(i + n))];
    }
    return counts;
  };
  const auto target_counts = count_ngrams(target);
  const auto prediction_counts = count_ngrams(prediction);
  int64_t overlap = 0;
  for (const auto& [ngram, count] : target_counts) {
    const auto found = prediction_counts.find(ngram);
    if (found != prediction_counts.end()) overlap += std::min(count, found->second);
  }
  const auto total = [](const std::map<TokenIds, int64_t>& counts) {
    int64_t sum = 0;
    for (const auto& entry : counts) sum += entry.second;
    return sum;
  };
  const double precision =
      static_cast<double>(overlap) / static_cast<double>(std::max<int64_t>(total(prediction_counts), 1));
  const double recall = static_cast<double>(overlap) / static_cast<double>(std::max<int64_t>(total(target_counts), 1));
  return make_score(precision, recall);
}

// The (rows + 1) x (cols + 1) dynamic-programming table of LCS lengths, row-major; rows index `ref`.
std::vector<int> lcs_table(const TokenIds& ref, const TokenIds& can) {
  const std::size_t cols = can.size() + 1;
  std::vector<int> table((ref.size() + 1) * cols, 0);
  for (std::size_t i = 1; i <= ref.size(); ++i) {
    for (std::size_t j = 1; j <= can.size(); ++j) {
      table[i * cols + j] = ref[i - 1] == can[j - 1] ? table[(i - 1) * cols + j - 1] + 1
                                                     : std::max(table[(i - 1) * cols + j], table[i * cols + j - 1]);
    }
  }
  return table;
}

RougeScore score_lcs(const TokenIds& target, const TokenIds& prediction) {
  if (target.empty() || prediction.empty()) return {};
  const int lcs_length = lcs_table(target, prediction).back();
  return make_score(static_cast<double>(lcs_length) / static_cast<double>(prediction.size()),
                           static_cast<double>(lcs_length) / static_cast<double>(target.size()));
}

// Indices into `ref` of one longest common subsequence, chosen by rouge-score's backtracking: on a tie between
// moving left and moving up, move up.
std::vector<std::size_t> lcs_indices(const TokenIds& ref, const TokenIds& can) {
  const std::vector<int> table = lcs_table(ref, can);
  const std::size_t cols = can.size() + 1;
  std::vector<std::size_t> indices;
  std::size_t i = ref.size(), j = can.size();
  while (i > 0 && j > 0) {
    if (ref[i - 1] == can[j - 1]) {
      indices.push_back(i - 1);
      --i;
      --j;
    } else if (table[i * cols + j - 1] > table[(i - 1) * cols + j]) {
      --j;
    } else {
      --i;
    }
  }
  return indices;  // order does not matter: the caller takes the union
}

RougeScore score_summary_lcs(const std::vector<TokenIds>& reference_sentences,
                             const std::vector<TokenIds>& prediction_sentences) {
  if (reference_sentences.empty() || prediction_sentences.empty()) return {};
  std::size_t m = 0, n = 0;
  std::unordered_map<int, int64_t> reference_counts, prediction_counts;
  for (const TokenIds& sentence : reference_sentences) {
    m += sentence.size();
    for (int token : sentence) ++reference_counts[token];
  }
  for (const TokenIds& sentence : prediction_sentences) {
    n += sentence.size();
    for (int token : sentence) ++prediction_counts[token];
  }
  if (m == 0 || n == 0) return {};

  int64_t hits = 0;
  for (const TokenIds& reference : reference_sentences) {
    std::set<std::size_t> union_indices;
    for (const TokenIds& prediction : prediction_sentences) {
      for (std::size_t index : lcs_indices(reference, prediction)) union_indices.insert(index);
    }
    // A token is a hit at most as many times as it occurs in each whole text.
    for (std::size_t index : union_indices) {
      const int token = reference[index];
      int64_t& in_prediction = prediction_counts[token];
      int64_t& in_reference = reference_counts[token];
      if (in_prediction > 0 && in_reference > 0) {
        ++hits;
        --in_prediction;
        --in_reference;
      }
    }
  }
  return make_score(static_cast<double>(hits) / static_cast<double>(n),
                           static_cast<double>(hits) / static_cast<double>(m));
}

// Python's text.split("\n") without the empty pieces.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find('\n', start);
    const std::string_view line =
        text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (!line.empty()) lines.push_back(line);
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return lines;
}

void add_to(RougeScore& sum, const RougeScore& value) {
  sum.precision += value.precision;
  sum.recall += value.recall;
  sum.fmeasure += value.fmeasure;
}

void divide(RougeScore& sum, double count) {
  sum.precision /= count;
  sum.recall /= count;
  sum.fmeasure /= count;
}

}  // namespace

std::vector<std::string> rouge_tokenize(std::string_view text, bool use_stemmer) {
  std::vector<std::string> tokens;
  std::string current;
  auto finish = [&] {
    if (current.empty()) return;
    tokens.push_back(use_stemmer && current.size() >= kMinStemmedLength ? porter_stem(current) : current);
    current.clear();
  };
  for (char32_t c : python_lower(decode_utf8(text))) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      current.push_back(static_cast<char>(c));
    } else {
      finish();
    }
  }
  finish();
  // rouge-score drops tokens that are empty or not [a-z0-9]+ after stemming; the stemmer keeps a non-empty
  // [a-z0-9] word inside that alphabet and non-empty, so this only guards the invariant.
  tokens.erase(std::remove_if(tokens.begin(), tokens.end(), [](const std::string& t) { return t.empty(); }),
               tokens.end());
  return tokens;
}

RougeScores rouge(std::string_view prediction, std::string_view reference, const RougeOptions& options) {
  Vocabulary vocabulary;
  const TokenIds target = vocabulary.ids(rouge_tokenize(reference, options.use_stemmer));
  const TokenIds predicted = vocabulary.ids(rouge_tokenize(prediction, options.use_stemmer));
  auto sentences = [&](std::string_view text) {
    std::vector<TokenIds> out;
    for (std::string_view line : split_lines(text))
      out.push_back(vocabulary.ids(rouge_tokenize(line, options.use_stemmer)));
    return out;
  };
  RougeScores scores;
  scores.rouge1 = score_ngrams(target, predicted, 1);
  scores.rouge2 = score_ngrams(target, predicted, 2);
  scores.rougeL = score_lcs(target, predicted);
  scores.rougeLsum = score_summary_lcs(sentences(reference), sentences(prediction));
  return scores;
}

RougeScores mean_rouge(const std::vector<std::string>& predictions, const std::vector<std::string>& references,
                       const RougeOptions& options) {
  T5S_CHECK(predictions.size() == references.size(), "mean_rouge: ", predictions.size(), " predictions but ",
            references.size(), " references; each prediction needs exactly one reference");
  T5S_CHECK(!predictions.empty(), "mean_rouge: no examples to score (empty predictions and references)");
  RougeScores sum;
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    const RougeScores one = rouge(predictions[i], references[i], options);
    add_to(sum.rouge1, one.rouge1);
    add_to(sum.rouge2, one.rouge2);
    add_to(sum.rougeL, one.rougeL);
    add_to(sum.rougeLsum, one.rougeLsum);
  }
  const auto count = static_cast<double>(predictions.size());
  divide(sum.rouge1, count);
  divide(sum.rouge2, count);
  divide(sum.rougeL, count);
  divide(sum.rougeLsum, count);
  return sum;
}

}  // namespace t5scale
