// Collation: tokenized examples to one padded Seq2SeqBatch. Dynamic padding to the longest sequence of the batch
// (sources and targets separately), optionally rounded up to a multiple (8 suits tensor cores), as Hugging Face's
// DataCollatorForSeq2Seq does: input_ids padded with the pad id, attention_mask 1 on tokens and 0 on padding,
// labels = target ids with kIgnoreIndex (-100) on padding. Every tensor is int64 on the CPU; the trainer moves it.
#pragma once

#include <cstdint>
#include <vector>

#include "data/token_sequences.h"
#include "model/seq2seq_batch.h"

namespace t5scale {

struct CollateOptions {
  int64_t pad_to_multiple_of = 0;  // 0 or 1: the batch maximum as it is
  int64_t pad_id = 0;              // T5's pad token
};

// examples: one row each, in order. An empty batch, an empty source or target, or a negative token id is an
// error naming the example's row.
Seq2SeqBatch collate(const std::vector<TokenSequences>& examples, const CollateOptions& options = {});

// The batch in page-locked host memory, whose copies to a GPU run asynchronously (needs CUDA).
Seq2SeqBatch pinned(const Seq2SeqBatch& batch);

}  // namespace t5scale
