// ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum, equal to Google's `rouge-score` package 0.1.2 (rouge_scorer.py) with
// its default tokenizer, which is what Hugging Face's `evaluate` "rouge" metric runs:
//   - tokens: the text lowercased as Python's str.lower() does, every run of characters other than ASCII a-z and
//     0-9 turned into a separator (so "café" gives "caf", "naïve" gives "na" and "ve", "well-known" gives "well"
//     and "known", "don't" gives "don" and "t"); the only non-ASCII characters that yield tokens are those whose
//     lowercase is ASCII, U+0130 ("i") and U+212A KELVIN SIGN ("k");
//   - with use_stemmer, tokens longer than three characters go through nltk's Porter stemmer (porter_stemmer.h);
//   - ROUGE-N: clipped n-gram counts; precision = overlap / max(prediction n-grams, 1), recall likewise;
//   - ROUGE-L: the longest common subsequence of the whole token lists; 0 for all three if either is empty;
//   - ROUGE-Lsum: summary-level LCS over sentences split on '\n' only (empty lines dropped): for each reference
//     sentence, the union of its LCS with every prediction sentence, each token counted at most as often as it
//     occurs in both texts (as ROUGE-1.5.5 does). Sentence splitting on anything else is the caller's job
//     (Hugging Face's summarization example joins nltk.sent_tokenize's sentences with '\n' first);
//   - F-measure = 2PR / (P + R), 0 when P + R = 0.
// Invalid UTF-8 never throws: each invalid byte sequence reads as U+FFFD, a separator.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace t5scale {

struct RougeOptions {
  // Stemming on is what Hugging Face's summarization examples pass (rouge-score's own default is off).
  bool use_stemmer = true;
};

struct RougeScore {
  double precision = 0.0;
  double recall = 0.0;
  double fmeasure = 0.0;
};

struct RougeScores {
  RougeScore rouge1;
  RougeScore rouge2;
  RougeScore rougeL;
  RougeScore rougeLsum;
};

// rouge-score's tokens of `text` (tokenize.tokenize with or without the Porter stemmer).
std::vector<std::string> rouge_tokenize(std::string_view text, bool use_stemmer);

// The scores of one prediction against its reference. Note the argument order: rouge-score's
// RougeScorer.score takes (target, prediction); this takes (prediction, reference), as `evaluate` does.
RougeScores rouge(std::string_view prediction, std::string_view reference, const RougeOptions& options = {});

// The mean over examples of each per-example precision, recall and F-measure (summed in order, divided by the
// count). This is the mean of the per-example lists that Hugging Face `evaluate`'s rouge returns with
// use_aggregator=False, not rouge-score's BootstrapAggregator (whose "mid" is a resampled estimate).
// Throws t5scale::Error when the vectors differ in size or are empty.
RougeScores mean_rouge(const std::vector<std::string>& predictions, const std::vector<std::string>& references,
                       const RougeOptions& options = {});

}  // namespace t5scale
