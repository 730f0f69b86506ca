// Internal pieces of the spec layer shared by the frontend, the translator and the oracle.
// Not part of the layer's interface: include spec.h / tensors.h / oracle.h from outside.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/frontend/source_range.h>
#include <torch/csrc/jit/frontend/tree_views.h>
#include <torch/csrc/jit/ir/ir.h>
// Tensor types only, as in tensors.h: the .cc files that compute with tensors include
// <torch/types.h> or <torch/torch.h> themselves.
#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "cuir/ir/expr.h"
#include "cuir/spec/spec.h"

namespace cubridge::spec::internal {

inline constexpr const char* kMaskFn = "mask_mod";
inline constexpr const char* kScoreFn = "score_mod";
inline constexpr const char* kReferenceFn = "reference";

// The canonical names of the leading positional arguments.
const std::vector<std::string>& CanonicalArgs(bool is_score);
// "(b, h, q_idx, kv_idx)" / "(score, b, h, q_idx, kv_idx)" for messages.
std::string SignatureText(bool is_score);

// The user's file text as TorchScript sees it, with positions mapped back to file:line:col.
struct SourceText {
  std::string path;
  std::string text;  // imports blanked, same length and line structure as the file
  std::shared_ptr<torch::jit::Source> source;

  cuir::SourceLoc LocAt(size_t offset) const;
  // The range's location when it points into this file (not into a TorchScript builtin).
  std::optional<cuir::SourceLoc> LocOf(const torch::jit::SourceRange& r) const;
};

// "PATH:LINE:COL: message" as INVALID_ARGUMENT.
absl::Status ErrorAt(const cuir::SourceLoc& loc, const std::string& message);

// TorchScript reports errors as text: a headline, then `File "PATH", line N` frames, each
// followed by the source lines with a `~~~~ <--- HERE` marker under the offending range.
struct TorchScriptError {
  std::string headline;  // the message without frames, on one line
  int line = 0;          // of the chosen frame; 0 when the text names none
  int col = 0;           // 1-based, from the HERE marker; 0 when absent
};
// `innermost_last`: runtime tracebacks list the innermost frame last, compile errors first.
TorchScriptError ParseTorchScriptError(const std::string& what, bool innermost_last);

// ---- compile.cc: from file text to compiled functions ----

// Replaces `import ...` / `from ... import ...` lines by spaces, keeping every position.
std::string BlankImports(const std::string& source);
// The file's top-level function definitions (module docstrings skipped); syntax errors and
// other top-level statements are reported as PATH:LINE:COL.
absl::StatusOr<std::vector<torch::jit::Def>> ParseDefinitions(const SourceText& file);
// Rejects control flow and Python's and/or/not in `root` and the file's functions it calls,
// each with its position and what to write instead.
absl::Status CheckStatements(const SourceText& file, const std::vector<torch::jit::Def>& defs,
                             const torch::jit::Def& root);
// Gives unannotated parameters with a literal default the literal's type (`window=256` is an
// int) and float parameters with an int default a float one (`cap: float = 20`), both of which
// TorchScript's C++ frontend would otherwise reject.
std::vector<torch::jit::Def> AnnotateDefaults(const std::vector<torch::jit::Def>& defs);
absl::StatusOr<std::shared_ptr<torch::jit::CompilationUnit>> CompileDefinitions(
    const SourceText& file, const std::vector<torch::jit::Def>& defs);

// Translates an inlined TorchScript graph into a CuIR expression over canonical names.
struct TranslateRequest {
  const SourceText* file = nullptr;
  std::string function;  // mask_mod / score_mod, for messages
  cuir::SourceLoc def_loc;
  std::shared_ptr<torch::jit::Graph> graph;  // inlined
  // Per graph input: the name it becomes and its type (a buffer's: its element type); buffers
  // are marked.
  std::vector<std::string> input_names;
  std::vector<Type> input_types;
  std::vector<bool> input_is_buffer;
};
struct TypedExpr {
  ExprPtr expr;
  Type type = Type::kBool;
};
absl::StatusOr<TypedExpr> TranslateGraph(const TranslateRequest& req);
// The TorchScript node kinds the translation reads (`aten::sin`, ...), sorted: docs/spec.md's
// table of operations is checked against it.
std::vector<std::string> SupportedOperations();

// "[2, 3, 5]" for messages.
std::string ShapeText(c10::IntArrayRef shape);

// Sets the default float dtype to float64 for its lifetime, so that index arithmetic the spec
// promotes to float (`h / heads`) is evaluated in float64 like the rest of the oracle.
class DefaultDoubleGuard {
 public:
  DefaultDoubleGuard();
  ~DefaultDoubleGuard();
  DefaultDoubleGuard(const DefaultDoubleGuard&) = delete;
  DefaultDoubleGuard& operator=(const DefaultDoubleGuard&) = delete;

 private:
  caffe2::TypeMeta saved_;
};

// Index tensors shaped for broadcasting: b [B,1,1,1] (values b0..b0+B-1), h [1,H,1,1]
// (values h0..h0+H-1), q_idx [1,1,Sq,1], kv_idx [1,1,1,Skv], all int64.
struct IndexGrid {
  at::Tensor b, h, q, kv;
};
IndexGrid MakeIndexGrid(int64_t b0, int64_t batch, int64_t h0, int64_t heads, int64_t seqlen_q,
                        int64_t seqlen_kv, at::Device device = at::kCPU);

// Runs a compiled spec function on whole tensors. `score` is used for score_mod only. Params
// are passed by value, buffers by name. A Python number result becomes a 0-d tensor. Errors
// (a TorchScript runtime failure, a missing buffer) name the spec file position.
absl::StatusOr<at::Tensor> CallSpecFunction(const Spec& spec, bool is_score, const IndexGrid& grid,
                                            const at::Tensor& score,
                                            const std::map<std::string, at::Tensor>& buffers);

// What a reference function gave: O, and LSE when it returned a tuple (else undefined).
struct ReferenceResult {
  at::Tensor o, lse;
};
// Runs the compiled `reference(q, k, v, scale, params...)` with torch's default float dtype set
// to q's. Checks that it returns O or (O, LSE) shaped after q ([B, Hq, Sq, D] and [B, Hq, Sq])
// with floating values; errors name the spec file position (the failing line for a TorchScript
// runtime error, else the reference's `def`).
absl::StatusOr<ReferenceResult> CallReference(const Spec& spec, const at::Tensor& q,
                                              const at::Tensor& k, const at::Tensor& v,
                                              double scale);

}  // namespace cubridge::spec::internal
