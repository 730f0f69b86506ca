// The attention configuration a job brings: shapes, head layout, dtype, softmax scale.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace cubridge::cuir {

enum class DType { kBF16, kFP16 };
const char* DTypeName(DType d);  // "bf16" / "fp16"

struct AttentionConfig {
  int64_t batch = 1;
  int64_t heads_q = 8;
  int64_t heads_kv = 8;  // heads_q % heads_kv == 0: MHA (equal), GQA (divides), MQA (1)
  int64_t head_dim = 128;  // 64, 128 or 256
  int64_t seqlen_q = 256;
  int64_t seqlen_kv = 256;
  DType dtype = DType::kBF16;
  double softmax_scale = 0.0;  // 0 = 1/sqrt(head_dim)

  double scale() const;
  // Human-readable one-liner, e.g. "b=1 hq=32 hkv=8 d=128 sq=257 skv=300 bf16 scale=0.0884".
  std::string ToString() const;
};

// The int builtin symbols with the config's values: batch, heads_q, heads_kv, head_dim, seqlen_q,
// seqlen_kv (softmax_scale, a float, is not among them).
std::vector<std::pair<std::string, int64_t>> BuiltinSizes(const AttentionConfig& c);

// INVALID_ARGUMENT naming the field and the accepted values when the config is unusable.
absl::Status ValidateConfig(const AttentionConfig& c);

}  // namespace cubridge::cuir
