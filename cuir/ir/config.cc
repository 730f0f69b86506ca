#include "cuir/ir/config.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace cubridge::cuir {

const char* DTypeName(DType d) { return d == DType::kBF16 ? "bf16" : "fp16"; }

double AttentionConfig::scale() const {
  return softmax_scale != 0.0 ? softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

std::string AttentionConfig::ToString() const {
  return absl::StrFormat("b=%d hq=%d hkv=%d d=%d sq=%d skv=%d %s scale=%.6g", batch, heads_q,
                         heads_kv, head_dim, seqlen_q, seqlen_kv, DTypeName(dtype), scale());
}

absl::Status ValidateConfig(const AttentionConfig& c) {
  auto positive = [](const char* name, int64_t v) -> absl::Status {
    if (v <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "config: %s must be a positive integer, got %d (set it with --%s)", name, v, name));
    }
    return absl::OkStatus();
  };
  for (auto [name, v] : {std::pair{"batch", c.batch}, {"heads-q", c.heads_q},
                         {"heads-kv", c.heads_kv}, {"head-dim", c.head_dim},
                         {"seqlen-q", c.seqlen_q}, {"seqlen-kv", c.seqlen_kv}}) {
    if (auto s = positive(name, v); !s.ok()) return s;
  }
  if (c.heads_q % c.heads_kv != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config: heads-q (%d) must be a multiple of heads-kv (%d): MHA uses equal counts, GQA a "
        "divisor, MQA heads-kv = 1",
        c.heads_q, c.heads_kv));
  }
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config: head-dim %d is not supported; the expert kernels take 64, 128 or 256",
        c.head_dim));
  }
  if (c.softmax_scale < 0 || !std::isfinite(c.softmax_scale)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config: softmax-scale must be a finite positive number (0 = 1/sqrt(head-dim)), got %g",
        c.softmax_scale));
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, int64_t>> BuiltinSizes(const AttentionConfig& c) {
  return {{"batch", c.batch},       {"heads_q", c.heads_q},   {"heads_kv", c.heads_kv},
          {"head_dim", c.head_dim}, {"seqlen_q", c.seqlen_q}, {"seqlen_kv", c.seqlen_kv}};
}

}  // namespace cubridge::cuir
