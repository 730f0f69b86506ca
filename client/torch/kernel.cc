#include "client/torch/kernel.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "cuir/ir/dtype.h"
#include "cuir/ir/eval.h"
#include "cuir/ir/program.h"
#include "cuir/lower/lower.h"

namespace cubridge::torch_op {
namespace {

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        path, ": cannot read it (a kernel folder holds what `cubridge-cli adapt --out DIR` writes)"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The report's `backward` section and kernel_bwd.cu.
absl::Status ReadBackward(const std::string& dir, const nlohmann::json& report,
                          const std::vector<KernelBuffer>& buffers, BackwardInfo* out) {
  const std::string where = dir + "/report.json";
  if (!report.contains("backward")) {
    out->reason = absl::StrCat(
        "the kernel folder ", dir, " has no backward kernel: it was made without one (an older "
        "CuBridge, or `adapt --backward off`); adapt the variant again to get one");
    return absl::OkStatus();
  }
  try {
    const auto& b = report.at("backward");
    if (!b.at("available").get<bool>()) {
      out->reason = absl::StrCat("CuBridge could not make this variant's backward kernel: ",
                                 b.at("reason").get<std::string>());
      return absl::OkStatus();
    }
    std::vector<std::string> learnable = b.at("grad_buffers").get<std::vector<std::string>>();
    std::vector<std::string> slots;
    for (const auto& buffer : b.at("lowering").at("buffers")) {
      slots.push_back(buffer.at("name").get<std::string>());
    }
    for (const KernelBuffer& buffer : buffers) {
      const auto at = std::find(slots.begin(), slots.end(), buffer.name);
      if (at == slots.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": the backward kernel does not read captured tensor '", buffer.name,
            "', which the forward does"));
      }
      out->slots.push_back(static_cast<int>(at - slots.begin()));
      out->learns.push_back(std::find(learnable.begin(), learnable.end(), buffer.name) !=
                            learnable.end());
    }
    if (slots.size() != buffers.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the backward kernel reads ", slots.size(), " captured tensors, the forward ",
          buffers.size()));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": backward: ", e.what()));
  }
  auto source = ReadText(dir + "/kernel_bwd.cu");
  if (!source.ok()) return source.status();
  out->source = *std::move(source);
  out->entries = lower::DeviceEntries(out->source);
  for (const char* role : {"plan", "preprocess", "attention", "postprocess"}) {
    if (out->entries.count(role) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, "/kernel_bwd.cu: names no `// @cuir-entry ", role,
          "` line; it is not a lowered backward kernel"));
    }
  }
  out->available = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KernelInfo> ReadKernel(const std::string& dir) {
  KernelInfo k;
  k.dir = dir;
  auto report_text = ReadText(dir + "/report.json");
  if (!report_text.ok()) return report_text.status();
  auto source = ReadText(dir + "/kernel.cu");
  if (!source.ok()) return source.status();
  k.source = *std::move(source);
  k.entries = lower::DeviceEntries(k.source);
  const auto report = nlohmann::json::parse(*report_text, nullptr, false);
  const std::string where = dir + "/report.json";
  if (!report.is_object()) return absl::InvalidArgumentError(where + ": not a JSON object");
  try {
    k.spec_hash = report.at("spec_hash").get<std::string>();
    k.arch = report.at("arch").get<std::string>();
    const auto& config = report.at("config");
    const std::string dtype = config.at("dtype").get<std::string>();
    if (dtype != "bf16" && dtype != "fp16") {
      return absl::InvalidArgumentError(absl::StrCat(where, ": config.dtype is '", dtype,
                                                     "'; a kernel is bf16 or fp16"));
    }
    k.dtype = dtype == "bf16" ? 0 : 1;
    k.head_dim = config.at("head_dim").get<int>();
    k.heads_q = config.at("heads_q").get<int>();
    k.heads_kv = config.at("heads_kv").get<int>();
    for (const auto& b : report.at("lowering").at("buffers")) {
      KernelBuffer buffer;
      buffer.name = b.at("name").get<std::string>();
      const auto dt = cuir::TensorDTypeFromName(b.at("dtype").get<std::string>());
      if (!dt) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": buffer '", buffer.name,
                                                       "' has an unknown dtype"));
      }
      buffer.dtype = static_cast<int>(*dt);
      buffer.extents = b.at("extents").get<std::vector<std::string>>();
      k.buffers.push_back(std::move(buffer));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", e.what()));
  }
  if (auto s = ReadBackward(dir, report, k.buffers, &k.backward); !s.ok()) return s;
  if (k.entries.count("plan") == 0 || k.entries.count("attention") == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, "/kernel.cu: names no `// @cuir-entry plan` and `attention` lines; it is not a "
             "lowered kernel"));
  }
  return k;
}

std::optional<int64_t> LeastSize(const std::string& extent, const CallShape& s) {
  if (extent == "?") return std::nullopt;
  auto expr = cuir::ParseExpr(extent);
  if (!expr.ok()) return std::nullopt;
  cuir::ScalarEnv env;
  env.vars = {{"batch", s.batch},         {"heads_q", s.heads_q},     {"heads_kv", s.heads_kv},
              {"seqlen_q", s.seqlen_q},   {"seqlen_kv", s.seqlen_kv}, {"head_dim", s.head_dim}};
  auto v = cuir::EvalInt(*expr, env);
  if (!v.ok()) return std::nullopt;
  return *v;
}

}  // namespace cubridge::torch_op
