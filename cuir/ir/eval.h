// Scalar evaluation and type checking of CuIR expressions (no LibTorch): used by the interpreter
// for loop bounds and block classification, by the transfer rules' soundness checks, and by the
// validator.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "cuir/ir/expr.h"

namespace cubridge::cuir {

using Value = std::variant<bool, int64_t, double>;
std::string ValueToString(const Value& v);

struct ScalarEnv {
  absl::flat_hash_map<std::string, Value> vars;
  absl::flat_hash_map<std::string, std::vector<int64_t>> buffers;  // 1-D int buffers
};

// Python / torch semantics: int // and % floor toward -inf, / is true division (float), int
// overflow is not checked. Errors: unbound name, buffer index out of range, integer division by
// zero (INVALID_ARGUMENT / OUT_OF_RANGE with the expression's location).
absl::StatusOr<Value> EvalScalar(const ExprPtr& e, const ScalarEnv& env);
absl::StatusOr<int64_t> EvalInt(const ExprPtr& e, const ScalarEnv& env);
absl::StatusOr<bool> EvalBool(const ExprPtr& e, const ScalarEnv& env);

struct TypeEnv {
  absl::flat_hash_map<std::string, Type> vars;
  absl::flat_hash_map<std::string, Type> buffers;  // element type
};

// Infers the type with torch promotion rules (int op int -> int except `/` and float math;
// comparisons -> bool; && || ! need bool). Errors name the location and the offending operand.
absl::StatusOr<Type> TypeOf(const ExprPtr& e, const TypeEnv& env);

// Folds constant subtrees (literals only; no symbol values).
ExprPtr FoldConstants(const ExprPtr& e);

}  // namespace cubridge::cuir
