#include "dist/lowest_rank_text.h"

namespace t5scale {

std::string lowest_rank_text(Communicator& group, const torch::Device& device, const std::string& mine) {
  const int size = group.size();
  // The maximum of size - rank over the ranks with a text is the lowest such rank.
  torch::Tensor owner =
      torch::tensor({mine.empty() ? int64_t{0} : int64_t{size - group.rank()}}, torch::kInt64).to(device);
  group.all_reduce_max(owner);
  const int64_t lowest = owner.cpu().item<int64_t>();
  if (lowest == 0) return "";
  const int root = static_cast<int>(size - lowest);
  torch::Tensor length = torch::tensor({static_cast<int64_t>(mine.size())}, torch::kInt64).to(device);
  group.broadcast(length, root);
  torch::Tensor text = torch::zeros({length.cpu().item<int64_t>()}, torch::kInt64);
  if (group.rank() == root) {
    for (size_t i = 0; i < mine.size(); ++i) text[static_cast<int64_t>(i)] = static_cast<unsigned char>(mine[i]);
  }
  if (text.numel() > 0) {
    text = text.to(device);
    group.broadcast(text, root);
    text = text.cpu();
  }
  std::string shared(static_cast<size_t>(text.numel()), '\0');
  const int64_t* codes = text.data_ptr<int64_t>();
  for (int64_t i = 0; i < text.numel(); ++i) shared[static_cast<size_t>(i)] = static_cast<char>(codes[i]);
  return shared;
}

}  // namespace t5scale
