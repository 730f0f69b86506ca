// RegionWriter's epilogue, host checks and bindings (region_writer.h): the sink logit
// (epilogue_sink), the launch plan's checks of a call's head layout (head_check) and buffers
// (buffer_check), and the attention kernel's names for the buffers and tables its regions read
// (variant_bind; BufferLocals serves the table classifiers too).
#include "absl/strings/str_cat.h"
#include "cuir/ir/status_macros.h"
#include "cuir/lower/region_writer.h"

namespace cubridge::lower {

using cuir::Stmt;

// `epilogue sink EXPR`: the expert's online softmax takes the sink as one more logit per row
// after the loop, in its log2 units (scores are multiplied by log2(e) before each step too).
// EXPR reads only what the kernel knows before the loop (validated), so the kernel scope serves.
absl::Status RegionWriter::EpilogueSink() {
  if (plan_.sink == nullptr) return absl::OkStatus();
  CUBRIDGE_ASSIGN_OR_RETURN(auto sink, EmitExpr(plan_.sink->value, kernel_));
  if (sink.type == CType::kBool) return InvalidAt(*plan_.sink, "an epilogue sink must be a number");
  out_["epilogue_sink"] = absl::StrCat(Origin(*plan_.sink), "softmax.add_sink(", AsFloat(sink),
                                       " * kLog2e, acc, lane);\n");
  return absl::OkStatus();
}

// The launch plan refuses a head layout the kernel's mapping does not serve: the mapping is
// monotone in h, so the first and the last query head bound every kv head it reads.
absl::Status RegionWriter::HeadCheck(const Stmt& head_map) {
  EmitScope scope = ns_.WithTarget(EmitTarget::kHost);
  BindBuiltins(&scope, "p.");
  std::string kv[2];
  for (int i = 0; i < 2; ++i) {
    EmitScope at = scope;
    at.Bind("h", i == 0 ? "0" : "(p.heads_q - 1)", CType::kInt);
    auto e = EmitExpr(head_map.value, at);
    if (!e.ok()) {
      return InvalidAt(head_map, absl::StrCat("the head mapping may depend on the query head `h` "
                                              "and the builtins only: ", e.status().message()));
    }
    kv[i] = Convert(*e, CType::kLong);
  }
  out_["head_check"] = absl::StrCat(
      Origin(head_map), "__host__ __device__ __forceinline__ bool variant_heads_ok(const ",
      params_type_, "& p) {\n  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) return false;\n",
      "  return 0 <= ", kv[0], " && ", kv[1], " < p.heads_kv;\n}\n");
  return absl::OkStatus();
}

// A buffer must be given with the dtype and rank the kernel was lowered for, at least the sizes
// its indexing reaches at this call's shape, and unit stride innermost; the launch plan, on
// the host or the device, refuses the call otherwise.
absl::Status RegionWriter::BufferCheck() {
  if (buffers_.empty()) return absl::OkStatus();
  EmitScope scope = ns_.WithTarget(EmitTarget::kHost);
  BindBuiltins(&scope, "p.");
  std::string checks;
  for (const BufferInfo& b : buffers_) {
    const std::string slot = BufferSlot("p", b);
    const size_t rank = b.decl->exprs.size();
    absl::StrAppend(&checks, Origin(*b.decl), "  if (", slot, ".data == nullptr || ", slot,
                    ".dtype != ", static_cast<int>(b.decl->dtype), " || ", slot, ".rank != ",
                    rank, ") return false;\n");
    for (size_t d = 0; d < rank; ++d) {
      if (b.decl->exprs[d] == nullptr) continue;  // the reach depends on data
      CUBRIDGE_ASSIGN_OR_RETURN(auto extent, EmitExpr(b.decl->exprs[d], scope));
      absl::StrAppend(&checks, "  if (", slot, ".sizes[", d, "] < ",
                      Convert(extent, CType::kLong), ") return false;\n");
    }
    if (rank > 0) {  // reads assume a unit stride innermost
      absl::StrAppend(&checks, "  if (", slot, ".sizes[", rank - 1, "] > 1 && ", slot,
                      ".strides[", rank - 1, "] != 1) return false;\n");
    }
  }
  out_["buffer_check"] = absl::StrCat(
      "__host__ __device__ __forceinline__ bool variant_buffers_ok(const ", params_type_,
      "& p) {\n", checks, "  return true;\n}\n");
  return absl::OkStatus();
}

// The attention kernel's names for the buffers and tables its generated regions read.
absl::Status RegionWriter::KernelBindings() {
  if (buffers_.empty() && tables_.empty()) return absl::OkStatus();
  std::string text;
  for (const BufferInfo& b : buffers_) absl::StrAppend(&text, Origin(*b.decl));
  absl::StrAppend(&text, BufferLocals("p", ""));
  // Declarations only: the expert may hold them as members of its call's context.
  for (const TableInfo& t : tables_) {
    absl::StrAppend(&text, Origin(*t.decl), "const int* __restrict__ const ", t.cpp,
                    " = variant_table(p, workspace, ", t.slot, ");\n");
  }
  out_["variant_bind"] = text;
  return absl::OkStatus();
}

std::string RegionWriter::BufferSlot(const std::string& params, const BufferInfo& b) {
  return absl::StrCat(params, ".buffers[", b.slot, "]");
}

// `const int* doc = ...data;` and the sizes and strides of every buffer: generated code reads
// buffers by these names (nvcc keeps only what an expression uses).
std::string RegionWriter::BufferLocals(const std::string& params,
                                       absl::string_view indent) const {
  std::string text;
  for (const BufferInfo& b : buffers_) {
    const std::string slot = BufferSlot(params, b);
    const char* type = StorageCType(b.binding.dtype);
    // [[maybe_unused]]: a table's classifier binds every buffer and reads only its mask's.
    absl::StrAppend(&text, indent, "[[maybe_unused]] const ", type, "* __restrict__ const ",
                    b.cpp, " = static_cast<const ", type, "*>(", slot, ".data);  // buffer ",
                    b.decl->name, "\n");
    for (size_t d = 0; d < b.binding.sizes.size(); ++d) {
      absl::StrAppend(&text, indent, "[[maybe_unused]] const long long ", b.binding.sizes[d],
                      " = ", slot, ".sizes[", d, "];\n");
      if (d < b.binding.strides.size()) {
        absl::StrAppend(&text, indent, "[[maybe_unused]] const long long ", b.binding.strides[d],
                        " = ", slot, ".strides[", d, "];\n");
      }
    }
  }
  return text;
}

}  // namespace cubridge::lower
