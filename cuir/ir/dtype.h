// Storage types of buffers (captured tensors). CuIR computes with bool / int / float values
// (Type); a buffer's dtype says how its elements are stored, which the kernel's loads, the
// launcher's checks and the spec hash need: an fp16 table is a different kernel than an fp32 one.
#pragma once

#include <optional>
#include <string_view>

#include "cuir/ir/expr.h"

namespace cubridge::cuir {

// The codes are the launcher ABI's (CUBRIDGE_DTYPE_* in experts/common/launch_abi.cuh).
enum class TensorDType { kInt32 = 0, kInt64 = 1, kBool = 2, kFloat32 = 3, kBFloat16 = 4, kFloat16 = 5 };
inline constexpr int kTensorDTypeCount = 6;

// "int32", "int64", "bool", "float32", "bfloat16", "float16": torch's names.
const char* TensorDTypeName(TensorDType d);
// The names above, torch's short ones ("int", "long", "float", "half", "bf16", "fp16", "f32",
// "i32", "i64") and CuIR's value types (`int` = int32, `float` = float32).
std::optional<TensorDType> TensorDTypeFromName(std::string_view name);
// What an element reads as: ints -> int, floats -> float, bool -> bool.
Type ElementType(TensorDType d);
int TensorDTypeBytes(TensorDType d);
// The TensorDTypeFromName spellings a user may write, for error messages.
const char* TensorDTypeNames();

}  // namespace cubridge::cuir
