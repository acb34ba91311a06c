#include "io/sharded_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "core/check.h"
#include "core/set_aside.h"
#include "core/text_file.h"
#include "core/utc_time.h"
#include "dist/lowest_rank_text.h"
#include "io/checkpoint_manifest.h"

namespace t5scale {
namespace fs = std::filesystem;

namespace {


std::string step_folder_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

// step_00000100 -> 100; anything else (a .tmp folder, another file) -> -1.
int64_t parse_step_folder(const std::string& name) {
  if (name.size() != 13 || name.rfind("step_", 0) != 0) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

nlohmann::json read_manifest(const fs::path& folder) {
  const fs::path path = folder / "manifest.json";
  std::error_code error;
  T5S_CHECK(fs::exists(path, error), folder.string(), " has no manifest.json");
  T5S_CHECK(fs::is_regular_file(path, error), path.string(), " is not a file");
  std::ifstream in(path, std::ios::binary);
  T5S_CHECK(in.good(), "cannot read ", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return parse_checkpoint_manifest(text.str(), path.string(), parse_step_folder(folder.filename().string()));
}

// A rank's file against its manifest entry: present, of the recorded size and checksum.
void check_shard_file(const fs::path& path, const nlohmann::json& entry) {
  std::error_code error;
  T5S_CHECK(fs::exists(path, error), "missing ", path.string());
  T5S_CHECK(fs::is_regular_file(path, error), path.string(), " is not a file");
  T5S_CHECK(static_cast<int64_t>(fs::file_size(path)) == entry.at("bytes").get<int64_t>(), path.string(), " has ",
            fs::file_size(path), " bytes, the manifest says ", entry.at("bytes").get<int64_t>());
  const std::string checksum = file_checksum(path.string());
  T5S_CHECK(checksum == entry.at("checksum").get<std::string>(), path.string(), " checksum ", checksum,
            " differs from the manifest's ", entry.at("checksum").get<std::string>());
}

// Writes one rank's file; returns its manifest entry {"bytes", "checksum"}.
nlohmann::json write_shard_file(const std::string& path, const NamedTensors& tensors, int64_t step, int tp_rank,
                                int dp_rank) {
  write_safetensors(path, tensors,
                    {{"step", std::to_string(step)},
                     {"tp_rank", std::to_string(tp_rank)},
                     {"dp_rank", std::to_string(dp_rank)}});
  return {{"bytes", static_cast<int64_t>(fs::file_size(path))}, {"checksum", file_checksum(path)}};
}

// The manifest into `temporary_folder`, then the folder renamed to `final_folder` (replacing one of the same
// step so that a complete checkpoint exists at every moment).
void complete_checkpoint_folder(const fs::path& temporary_folder, const fs::path& final_folder, int64_t step,
                                const CheckpointIdentity& identity, const nlohmann::json& run_state,
                                const nlohmann::json& optimizer_layout, const nlohmann::json& files) {
  const nlohmann::json manifest = {{"format", kCheckpointFormat}, {"format_version", kCheckpointFormatVersion},
                                   {"step", step},              {"created_utc", utc_iso_time()},
                                   {"identity", to_json(identity)}, {"run_state", run_state},
                                   {"optimizer_layout", optimizer_layout}, {"files", files}};
  write_text_file_atomically((temporary_folder / "manifest.json").string(), manifest.dump(2));
  if (fs::exists(final_folder)) {
    const fs::path previous = final_folder.string() + ".old.tmp";
    fs::remove_all(previous);
    fs::rename(final_folder, previous);
    fs::rename(temporary_folder, final_folder);
    fs::remove_all(previous);
  } else {
    fs::rename(temporary_folder, final_folder);
  }
}

}  // namespace

std::vector<std::string> CheckpointIdentity::differences_from(const CheckpointIdentity& saved) const {
  std::vector<std::string> differences;
  if (saved.model_name != model_name) {
    differences.push_back(msg("it holds model '", saved.model_name, "', this job trains '", model_name, "'"));
  }
  if (saved.parameter_count != parameter_count) {
    differences.push_back(msg("it holds ", saved.parameter_count, " parameters, this model has ", parameter_count));
  }
  if (saved.model_config != model_config) {
    for (const auto& [key, value] : model_config.items()) {
      if (!saved.model_config.contains(key) || saved.model_config[key] != value) {
        differences.push_back(msg("model config '", key, "' is ",
                                  saved.model_config.contains(key) ? saved.model_config[key].dump() : "missing",
                                  " in the checkpoint, ", value.dump(), " in this job"));
      }
    }
  }
  return differences;
}

nlohmann::json to_json(const CheckpointIdentity& identity) {
  return {{"tp", identity.tp},
          {"dp", identity.dp},
          {"model_name", identity.model_name},
          {"parameter_count", identity.parameter_count},
          {"model_config", identity.model_config}};
}

CheckpointIdentity checkpoint_identity_from_json(const nlohmann::json& json) {
  CheckpointIdentity identity;
  identity.tp = json.at("tp").get<int>();
  identity.dp = json.at("dp").get<int>();
  identity.model_name = json.at("model_name").get<std::string>();
  identity.parameter_count = json.at("parameter_count").get<int64_t>();
  identity.model_config = json.at("model_config");
  return identity;
}

std::string file_checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  T5S_CHECK(in.good(), "cannot read ", path);
  // A multiply-rotate hash over 8-byte words: several GB/s, so checksumming a shard costs little next to
  // writing it; any changed, missing or extra byte changes the result with overwhelming probability.
  constexpr uint64_t kMultiplier1 = 0x9E3779B97F4A7C15ull, kMultiplier2 = 0xC2B2AE3D27D4EB4Full;
  uint64_t hash = 0x27D4EB2F165667C5ull, length = 0;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    size_t i = 0;
    for (; i + 8 <= got; i += 8) {
      uint64_t word;
      std::memcpy(&word, buffer.data() + i, 8);
      hash ^= word * kMultiplier1;
      hash = ((hash << 31) | (hash >> 33)) * kMultiplier2;
    }
    for (; i < got; ++i) {
      hash ^= static_cast<uint8_t>(buffer[i]) * kMultiplier1;
      hash = ((hash << 31) | (hash >> 33)) * kMultiplier2;
    }
    length += got;
  }
  hash ^= length * kMultiplier2;
  std::ostringstream hex;
  hex << std::hex << std::setw(16) << std::setfill('0') << hash;
  return hex.str();
}

ShardedCheckpointStore::ShardedCheckpointStore(std::string dir, int keep_last, CommunicatorPtr world, int tp_rank,
                                               int dp_rank, torch::Device device)
    : dir_(std::move(dir)), keep_last_(keep_last), world_(std::move(world)), tp_rank_(tp_rank), dp_rank_(dp_rank),
      device_(device) {
  T5S_CHECK(keep_last_ >= 1, "checkpoint.keep_last must be at least 1, got ", keep_last_);
  T5S_CHECK(!dir_.empty(), "the checkpoint folder is empty");
}

std::string ShardedCheckpointStore::shard_file_name() const { return checkpoint_shard_name(tp_rank_, dp_rank_); }

SafetensorsFile ShardedCheckpointStore::open_shard(const LoadedCheckpoint& loaded, int tp_rank, int dp_rank) const {
  return SafetensorsFile::open((fs::path(loaded.folder) / checkpoint_shard_name(tp_rank, dp_rank)).string());
}

void ShardedCheckpointStore::barrier() {
  torch::Tensor token = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt64).device(device_));
  world_->all_reduce_sum(token);
}

