#include "train/optimizer_resharding.h"

#include <algorithm>
#include <filesystem>

#include "core/check.h"

namespace t5scale {

nlohmann::json optimizer_layout(DistributedOptimizer& optimizer) {
  GradientBuckets& gradients = optimizer.gradients();
  nlohmann::json bucket_elements = nlohmann::json::array();
  for (const GradientBucket& bucket : gradients.buckets()) bucket_elements.push_back(bucket.elements);
  nlohmann::json parameters = nlohmann::json::array();
  for (const ParameterSlot& slot : gradients.slots()) {
    parameters.push_back({{"name", slot.name},
                          {"bucket", slot.bucket},
                          {"offset", slot.offset},
                          {"numel", slot.numel},
                          {"full_shape", slot.layout.full_shape},
                          {"split_dim", slot.layout.split_dim}});
  }
  return {{"optimizer", optimizer.name()},
          {"tp", optimizer.tp().size()},
          {"dp", gradients.dp().size()},
          {"zero1", gradients.zero1()},
          {"bucket_elements", bucket_elements},
          {"parameters", parameters}};
}

NamedTensors optimizer_checkpoint_tensors(DistributedOptimizer& optimizer) {
  NamedTensors tensors;
  if (!optimizer.gradients().zero1() && optimizer.gradients().dp().rank() != 0) return tensors;
  for (auto& [name, tensor] : optimizer.state()) tensors.emplace_back("optimizer." + name, tensor);
  return tensors;
}

SavedOptimizerState::SavedOptimizerState(std::string folder, const nlohmann::json& layout) : folder_(std::move(folder)) {
  try {
    optimizer_ = layout.at("optimizer").get<std::string>();
    tp_ = layout.at("tp").get<int>();
    dp_ = layout.at("dp").get<int>();
    zero1_ = layout.at("zero1").get<bool>();
    bucket_elements_ = layout.at("bucket_elements").get<std::vector<int64_t>>();
    for (const auto& p : layout.at("parameters")) {
      ParameterLayout parameter{p.at("name").get<std::string>(), p.at("full_shape").get<std::vector<int64_t>>(),
                                p.at("split_dim").get<int64_t>()};
      Placement placement{p.at("bucket").get<size_t>(), p.at("offset").get<int64_t>(), p.at("numel").get<int64_t>()};
      T5S_CHECK(placement.bucket < bucket_elements_.size() && placement.offset >= 0 && placement.numel >= 0 &&
                    placement.offset + placement.numel <= bucket_elements_[placement.bucket],
                "parameter '", parameter.name, "' lies outside bucket ", placement.bucket);
      index_[parameter.name] = layouts_.size();
      layouts_.push_back(std::move(parameter));
      placements_.push_back(placement);
    }
  } catch (const std::exception& e) {
    throw Error(msg(folder_, "/manifest.json: optimizer_layout is unreadable: ", e.what()));
  }
  T5S_CHECK(tp_ >= 1 && dp_ >= 1, folder_, "/manifest.json: optimizer_layout has tp ", tp_, " and dp ", dp_);
  for (int64_t elements : bucket_elements_) {
    T5S_CHECK(elements % dp_ == 0, folder_, "/manifest.json: a bucket of ", elements,
              " elements does not divide into dp ", dp_);
  }
}

const ParameterLayout& SavedOptimizerState::parameter(const std::string& name) const {
  return layouts_[index_of(name)];
}

size_t SavedOptimizerState::index_of(const std::string& parameter) const {
  const auto found = index_.find(parameter);
  T5S_CHECK(found != index_.end(), folder_, " holds no optimizer state for parameter '", parameter,
            "' (was it frozen when the checkpoint was written? train.freeze must select the same parameters)");
  return found->second;
}

const SafetensorsFile& SavedOptimizerState::file(int tp_rank, int dp_rank) const {
  auto& slot = files_[{tp_rank, dp_rank}];
  if (!slot) {
    const std::string path = (std::filesystem::path(folder_) / checkpoint_shard_name(tp_rank, dp_rank)).string();
    slot = std::make_unique<SafetensorsFile>(SafetensorsFile::open(path));
  }
  return *slot;
}

torch::Tensor SavedOptimizerState::step() const { return file(0, 0).read("optimizer.step"); }

torch::Tensor SavedOptimizerState::full_bucket_state(const std::string& kind, const std::string& parameter) const {
  const size_t k = index_of(parameter);
  const ParameterLayout& layout = layouts_[k];
  const Placement& at = placements_[k];
  const std::string tensor = msg("optimizer.", kind, ".", at.bucket);
  std::vector<int64_t> shard_shape = layout.full_shape;
  if (layout.is_split()) shard_shape[layout.split_dim] /= tp_;
  // Each TP rank's shard, pieced together from the DP ranks that own parts of it (ZeRO-1) or read whole from DP
  // rank 0 (without ZeRO-1 the state is the same on every DP rank, and DP rank 0 wrote it).
  std::vector<torch::Tensor> shards;
  for (int t = 0; t < (layout.is_split() ? tp_ : 1); ++t) {
    std::vector<torch::Tensor> pieces;
    if (!zero1_) {
      pieces.push_back(file(t, 0).read_slice(tensor, 0, at.offset, at.numel));
    } else {
      const int64_t chunk = bucket_elements_[at.bucket] / dp_;
      for (int d = 0; d < dp_; ++d) {
        const int64_t from = std::max(at.offset, d * chunk), to = std::min(at.offset + at.numel, (d + 1) * chunk);
        if (from < to) pieces.push_back(file(t, d).read_slice(tensor, 0, from - d * chunk, to - from));
      }
    }
    shards.push_back(torch::cat(pieces).view(shard_shape));
  }
  return shards.size() == 1 ? shards[0] : torch::cat(shards, layout.split_dim);
}

torch::Tensor SavedOptimizerState::full_parameter_state(const std::string& parameter, const std::string& kind,
                                                        const ParameterLayout& layout) const {
  index_of(parameter);
  const std::string tensor = msg("optimizer.", parameter, ".", kind);
  if (!layout.is_split()) return file(0, 0).read(tensor);
  std::vector<torch::Tensor> shards;
  for (int t = 0; t < tp_; ++t) shards.push_back(file(t, 0).read(tensor));
  return torch::cat(shards, layout.split_dim);
}

void load_resharded_state(const SavedOptimizerState& saved, DistributedOptimizer& live) {
  T5S_CHECK(saved.optimizer_name() == live.name(), "the checkpoint holds ", saved.optimizer_name(),
            " state, this job's optimizer.name is ", live.name());
  torch::NoGradGuard no_grad;
  GradientBuckets& gradients = live.gradients();
  const int tp_rank = live.tp().rank(), tp_size = live.tp().size();
  std::map<std::string, size_t> slot_of;
  for (size_t k = 0; k < gradients.slots().size(); ++k) slot_of[gradients.slots()[k].name] = k;
  for (const ParameterSlot& slot : gradients.slots()) {
    const ParameterLayout& saved_layout = saved.parameter(slot.name);
    T5S_CHECK(saved_layout.full_shape == slot.layout.full_shape && saved_layout.split_dim == slot.layout.split_dim,
              "parameter '", slot.name, "' has full shape ", c10::IntArrayRef(saved_layout.full_shape), " split along ",
              saved_layout.split_dim, " in the checkpoint, ", c10::IntArrayRef(slot.layout.full_shape), " split along ",
              slot.layout.split_dim, " here");
  }

  // Written straight into the live tensors (no second copy of the state), then loaded as they are: load_state()
  // checks names and shapes, takes the step count and gives the parameters their master weights.
  OptimizerState filled = live.state();
  for (auto& [name, tensor] : filled) {
    const StateName part = parse_state_name(name);
    if (part.kind == "step") {
      tensor = saved.step();
    } else if (part.bucket >= 0) {
      // The owned range of one bucket: every parameter's elements that fall inside it; the padding stays zero.
      const size_t b = static_cast<size_t>(part.bucket);
      const auto [begin, end] = gradients.owned_range(b);
      tensor.zero_();
      for (size_t k : gradients.buckets()[b].slots) {
        const ParameterSlot& slot = gradients.slots()[k];
        const int64_t from = std::max(slot.offset, begin), to = std::min(slot.offset + slot.numel, end);
        if (from >= to) continue;
        const torch::Tensor shard =
            shard_of(saved.full_bucket_state(part.kind, slot.name), slot.layout, tp_rank, tp_size).reshape({-1});
        tensor.narrow(0, from - begin, to - from).copy_(shard.narrow(0, from - slot.offset, to - from));
      }
    } else {
      const auto found = slot_of.find(part.parameter);
      T5S_CHECK(found != slot_of.end(), "optimizer state '", name, "' belongs to no trained parameter");
      const ParameterLayout layout = live.state_layout(gradients.slots()[found->second].layout, part.kind);
      tensor.copy_(shard_of(saved.full_parameter_state(part.parameter, part.kind, layout), layout, tp_rank, tp_size));
    }
  }
  live.load_state(filled);
}

std::string load_optimizer_state(const LoadedCheckpoint& loaded, DistributedOptimizer& live) {
  const int tp_rank = live.tp().rank();
  const int tp_size = live.tp().size(), dp_size = live.gradients().dp().size();
  const bool same_grid = loaded.saved.tp == tp_size && loaded.saved.dp == dp_size;
  const bool same_layout =
      loaded.optimizer_layout.is_null() ? same_grid : loaded.optimizer_layout == optimizer_layout(live);
  if (same_layout) {
    // Without ZeRO-1 the optimizer state is the same on every DP rank, and DP rank 0 alone wrote it.
    const auto own = [&](int dp) {
      return SafetensorsFile::open((std::filesystem::path(loaded.folder) / checkpoint_shard_name(tp_rank, dp)).string());
    };
    const SafetensorsFile file = loaded.shard && loaded.shard->contains("optimizer.step") ? *loaded.shard : own(0);
    OptimizerState saved;
    for (const auto& [name, tensor] : live.state()) saved.emplace_back(name, file.read("optimizer." + name));
    live.load_state(saved);
    return "optimizer state as saved";
  }
  T5S_CHECK(!loaded.optimizer_layout.is_null(), loaded.folder, " was written in checkpoint format 1, without the ",
            "optimizer layout that moving it to another grid needs: resume it on its own grid, tp ", loaded.saved.tp,
            " x dp ", loaded.saved.dp);
  const SavedOptimizerState saved(loaded.folder, loaded.optimizer_layout);
  load_resharded_state(saved, live);
  return msg("optimizer state resharded from tp ", saved.tp(), " x dp ", saved.dp(), (saved.zero1() ? " (ZeRO-1)" : ""),
             " to tp ", tp_size, " x dp ", dp_size, (live.gradients().zero1() ? " (ZeRO-1)" : ""));
}

ParallelRng::State resumed_rng_state(const LoadedCheckpoint& loaded, int tp_rank, int tp_size, int dp_rank,
                                     const ParallelRng::State& fresh) {
  const int saved_tp = loaded.saved.tp, saved_dp = loaded.saved.dp;
  const bool same_place = tp_rank < saved_tp && dp_rank < saved_dp;
  const SafetensorsFile source =
      same_place && loaded.shard
          ? *loaded.shard
          : SafetensorsFile::open((std::filesystem::path(loaded.folder) /
                                   checkpoint_shard_name(tp_rank % saved_tp, dp_rank % saved_dp))
                                      .string());
  ParallelRng::State state = fresh;
  state.default_generator = source.read("rng.default");
  if (saved_tp == tp_size) state.tensor_parallel = source.read("rng.tensor_parallel");
  return state;
}

}  // namespace t5scale
