// One job at a time in a run's place: the lock names its owner, refuses a second job, and a lock whose owner is
// gone (its process on this host, its heartbeat elsewhere, or a restart of the same Slurm job) is taken over.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "job/run_lock.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

void write_lock(const std::string& path, const std::string& host, int64_t pid, const std::string& job = "") {
  std::ofstream(path) << "host=" << host << "\nslurm_job_id=" << job << "\npid=" << pid
                      << "\nstarted_utc=2026-11-25T10:00:00Z\n";
}

// A pid that no process has: one past the kernel's maximum.
int64_t pid_of_no_process() {
  std::ifstream in("/proc/sys/kernel/pid_max");
  int64_t max = 4194304;
  in >> max;
  return max + 1;
}

class RunLockTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("SLURM_JOB_ID"); }
  void TearDown() override { unsetenv("SLURM_JOB_ID"); }
  TempDir dir_;
  std::string path() const { return dir_ / "run.lock"; }
};

TEST_F(RunLockTest, ASecondJobIsRefusedNamingTheOwner) {
  setenv("SLURM_JOB_ID", "4242", 1);
  {
    RunLock first(path(), "run");
    const auto owner = read_run_lock(path());
    ASSERT_TRUE(owner.has_value());
    EXPECT_EQ(owner->host, host_name());
    EXPECT_EQ(owner->pid, static_cast<int64_t>(getpid()));
    EXPECT_EQ(owner->slurm_job_id, "4242");
    unsetenv("SLURM_JOB_ID");  // another job on the same host, while the first one lives
    const std::string message = error_of([&] { RunLock second(path(), "run"); });
    const std::vector<std::string> expected_parts = {"run 'run' is owned by another job", "host " + host_name(),
                                                     "Slurm job 4242", "pid " + std::to_string(getpid()), path()};
    for (const std::string& expected : expected_parts) {
      EXPECT_NE(message.find(expected), std::string::npos) << expected << " missing from: " << message;
    }
    EXPECT_TRUE(fs::exists(path()));  // the refused job leaves the owner's lock alone
  }
  EXPECT_FALSE(fs::exists(path()));  // released by its owner
}

TEST_F(RunLockTest, ALockWhoseProcessIsGoneOnThisHostIsTakenOver) {
  write_lock(path(), host_name(), pid_of_no_process());
  RunLock lock(path(), "run");
  EXPECT_NE(lock.takeover_note().find("on this host is gone"), std::string::npos) << lock.takeover_note();
  EXPECT_EQ(read_run_lock(path())->pid, static_cast<int64_t>(getpid()));
}

TEST_F(RunLockTest, ALockOfAnotherHostCountsUntilItsHeartbeatStops) {
  write_lock(path(), "some-other-node", 12345);
  const std::string message = error_of([&] { RunLock lock(path(), "run"); });
  EXPECT_NE(message.find("host some-other-node"), std::string::npos) << message;
  // Its last refresh longer ago than the stale limit: the job there is gone.
  fs::last_write_time(path(), fs::file_time_type::clock::now() -
                                  std::chrono::seconds(static_cast<int64_t>(RunLock::kStaleAfterS) + 30));
  RunLock lock(path(), "run");
  EXPECT_NE(lock.takeover_note().find("heartbeat stopped"), std::string::npos) << lock.takeover_note();
}

TEST_F(RunLockTest, TheSameSlurmJobRestartedTakesItsOwnLock) {
  write_lock(path(), "some-other-node", 12345, "777");
  setenv("SLURM_JOB_ID", "777", 1);
  RunLock lock(path(), "run");
  EXPECT_NE(lock.takeover_note().find("this Slurm job 777"), std::string::npos) << lock.takeover_note();
}

TEST_F(RunLockTest, AReleaseRemovesOnlyItsOwnLock) {
  RunLock lock(path(), "run");
  write_lock(path(), "some-other-node", 12345);  // taken over by another job in the meantime
  lock.release();
  EXPECT_TRUE(fs::exists(path()));
  EXPECT_EQ(read_run_lock(path())->host, "some-other-node");
}

}  // namespace
}  // namespace t5scale
