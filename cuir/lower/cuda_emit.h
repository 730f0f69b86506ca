// CuIR expression -> CUDA C++ expression text.
//
// Numeric conventions (docs/lowering.md): index values are `int`; products and powers of ints are
// computed in `long long` (they are where index math overflows); Python `//`, `%`, ceil division
// and integer powers go through the helpers of cuir/experts/common/cuir_scalar.cuh; float math is
// fp32 (expf, exp2f, tanhf, ...); `/` is always a float division; buffers are `const int*`
// kernel parameters read with __ldg. Every compound subexpression is parenthesized, so the text
// never depends on C++ precedence.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "cuir/ir/expr.h"

namespace cubridge::lower {

// The C type of an emitted (sub)expression.
enum class CType { kBool, kInt, kLong, kFloat };
const char* CTypeName(CType t);  // "bool", "int", "long long", "float"

struct CExpr {
  std::string text;
  CType type = CType::kInt;
};

// Where the code runs: host code (launch-time sizes) cannot read device buffers.
enum class EmitTarget { kDevice, kHost };

// The CuIR symbols visible at one point of the generated code and their C++ spellings.
class EmitScope {
 public:
  explicit EmitScope(EmitTarget target = EmitTarget::kDevice) : target_(target) {}

  void Bind(const std::string& cuir_name, std::string cpp_name, CType type);
  void BindBuffer(const std::string& cuir_name, std::string cpp_name);
  const CExpr* Find(const std::string& cuir_name) const;
  const std::string* FindBuffer(const std::string& cuir_name) const;
  EmitTarget target() const { return target_; }
  EmitScope WithTarget(EmitTarget target) const;

 private:
  EmitTarget target_;
  std::map<std::string, CExpr> vars_;
  std::map<std::string, std::string> buffers_;
};

// Errors (INVALID_ARGUMENT, with the expression's file:line:col): a name not in scope, a buffer
// read in host code, an operand type CuIR does not allow (the validator rejects those first).
absl::StatusOr<CExpr> EmitExpr(const cuir::ExprPtr& e, const EmitScope& scope);

// The expression converted to float / to the C type of a CuIR declaration of type `t`.
std::string AsFloat(const CExpr& e);
CType DeclaredCType(cuir::Type t, CType value_type);
std::string Convert(const CExpr& e, CType to);

// `float` literal text that round-trips the value rounded to fp32: "0.5f", "INFINITY", "NAN".
std::string FloatLiteral(double v);

}  // namespace cubridge::lower
