// The entry of the region generation (GenerateRegions) and the RegionWriter's orchestration:
// Run calls each region family in the order the regions see each other's names, and the symbol
// helpers here serve every family. The families are defined in region_*.cc (region_writer.h
// lists which file writes which region); the rewrites of element expressions and the hoisting
// passes are in rewrites/.
#include "cuir/lower/codegen.h"

#include "absl/strings/str_cat.h"
#include "cuir/ir/status_macros.h"
#include "cuir/lower/region_writer.h"

namespace cubridge::lower {

using cuir::Stmt;
using cuir::StmtKind;

RegionWriter::RegionWriter(const LoweringPlan& plan, const cuir::Program& base,
                           const Expert& expert)
    : plan_(plan),
      base_(base),
      namer_(expert.code_identifiers),
      // A backward's host checks take the forward call's params it holds (backward_abi.cuh).
      params_type_(expert.backward ? "cubridge_attn_fwd_params"
                                   : absl::StrCat("cubridge_", base.kernel, "_params")),
      lse_rows_(expert.source.Find("epilogue_rows") != nullptr),
      raw_scores_(expert.code_identifiers.count("for_each_raw_score") > 0),
      kv_split_scores_(expert.code_identifiers.count("for_each_raw_score_kv_split") > 0),
      kv_walk_region_(expert.source.Find("kv_walk") != nullptr),
      stream_regions_(expert.source.Find("tile_stream") != nullptr &&
                      expert.source.Find("stream_coords") != nullptr),
      backward_(expert.backward) {}

// The families in the order their regions read each other: params and consts (read by every
// later expression), buffers (read by the tables and the elements), tables (read by the loop),
// top lets, the work tile's streamed tensor (read by the elements), the loop and its
// elements, then the epilogue, the host checks and the bindings. The order also fixes which uses
// of a name Fresh suffixes (`c` -> `c_2`), so it is part of the generated text.
absl::StatusOr<std::map<std::string, std::string>> RegionWriter::Run() {
  CUBRIDGE_RETURN_IF_ERROR(Params());
  CUBRIDGE_RETURN_IF_ERROR(Consts());
  CUBRIDGE_RETURN_IF_ERROR(Buffers());
  CUBRIDGE_RETURN_IF_ERROR(Tables());
  CUBRIDGE_RETURN_IF_ERROR(TopLets());
  CUBRIDGE_RETURN_IF_ERROR(TileStreamRegions());
  CUBRIDGE_RETURN_IF_ERROR(LoopHeader());
  CUBRIDGE_RETURN_IF_ERROR(LoopBody());
  CUBRIDGE_RETURN_IF_ERROR(EpilogueSink());
  CUBRIDGE_RETURN_IF_ERROR(BufferCheck());
  CUBRIDGE_RETURN_IF_ERROR(KernelBindings());
  return out_;
}

// ---- symbols ------------------------------------------------------------------------------

std::string RegionWriter::Origin(const Stmt& s) {
  return absl::StrCat("// ", StmtHeader(s), s.loc.known() ? "  (" + s.loc.ToString() + ")" : "",
                      "\n");
}

CType RegionWriter::BaseCType(cuir::Type t) {
  switch (t) {
    case cuir::Type::kBool: return CType::kBool;
    case cuir::Type::kFloat: return CType::kFloat;
    case cuir::Type::kInt: return CType::kInt;
  }
  return CType::kInt;
}

absl::Status RegionWriter::InvalidAt(const Stmt& s, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(s.loc.known() ? s.loc.ToString() + ": " : "", what));
}

std::string RegionWriter::Fresh(const std::string& want) {
  std::string name = namer_.Fresh(want);
  assigned_.insert(name);
  return name;
}

void RegionWriter::Bind(EmitScope* scope, const std::string& cuir_name, const std::string& cpp,
                        CType t) {
  scope->Bind(cuir_name, cpp, t);
  assigned_.insert(cpp);
}

// Builtins read as `<prefix>name` (a params struct) or as the expert's locals (prefix "").
void RegionWriter::BindBuiltins(EmitScope* scope, const std::string& prefix) {
  for (const auto& [name, type] : cuir::BuiltinSymbols()) {
    scope->Bind(name, prefix + name, BaseCType(type));
  }
}

void RegionWriter::BindBuffers(EmitScope* scope) const {
  for (const BufferInfo& b : buffers_) scope->BindBuffer(b.decl->name, b.binding);
}

bool RegionWriter::InBase(StmtKind kind, const std::string& name) const {
  return cuir::FindDecl(base_, kind, name) != nullptr;
}

// `const T cpp = value;` for a let-like declaration, binding it in `scope`.
absl::StatusOr<std::string> RegionWriter::Declare(const Stmt& s, const std::string& cpp,
                                                  EmitScope* scope, absl::string_view qualifier) {
  CUBRIDGE_ASSIGN_OR_RETURN(auto value, EmitExpr(s.value, *scope));
  const CType t = DeclaredCType(s.type, value.type);
  if ((t == CType::kBool) != (value.type == CType::kBool)) {
    return InvalidAt(s, absl::StrCat("`", s.name, "` is declared ", cuir::TypeName(s.type),
                                     " but its value is ", CTypeName(value.type)));
  }
  Bind(scope, s.name, cpp, t);
  return absl::StrCat(Origin(s), qualifier, " ", CTypeName(t), " ", cpp, " = ",
                      Convert(value, t), ";\n");
}

absl::StatusOr<std::map<std::string, std::string>> GenerateRegions(const LoweringPlan& plan,
                                                                   const cuir::Program& base,
                                                                   const Expert& expert) {
  return RegionWriter(plan, base, expert).Run();
}

}  // namespace cubridge::lower
