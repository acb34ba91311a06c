// The text of the lowest rank of a group that has one: every rank learns, for instance, which file another rank
// found damaged or why it cannot go on, so that all of them act on it alike and name it.
#pragma once

#include <torch/torch.h>

#include <string>

#include "dist/communicator.h"

namespace t5scale {

// Collective over `group`: `mine` as the lowest rank with a non-empty text wrote it; "" when no rank has one.
// Small tensors on `device` carry it (NCCL carries device tensors only).
std::string lowest_rank_text(Communicator& group, const torch::Device& device, const std::string& mine);

}  // namespace t5scale
