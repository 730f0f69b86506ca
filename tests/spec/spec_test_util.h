// Helpers shared by the spec layer's tests.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cuir/ir/eval.h"
#include "cuir/spec/spec.h"
#include "cuir/spec/tensors.h"

namespace cubridge::spec::testing {

inline std::string ExampleSpecPath(const std::string& file) {
  return std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/specs/" + file;
}

// A fresh file under the test's temporary directory.
inline std::string WriteTempFile(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "cubridge_spec_tests";
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

// The scalar environment for evaluating a translated spec at one point, params at their
// current values.
inline cuir::ScalarEnv PointEnv(const Spec& spec, int64_t b, int64_t h, int64_t q, int64_t kv,
                                double score) {
  cuir::ScalarEnv env;
  env.vars["b"] = b;
  env.vars["h"] = h;
  env.vars["q_idx"] = q;
  env.vars["kv_idx"] = kv;
  env.vars["score"] = score;
  for (const SpecParam& p : spec.params) {
    std::visit([&](auto v) { env.vars[p.name] = cuir::Value(v); }, p.value);
  }
  return env;
}

// A spec file (or source) loaded for the dtypes its job's buffer sources give (int32 where a
// source names none), as the pipeline loads it.
inline Spec LoadSpecFor(const std::string& path,
                        const std::map<std::string, BufferSource>& sources = {},
                        const std::string* source = nullptr) {
  auto dtypes = BufferDTypesOf(sources);
  EXPECT_TRUE(dtypes.ok()) << dtypes.status();
  const BufferDTypes given = dtypes.ok() ? *dtypes : BufferDTypes{};
  auto spec = source != nullptr ? LoadSpecSource(*source, path, given) : LoadSpecFile(path, given);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : Spec{};
}

// A spec source that must be refused: INVALID_ARGUMENT at "t.py:<where>: ", saying `what`.
inline void ExpectError(const std::string& source, const std::string& where,
                        const std::string& what) {
  auto spec = LoadSpecSource(source, "t.py");
  ASSERT_FALSE(spec.ok()) << "accepted:\n" << source;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  EXPECT_THAT(std::string(spec.status().message()), ::testing::StartsWith("t.py:" + where + ": "));
  EXPECT_THAT(std::string(spec.status().message()), ::testing::HasSubstr(what));
}

// Batch 2, head dim 64, bf16, with the given heads and sequence lengths.
inline cuir::AttentionConfig Config(int64_t hq, int64_t hkv, int64_t sq, int64_t skv) {
  cuir::AttentionConfig c;
  c.batch = 2;
  c.heads_q = hq;
  c.heads_kv = hkv;
  c.head_dim = 64;
  c.seqlen_q = sq;
  c.seqlen_kv = skv;
  c.dtype = cuir::DType::kBF16;
  return c;
}

}  // namespace cubridge::spec::testing
