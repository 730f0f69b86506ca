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

TEST_F(Kernels, TheCompiledModuleComesBackWithItsSymbols) {
  KernelCache cache(client_.get());
  CachedKernel k = Entry("ir");
  k.module_file = "module.sm_90.cubin";
  k.module_image = std::string("\x7f" "ELF\0\x01\xff", 7);
  k.module_symbols_json = R"({"k<bf16, 128>": "_Z1kI...E"})";
  ASSERT_TRUE(cache.Put(k).ok());
  auto hit = cache.Get("abc123", "sm_90", "rules-1");
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->module_file, k.module_file);
  EXPECT_EQ((*hit)->module_image, k.module_image);  // binary safe
  EXPECT_EQ((*hit)->module_symbols_json, k.module_symbols_json);
  // An entry without one (older kernels) reads back with none.
  ASSERT_TRUE(cache.Put(Entry("ir")).ok());
  EXPECT_EQ((*cache.Get("abc123", "sm_90", "rules-1"))->module_file, "");
}

TEST_F(Kernels, TheBackwardComesBackWithTheForwardAndOnlyWhole) {
  KernelCache cache(client_.get());
  CachedKernel k = Entry("ir");
  k.backward_cuir = "cuir 1\nkernel attn_bwd {}\n";
  k.backward_cuda_source = "__global__ void kb() {}";
  k.backward_launcher_header = "int cubridge_kb();\n";
  ASSERT_TRUE(cache.Put(k).ok());
  auto hit = cache.Get("abc123", "sm_90", "rules-1");
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->backward_cuir, k.backward_cuir);
  EXPECT_EQ((*hit)->backward_cuda_source, k.backward_cuda_source);
  EXPECT_EQ((*hit)->backward_launcher_header, k.backward_launcher_header);
  CachedKernel partial = k;
  partial.backward_launcher_header.clear();
  EXPECT_EQ(cache.Put(partial).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*cache.Get("abc123", "sm_90", "rules-1"))->backward_launcher_header,
            k.backward_launcher_header);  // the whole entry stayed
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
