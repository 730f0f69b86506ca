// The proto's TensorDType as the IR's: the launcher ABI's code plus one, so that 0 stays "not
// set". Header-only: the coordinator's request checks (which the fuzz build links alone) and the
// task messages both use it.
#pragma once

#include <optional>

#include "cubridge/v1/common.pb.h"
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

}  // namespace cubridge::contract
