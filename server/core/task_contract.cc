#include "server/core/task_contract.h"

#include "absl/strings/str_cat.h"
#include "cuir/pipeline/verify.h"
#include "server/core/ids.h"

namespace cubridge::core {

nlohmann::json SpecInput::ToJson() const {
  return {{"file_name", file_name}, {"source", source}, {"params", params},
          {"buffers", buffers},     {"config", pipeline::ConfigJson(config)},
          {"seed", seed}};
}

absl::StatusOr<SpecInput> SpecInput::FromJson(const nlohmann::json& j) {
  SpecInput in;
  try {
    in.file_name = j.at("file_name").get<std::string>();
    in.source = j.at("source").get<std::string>();
    in.params = j.at("params").get<std::vector<std::string>>();
    in.buffers = j.at("buffers").get<std::map<std::string, std::string>>();
    in.seed = j.at("seed").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("task payload: bad spec input: ", e.what()));
  }
  auto config = pipeline::ConfigFromJson(j.value("config", nlohmann::json::object()));
  if (!config.ok()) return config.status();
  in.config = *config;
  return in;
}

std::map<std::string, spec::BufferSource> SpecInput::BufferSources() const {
  std::map<std::string, spec::BufferSource> out;
  for (const auto& [name, source] : buffers) out[name] = spec::BufferSource{source};
  return out;
}

absl::StatusOr<nlohmann::json> Field(const nlohmann::json& doc, const std::string& name,
                                     const std::string& what) {
  if (!doc.is_object() || !doc.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the field '", name, "' is missing"));
  }
  return doc[name];
}

const std::vector<std::string>& WorkerClasses() {
  static const std::vector<std::string> classes = [] {
    std::vector<std::string> out = WorkerArchs();
    out.emplace_back(kLlmClass);
    for (const std::string& arch : WorkerArchs()) {
      if (arch != "cpu") out.push_back(LlmGpuClass(arch));
    }
    return out;
  }();
  return classes;
}

}  // namespace cubridge::core
