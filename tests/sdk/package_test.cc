// The installed SDK works for another CMake project: install the sdk component of this build,
// build client/sdk/example against it with find_package(cubridge), run the example.
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_service.h"
#include "test_util.h"

namespace cubridge {
namespace {

using ::cubridge::testing::Event;
using ::cubridge::testing::FakeServer;
using ::cubridge::testing::RunCommand;
using ::cubridge::testing::TempDir;
using ::testing::HasSubstr;

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

TEST(Package, TheExampleBuildsAgainstTheInstalledSdkAndRuns) {
  TempDir tmp;
  const std::string prefix = tmp / "prefix";
  const std::string cmake = Quoted(CUBRIDGE_CMAKE);
  auto install = RunCommand(cmake + " --install " + Quoted(CUBRIDGE_BUILD_DIR) + " --prefix " + prefix +
                     " --component sdk");
  ASSERT_EQ(install.exit_code, 0) << install.output;
  namespace fs = std::filesystem;
  EXPECT_TRUE(fs::exists(prefix + "/include/cubridge/client.h"));
  EXPECT_TRUE(fs::exists(prefix + "/include/cubridge/v1/client.grpc.pb.h"));
  EXPECT_TRUE(fs::exists(prefix + "/lib/libcubridge_client.a"));
  EXPECT_TRUE(fs::exists(prefix + "/lib/libcubridge_proto.a"));
  EXPECT_TRUE(fs::exists(prefix + "/lib/cmake/cubridge/cubridgeConfigVersion.cmake"));
  EXPECT_FALSE(fs::exists(prefix + "/bin")) << "the sdk component installs no programs";

  const std::string build = tmp / "build";
  auto configure = RunCommand(cmake + " -S " + Quoted(std::string(CUBRIDGE_SOURCE_ROOT) +
                                               "/client/sdk/example") +
                       " -B " + build + " -G " + Quoted(CUBRIDGE_CMAKE_GENERATOR) +
                       " -DCMAKE_PREFIX_PATH=" + prefix);
  ASSERT_EQ(configure.exit_code, 0) << configure.output;
  auto compile = RunCommand(cmake + " --build " + build + " -j2");
  ASSERT_EQ(compile.exit_code, 0) << compile.output;
  const std::string example = build + "/submit_and_wait";
  ASSERT_TRUE(fs::exists(example));

  auto usage = RunCommand(example);
  EXPECT_EQ(usage.exit_code, 2) << usage.output;
  EXPECT_THAT(usage.output, HasSubstr("usage: submit_and_wait"));

  // End to end against the in-test coordinator: events, then where the kernel is.
  FakeServer server;
  server.service().EndSubmittedJobs(v1::JOB_STATE_SUCCEEDED, {Event("spec"), Event("lower")});
  const std::string spec = testing::WriteFile(tmp / "causal.py", "def mask_mod(b, h, q, kv):\n");
  const std::string env = "env -u CUBRIDGE_TOKEN -u CUBRIDGE_TOKEN_FILE -u CUBRIDGE_TLS_CA "
                          "CUBRIDGE_ADDRESS=" + server.address() + " ";
  auto ok = RunCommand(env + example + " " + spec);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("[lower   ] ok     0.250s  lower done"));
  EXPECT_THAT(ok.output, HasSubstr("kernel: spec"));
  server.service().EndSubmittedJobs(v1::JOB_STATE_FAILED, {Event("transfer", false)});
  auto failed = RunCommand(env + example + " " + spec);
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_THAT(failed.output, HasSubstr("not covered by the rules"));
}

}  // namespace
}  // namespace cubridge
