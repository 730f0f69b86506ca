#include "client/cli/config_flags.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cubridge::cli {
namespace {

// "NAME=VALUE" -> (NAME, VALUE), both trimmed; `form` and `example` go into the error.
absl::StatusOr<std::pair<std::string, std::string>> SplitAssignment(const char* flag,
                                                                    const std::string& text,
                                                                    const char* form,
                                                                    const char* example) {
  const size_t eq = text.find('=');
  std::string name(absl::StripAsciiWhitespace(text.substr(0, eq)));
  if (eq == std::string::npos || name.empty() || eq + 1 == text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", text, "' must be ", form, ", e.g. ", example));
  }
  return std::make_pair(std::move(name), std::string(absl::StripAsciiWhitespace(text.substr(eq + 1))));
}

absl::StatusOr<cuir::DType> ParseDType(const std::string& dtype) {
  if (dtype == "bf16") return cuir::DType::kBF16;
  if (dtype == "fp16") return cuir::DType::kFP16;
  return absl::InvalidArgumentError(
      absl::StrCat("--dtype must be bf16 or fp16, got '", dtype, "'"));
}

}  // namespace

void AddConfigFlags(CLI::App* cmd, ConfigFlags& f) {
  auto& c = f.config;
  cmd->add_option("--batch", c.batch, "Batch size");
  cmd->add_option("--heads-q", c.heads_q, "Query heads");
  cmd->add_option("--heads-kv", c.heads_kv, "Key/value heads (divides --heads-q: MHA, GQA, MQA)");
  cmd->add_option("--head-dim", c.head_dim, "Head dimension: 64, 128 or 256");
  f.seqlen_flag = cmd->add_option("--seqlen", f.seqlen, "Sets both --seqlen-q and --seqlen-kv");
  f.seqlen_q_flag =
      cmd->add_option("--seqlen-q", c.seqlen_q, "Query sequence length (wins over --seqlen)");
  f.seqlen_kv_flag =
      cmd->add_option("--seqlen-kv", c.seqlen_kv, "Key/value sequence length (wins over --seqlen)");
  cmd->add_option("--dtype", f.dtype, "bf16 or fp16");
  cmd->add_option("--scale", c.softmax_scale, "Softmax scale (default 1/sqrt(head-dim))");
  cmd->add_option("--param", f.params, "Override a spec parameter: NAME=VALUE");
  cmd->add_option("--buffer", f.buffers,
                  "A captured tensor's values: NAME=random | NAME=random:DTYPE | "
                  "NAME=random:DTYPE[D0,D1,..] | NAME=tensor:PATH (torch.save) | "
                  "NAME=lengths:A,B,.. | NAME=values:.. | NAME=file:PATH");
}

absl::StatusOr<ResolvedConfig> ResolveConfig(const ConfigFlags& f) {
  ResolvedConfig r;
  r.attention = f.config;
  auto dtype = ParseDType(f.dtype);
  if (!dtype.ok()) return dtype.status();
  r.attention.dtype = *dtype;
  if (f.seqlen_flag != nullptr && f.seqlen_flag->count() > 0) {
    if (f.seqlen_q_flag->count() == 0) r.attention.seqlen_q = f.seqlen;
    if (f.seqlen_kv_flag->count() == 0) r.attention.seqlen_kv = f.seqlen;
  }
  for (const auto& p : f.params) {
    auto kv = SplitAssignment("--param", p, "NAME=VALUE", "window=128");
    if (!kv.ok()) return kv.status();
    r.params.push_back(*std::move(kv));
  }
  for (const auto& b : f.buffers) {
    auto kv = SplitAssignment("--buffer", b, "NAME=SOURCE", "doc=lengths:100,157");
    if (!kv.ok()) return kv.status();
    r.buffers[kv->first] = kv->second;
  }
  return r;
}

}  // namespace cubridge::cli
