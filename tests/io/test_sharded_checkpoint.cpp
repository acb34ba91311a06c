// Sharded checkpoints on one rank: round trip, keep-last pruning, saves that never completed, corrupt shards,
// and the refusal of a checkpoint made for another grid or model.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/sharded_checkpoint.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

CheckpointIdentity tiny_identity() {
  CheckpointIdentity identity;
  identity.model_name = "tiny";
  identity.parameter_count = 12;
  identity.model_config = {{"d_model", 4}, {"num_heads", 2}};
  return identity;
}

ShardedCheckpointStore solo_store(const std::string& dir, int keep_last) {
  return ShardedCheckpointStore(dir, keep_last, std::make_shared<SoloCommunicator>("world"), 0, 0);
}

NamedTensors tensors_for_step(int64_t step) {
  return {{"model.w", torch::full({3, 4}, static_cast<float>(step))}, {"optimizer.step", torch::tensor({step})}};
}

TEST(ShardedCheckpoint, RoundTripsTensorsAndRunState) {
  TempDir dir;
  auto store = solo_store(dir / "ckpt", 2);
  const torch::Tensor w = torch::randn({3, 4});
  store.save(7, {{"model.w", w}}, tiny_identity(), {{"sampler", {{"epoch", 1}, {"step_in_epoch", 5}}}}, {});
  std::vector<std::string> notes;
  const auto loaded = store.load_latest(tiny_identity(), &notes);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 7);
  EXPECT_TRUE(torch::equal(loaded->shard->read("model.w"), w));
  EXPECT_EQ(loaded->state["sampler"]["step_in_epoch"], 5);
  EXPECT_TRUE(notes.empty());
}

TEST(ShardedCheckpoint, NothingToResumeFromIsNotAnError) {
  TempDir dir;
  auto store = solo_store(dir / "absent", 1);
  EXPECT_FALSE(store.load_latest(tiny_identity(), nullptr).has_value());
}

TEST(ShardedCheckpoint, KeepsTheNewestAndDropsUnfinishedSaves) {
  TempDir dir;
  auto store = solo_store(dir / "ckpt", 2);
  fs::create_directories(fs::path(dir / "ckpt") / "step_00000002.tmp");  // a save killed halfway
  for (int64_t step : {1, 2, 3}) store.save(step, tensors_for_step(step), tiny_identity(), {}, {});
  const auto complete = store.complete_checkpoints();
  ASSERT_EQ(complete.size(), 2u);
  EXPECT_EQ(complete[0].first, 3);
  EXPECT_EQ(complete[1].first, 2);
  EXPECT_FALSE(fs::exists(fs::path(dir / "ckpt") / "step_00000002.tmp"));
  EXPECT_FALSE(fs::exists(fs::path(dir / "ckpt") / "step_00000001"));
}

TEST(ShardedCheckpoint, SkipsACorruptNewestCheckpointForTheOneBefore) {
  TempDir dir;
  auto store = solo_store(dir / "ckpt", 3);
  store.save(1, tensors_for_step(1), tiny_identity(), {}, {});
  const std::string newest = store.save(2, tensors_for_step(2), tiny_identity(), {}, {});
  {
    // Flip one byte in the data section: same size, different bytes.
    std::fstream shard(newest + "/rank_tp0_dp0.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    shard.seekg(-1, std::ios::end);
    char last = 0;
    shard.read(&last, 1);
    shard.seekp(-1, std::ios::end);
    last = static_cast<char>(last ^ 0x5A);
    shard.write(&last, 1);
  }
  std::vector<std::string> notes;
  const auto loaded = store.load_latest(tiny_identity(), &notes);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("checksum"), std::string::npos) << notes[0];

  fs::resize_file(loaded->folder + "/rank_tp0_dp0.safetensors", 10);  // truncated too: nothing valid is left
  notes.clear();
  EXPECT_FALSE(store.load_latest(tiny_identity(), &notes).has_value());
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[1].find("bytes"), std::string::npos) << notes[1];
}

TEST(ShardedCheckpoint, RefusesACheckpointOfAnotherModelButNotOfAnotherGrid) {
  TempDir dir;
  auto store = solo_store(dir / "ckpt", 1);
  store.save(4, tensors_for_step(4), tiny_identity(), {}, {{"optimizer", "adamw"}});
  CheckpointIdentity other_grid = tiny_identity();
  other_grid.tp = 2;
  const auto loaded = store.load_latest(other_grid, nullptr);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->saved.tp, 1);  // the writer's grid, for the loader to reshard from
  EXPECT_EQ(loaded->optimizer_layout.at("optimizer"), "adamw");
  CheckpointIdentity other_model = other_grid;
  other_model.model_config["d_model"] = 8;
  const std::string message = error_of([&] { store.load_latest(other_model, nullptr); });
  EXPECT_NE(message.find("'d_model' is 4 in the checkpoint, 8 in this job"), std::string::npos) << message;
  EXPECT_EQ(message.find("written with tp"), std::string::npos) << message;
}

