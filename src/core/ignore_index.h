// The label that marks a target position as padding: it contributes neither loss nor gradient. The data side
// writes it (collation, the synthetic task) and the model side skips it, so it lives here, below both.
#pragma once

#include <cstdint>

namespace t5scale {

inline constexpr int64_t kIgnoreIndex = -100;  // the value transformers' T5 uses (CrossEntropyLoss ignore_index)

}  // namespace t5scale
