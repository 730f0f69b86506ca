#include "cuir/pipeline/report.h"

#include "cuir/pipeline/stages.h"

namespace cubridge::pipeline {

nlohmann::json KernelReport::ToJson() const {
  nlohmann::json out = {
      {"spec", spec},
      {"spec_hash", spec_hash},
      {"canonical_form", canonical_form},
      {"ruleset", ruleset},
      {"arch", arch},
      {"expert", expert},
      {"config", config},
      {"proposer", proposer},
      {"transfer", transfer},
      {"verification", verification},
      {"verification_level", verification_level},
      {"lowering", lowering},
      {"gpu", gpu},
      {"llm", llm},
      {"stages", stages},
      {"cache_hit", cache_hit},
      {"job_id", job_id},
  };
  MarkCanonicalBuffers(&out, canonical_buffers);
  return out;
}

std::vector<std::string> KernelReportKeys() {
  std::vector<std::string> keys;
  for (const auto& [key, value] : KernelReport().ToJson().items()) keys.push_back(key);
  return keys;
}

}  // namespace cubridge::pipeline
