// LoadSpecFile / LoadSpecSource: read, compile, check the signatures, probe-run, translate.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <set>

#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/types.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/ir/eval.h"
#include "cuir/spec/checked_int_ops.h"
#include "cuir/spec/guard.h"
#include "cuir/spec/internal.h"
#include "cuir/spec/tensors.h"

namespace cubridge::spec {
namespace {

using internal::ErrorAt;
using internal::SourceText;
using torch::jit::Def;

// Names a spec parameter cannot take: the canonical arguments, CuIR's builtin symbols and the
// names the expert programs bind (a const of that name would shadow them), and CuIR's
// keywords and functions.
const std::set<std::string>& ReservedNames() {
  static const std::set<std::string> names = {
      "b", "h", "q_idx", "kv_idx", "score", "batch", "heads_q", "heads_kv", "head_dim",
      "seqlen_q", "seqlen_kv", "softmax_scale", "m_block", "n_block", "kv_h", "q_lo", "q_hi",
      "kv_lo", "kv_hi", "full", "BLOCK_M", "BLOCK_N", "STAGES", "WARPS", "true", "false", "inf",
      "nan", "exp", "exp2", "log", "log2", "sqrt", "tanh", "abs", "sigmoid", "floor", "float",
      "int", "bool", "min", "max", "cdiv", "select"};
  return names;
}

struct SpecFunction {
  bool is_score = false;
  std::string name;
  std::optional<Def> def;
  torch::jit::Function* fn = nullptr;
  cuir::SourceLoc def_loc, return_loc;
};

cuir::SourceLoc ReturnLoc(const SourceText& file, const Def& def) {
  std::vector<torch::jit::TreeRef> work = {def.tree()};
  while (!work.empty()) {
    const torch::jit::TreeRef t = work.back();
    work.pop_back();
    if (t->kind() == torch::jit::TK_RETURN) return file.LocAt(t->range().start());
    if (t->kind() == torch::jit::TK_STRING) continue;
    // Reverse so that the first statement is looked at first.
    for (auto it = t->trees().rbegin(); it != t->trees().rend(); ++it) work.push_back(*it);
  }
  return file.LocAt(def.range().start());
}

absl::StatusOr<std::vector<SpecFunction>> FindSpecFunctions(const SourceText& file,
                                                            const std::vector<Def>& defs) {
  std::vector<SpecFunction> fns;
  for (bool is_score : {false, true}) {
    const std::string name = is_score ? internal::kScoreFn : internal::kMaskFn;
    for (const Def& d : defs) {
      if (d.name().name() != name) continue;
      const cuir::SourceLoc loc = file.LocAt(d.range().start());
      if (!fns.empty() && fns.back().name == name) {
        return ErrorAt(loc, absl::StrCat(name, " is defined twice (first at line ",
                                         fns.back().def_loc.line, "); keep one definition"));
      }
      fns.push_back({is_score, name, d, nullptr, loc, ReturnLoc(file, d)});
    }
  }
  if (fns.empty()) {
    return ErrorAt(cuir::SourceLoc{file.path, 1, 1},
                   absl::StrCat("the file defines neither mask_mod", internal::SignatureText(false),
                                " nor score_mod", internal::SignatureText(true),
                                "; define at least one (or, for a variant they cannot express, "
                                "reference(q, k, v, scale: float) computing the whole attention)"));
  }
  return fns;
}

absl::Status AddParam(Spec* spec, const SpecParam& p) {
  for (const SpecBuffer& b : spec->buffers) {
    if (b.name == p.name) {
      return ErrorAt(p.loc, absl::StrCat("`", p.name, "` is a buffer in the other function and a "
                                         "scalar parameter here; use one kind"));
    }
  }
  if (const SpecParam* old = spec->FindParam(p.name)) {
    if (old->type != p.type || old->value != p.value) {
      return ErrorAt(p.loc, absl::StrCat("parameter `", p.name, "` is also declared at line ",
                                         old->loc.line, " with another type or default; give "
                                         "both the same"));
    }
    return absl::OkStatus();
  }
  spec->params.push_back(p);
  return absl::OkStatus();
}

absl::Status AddBuffer(Spec* spec, const SpecBuffer& b) {
  if (spec->FindParam(b.name) != nullptr) {
    return ErrorAt(b.loc, absl::StrCat("`", b.name, "` is a scalar parameter in the other "
                                       "function and a buffer here; use one kind"));
  }
  for (const SpecBuffer& old : spec->buffers) {
    if (old.name == b.name) return absl::OkStatus();
  }
  spec->buffers.push_back(b);
  return absl::OkStatus();
}

std::optional<Type> ScalarParamType(const c10::TypePtr& t) {
  switch (t->kind()) {
    case c10::TypeKind::IntType: return Type::kInt;
    case c10::TypeKind::FloatType: return Type::kFloat;
    case c10::TypeKind::BoolType: return Type::kBool;
    default: return std::nullopt;
  }
}

absl::StatusOr<SpecParam> MakeParam(const c10::Argument& arg, Type type,
                                    const cuir::SourceLoc& loc) {
  SpecParam p{arg.name(), type, {}, loc};
  const c10::IValue& v = *arg.default_value();
  if (type == Type::kInt && v.isInt()) p.value = v.toInt();
  else if (type == Type::kFloat && (v.isDouble() || v.isInt())) p.value = v.toScalar().toDouble();
  else if (type == Type::kBool && v.isBool()) p.value = v.toBool();
  else return ErrorAt(loc, absl::StrCat("the default of `", arg.name(), "` must be a constant ",
                                        cuir::TypeName(type)));
  return p;
}

// The leading positional parameters, then params (with a default) and buffers (tensors without).
absl::Status AnalyzeSignature(const SourceText& file, const SpecFunction& f, Spec* spec) {
  const auto& args = f.fn->getSchema().arguments();
  std::vector<torch::jit::Param> params;
  for (const torch::jit::Param& p : f.def->decl().params()) params.push_back(p);
  const size_t n = internal::CanonicalArgs(f.is_score).size();
  size_t leading = 0;
  while (leading < params.size() && !params[leading].defaultValue().present()) ++leading;
  if (leading < n) {
    std::vector<std::string> names;
    for (size_t i = 0; i < leading; ++i) names.push_back(params[i].ident().name());
    return ErrorAt(f.def_loc, absl::StrCat(f.name, " must take ",
                                           internal::SignatureText(f.is_score), " first; found ",
                                           leading, " parameters (", absl::StrJoin(names, ", "),
                                           ")"));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const cuir::SourceLoc loc = file.LocAt(params[i].range().start());
    const bool is_tensor = args[i].type()->kind() == c10::TypeKind::TensorType;
    const bool has_default = args[i].default_value().has_value();
    const std::string& name = args[i].name();
    if (i < n) {
      if (!is_tensor) {
        return ErrorAt(loc, absl::StrCat("`", name, "` receives index tensors: remove its `",
                                         args[i].type()->str(), "` annotation"));
      }
      continue;
    }
    if (ReservedNames().count(name) > 0) {
      return ErrorAt(loc, absl::StrCat("parameter name `", name, "` is reserved (CuIR uses it); "
                                       "rename the parameter"));
    }
    const std::optional<Type> scalar = ScalarParamType(args[i].type());
    if (is_tensor && !has_default) {
      SpecBuffer b;
      b.name = name;
      b.loc = loc;
      if (auto s = AddBuffer(spec, b); !s.ok()) return s;
    } else if (scalar && has_default) {
      auto p = MakeParam(args[i], *scalar, loc);
      if (!p.ok()) return p.status();
      if (auto s = AddParam(spec, *p); !s.ok()) return s;
    } else if (scalar) {
      return ErrorAt(loc, absl::StrCat("parameter `", name, ": ", cuir::TypeName(*scalar),
                                       "` has no default: scalar parameters need one, e.g. `",
                                       name, ": ", cuir::TypeName(*scalar), " = ",
                                       *scalar == Type::kFloat ? "1.0" : "1",
                                       "` (only captured tensors such as `doc` go without)"));
    } else {
      return ErrorAt(loc, absl::StrCat("parameter `", name, "` has type ", args[i].type()->str(),
                                       "; extra parameters are int / float / bool with a "
                                       "default, or tensors without one (captured tensors)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReturnTypeError(const SpecFunction& f, Type t) {
  if (!f.is_score) {
    return ErrorAt(f.return_loc, absl::StrCat("mask_mod returns ", cuir::TypeName(t),
                                              ": a mask must return a bool, e.g. a comparison such as "
                                              "q_idx >= kv_idx"));
  }
  return ErrorAt(f.return_loc, absl::StrCat("score_mod returns ", cuir::TypeName(t),
                                            ": it must return the modified score, e.g. score + "
                                            "bias; to drop elements write a mask_mod"));
}

Type TypeOfDtype(c10::ScalarType st) {
  if (st == c10::kBool) return Type::kBool;
  return c10::isFloatingType(st) ? Type::kFloat : Type::kInt;
}

// Zeros of each buffer's dtype, shaped to what its indexing reaches at `shape`. A dimension whose
// reach depends on data (an index clamped by another tensor's values, say) gets room for offsets
// a spec adds to such an index: 1024 for tensors of rank 2 or less, fewer for the larger ones.
std::map<std::string, torch::Tensor> ProbeBuffers(const Spec& spec,
                                                  const cuir::AttentionConfig& shape) {
  std::map<std::string, torch::Tensor> buffers;
  for (const SpecBuffer& b : spec.buffers) {
    const int64_t unknown = b.rank <= 2 ? 1024 : b.rank == 3 ? 128 : 32;
    std::vector<int64_t> sizes = RequiredBufferShape(spec, b, shape);
    for (int64_t& n : sizes) n = n < 0 ? unknown : std::clamp<int64_t>(n, 1, int64_t{1} << 16);
    if (b.rank < 0) sizes = {1};
    buffers[b.name] = torch::zeros(sizes, TorchDType(b.dtype));
  }
  return buffers;
}

// Runs the compiled function on small broadcast index tensors (dims 2, 3, 5, 7 so that any
// mix-up shows): it must run on whole tensors, return the right dtype and an elementwise shape.
absl::StatusOr<Type> Probe(const Spec& spec, const SpecFunction& f) {
  const std::vector<int64_t> full = {2, 3, 5, 7};
  const auto grid = internal::MakeIndexGrid(0, full[0], 0, full[1], full[2], full[3]);
  const auto score = torch::linspace(-3.0, 3.0, 2 * 3 * 5 * 7, torch::kFloat32).view(full);
  cuir::AttentionConfig shape;
  shape.batch = full[0];
  shape.heads_q = shape.heads_kv = full[1];
  shape.seqlen_q = full[2];
  shape.seqlen_kv = full[3];
  auto r = internal::CallSpecFunction(spec, f.is_score, grid, score, ProbeBuffers(spec, shape));
  if (!r.ok()) return r.status();
  const Type type = TypeOfDtype(r->scalar_type());
  if (f.is_score == (type == Type::kBool)) return ReturnTypeError(f, type);
  bool elementwise = r->dim() <= 4;
  for (int64_t i = 1; elementwise && i <= r->dim(); ++i) {
    const int64_t got = r->size(-i), want = full[4 - i];
    elementwise = got == want || got == 1;
  }
  if (!elementwise) {
    return ErrorAt(f.return_loc,
                   absl::StrCat(f.name, " returns a tensor of shape ", internal::ShapeText(r->sizes()),
                                " for ", f.is_score ? "scores" : "indices", " of shape ",
                                internal::ShapeText(full), ": it must be elementwise (one value per ",
                                f.is_score ? "score, e.g. score + bias" : "(q_idx, kv_idx)",
                                "), not a reduction or reshape"));
  }
  return type;
}

// A translated mod is printed, hashed, rewritten by the rules and interpreted by recursive walks,
// and sits a few levels down in a CuIR program (whose expressions may be cuir::kMaxExprDepth
// deep). The guard keeps each statement small, but chained assignments (`x2 = x1 + 1`, ...)
// deepen the expression a statement at a time, and reuse (`y = x + x`) doubles what prints and
// what the interpreter evaluates per score. The example specs stay under 10 deep and 100 nodes.
constexpr int kMaxModDepth = 256;
constexpr int64_t kMaxModNodes = 4096;

absl::Status CheckTranslationSize(const SpecFunction& f, const ExprPtr& e) {
  const cuir::ExprExtent extent = cuir::MeasureExpr(e, kMaxModDepth, kMaxModNodes);
  if (extent.over == nullptr) return absl::OkStatus();
  if (extent.depth > kMaxModDepth) {
    return ErrorAt(f.def_loc, absl::StrCat(
                                  f.name, " computes an expression more than ", kMaxModDepth,
                                  " operations deep (each value computed from the one before); "
                                  "this service accepts at most ", kMaxModDepth,
                                  " (compute the result in fewer steps)"));
  }
  return ErrorAt(f.def_loc, absl::StrCat(
                                f.name, " computes an expression of more than ", kMaxModNodes,
                                " operations once its local names are replaced by their values "
                                "(`y = x + x` counts x twice); this service accepts at most ",
                                kMaxModNodes, " (compute the result in fewer steps)"));
}

absl::StatusOr<internal::TypedExpr> Translate(const SourceText& file, const Spec& spec,
                                              const SpecFunction& f) {
  auto graph = torch::jit::toGraphFunction(*f.fn).graph()->copy();
  torch::jit::Inline(*graph);
  internal::TranslateRequest req{&file, f.name, f.def_loc, graph, {}, {}, {}};
  const auto& canonical = internal::CanonicalArgs(f.is_score);
  const auto& args = f.fn->getSchema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const bool positional = i < canonical.size();
    const SpecParam* p = positional ? nullptr : spec.FindParam(args[i].name());
    const SpecBuffer* b = nullptr;
    for (const SpecBuffer& x : spec.buffers) {
      if (!positional && p == nullptr && x.name == args[i].name()) b = &x;
    }
    req.input_names.push_back(positional ? canonical[i] : args[i].name());
    req.input_types.push_back(p   ? p->type
                              : b ? cuir::ElementType(b->dtype)
                                  : (positional && canonical[i] == "score" ? Type::kFloat
                                                                           : Type::kInt));
    req.input_is_buffer.push_back(!positional && p == nullptr);
  }
  auto r = internal::TranslateGraph(req);
  if (!r.ok()) return r.status();
  if (auto s = CheckTranslationSize(f, r->expr); !s.ok()) return s;
  if (f.is_score == (r->type == Type::kBool)) return ReturnTypeError(f, r->type);
  return r;
}

// The translation checked against what TorchScript computed on the probe; a score_mod's int
// result becomes a float like torch's `score` tensor makes it.
absl::StatusOr<ExprPtr> Finish(const SpecFunction& f, const internal::TypedExpr& r, Type probed) {
  if (r.type != probed) {
    return absl::InternalError(absl::StrCat(
        f.def_loc.ToString(), ": ", f.name, " translates to a ", cuir::TypeName(r.type),
        " expression but TorchScript computes ", cuir::TypeName(probed), ": ",
        cuir::PrintExpr(r.expr), " (a CuBridge bug; please report it with the spec)"));
  }
  if (r.type == Type::kInt) {
    if (r.expr->kind == cuir::ExprKind::kIntLit) {
      return cuir::FloatLit(static_cast<double>(r.expr->int_value), r.expr->loc);
    }
    return cuir::Unary(cuir::UnaryOp::kToFloat, r.expr, r.expr->loc);
  }
  return r.expr;
}

// Every use of a captured tensor indexes it with the same number of indices: its rank.
absl::Status RecordIndexUses(const ExprPtr& root, Spec* spec) {
  if (root == nullptr) return absl::OkStatus();
  std::vector<const cuir::Expr*> stack = {root.get()};
  while (!stack.empty()) {
    const cuir::Expr* e = stack.back();
    stack.pop_back();
    // Right to left onto the stack: the first use in reading order fixes the rank.
    for (auto a = e->args.rbegin(); a != e->args.rend(); ++a) stack.push_back(a->get());
    if (e->kind != cuir::ExprKind::kIndex) continue;
    for (SpecBuffer& b : spec->buffers) {
      if (b.name != e->name) continue;
      const int rank = static_cast<int>(e->args.size());
      if (b.rank < 0) {
        b.rank = rank;
        b.use_loc = e->loc;
      } else if (b.rank != rank) {
        auto uses = [](int n) { return n == 0 ? std::string("as a value (rank 0)")
                                              : absl::StrCat("with ", n, n == 1 ? " index" : " indices"); };
        return ErrorAt(e->loc, absl::StrCat("`", b.name, "` is used ", uses(rank), " here but ",
                                            uses(b.rank), " at ", b.use_loc.ToString(),
                                            ": index a captured tensor with one integer "
                                            "expression per dimension everywhere"));
      }
    }
  }
  return absl::OkStatus();
}

// ---- reference(q, k, v, scale, ...) -----------------------------------------------------------

constexpr const char* kReferenceSignature = "(q, k, v, scale: float)";

// The file's `reference` definition, if any. A file with a reference and a mod is rejected: the
// reference is the whole attention, so a mod beside it would be ignored or applied twice.
absl::StatusOr<std::optional<Def>> FindReference(const SourceText& file,
                                                 const std::vector<Def>& defs) {
  std::optional<Def> reference;
  for (const Def& d : defs) {
    if (d.name().name() != internal::kReferenceFn) continue;
    if (reference) {
      return ErrorAt(file.LocAt(d.range().start()),
                     absl::StrCat("reference is defined twice (first at line ",
                                  file.LocAt(reference->range().start()).line,
                                  "); keep one definition"));
    }
    reference = d;
  }
  if (!reference) return reference;
  for (const Def& d : defs) {
    const std::string& name = d.name().name();
    if (name != internal::kMaskFn && name != internal::kScoreFn) continue;
    return ErrorAt(file.LocAt(d.range().start()),
                   absl::StrCat("give either mask_mod/score_mod or reference, not both: ",
                                "reference (line ", file.LocAt(reference->range().start()).line,
                                ") computes the whole attention, so fold ", name,
                                " into it, or drop reference and keep the mods"));
  }
  return reference;
}

// (q, k, v, scale: float) first, then scalar parameters with defaults; no buffers.
absl::Status AnalyzeReferenceSignature(const SourceText& file, const Def& def,
                                       torch::jit::Function* fn, Spec* spec) {
  const auto& args = fn->getSchema().arguments();
  std::vector<torch::jit::Param> params;
  for (const torch::jit::Param& p : def.decl().params()) params.push_back(p);
  constexpr size_t kLeading = 4;
  size_t leading = 0;
  while (leading < params.size() && !params[leading].defaultValue().present()) ++leading;
  if (leading < kLeading) {
    std::vector<std::string> names;
    for (size_t i = 0; i < leading; ++i) names.push_back(params[i].ident().name());
    return ErrorAt(spec->reference_loc,
                   absl::StrCat("reference must take ", kReferenceSignature, " first; found ",
                                leading, " parameters (", absl::StrJoin(names, ", "),
                                "): write def reference(q, k, v, scale: float, <params with "
                                "defaults>)"));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const cuir::SourceLoc loc = file.LocAt(params[i].range().start());
    const auto kind = args[i].type()->kind();
    const bool is_tensor = kind == c10::TypeKind::TensorType;
    const std::string& name = args[i].name();
    if (i < 3) {
      if (!is_tensor) {
        return ErrorAt(loc, absl::StrCat("`", name, "` receives the ", std::string(1, "qkv"[i]),
                                         " tensor [batch, heads, seqlen, head_dim]: remove its `",
                                         args[i].type()->str(), "` annotation"));
      }
      continue;
    }
    if (i == 3) {
      if (kind != c10::TypeKind::FloatType) {
        return ErrorAt(loc, absl::StrCat("`", name, "` receives the softmax scale, a Python "
                                         "float: annotate it `", name, ": float` (found ",
                                         args[i].type()->str(), ")"));
      }
      continue;
    }
    if (is_tensor) {
      return ErrorAt(loc, absl::StrCat("tensor parameter `", name, "`: reference does not take "
                                       "buffers; give the values as scalar parameters with "
                                       "defaults (int, float, bool), or use mask_mod/score_mod "
                                       "with a buffer"));
    }
    if (ReservedNames().count(name) > 0) {
      return ErrorAt(loc, absl::StrCat("parameter name `", name, "` is reserved (CuIR uses it); "
                                       "rename the parameter"));
    }
    const std::optional<Type> scalar = ScalarParamType(args[i].type());
    if (!scalar) {
      return ErrorAt(loc, absl::StrCat("parameter `", name, "` has type ", args[i].type()->str(),
                                       "; reference parameters after ", kReferenceSignature,
                                       " are int / float / bool with a default"));
    }
    if (!args[i].default_value().has_value()) {
      return ErrorAt(loc, absl::StrCat("parameter `", name, ": ", cuir::TypeName(*scalar),
                                       "` has no default: scalar parameters need one, e.g. `",
                                       name, ": ", cuir::TypeName(*scalar), " = ",
                                       *scalar == Type::kFloat ? "1.0" : "1", "`"));
    }
    auto p = MakeParam(args[i], *scalar, loc);
    if (!p.ok()) return p.status();
    if (auto st = AddParam(spec, *p); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// Runs the reference once on small GQA inputs (batch 2, 4 query heads over 2 kv heads, 5 queries,
// 7 keys, head dim 8: distinct sizes show a mix-up), so a broken one fails when the spec is
// loaded, with its position, not in the middle of a verification.
absl::Status ProbeReference(const Spec& spec) {
  // Deterministic values without touching torch's global random generator.
  const auto values = [](std::vector<int64_t> shape, double step) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return torch::arange(n, torch::kFloat64).mul(step).sin().view(shape);
  };
  const auto q = values({2, 4, 5, 8}, 0.37);
  const auto k = values({2, 2, 7, 8}, 0.53);
  const auto v = values({2, 2, 7, 8}, 0.71);
  return internal::CallReference(spec, q, k, v, 1.0 / std::sqrt(8.0)).status();
}

// The inlined graph without source positions: comments, blank lines and the file's path do not
// show; the computation, the parameters' names and the helper functions it calls do.
std::string ReferenceCode(torch::jit::Function* fn) {
  auto graph = torch::jit::toGraphFunction(*fn).graph()->copy();
  torch::jit::Inline(*graph);
  return graph->toString(/*print_source_locations=*/false);
}

absl::StatusOr<Spec> LoadReference(const SourceText& file, const std::vector<Def>& defs,
                                   const Def& def, Spec spec) {
  spec.has_reference = true;
  spec.reference_loc = file.LocAt(def.range().start());
  // No CheckStatements: the reference is never translated to CuIR, so `if`, loops and
  // and/or/not are as fine as TorchScript finds them.
  auto cu = internal::CompileDefinitions(file, internal::AnnotateDefaults(defs));
  if (!cu.ok()) return cu.status();
  spec.compiled = *cu;
  torch::jit::Function* fn = spec.compiled->find_function(internal::kReferenceFn);
  if (auto st = AnalyzeReferenceSignature(file, def, fn, &spec); !st.ok()) return st;
  if (auto st = ProbeReference(spec); !st.ok()) return st;
  spec.reference_code = ReferenceCode(fn);
  return spec;
}

absl::StatusOr<std::string> ReadSpecFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a spec file"));
  }
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(path, ": spec file does not exist"));
    }
    if (err == EACCES || err == EPERM) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, ": cannot read the spec file: permission denied"));
    }
    return absl::UnavailableError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  std::string text;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::UnavailableError(absl::StrCat(path, ": read error"));
  return text;
}

}  // namespace