std::vector<std::pair<int64_t, std::string>> ShardedCheckpointStore::complete_checkpoints() const {
  std::vector<std::pair<int64_t, std::string>> complete;
  for (const auto& [step, folder] : step_folders()) {
    if (fs::exists(fs::path(folder) / "manifest.json")) complete.emplace_back(step, folder);
  }
  return complete;
}

std::string ShardedCheckpointStore::save(int64_t step, const NamedTensors& rank_tensors,
                                         const CheckpointIdentity& identity, const nlohmann::json& run_state,
                                         const nlohmann::json& optimizer_layout) {
  const bool rank0 = world_->rank() == 0;
  const fs::path final_folder = fs::path(dir_) / step_folder_name(step);
  const fs::path temporary_folder = fs::path(dir_) / (step_folder_name(step) + ".tmp");
  if (rank0) {
    fs::create_directories(dir_);
    fs::remove_all(temporary_folder);  // left by a job killed while saving this step
    fs::create_directories(temporary_folder);
  }
  barrier();

  const nlohmann::json mine = write_shard_file((temporary_folder / shard_file_name()).string(), rank_tensors, step,
                                               tp_rank_, dp_rank_);
  const int64_t bytes = mine.at("bytes").get<int64_t>();
  const std::string checksum = mine.at("checksum").get<std::string>();

  // Rank 0 learns every rank's file: (tp_rank, dp_rank, bytes, checksum as two 32-bit halves).
  const uint64_t checksum_value = std::stoull(checksum, nullptr, 16);
  torch::Tensor row = torch::tensor({static_cast<int64_t>(tp_rank_), static_cast<int64_t>(dp_rank_), bytes,
                                     static_cast<int64_t>(checksum_value >> 32),
                                     static_cast<int64_t>(checksum_value & 0xFFFFFFFFull)},
                                    torch::kInt64);
  const torch::Tensor everyone = world_->all_gather(row.to(device_)).cpu();
  if (rank0) {
    nlohmann::json files = nlohmann::json::object();
    for (int64_t r = 0; r < everyone.size(0); ++r) {
      const auto entry = everyone[r];
      const uint64_t value = (static_cast<uint64_t>(entry[3].item<int64_t>()) << 32) |
                             static_cast<uint64_t>(entry[4].item<int64_t>());
      std::ostringstream hex;
      hex << std::hex << std::setw(16) << std::setfill('0') << value;
      files[checkpoint_shard_name(static_cast<int>(entry[0].item<int64_t>()), static_cast<int>(entry[1].item<int64_t>()))] = {
          {"bytes", entry[2].item<int64_t>()}, {"checksum", hex.str()}};
    }
    complete_checkpoint_folder(temporary_folder, final_folder, step, identity, run_state, optimizer_layout, files);
    // Keep the newest keep_last; drop folders of saves that never completed.
    const auto complete = complete_checkpoints();
    for (size_t i = static_cast<size_t>(keep_last_); i < complete.size(); ++i) fs::remove_all(complete[i].second);
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step_", 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == ".tmp") {
        fs::remove_all(entry.path());
      }
    }
  }
  barrier();
  return final_folder.string();
}

