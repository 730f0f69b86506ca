// RegionWriter's declarations (region_writer.h): tile_params, variant_consts, the buffers'
// kernel names, and the kernel's top lets (head_map, program_lets).
#include "absl/strings/str_cat.h"
#include "cuir/ir/status_macros.h"
#include "cuir/lower/region_writer.h"

namespace cubridge::lower {
namespace {

constexpr int kMaxBuffers = 8;  // CUBRIDGE_MAX_BUFFERS of the launcher ABI

}  // namespace

using cuir::Stmt;
using cuir::StmtKind;

absl::Status RegionWriter::Params() {
  std::string text;
  for (const Stmt* s : plan_.params) {
    const std::string cpp = InBase(StmtKind::kParam, s->name) ? s->name : Fresh(s->name);
    CUBRIDGE_ASSIGN_OR_RETURN(auto line, Declare(*s, cpp, &ns_, "constexpr"));
    text += line;
  }
  if (plan_.params_changed) out_["tile_params"] = text;
  return absl::OkStatus();
}

absl::Status RegionWriter::Consts() {
  std::string text;
  for (const Stmt* s : plan_.consts) {
    // Unused where every read was folded into a literal (the interval analysis knows its value).
    CUBRIDGE_ASSIGN_OR_RETURN(auto line,
                           Declare(*s, Fresh(s->name), &ns_, "[[maybe_unused]] constexpr"));
    text += line;
    if (s->value != nullptr) {
      AddRange(&element_bounds_, s->name, cuir::BoundsOf(s->value, element_bounds_));
    }
  }
  if (!plan_.consts.empty()) out_["variant_consts"] = text;
  kernel_ = ns_;
  BindBuiltins(&kernel_, "");
  return absl::OkStatus();
}

absl::Status RegionWriter::Buffers() {
  for (const Stmt* s : plan_.buffers) {
    if (static_cast<int>(buffers_.size()) == kMaxBuffers) {
      return absl::UnimplementedError(absl::StrCat(
          s->loc.ToString(), ": the lowering does not know more than ", kMaxBuffers,
          " buffers (`", StmtHeader(*s), "`): the launcher ABI has ", kMaxBuffers, " slots"));
    }
    BufferBinding binding;
    binding.data = Fresh(s->name);
    binding.dtype = s->dtype;
    for (size_t d = 0; d < s->exprs.size(); ++d) {
      binding.sizes.push_back(Fresh(absl::StrCat(s->name, "_size", d)));
      if (d + 1 < s->exprs.size()) {
        binding.strides.push_back(Fresh(absl::StrCat(s->name, "_stride", d)));
      }
    }
    buffers_.push_back({s, binding.data, static_cast<int>(buffers_.size()), binding});
  }
  BindBuffers(&kernel_);
  return absl::OkStatus();
}

// Base lets first (the expert declares q_lo / q_hi before its head_map region), then the head
// map, then the lets the transfer added (program_lets).
absl::Status RegionWriter::TopLets() {
  for (const std::string& axis : plan_.grid->names) kernel_.Bind(axis, axis, CType::kInt);
  for (const Stmt& s : base_.stmts) {
    if (s.kind == StmtKind::kLet && s.name != kHeadMapLet) {
      kernel_.Bind(s.name, s.name, BaseCType(s.type));
    }
  }
  if (plan_.head_map != nullptr && plan_.head_map_changed) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto line, Declare(*plan_.head_map, kHeadMapLet, &kernel_));
    out_["head_map"] = line;
    CUBRIDGE_RETURN_IF_ERROR(HeadCheck(*plan_.head_map));
  } else {
    kernel_.Bind(kHeadMapLet, kHeadMapLet, CType::kInt);
  }
  std::string lets;
  for (const Stmt* s : plan_.program_lets) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto line, Declare(*s, Fresh(s->name), &kernel_));
    lets += line;
  }
  if (!plan_.program_lets.empty()) out_["program_lets"] = lets;
  return absl::OkStatus();
}

}  // namespace cubridge::lower
