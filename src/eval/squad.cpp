// SQuAD normalisation and scores on code points, step for step as normalize_answer does them on Python strings.
#include "eval/squad.h"

#include <algorithm>
#include <cstdint>
#include <map>

#include "core/check.h"
#include "eval/unicode_text.h"

namespace t5scale {
namespace {

// Python's string.punctuation.
bool is_ascii_punctuation(char32_t c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}

// The word characters of Python's re on str patterns: \b lies between a word and a non-word character.
bool is_word_character(char32_t c) { return python_isalnum(c) || c == '_'; }

bool is_word_at(std::u32string_view text, std::size_t i) { return i < text.size() && is_word_character(text[i]); }

// re.sub(r"\b(a|an|the)\b", " ", text): scanning left to right, an article that starts after a non-word
// character (or at the start) and ends before one (or at the end) becomes a space.
std::u32string remove_articles(std::u32string_view text) {
  static const std::u32string_view kArticles[] = {U"a", U"an", U"the"};
  std::u32string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const bool boundary_before = i == 0 || !is_word_character(text[i - 1]);
    std::size_t matched = 0;
    if (boundary_before) {
      for (std::u32string_view article : kArticles) {
        if (text.compare(i, article.size(), article) == 0 && !is_word_at(text, i + article.size())) {
          matched = article.size();
          break;
        }
      }
    }
    if (matched > 0) {
      out.push_back(U' ');
      i += matched;
    } else {
      out.push_back(text[i]);
      ++i;
    }
  }
  return out;
}

// str.split() with no argument.
std::vector<std::u32string> split_whitespace(std::u32string_view text) {
  std::vector<std::u32string> words;
  std::u32string current;
  for (char32_t c : text) {
    if (python_isspace(c)) {
      if (!current.empty()) words.push_back(std::move(current));
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  if (!current.empty()) words.push_back(std::move(current));
  return words;
}

std::vector<std::u32string> normalized_tokens(std::string_view text) {
  std::u32string kept;
  for (char32_t c : python_lower(decode_utf8(text))) {
    if (!is_ascii_punctuation(c)) kept.push_back(c);
  }
  return split_whitespace(remove_articles(kept));
}

}  // namespace

std::string squad_normalize_answer(std::string_view text) {
  std::u32string joined;
  for (const std::u32string& word : normalized_tokens(text)) {
    if (!joined.empty()) joined.push_back(U' ');
    joined += word;
  }
  return encode_utf8(joined);
}

double squad_exact_match(std::string_view prediction, std::string_view reference) {
  return squad_normalize_answer(prediction) == squad_normalize_answer(reference) ? 1.0 : 0.0;
}

double squad_f1(std::string_view prediction, std::string_view reference) {
  const std::vector<std::u32string> gold = normalized_tokens(reference);
  const std::vector<std::u32string> predicted = normalized_tokens(prediction);
  if (gold.empty() || predicted.empty()) return gold == predicted ? 1.0 : 0.0;
  std::map<std::u32string, int64_t> gold_counts;
  for (const auto& token : gold) ++gold_counts[token];
  int64_t same = 0;
  for (const auto& token : predicted) {
    auto found = gold_counts.find(token);
    if (found != gold_counts.end() && found->second > 0) {
      ++same;
      --found->second;
    }
  }
  if (same == 0) return 0.0;
  const double precision = 1.0 * static_cast<double>(same) / static_cast<double>(predicted.size());
  const double recall = 1.0 * static_cast<double>(same) / static_cast<double>(gold.size());
  return (2 * precision * recall) / (precision + recall);
}

SquadScore squad_score(std::string_view prediction, const std::vector<std::string>& references) {
  std::vector<std::string> answers;
  for (const std::string& reference : references) {
    if (!squad_normalize_answer(reference).empty()) answers.push_back(reference);
  }
  if (answers.empty()) answers.push_back("");
  SquadScore best;
  for (const std::string& answer : answers) {
    best.exact_match = std::max(best.exact_match, squad_exact_match(prediction, answer));
    best.f1 = std::max(best.f1, squad_f1(prediction, answer));
  }
  return best;
}

SquadScore mean_squad(const std::vector<std::string>& predictions,
                      const std::vector<std::vector<std::string>>& references) {
  T5S_CHECK(predictions.size() == references.size(), "mean_squad: ", predictions.size(), " predictions but ",
            references.size(), " reference lists; each prediction needs its list of reference answers");
  T5S_CHECK(!predictions.empty(), "mean_squad: no examples to score (empty predictions and references)");
  SquadScore sum;
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    const SquadScore one = squad_score(predictions[i], references[i]);
    sum.exact_match += one.exact_match;
    sum.f1 += one.f1;
  }
  const auto count = static_cast<double>(predictions.size());
  return {sum.exact_match / count, sum.f1 / count};
}

}  // namespace t5scale
