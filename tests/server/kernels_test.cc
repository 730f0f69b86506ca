// The kernel cache on a real Redis: whole entries only, keyed by spec hash, arch and ruleset,
// with the verification level respected.
#include "server/store/kernels.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/server/redis_server.h"

namespace cubridge::store {
namespace {

class Kernels : public testing::RedisTest {
 protected:
  static CachedKernel Entry(const std::string& verification) {
    return {"abc123", "sm_90", "rules-1", verification, "cuir 1\nkernel k {}\n",
            std::string("__global__ void k() {}\0", 23), "int cubridge_k();\n", R"({"ok": true})"};
  }
};

TEST_F(Kernels, AnEntryComesBackWholeUnderItsKeyOnly) {
  KernelCache cache(client_.get());
  ASSERT_TRUE(cache.Put(Entry("gpu")).ok());
  auto hit = cache.Get("abc123", "sm_90", "rules-1");
  ASSERT_TRUE(hit.ok()) << hit.status();
  ASSERT_TRUE(hit->has_value());
  EXPECT_EQ((*hit)->cuda_source, Entry("gpu").cuda_source);  // binary safe
  EXPECT_EQ((*hit)->verification, "gpu");
  for (auto [arch, ruleset] : {std::pair{"sm_80", "rules-1"}, {"sm_90", "rules-2"}}) {
    auto miss = cache.Get("abc123", arch, ruleset);
    ASSERT_TRUE(miss.ok());
    EXPECT_FALSE(miss->has_value()) << arch << " " << ruleset;
  }
}

TEST_F(Kernels, IrVerifiedKernelsAreNotServedAsGpuVerified) {
  KernelCache cache(client_.get());
  ASSERT_TRUE(cache.Put(Entry("ir")).ok());
  EXPECT_TRUE(cache.Get("abc123", "sm_90", "rules-1", "ir")->has_value());
  EXPECT_FALSE(cache.Get("abc123", "sm_90", "rules-1", "gpu")->has_value());
}

TEST_F(Kernels, PartialOrUnverifiedEntriesAreRefused) {
  KernelCache cache(client_.get());
  CachedKernel no_source = Entry("gpu");
  no_source.cuda_source.clear();
  EXPECT_EQ(cache.Put(no_source).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Put(Entry("")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(cache.Get("abc123", "sm_90", "rules-1")->has_value());
}

}  // namespace
}  // namespace cubridge::store