std::vector<std::pair<int64_t, std::string>> ShardedCheckpointStore::step_folders() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code error;
  if (!fs::is_directory(dir_, error)) return found;
  for (const auto& entry : fs::directory_iterator(dir_, error)) {
    const int64_t step = parse_step_folder(entry.path().filename().string());
    if (step >= 0) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return found;
}

std::string ShardedCheckpointStore::keep_earlier_checkpoints_aside() {
  std::string kept;
  if (world_->rank() == 0 && !step_folders().empty()) kept = set_aside(dir_, "previous");
  barrier();  // the other ranks write into the folder only after this
  return kept;
}

std::optional<LoadedCheckpoint> ShardedCheckpointStore::load_latest(const CheckpointIdentity& expected,
                                                                    std::vector<std::string>* notes) {
  // Rank 0's view of the folder decides the candidates, so every rank tries the same steps in the same order. A
  // step folder without its manifest is a candidate too: it is damaged (a save renames the folder only after the
  // manifest is in it), and it is reported, not passed over in silence.
  std::vector<int64_t> steps;
  if (world_->rank() == 0) {
    for (const auto& [step, folder] : step_folders()) steps.push_back(step);
  }
  torch::Tensor count = torch::tensor({static_cast<int64_t>(steps.size())}, torch::kInt64).to(device_);
  world_->broadcast(count, 0);
  torch::Tensor candidates = torch::zeros({count.cpu().item<int64_t>()}, torch::kInt64);
  if (world_->rank() == 0 && !steps.empty()) candidates.copy_(torch::tensor(steps, torch::kInt64));
  if (candidates.numel() > 0) {
    candidates = candidates.to(device_);
    world_->broadcast(candidates, 0);
    candidates = candidates.cpu();
  }

  for (int64_t i = 0; i < candidates.numel(); ++i) {
    const int64_t step = candidates[i].item<int64_t>();
    const fs::path folder = fs::path(dir_) / step_folder_name(step);
    std::string problem;
    nlohmann::json manifest;
    try {
      manifest = read_manifest(folder);
      // The files are shared out over this job's ranks (its grid may differ from the writer's): each is read
      // through once, by one rank.
      int index = 0;
      for (const auto& [name, file] : manifest.at("files").items()) {
        if (index++ % world_->size() != world_->rank()) continue;
        check_shard_file(folder / name, file);
      }
    } catch (const std::exception& e) {
      problem = e.what();
    }
    problem = lowest_rank_text(*world_, device_, problem);  // every rank names the damaged file
    if (!problem.empty()) {
      if (notes) notes->push_back(msg("checkpoint ", folder.string(), " skipped: ", problem));
      continue;
    }
    const CheckpointIdentity saved = checkpoint_identity_from_json(manifest.at("identity"));
    const auto differences = expected.differences_from(saved);
    if (!differences.empty()) {
      std::string message = msg("cannot resume from ", folder.string(), ":");
      for (const auto& d : differences) message += "\n  " + d;
      message += "\n(use another checkpoint.dir, or checkpoint.resume: never to start afresh)";
      throw Error(message);
    }
    LoadedCheckpoint loaded{step, folder.string(), saved, manifest.at("run_state"),
                            manifest.value("optimizer_layout", nlohmann::json()), std::nullopt};
    if (manifest.at("files").contains(shard_file_name())) {
      loaded.shard = SafetensorsFile::open((folder / shard_file_name()).string());
    }
    return loaded;
  }
  return std::nullopt;
}

