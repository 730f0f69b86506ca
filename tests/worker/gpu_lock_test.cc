// The per-GPU lock (worker/daemon/gpu_lock.h): one holder at a time, the refusal naming the file
// and the holder's pid, released with its holder, and a folder it cannot use said as such.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "worker/daemon/gpu_lock.h"

namespace cubridge::workerd {
namespace {

using ::testing::HasSubstr;

class GpuLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "cubridge-lock-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
};

constexpr char kUuid[] = "GPU-0a1b2c3d-0000-1111-2222-333344445555";

TEST_F(GpuLockTest, ASecondHolderIsRefusedUntilTheFirstLetsGo) {
  auto first = GpuLock::Acquire(dir_, kUuid);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->path(), absl::StrCat(dir_, "/cubridge-gpu-", kUuid, ".lock"));
  // The file says who holds it.
  std::ifstream in(first->path());
  std::string pid;
  in >> pid;
  EXPECT_EQ(pid, std::to_string(getpid()));

  auto second = GpuLock::Acquire(dir_, kUuid);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("GPU ", kUuid, " is driven by another cubridge-worker on this "
                                     "machine (pid ", getpid(), "), which holds ", first->path())));
  EXPECT_THAT(second.status().message(), HasSubstr("--gpu N"));
  EXPECT_THAT(second.status().message(), HasSubstr("--share-gpu"));

  // Another GPU is another lock.
  auto other = GpuLock::Acquire(dir_, "GPU-ffffffff-0000-1111-2222-333344445555");
  EXPECT_TRUE(other.ok()) << other.status();

  // Moved, it is still held; destroyed, it is free again.
  GpuLock moved = *std::move(first);
  EXPECT_FALSE(GpuLock::Acquire(dir_, kUuid).ok());
  { GpuLock gone = std::move(moved); }
  EXPECT_TRUE(GpuLock::Acquire(dir_, kUuid).ok());
}

TEST_F(GpuLockTest, AFolderItCannotUseIsNamed) {
  auto missing = GpuLock::Acquire(dir_ + "/absent", kUuid);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot open the GPU lock " + dir_ + "/absent/"));
  EXPECT_THAT(missing.status().message(), HasSubstr("--gpu-lock-dir"));
  EXPECT_EQ(GpuLock::Acquire(dir_, "").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cubridge::workerd
