#include "worker/gpu/run_request.h"

#include "absl/strings/str_cat.h"
#include "cuir/spec/buffer_json.h"

namespace cubridge::gpu {

nlohmann::json RunRequest::ToJson() const {
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& s : verify_shapes) shapes.push_back({s.batch, s.seqlen_q, s.seqlen_kv});
  return {{"spec_path", spec_path},
          {"param_overrides", param_overrides},
          {"buffers", spec::BufferSourcesJson(buffers)},
          {"buffer_order", buffer_order},
          {"config", pipeline::ConfigJson(config)},
          {"verify_shapes", shapes},
          {"o_atol", verify.o_atol},
          {"o_rtol", verify.o_rtol},
          {"seed", seed},
          {"image_path", image_path},
          {"ptx", ptx},
          {"entries", entries},
          {"reference_program", reference_program},
          {"backward", backward},
          {"grad_buffers", grad_buffers},
          {"profile",
           {{"enabled", profile.enabled},
            {"warmup", profile.warmup},
            {"min_reps", profile.min_reps},
            {"min_seconds", profile.min_seconds},
            {"max_reps", profile.max_reps}}}};
}

absl::StatusOr<RunRequest> RunRequest::FromJson(const nlohmann::json& j) {
  RunRequest r;
  try {
    r.spec_path = j.at("spec_path").get<std::string>();
    r.param_overrides = j.at("param_overrides").get<std::vector<std::string>>();
    auto buffers = spec::BufferSourcesFromJson(j.at("buffers"));
    if (!buffers.ok()) return absl::InvalidArgumentError(absl::StrCat("runner request: ", buffers.status().message()));
    r.buffers = *std::move(buffers);
    r.buffer_order = j.at("buffer_order").get<std::vector<std::string>>();
    auto config = pipeline::ConfigFromJson(j.at("config"));
    if (!config.ok()) return config.status();
    r.config = *config;
    // The resolved scale travels; keep it exact rather than re-deriving the default.
    for (const auto& s : j.at("verify_shapes")) {
      r.verify_shapes.push_back({s.at(0).get<int64_t>(), s.at(1).get<int64_t>(), s.at(2).get<int64_t>()});
    }
    r.verify.o_atol = j.value("o_atol", 0.0);
    r.verify.o_rtol = j.value("o_rtol", 0.0);
    r.seed = j.at("seed").get<uint64_t>();
    r.image_path = j.at("image_path").get<std::string>();
    r.ptx = j.at("ptx").get<bool>();
    r.entries = j.at("entries").get<std::map<std::string, std::string>>();
    r.reference_program = j.value("reference_program", "");
    r.backward = j.value("backward", false);
    r.grad_buffers = j.value("grad_buffers", std::vector<std::string>{});
    const auto& p = j.at("profile");
    r.profile.enabled = p.at("enabled").get<bool>();
    r.profile.warmup = p.at("warmup").get<int>();
    r.profile.min_reps = p.at("min_reps").get<int>();
    r.profile.min_seconds = p.at("min_seconds").get<double>();
    r.profile.max_reps = p.at("max_reps").get<int>();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(std::string("runner request: ") + e.what());
  }
  return r;
}

}  // namespace cubridge::gpu
