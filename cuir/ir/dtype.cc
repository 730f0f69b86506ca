#include "cuir/ir/dtype.h"

#include <array>
#include <utility>

namespace cubridge::cuir {

const char* TensorDTypeName(TensorDType d) {
  switch (d) {
    case TensorDType::kInt32: return "int32";
    case TensorDType::kInt64: return "int64";
    case TensorDType::kBool: return "bool";
    case TensorDType::kFloat32: return "float32";
    case TensorDType::kBFloat16: return "bfloat16";
    case TensorDType::kFloat16: return "float16";
  }
  return "?";
}

std::optional<TensorDType> TensorDTypeFromName(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, TensorDType>, 17> kNames = {{
      {"int32", TensorDType::kInt32}, {"int", TensorDType::kInt32}, {"i32", TensorDType::kInt32},
      {"int64", TensorDType::kInt64}, {"long", TensorDType::kInt64}, {"i64", TensorDType::kInt64},
      {"bool", TensorDType::kBool},
      {"float32", TensorDType::kFloat32}, {"float", TensorDType::kFloat32}, {"f32", TensorDType::kFloat32},
      {"bfloat16", TensorDType::kBFloat16}, {"bf16", TensorDType::kBFloat16},
      {"float16", TensorDType::kFloat16}, {"half", TensorDType::kFloat16}, {"fp16", TensorDType::kFloat16},
      {"f16", TensorDType::kFloat16}, {"fp32", TensorDType::kFloat32},
  }};
  for (const auto& [n, d] : kNames) {
    if (n == name) return d;
  }
  return std::nullopt;
}

const char* TensorDTypeNames() { return "int32, int64, bool, float32, bfloat16, float16"; }

Type ElementType(TensorDType d) {
  switch (d) {
    case TensorDType::kInt32:
    case TensorDType::kInt64: return Type::kInt;
    case TensorDType::kBool: return Type::kBool;
    default: return Type::kFloat;
  }
}

int TensorDTypeBytes(TensorDType d) {
  switch (d) {
    case TensorDType::kInt64: return 8;
    case TensorDType::kBool: return 1;
    case TensorDType::kBFloat16:
    case TensorDType::kFloat16: return 2;
    default: return 4;
  }
}

}  // namespace cubridge::cuir