absl::StatusOr<Spec> LoadSpecFile(const std::string& path, const BufferDTypes& dtypes) {
  auto text = ReadSpecFile(path);
  if (!text.ok()) return text.status();
  return LoadSpecSource(*text, path, dtypes);
}

absl::StatusOr<Spec> LoadSpecSource(const std::string& source, const std::string& path,
                                    const BufferDTypes& dtypes) {
  if (absl::Status s = GuardSpecSource(source, path); !s.ok()) return s;
  internal::InstallCheckedIntOps();
  Spec spec;
  spec.path = path;
  spec.source = source;
  SourceText file{path, internal::BlankImports(source), nullptr};
  // TorchScript's lexer wants the last line ended; appending keeps every position.
  if (!file.text.empty() && file.text.back() != '\n') file.text += '\n';
  file.source = std::make_shared<torch::jit::Source>(c10::string_view(file.text),
                                                     c10::optional<std::string>(path), 1);
  auto defs = internal::ParseDefinitions(file);
  if (!defs.ok()) return defs.status();
  auto reference = FindReference(file, *defs);
  if (!reference.ok()) return reference.status();
  if (*reference) return LoadReference(file, *defs, **reference, std::move(spec));
  auto fns = FindSpecFunctions(file, *defs);
  if (!fns.ok()) return fns.status();
  for (const SpecFunction& f : *fns) {
    if (auto s = internal::CheckStatements(file, *defs, *f.def); !s.ok()) return s;
  }
  auto cu = internal::CompileDefinitions(file, internal::AnnotateDefaults(*defs));
  if (!cu.ok()) return cu.status();
  spec.compiled = *cu;
  for (SpecFunction& f : *fns) {
    f.fn = spec.compiled->find_function(f.name);
    if (auto s = AnalyzeSignature(file, f, &spec); !s.ok()) return s;
  }
  for (SpecBuffer& b : spec.buffers) {
    if (auto it = dtypes.find(b.name); it != dtypes.end()) b.dtype = it->second;
  }
  // Translate first: the probe needs each captured tensor's rank, which its indexing fixes.
  std::vector<internal::TypedExpr> translated;
  for (const SpecFunction& f : *fns) {
    auto e = Translate(file, spec, f);
    if (!e.ok()) {
      // Without captured tensors the probe runs as is, and its message (a runtime error, a
      // reduction) says more than "unsupported operation".
      if (spec.buffers.empty()) {
        if (auto probed = Probe(spec, f); !probed.ok()) return probed.status();
      }
      return e.status();
    }
    translated.push_back(*e);
    (f.is_score ? spec.score : spec.mask) = e->expr;
  }
  for (const internal::TypedExpr& t : translated) {
    if (auto s = RecordIndexUses(t.expr, &spec); !s.ok()) return s;
  }
  for (size_t i = 0; i < fns->size(); ++i) {
    const SpecFunction& f = (*fns)[i];
    auto probed = Probe(spec, f);
    if (!probed.ok()) return probed.status();
    auto e = Finish(f, translated[i], *probed);
    if (!e.ok()) return e.status();
    (f.is_score ? spec.score : spec.mask) = *e;
    (f.is_score ? spec.score_loc : spec.mask_loc) = f.def_loc;
  }
  return spec;
}

}  // namespace cubridge::spec
