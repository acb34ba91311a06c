// Autograd contexts save only tensors and IValues; the non-tensor objects our autograd functions need in backward
// (a communicator, a block, an RNG) travel as their address. Each such object belongs to the model or the process
// grid, which outlive every graph built from them.
#pragma once

#include <torch/torch.h>

#include <string>

namespace t5scale {

template <typename T>
void save_object(torch::autograd::AutogradContext* ctx, const std::string& key, T* object) {
  ctx->saved_data[key] = static_cast<int64_t>(reinterpret_cast<intptr_t>(object));
}

template <typename T>
T* saved_object(torch::autograd::AutogradContext* ctx, const std::string& key) {
  return reinterpret_cast<T*>(static_cast<intptr_t>(ctx->saved_data[key].toInt()));
}

}  // namespace t5scale
