// model.init_from by name: the local Hugging Face cache found through the environment as huggingface_hub finds it,
// the snapshot that refs/main names (else the newest), and a miss reported with the key, the name and every place
// looked.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "config/hf_config.h"
#include "config/hf_model_folder.h"
#include "config/run_config.h"
#include "core/check.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

namespace fs = std::filesystem;
using testing::expect_mentions;
using testing::TempDir;

// Sets or unsets environment variables for one test and restores them after it.
class ScopedEnvironment {
 public:
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  void set(const std::string& name, const std::string& value) {
    save(name);
    setenv(name.c_str(), value.c_str(), 1);
  }
  void unset(const std::string& name) {
    save(name);
    unsetenv(name.c_str());
  }

 private:
  void save(const std::string& name) {
    if (saved_.count(name)) return;
    const char* value = std::getenv(name.c_str());
    saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

// A cache as huggingface_hub lays it out, with only the files that matter here.
class HfModelFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"}) environment_.unset(name);
    environment_.set("HF_HUB_CACHE", hub());
  }
  std::string hub() const { return dir_ / "hub"; }
  // models--<org>--<name>/snapshots/<commit>/config.json, modified `age` ago.
  fs::path add_snapshot(const std::string& model, const std::string& commit, std::chrono::seconds age) {
    const fs::path snapshot = fs::path(hub()) / model / "snapshots" / commit;
    fs::create_directories(snapshot);
    std::ofstream(snapshot / "config.json") << "{}";
    fs::last_write_time(snapshot, fs::file_time_type::clock::now() - age);
    return snapshot;
  }
  void set_main(const std::string& model, const std::string& commit) {
    fs::create_directories(fs::path(hub()) / model / "refs");
    std::ofstream(fs::path(hub()) / model / "refs" / "main") << commit;
  }

  TempDir dir_;
  ScopedEnvironment environment_;
};

TEST_F(HfModelFolder, AFolderIsItself) {
  fs::create_directories(dir_ / "local");
  EXPECT_EQ(find_hf_model_folder(dir_ / "local").folder, dir_ / "local");
}

TEST_F(HfModelFolder, ANameIsTheSnapshotThatRefsMainNames) {
  const fs::path main = add_snapshot("models--google--t5-v1_1-base", "aaaa", std::chrono::hours(2));
  add_snapshot("models--google--t5-v1_1-base", "bbbb", std::chrono::hours(1));  // newer, but not main
  set_main("models--google--t5-v1_1-base", "aaaa\n");
  EXPECT_EQ(resolve_hf_model_folder("google/t5-v1_1-base"), main.string());
}

TEST_F(HfModelFolder, WithoutRefsMainTheNewestSnapshot) {
  add_snapshot("models--t5-small", "aaaa", std::chrono::hours(2));
  const fs::path newest = add_snapshot("models--t5-small", "bbbb", std::chrono::hours(1));
  add_snapshot("models--t5-small", "cccc", std::chrono::hours(3));
  EXPECT_EQ(resolve_hf_model_folder("t5-small"), newest.string());
  // refs/main naming a snapshot that is not there: the newest, and the lookup says so.
  set_main("models--t5-small", "dddd");
  const HfModelLookup lookup = find_hf_model_folder("t5-small");
  EXPECT_EQ(lookup.folder, newest.string());
  ASSERT_FALSE(lookup.looked.empty());
  expect_mentions(lookup.looked.back(), {"refs/main names commit 'dddd', which is not in"});
}

