// The generality suite (examples/specs/generality/suite.json): specs nobody tuned for, each with
// the buffer sources and parameter overrides it runs with. The CPU and GPU suites both read it.
#pragma once

#include <fstream>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuir/spec/spec.h"
#include "cuir/spec/tensors.h"

namespace cubridge::testing {

struct GeneralitySpec {
  std::string name;  // file stem, a valid test name
  std::string path;
  std::map<std::string, spec::BufferSource> buffers;
  std::vector<std::string> params;  // "name=value"
};

// gtest names the parameter by its file stem rather than by its bytes.
inline void PrintTo(const GeneralitySpec& g, std::ostream* out) { *out << g.name; }

inline std::string GeneralityDir() {
  return std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/specs/generality";
}

inline std::vector<GeneralitySpec> GeneralitySuite() {
  std::ifstream in(GeneralityDir() + "/suite.json");
  const nlohmann::json suite = nlohmann::json::parse(in);
  std::vector<GeneralitySpec> out;
  for (const auto& s : suite.at("specs")) {
    GeneralitySpec g;
    const std::string file = s.at("file").get<std::string>();
    g.name = file.substr(0, file.rfind('.'));
    g.path = GeneralityDir() + "/" + file;
    // Named, not temporaries: items() refers to the object it iterates.
    const nlohmann::json buffers = s.value("buffers", nlohmann::json::object());
    const nlohmann::json params = s.value("params", nlohmann::json::object());
    for (const auto& [name, source] : buffers.items()) {
      g.buffers[name].spec = source.get<std::string>();
    }
    for (const auto& [name, value] : params.items()) {
      g.params.push_back(name + "=" + (value.is_string() ? value.get<std::string>() : value.dump()));
    }
    out.push_back(std::move(g));
  }
  return out;
}

inline std::string GeneralityName(const ::testing::TestParamInfo<GeneralitySpec>& info) {
  return info.param.name;
}

// The twelve tuned examples (examples/specs), with their default buffer sources.
inline std::vector<GeneralitySpec> ExampleSpecs() {
  std::vector<GeneralitySpec> out;
  for (const char* file : {"full", "causal", "sliding_window", "global_sliding_window",
                           "prefix_lm", "block_causal", "causal_document", "share_question",
                           "relative_position", "alibi", "softcap", "alibi_window_softcap"}) {
    GeneralitySpec g;
    g.name = file;
    g.path = std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/specs/" + file + ".py";
    out.push_back(std::move(g));
  }
  return out;
}

// A suite entry or example by name (generality suite first).
inline GeneralitySpec FindSpec(const std::string& name) {
  for (std::vector<GeneralitySpec> list : {GeneralitySuite(), ExampleSpecs()}) {
    for (GeneralitySpec& g : list) {
      if (g.name == name) return g;
    }
  }
  return GeneralitySpec{name, "", {}, {}};
}

// The spec loaded for the dtypes its buffer sources give, its parameter overrides applied.
inline absl::StatusOr<spec::Spec> LoadSuiteSpec(const GeneralitySpec& g) {
  auto dtypes = spec::BufferDTypesOf(g.buffers);
  if (!dtypes.ok()) return dtypes.status();
  auto loaded = spec::LoadSpecFile(g.path, *dtypes);
  if (!loaded.ok()) return loaded.status();
  if (absl::Status s = spec::OverrideParams(*loaded, g.params); !s.ok()) return s;
  return loaded;
}

}  // namespace cubridge::testing
