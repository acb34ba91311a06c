// State dicts that Python's torch.save wrote, as Hugging Face's pytorch_model.bin holds them: a zip archive of
// data.pkl (the pickled dict) and one record per storage. Read with LibTorch's own unpickler, which rebuilds
// tensors, dicts and lists and nothing else: a pickle that calls any other Python code is refused, not run.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace t5scale {

// The (name, tensor) pairs of the state dict at `path`, in the file's order, on the CPU (whatever device they were
// saved from). Tensors that shared storage in Python share it here. Refuses, naming the file: a file that is not a
// zip archive (torch.save's format before PyTorch 1.6, or not torch.save's at all), an archive LibTorch cannot
// unpickle, an object that is not a dict, a key that is not a string, a value that is not a tensor.
std::vector<std::pair<std::string, torch::Tensor>> read_torch_state_dict(const std::string& path);

}  // namespace t5scale
