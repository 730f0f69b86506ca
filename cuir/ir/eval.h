// Scalar evaluation and type checking of CuIR expressions (no LibTorch): used by the interpreter
// for loop bounds and block classification, by the transfer rules' soundness checks, and by the
// validator.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "cuir/ir/expr.h"

namespace cubridge::cuir {

using Value = std::variant<bool, int64_t, double>;
std::string ValueToString(const Value& v);

// A buffer's values: row-major, `sizes` giving the rank (none for a scalar); each value holds
// `element`'s alternative.
struct BufferData {
  Type element = Type::kInt;
  std::vector<int64_t> sizes;
  std::vector<Value> values;

  // A 1-D int buffer (document ids and the like).
  static BufferData Ints(const std::vector<int64_t>& ints) {
    BufferData d;
    d.sizes = {static_cast<int64_t>(ints.size())};
    for (int64_t v : ints) d.values.emplace_back(v);
    return d;
  }
};

struct ScalarEnv {
  absl::flat_hash_map<std::string, Value> vars;
  absl::flat_hash_map<std::string, BufferData> buffers;
};

// The row-major offset of `index` in a buffer of `sizes`, with Python's semantics (a negative
// index counts from the end); nullopt when an index is out of range or the counts differ.
std::optional<int64_t> ElementOffset(const std::vector<int64_t>& sizes,
                                     const std::vector<int64_t>& index);

// Python / torch semantics: int // and % floor toward -inf, / is true division (float), int
// overflow wraps. Errors: unbound name, buffer index out of range, integer division by zero
// (INVALID_ARGUMENT / OUT_OF_RANGE with the expression's location).
absl::StatusOr<Value> EvalScalar(const ExprPtr& e, const ScalarEnv& env);
absl::StatusOr<int64_t> EvalInt(const ExprPtr& e, const ScalarEnv& env);
absl::StatusOr<bool> EvalBool(const ExprPtr& e, const ScalarEnv& env);

struct TypeEnv {
  absl::flat_hash_map<std::string, Type> vars;
  absl::flat_hash_map<std::string, Type> buffers;  // element type (the validator checks ranks)
};

// Infers the type with torch promotion rules (int op int -> int except `/` and float math;
// comparisons -> bool; && || ! need bool). Errors name the location and the offending operand.
absl::StatusOr<Type> TypeOf(const ExprPtr& e, const TypeEnv& env);

// Folds constant subtrees (literals only; no symbol values).
ExprPtr FoldConstants(const ExprPtr& e);

}  // namespace cubridge::cuir
