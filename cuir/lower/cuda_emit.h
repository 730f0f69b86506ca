// CuIR expression -> CUDA C++ expression text.
//
// Numeric conventions (docs/lowering.md): index values are `int`; products and powers of ints are
// computed in `long long` (they are where index math overflows); Python `//`, `%`, ceil division
// and integer powers go through the helpers of cuir/experts/common/cuir_scalar.cuh, except an int
// `//` / `%` whose operands' ranges allow a cheaper exact form (a shift, a mask, C's `/` and `%`,
// or the positive-divisor helpers; see EmitScope::SetBounds); float math is
// fp32 (expf, exp2f, tanhf, ...); `/` is always a float division; buffers are `const int*`
// kernel parameters read with __ldg. Every compound subexpression is parenthesized, so the text
// never depends on C++ precedence.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuir/ir/bounds.h"
#include "cuir/ir/dtype.h"
#include "cuir/ir/expr.h"

namespace cubridge::lower {

// The C type of an emitted (sub)expression.
enum class CType { kBool, kInt, kLong, kFloat };
const char* CTypeName(CType t);  // "bool", "int", "long long", "float"
bool IsInt(CType t);            // int or long long

struct CExpr {
  std::string text;
  CType type = CType::kInt;
};

// The kernel's names for one captured tensor: its data pointer (typed after the dtype), and per
// dimension its size and stride (elements) locals; the innermost dimension has unit stride (the
// launcher checks it), so it has no stride name.
struct BufferBinding {
  std::string data;
  cuir::TensorDType dtype = cuir::TensorDType::kInt32;
  std::vector<std::string> sizes;    // one per dimension
  std::vector<std::string> strides;  // one per dimension but the last
  // A tile stream's view (tile_stream.h): `data` names the expert's view, read as
  // data.at(q_idx, kv_idx); sizes and strides are unused.
  bool tile_view = false;
};
// The C pointee type of a dtype (`int`, `long long`, `bool`, `float`, `__nv_bfloat16`, `__half`)
// and the C type a read gives (int, long long, bool or float).
const char* StorageCType(cuir::TensorDType d);
CType ValueCType(cuir::TensorDType d);

// Where the code runs: host code (launch-time sizes) cannot read device buffers.
enum class EmitTarget { kDevice, kHost };

// The CuIR symbols visible at one point of the generated code and their C++ spellings.
class EmitScope {
 public:
  explicit EmitScope(EmitTarget target = EmitTarget::kDevice) : target_(target) {}

  void Bind(const std::string& cuir_name, std::string cpp_name, CType type);
  void BindBuffer(const std::string& cuir_name, BufferBinding binding);
  const CExpr* Find(const std::string& cuir_name) const;
  const BufferBinding* FindBuffer(const std::string& cuir_name) const;
  EmitTarget target() const { return target_; }
  EmitScope WithTarget(EmitTarget target) const;

  // The ranges the CuIR symbols have where this code runs (e.g. cuir::ElementBoundsEnv() inside
  // the element visitors, whose q_idx / kv_idx are in bounds). Int `//` and `%` use them to pick
  // a cheaper form that is still exact; without them only the literals' own values count.
  void SetBounds(cuir::BoundsEnv env);
  const cuir::BoundsEnv* bounds() const { return bounds_.get(); }

 private:
  EmitTarget target_;
  std::map<std::string, CExpr> vars_;
  std::map<std::string, BufferBinding> buffers_;
  std::shared_ptr<const cuir::BoundsEnv> bounds_;  // shared: scopes are copied freely
};

// The scope key under which a positive int value's cuir_divisor is bound (its C name is
// DivisorName's): an int `//` or `%` by that value then multiplies instead of dividing.
std::string DivisorKey(const std::string& cuir_name);
std::string DivisorName(const std::string& cpp_name);
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
