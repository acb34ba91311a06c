// Where the trainer's examples come from: a split of a tokenized dataset file, or examples held in memory (the
// built-in synthetic task). The sampler needs only the lengths; the loop fetches the examples of each
// micro-batch by index.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "data/token_sequences.h"

namespace t5scale {

class ExampleSource {
 public:
  virtual ~ExampleSource() = default;
  virtual std::string name() const = 0;  // "<file>:<split>" or "synthetic:<split>", for messages
  virtual const std::vector<int64_t>& source_lengths() const = 0;
  virtual const std::vector<int64_t>& target_lengths() const = 0;
  virtual std::vector<TokenSequences> fetch(const std::vector<int64_t>& indices) = 0;
  int64_t size() const { return static_cast<int64_t>(source_lengths().size()); }
};

class InMemoryExamples final : public ExampleSource {
 public:
  InMemoryExamples(std::string name, std::vector<TokenSequences> examples)
      : name_(std::move(name)), examples_(std::move(examples)) {
    for (const auto& e : examples_) {
      source_lengths_.push_back(static_cast<int64_t>(e.source.size()));
      target_lengths_.push_back(static_cast<int64_t>(e.target.size()));
    }
  }
  std::string name() const override { return name_; }
  const std::vector<int64_t>& source_lengths() const override { return source_lengths_; }
  const std::vector<int64_t>& target_lengths() const override { return target_lengths_; }
  std::vector<TokenSequences> fetch(const std::vector<int64_t>& indices) override {
    std::vector<TokenSequences> out;
    out.reserve(indices.size());
    for (int64_t i : indices) {
      T5S_CHECK(i >= 0 && i < size(), name_, ": example ", i, " is out of range (", size(), " examples)");
      out.push_back(examples_[static_cast<size_t>(i)]);
    }
    return out;
  }

 private:
  std::string name_;
  std::vector<TokenSequences> examples_;
  std::vector<int64_t> source_lengths_, target_lengths_;
};

// Another source with every sequence cut to at most max_source / max_target tokens (0: no limit), keeping the
// final eos, as t5scale-prep truncates: a run may train on shorter sequences than its dataset holds.
class TruncatedExamples final : public ExampleSource {
 public:
  TruncatedExamples(std::unique_ptr<ExampleSource> inner, int64_t max_source, int64_t max_target)
      : inner_(std::move(inner)), max_source_(max_source), max_target_(max_target) {
    for (int64_t length : inner_->source_lengths()) source_lengths_.push_back(cut(length, max_source_));
    for (int64_t length : inner_->target_lengths()) target_lengths_.push_back(cut(length, max_target_));
  }
  std::string name() const override { return inner_->name(); }
  const std::vector<int64_t>& source_lengths() const override { return source_lengths_; }
  const std::vector<int64_t>& target_lengths() const override { return target_lengths_; }
  std::vector<TokenSequences> fetch(const std::vector<int64_t>& indices) override {
    std::vector<TokenSequences> examples = inner_->fetch(indices);
    for (auto& e : examples) {
      truncate(e.source, max_source_);
      truncate(e.target, max_target_);
    }
    return examples;
  }

 private:
  static int64_t cut(int64_t length, int64_t limit) { return limit > 0 ? std::min(length, limit) : length; }
  static void truncate(std::vector<int32_t>& ids, int64_t limit) {
    if (limit > 0 && static_cast<int64_t>(ids.size()) > limit) {
      const int32_t last = ids.back();  // eos
      ids.resize(static_cast<size_t>(limit));
      ids.back() = last;
    }
  }
  std::unique_ptr<ExampleSource> inner_;
  int64_t max_source_, max_target_;
  std::vector<int64_t> source_lengths_, target_lengths_;
};

}  // namespace t5scale
