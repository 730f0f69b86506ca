#include "cuir/pipeline/report.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cubridge::pipeline {
namespace {

// Each of the report's kernel buffers ("lowering.buffers", in the kernel's argument order) gets
// its canonical name ("canonical": buf0, ...), so that a cache hit can be bound to another spec of
// the same hash (BindBuffers).
void MarkCanonicalBuffers(nlohmann::json* report, const std::map<std::string, std::string>& canonical) {
  if (!report->contains("lowering") || !(*report)["lowering"].contains("buffers")) return;
  for (auto& b : (*report)["lowering"]["buffers"]) {
    const auto it = canonical.find(b.value("name", ""));
    if (it != canonical.end()) b["canonical"] = it->second;
  }
}

}  // namespace

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

absl::Status BindBuffers(nlohmann::json* report, const std::map<std::string, std::string>& canonical) {
  if (!report->is_object() || !report->contains("lowering") ||
      !(*report)["lowering"].contains("buffers") || !(*report)["lowering"]["buffers"].is_array()) {
    return absl::OkStatus();  // a kernel without captured tensors
  }
  std::map<std::string, std::string> name_of;  // canonical -> this spec's name
  for (const auto& [name, c] : canonical) name_of[c] = name;
  auto& buffers = (*report)["lowering"]["buffers"];
  std::vector<std::string> names;
  for (const auto& b : buffers) {
    const std::string name = b.contains("name") && b["name"].is_string() ? b["name"].get<std::string>() : "";
    if (b.contains("canonical") && b["canonical"].is_string()) {
      const auto it = name_of.find(b["canonical"].get<std::string>());
      if (it == name_of.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the kernel's buffer '", name, "' (", b["canonical"].get<std::string>(),
            ") has no counterpart in this spec, whose buffers are ",
            absl::StrJoin(canonical, ", ", absl::PairFormatter(" as ")),
            ": the kernel was made for another spec; adapt this one again (--no-cache)"));
      }
      names.push_back(it->second);
    } else if (canonical.count(name)) {
      names.push_back(name);
    } else {
      return absl::FailedPreconditionError(absl::StrCat(
          "the kernel names a buffer '", name, "' this spec does not declare, and it was made "
          "before kernels recorded which buffer is which: adapt this spec again (--no-cache)"));
    }
  }
  std::map<std::string, std::string> renamed;  // the kernel's name -> this spec's
  for (size_t i = 0; i < names.size(); ++i) {
    renamed[buffers[i].value("name", "")] = names[i];
    buffers[i]["name"] = names[i];
  }
  // The backward reads the same tensors: its slots and learnable tensors are renamed alike.
  if (!report->contains("backward") || !(*report)["backward"].is_object()) return absl::OkStatus();
  auto& backward = (*report)["backward"];
  const auto rename = [&](nlohmann::json& name) {
    if (!name.is_string()) return;
    const auto it = renamed.find(name.get<std::string>());
    if (it != renamed.end()) name = it->second;
  };
  if (backward.contains("grad_buffers") && backward["grad_buffers"].is_array()) {
    for (auto& name : backward["grad_buffers"]) rename(name);
  }
  if (backward.contains("lowering") && backward["lowering"].contains("buffers") &&
      backward["lowering"]["buffers"].is_array()) {
    for (auto& b : backward["lowering"]["buffers"]) {
      if (b.is_object() && b.contains("name")) rename(b["name"]);
    }
  }
  return absl::OkStatus();
}

}  // namespace cubridge::pipeline