CheckpointFolderWriter::CheckpointFolderWriter(std::string dir, int64_t step)
    : dir_(std::move(dir)), step_(step), files_(nlohmann::json::object()) {
  const fs::path final_folder = fs::path(dir_) / step_folder_name(step_);
  T5S_CHECK(!fs::exists(final_folder), final_folder.string(), " exists; it is left as it is (choose another folder)");
  fs::create_directories(dir_);
  fs::remove_all(temporary_folder());  // left by an earlier attempt that did not complete
  fs::create_directories(temporary_folder());
}

std::string CheckpointFolderWriter::temporary_folder() const {
  return (fs::path(dir_) / (step_folder_name(step_) + ".tmp")).string();
}

void CheckpointFolderWriter::write_shard(int tp_rank, int dp_rank, const NamedTensors& tensors) {
  const std::string name = checkpoint_shard_name(tp_rank, dp_rank);
  files_[name] = write_shard_file((fs::path(temporary_folder()) / name).string(), tensors, step_, tp_rank, dp_rank);
}

std::string CheckpointFolderWriter::finish(const CheckpointIdentity& identity, const nlohmann::json& run_state,
                                           const nlohmann::json& optimizer_layout) {
  const fs::path final_folder = fs::path(dir_) / step_folder_name(step_);
  complete_checkpoint_folder(temporary_folder(), final_folder, step_, identity, run_state, optimizer_layout, files_);
  return final_folder.string();
}

OpenedCheckpoint open_checkpoint(const std::string& path) {
  fs::path folder = path;
  T5S_CHECK(fs::is_directory(folder), path, " is not a folder");
  if (!fs::exists(folder / "manifest.json")) {  // a checkpoint folder: its newest complete step
    int64_t newest = -1;
    for (const auto& entry : fs::directory_iterator(folder)) {
      const int64_t step = parse_step_folder(entry.path().filename().string());
      if (step > newest && fs::exists(entry.path() / "manifest.json")) {
        newest = step;
        folder = entry.path();
      }
    }
    T5S_CHECK(newest >= 0, path, " holds no complete checkpoint (no manifest.json in it or in a step_N folder)");
  }
  OpenedCheckpoint opened;
  opened.manifest = read_manifest(folder);
  const nlohmann::json& m = opened.manifest;
  for (const auto& [name, entry] : m.at("files").items()) check_shard_file(folder / name, entry);
  opened.loaded = LoadedCheckpoint{m.at("step").get<int64_t>(), folder.string(),
                                   checkpoint_identity_from_json(m.at("identity")), m.at("run_state"),
                                   m.value("optimizer_layout", nlohmann::json()), std::nullopt};
  return opened;
}

}  // namespace t5scale