TEST_F(HfModelFolder, TheCacheIsHfHubCacheElseHfHomeElseXdgElseHome) {
  environment_.unset("HF_HUB_CACHE");
  environment_.set("HF_HOME", dir_ / "home_hf");
  const fs::path under_hf_home = dir_.path() / "home_hf/hub/models--t5-small/snapshots/x";
  fs::create_directories(under_hf_home);
  EXPECT_EQ(resolve_hf_model_folder("t5-small"), under_hf_home.string());

  environment_.unset("HF_HOME");
  environment_.set("XDG_CACHE_HOME", dir_ / "xdg");
  const fs::path under_xdg = dir_.path() / "xdg/huggingface/hub/models--t5-small/snapshots/y";
  fs::create_directories(under_xdg);
  EXPECT_EQ(resolve_hf_model_folder("t5-small"), under_xdg.string());

  environment_.unset("XDG_CACHE_HOME");
  environment_.set("HOME", dir_ / "user");
  const fs::path under_home = dir_.path() / "user/.cache/huggingface/hub/models--t5-small/snapshots/z";
  fs::create_directories(under_home);
  EXPECT_EQ(resolve_hf_model_folder("t5-small"), under_home.string());
}

TEST_F(HfModelFolder, AMissingModelIsReportedOnTheKeyWithTheNameAndEveryPlaceLooked) {
  RunConfig c;
  c.model.init_from = "google/t5-v1_1-base";
  const std::vector<ConfigError> errors = check_files(c);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].key, "model.init_from");
  const std::string folder = fs::absolute("google/t5-v1_1-base").string();
  const std::string cached = (fs::path(hub()) / "models--google--t5-v1_1-base").string();
  expect_mentions(errors[0].text(), {"model.init_from: 'google/t5-v1_1-base' is neither a folder nor a model in the "
                                     "Hugging Face cache",
                                     "looked in: " + folder + " (no such folder); " + cached +
                                         " (no such folder; the cache is $HF_HUB_CACHE)",
                                     "set HF_HUB_CACHE"});
  EXPECT_THROW(resolve_hf_model_folder("google/t5-v1_1-base"), Error);
  EXPECT_EQ(init_from_folder(c), "google/t5-v1_1-base");  // as it is: the planner notes it, check_files refuses it
}

TEST_F(HfModelFolder, ACachedModelWithoutSnapshotsOrAPathThatIsNoNameIsReportedSo) {
  fs::create_directories(fs::path(hub()) / "models--t5-small" / "blobs");
  const std::string message = hf_model_not_found("t5-small", find_hf_model_folder("t5-small"));
  expect_mentions(message, {(fs::path(hub()) / "models--t5-small" / "snapshots").string() + " (no snapshot)"});

  const std::string missing = dir_ / "missing/model";
  const HfModelLookup lookup = find_hf_model_folder(missing);
  EXPECT_EQ(lookup.folder, "");
  ASSERT_EQ(lookup.looked.size(), 2u);
  EXPECT_EQ(lookup.looked[0], missing + " (no such folder)");
  expect_mentions(lookup.looked[1], {"is not a model name"});
}

TEST_F(HfModelFolder, CheckFilesAndTheRunsFolderFollowTheName) {
  const fs::path snapshot = add_snapshot("models--org--tiny", "abc", std::chrono::seconds(0));
  RunConfig c;
  c.model.init_from = "org/tiny";
  EXPECT_TRUE(check_files(c).empty());
  EXPECT_EQ(init_from_folder(c), snapshot.string());
  fs::remove(snapshot / "config.json");
  const std::vector<ConfigError> errors = check_files(c);
  ASSERT_EQ(errors.size(), 1u);
  expect_mentions(errors[0].text(), {"model.init_from: 'org/tiny' (found as " + snapshot.string() +
                                     ") has no config.json"});
}

// A model found in the cache is named as the user named it, not by its snapshot's commit.
TEST(HfModelName, ASnapshotOfTheCacheIsNamedByItsRepository) {
  EXPECT_EQ(hf_model_name_of_folder("/c/hub/models--google--t5-v1_1-base/snapshots/0123abcd"), "google/t5-v1_1-base");
  EXPECT_EQ(hf_model_name_of_folder("/c/hub/models--t5-small/snapshots/0123abcd/"), "t5-small");
  EXPECT_EQ(hf_model_name_of_folder("/work/my-t5"), "my-t5");
  EXPECT_EQ(hf_model_name_of_folder("/work/my-t5/"), "my-t5");
  EXPECT_EQ(hf_model_name_of_folder("/work/snapshots/abc"), "abc");  // not the cache's layout
}

}  // namespace
}  // namespace t5scale