TEST(ShardedCheckpoint, SavingTheSameStepAgainReplacesIt) {
  TempDir dir;
  auto store = solo_store(dir / "ckpt", 2);
  store.save(5, tensors_for_step(1), tiny_identity(), {}, {});
  store.save(5, tensors_for_step(5), tiny_identity(), {}, {});
  const auto loaded = store.load_latest(tiny_identity(), nullptr);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->shard->read("optimizer.step").item<int64_t>(), 5);
  EXPECT_EQ(store.complete_checkpoints().size(), 1u);
}

// The manifest as written by save(), edited by `edit`, written back.
void edit_manifest(const std::string& folder, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(folder + "/manifest.json"));
  edit(manifest);
  std::ofstream(folder + "/manifest.json") << manifest.dump(2);
}

TEST(ShardedCheckpoint, AManifestNamingAFileOutsideItsFolderIsRefusedBeforeAnyFileIsOpened) {
  TempDir dir;
  auto store = solo_store(dir / "run/ckpt", 1);
  const std::string folder = store.save(3, tensors_for_step(3), tiny_identity(), {}, {});
  // A file outside with the very bytes the manifest expects: only the name can stop it.
  fs::copy_file(folder + "/rank_tp0_dp0.safetensors", dir / "outside.safetensors");
  for (const std::string name : {"../../../outside.safetensors", "/etc/hostname", "..", "sub/rank_tp0_dp0.safetensors"}) {
    edit_manifest(folder, [&](nlohmann::json& m) { m["files"] = {{name, m["files"].begin().value()}}; });
    std::vector<std::string> notes;
    EXPECT_FALSE(store.load_latest(tiny_identity(), &notes).has_value()) << name;
    ASSERT_EQ(notes.size(), 1u) << name;
    EXPECT_NE(notes[0].find("'" + name + "', which is not a plain file name"), std::string::npos) << notes[0];
    const std::string offline = error_of([&] { open_checkpoint(folder); });
    EXPECT_NE(offline.find("manifest.json is damaged"), std::string::npos) << offline;
    edit_manifest(folder, [&](nlohmann::json& m) {
      m["files"] = {{"rank_tp0_dp0.safetensors", m["files"].begin().value()}};
    });
  }
  EXPECT_TRUE(store.load_latest(tiny_identity(), nullptr).has_value());  // the edits undone: usable again
}

TEST(ShardedCheckpoint, AManifestOfTheWrongStructureIsNamedWithWhatIsWrong) {
  TempDir dir;
  auto store = solo_store(dir / "ckpt", 1);
  const std::string folder = store.save(3, tensors_for_step(3), tiny_identity(), {}, {});
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& m) { m["files"] = nlohmann::json::array({"rank_tp0_dp0.safetensors"}); },
       "'files' is not an object naming the shard files"},
      {[](nlohmann::json& m) { m["files"]["rank_tp0_dp0.safetensors"] = "big"; },
       "'files.rank_tp0_dp0.safetensors' is not {\"bytes\": <size>, \"checksum\": <16 hex digits>}"},
      {[](nlohmann::json& m) { m["files"]["rank_tp3_dp0.safetensors"] = m["files"]["rank_tp0_dp0.safetensors"]; },
       "'rank_tp3_dp0.safetensors', which is not the shard of a rank of its grid (tp 1 x dp 1"},
      {[](nlohmann::json& m) { m["identity"]["tp"] = "two"; }, "'identity.tp' is not a positive whole number"},
      {[](nlohmann::json& m) { m["step"] = 4; }, "says step 4, its folder is step 3"},
      {[](nlohmann::json& m) { m = nlohmann::json::array({1, 2}); }, "is not a t5scale checkpoint manifest"},
  };
  const std::string original = nlohmann::json::parse(std::ifstream(folder + "/manifest.json")).dump();
  for (const auto& [edit, expected] : cases) {
    edit_manifest(folder, edit);
    std::vector<std::string> notes;
    EXPECT_FALSE(store.load_latest(tiny_identity(), &notes).has_value()) << expected;
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find(expected), std::string::npos) << notes[0];
    EXPECT_NE(notes[0].find("manifest.json"), std::string::npos) << notes[0];
    std::ofstream(folder + "/manifest.json") << original;
  }
}

TEST(ShardedCheckpoint, AStepFolderWithoutItsManifestIsReportedNotPassedOver) {
  TempDir dir;
  auto store = solo_store(dir / "ckpt", 3);
  store.save(1, tensors_for_step(1), tiny_identity(), {}, {});
  const std::string newest = store.save(2, tensors_for_step(2), tiny_identity(), {}, {});
  fs::remove(newest + "/manifest.json");
  std::vector<std::string> notes;
  const auto loaded = store.load_latest(tiny_identity(), &notes);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("step_00000002 has no manifest.json"), std::string::npos) << notes[0];
}

TEST(ShardedCheckpoint, ChecksumSeesEveryByte) {
  TempDir dir;
  const std::string a = dir / "a", b = dir / "b";
  std::ofstream(a, std::ios::binary) << std::string(1000, 'x');
  std::ofstream(b, std::ios::binary) << std::string(999, 'x') << 'y';
  EXPECT_NE(file_checksum(a), file_checksum(b));
  std::ofstream(b, std::ios::binary) << std::string(1001, 'x');
  EXPECT_NE(file_checksum(a), file_checksum(b));
  EXPECT_EQ(file_checksum(a), file_checksum(a));
}

}  // namespace
}  // namespace t5scale
