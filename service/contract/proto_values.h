// IR values as the wire's messages: TensorDType (the launcher ABI's code plus one, so that 0 stays
// "not set") and the attention config. Header-only: the coordinator's request checks (which the
// fuzz build links alone), the task messages and the CLI all use them.
#pragma once

#include <optional>

#include "cubridge/v1/common.pb.h"
#include "cuir/ir/config.h"
#include "cuir/ir/dtype.h"

namespace cubridge::contract {

// nullopt for UNSPECIFIED or a code this build does not know.
inline std::optional<cuir::TensorDType> TensorDTypeFromProto(int dtype) {
  static_assert(v1::TENSOR_DTYPE_INT32 == static_cast<int>(cuir::TensorDType::kInt32) + 1 &&
                v1::TENSOR_DTYPE_FLOAT16 == static_cast<int>(cuir::TensorDType::kFloat16) + 1 &&
                v1::TensorDType_MAX == cuir::kTensorDTypeCount);
  if (dtype < 1 || dtype > cuir::kTensorDTypeCount) return std::nullopt;
  return static_cast<cuir::TensorDType>(dtype - 1);
}

inline v1::TensorDType TensorDTypeToProto(cuir::TensorDType dtype) {
  return static_cast<v1::TensorDType>(static_cast<int>(dtype) + 1);
}

// Every size set.
inline v1::AttentionConfig ConfigToProto(const cuir::AttentionConfig& c) {
  v1::AttentionConfig p;
  p.set_batch(c.batch);
  p.set_heads_q(c.heads_q);
  p.set_heads_kv(c.heads_kv);
  p.set_head_dim(c.head_dim);
  p.set_seqlen_q(c.seqlen_q);
  p.set_seqlen_kv(c.seqlen_kv);
  p.set_dtype(cuir::DTypeName(c.dtype));
  p.set_softmax_scale(c.softmax_scale);
  return p;
}

}  // namespace cubridge::contract
