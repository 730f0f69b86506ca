#include <cstdint>

#include "absl/strings/str_cat.h"
#include "cuir/ir/status_macros.h"
#include "cuir/lower/rewrites/hoisting.h"

namespace cubridge::lower {

using cuir::ExprPtr;

// Pass "place the hoisted values": where each let of the hoisting is declared, in order (a let
// reads only lets before it), growing the ranges the interval analysis knows by each int let's.
//  - Literal: a block int the analysis pins to one number (`window * window`) is that literal.
//    Declared, it would go unread wherever the emitter folded it already. (A bool can be one
//    number to the analysis too, `select(true, true, x)` is 1: only ints are pinned.)
//  - Before the walk (BlockValuesOutsideTheWalk): a block value that reads nothing of the KV
//    walk (no block index, bound or block let) is the same for every KV block of the work tile,
//    so it is computed once per work tile (region program_lets) rather than once per block. It
//    reads only earlier lets that moved too (or literals), so it emits in `before_walk`; a name of
//    the walk fails to emit there, and the value stays per block.
//  - Per block: the other block values, as consts before the element loop. A positive int one
//    may divide elements (a per-head dilation): its multiplier is computed once there
//    (cuir_divisor_of), and the emitter's `//` / `%` by it multiply.
//  - Row / column: one register array slot per query row (MT x 2) or key column (NT x 2) the
//    thread owns, filled by the expert's for_each_score_row / _col; slots past the tile's end
//    read its last in-bounds index. A 64-bit value that provably fits int is kept as int: half
//    the registers per slot.

void AddRange(cuir::BoundsEnv* env, const std::string& name, const cuir::IntBounds& b) {
  if (b.lo && b.hi) {
    (*env)[name] = cuir::SymbolRange{cuir::IntLit(*b.lo), cuir::IntLit(*b.hi), b.lo, b.hi};
  }
}

absl::StatusOr<std::vector<PlacedLet>> PlaceHoisted(const std::vector<Hoisted>& lets,
                                                    const EmitScope* before_walk,
                                                    const EmitScope& block_scope,
                                                    const cuir::BoundsEnv& bounds,
                                                    EmitScope* element) {
  EmitScope top = before_walk != nullptr ? *before_walk : block_scope;
  EmitScope block = block_scope, row = block_scope, col = block_scope;
  cuir::BoundsEnv env = bounds;  // grows by each hoisted int value's range
  for (EmitScope* scope : {&top, &block, &row, &col}) scope->SetBounds(env);
  row.Bind("q_idx", "q_idx", CType::kInt);
  col.Bind("kv_idx", "kv_idx", CType::kInt);
  row.Bind(kQFloat, "static_cast<float>(q_idx)", CType::kFloat);
  col.Bind(kKvFloat, "static_cast<float>(kv_idx)", CType::kFloat);
  std::vector<PlacedLet> placed;
  for (const Hoisted& h : lets) {
    switch (h.level) {
      case Level::kBlock: {
        const cuir::IntBounds v = cuir::BoundsOf(h.expr, env);
        if (v.lo && v.hi && *v.lo == *v.hi && cuir::WithinInt32(v)) {
          const auto typed = EmitExpr(h.expr, block);
          if (typed.ok() && IsInt(typed->type)) {
            const std::string literal =
                *v.lo < 0 ? absl::StrCat("(", *v.lo, ")") : absl::StrCat(*v.lo);
            AddRange(&env, h.name, v);
            for (EmitScope* scope : {&top, &block, &row, &col, element}) {
              scope->Bind(h.name, literal, CType::kInt);
              scope->SetBounds(env);
            }
            placed.push_back({Placement::kLiteral, {literal, CType::kInt}});
            break;
          }
        }
        const bool to_top = before_walk != nullptr && EmitExpr(h.expr, top).ok();
        CUBRIDGE_ASSIGN_OR_RETURN(auto value, EmitExpr(h.expr, to_top ? top : block));
        const bool divisor = value.type == CType::kInt && v.lo && *v.lo >= 1 && v.hi &&
                             *v.hi <= INT32_MAX && *v.lo != *v.hi;
        if (to_top) top.Bind(h.name, h.name, value.type);
        AddRange(&env, h.name, v);
        for (EmitScope* scope : {&top, &block, &row, &col, element}) {
          if (scope != &top || to_top) {
            scope->Bind(h.name, h.name, value.type);
            if (divisor) scope->Bind(DivisorKey(h.name), DivisorName(h.name), CType::kInt);
          }
          scope->SetBounds(env);
        }
        placed.push_back({to_top ? Placement::kBeforeWalk : Placement::kPerBlock, value, divisor});
        break;
      }
      case Level::kRow:
      case Level::kColumn: {
        const bool is_row = h.level == Level::kRow;
        EmitScope& scope = is_row ? row : col;
        const std::string slot = h.name + (is_row ? "[mt][r]" : "[j][k]");
        CUBRIDGE_ASSIGN_OR_RETURN(auto value, EmitExpr(h.expr, scope));
        const cuir::IntBounds range = cuir::BoundsOf(h.expr, env);
        if (value.type == CType::kLong && cuir::WithinInt32(range)) {
          value = CExpr{Convert(value, CType::kInt), CType::kInt};
        }
        AddRange(&env, h.name, range);
        for (EmitScope* s : {&row, &col, element}) s->SetBounds(env);
        scope.Bind(h.name, slot, value.type);
        element->Bind(h.name, slot, value.type);
        placed.push_back({is_row ? Placement::kRow : Placement::kColumn, value});
        break;
      }
      case Level::kElement:  // (HoistLevel never moves one)
        return absl::InternalError(absl::StrCat("`", h.name, "` is not a hoisted value"));
    }
  }
  return placed;
}

}  // namespace cubridge::lower
