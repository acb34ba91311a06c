// One tokenized example as the dataset reader hands it out and collation consumes it: the source and target
// token ids, each ending with eos as T5's tokenizer writes them. Plain data, no LibTorch.
#pragma once

#include <cstdint>
#include <vector>

namespace t5scale {

struct TokenSequences {
  std::vector<int32_t> source;
  std::vector<int32_t> target;
};

}  // namespace t5scale
