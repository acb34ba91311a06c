// A run's SentencePiece tokenizer as the files of a Hugging Face T5 folder, so that transformers' AutoTokenizer
// loads it beside an exported model: spiece.model (the run's own file, byte for byte), tokenizer_config.json and
// special_tokens_map.json as T5Tokenizer.save_pretrained writes them (transformers 4.57): pad "<pad>" 0, eos "</s>" 1,
// unk "<unk>" 2, the 100 sentinels <extra_id_0> = N+99 down to <extra_id_99> = N, and the added tokens from N+100 on,
// the ids of data/tokenizer.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.h"

namespace t5scale {

// The tokenizer a run's data was made with.
struct RunTokenizer {
  std::string model_path;                 // its SentencePiece .model; "" when the run has none
  std::vector<std::string> added_tokens;  // the dataset's special tokens (a recipe's), in id order
  std::string description;                // where it was found, or why there is none
};

// data.tokenizer when set, else the file that the dataset names (its tokenizer_file attribute, as t5scale-prep was
// given it: as written, then beside the dataset), else model.init_from's spiece.model where the dataset was made
// with it; `given` (a path, or "none") replaces them all. Where the dataset file
// is readable, the tokenizer must be the one that made it (the SHA-256 the dataset records) and the added tokens
// are the dataset's; where it is not (moved, or replaced by synthetic ids although data.tokenizer is set), the file is
// taken unchecked and the description says so. None for synthetic data (data.dataset synthetic, or a file that
// t5scale-prep synthetic wrote, without data.tokenizer). Throws, naming every path tried, when the run had a
// tokenizer that is not found or not the dataset's.
RunTokenizer find_run_tokenizer(const RunConfig& run, const std::string& given = "");

// Writes spiece.model, tokenizer_config.json and special_tokens_map.json into `folder` and returns their names.
// Refuses a tokenizer with more ids than the model has embedding rows (`model_vocab_size`), naming both.
std::vector<std::string> write_hf_tokenizer_files(const RunTokenizer& tokenizer, int64_t model_vocab_size,
                                                  const std::string& folder);

}  // namespace t5scale
