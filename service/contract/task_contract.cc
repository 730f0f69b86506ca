#include "service/contract/task_contract.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "cuir/pipeline/verify.h"
#include "cuir/spec/buffer_json.h"
#include "cuir/spec/digest.h"
#include "service/contract/ids.h"

namespace cubridge::contract {

nlohmann::json SpecInput::ToJson() const {
  nlohmann::json bufs(buffers);
  for (const auto& [name, t] : tensors) {
    nlohmann::json v = spec::TensorHeaderJson(t.dtype, t.shape);
    v["sha256"] = t.sha256;
    bufs[name] = std::move(v);
  }
  return {{"file_name", file_name}, {"source", source}, {"params", params},
          {"buffers", bufs},        {"config", pipeline::ConfigJson(config)},
          {"seed", seed}};
}

absl::StatusOr<SpecInput> SpecInput::FromJson(const nlohmann::json& j) {
  SpecInput in;
  try {
    in.file_name = j.at("file_name").get<std::string>();
    in.source = j.at("source").get<std::string>();
    in.params = j.at("params").get<std::vector<std::string>>();
    for (const auto& [name, src] : j.at("buffers").items()) {
      if (src.is_string()) {
        in.buffers[name] = src.get<std::string>();
        continue;
      }
      auto head = spec::TensorHeaderFromJson(src, absl::StrCat("job input: buffer `", name, "`"));
      if (!head.ok()) return head.status();
      // The values themselves are stored apart, by digest; a worker gets them with its lease.
      in.tensors[name] = {head->dtype, head->shape, src.at("sha256").get<std::string>(), std::nullopt};
    }
    in.seed = j.at("seed").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("job input: bad spec input: ", e.what()));
  }
  auto config = pipeline::ConfigFromJson(j.value("config", nlohmann::json::object()));
  if (!config.ok()) return config.status();
  in.config = *config;
  return in;
}

absl::StatusOr<std::map<std::string, spec::BufferSource>> SpecInput::BufferSources() const {
  std::map<std::string, spec::BufferSource> out;
  for (const auto& [name, source] : buffers) out[name] = spec::BufferSource{source};
  for (const auto& [name, t] : tensors) {
    if (!t.data) {
      return absl::FailedPreconditionError(absl::StrCat(
          "buffer `", name, "`: its values (sha256 ", t.sha256, ") did not come with the task"));
    }
    out[name] = spec::BufferSource::Of({t.dtype, t.shape, *t.data});
  }
  return out;
}

}  // namespace cubridge::contract
