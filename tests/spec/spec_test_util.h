// Helpers shared by the spec layer's tests.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cuir/ir/eval.h"
#include "cuir/spec/spec.h"

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

}  // namespace cubridge::spec::testing
