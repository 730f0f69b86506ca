#include "cuir/interp/block_table.h"

#include <algorithm>

#include <torch/types.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/interp/interp.h"
#include "cuir/interp/tensor_eval.h"

namespace cubridge::interp {
namespace {

std::string At(const cuir::SourceLoc& loc) {
  return loc.known() ? absl::StrCat(loc.ToString(), ": ") : std::string();
}

absl::StatusOr<int64_t> TileParam(const cuir::ScalarEnv& globals, const char* name,
                                  const cuir::Stmt& table) {
  auto it = globals.vars.find(name);
  if (it == globals.vars.end() || !std::holds_alternative<int64_t>(it->second) ||
      std::get<int64_t>(it->second) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        At(table.loc), "table ", table.name, " needs `param ", name,
        ": int` (a positive tile size) to classify blocks"));
  }
  return std::get<int64_t>(it->second);
}

// Which positions a table's rows and columns are: a table's row is a query tile and its blocks
// KV blocks, or, transposed (the backward's), a KV tile and query blocks.
struct TableAxes {
  const char* row_var;     // q_idx, or kv_idx when transposed
  const char* column_var;  // the other
  int64_t row_len, row_block, column_len, column_block;
};

// One tile [r0, r0 + rows) against all columns. Reducing the predicate over the rows first
// leaves per-column any/all flags, from which each block's any/all follow.
absl::Status ClassifyTile(const cuir::Stmt& table, TensorEnv& env, const TableAxes& axes,
                          int64_t r0, int64_t rows, std::vector<std::pair<int64_t, bool>>* row) {
  const int64_t columns = axes.column_len, block = axes.column_block;
  env.tensors[axes.row_var] = torch::arange(r0, r0 + rows, torch::kLong).view({rows, 1});
  auto pred = EvalTensor(table.value, env);
  if (!pred.ok()) return pred.status();
  if (pred->scalar_type() != torch::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(
        At(table.value->loc), "table ", table.name, ": blocks(...) needs a bool predicate, got ",
        cuir::TypeName(TensorType(*pred))));
  }
  const torch::Tensor full = pred->expand({rows, columns});
  const torch::Tensor any = full.any(0).contiguous();
  const torch::Tensor all = full.all(0).contiguous();
  const bool* any_p = any.data_ptr<bool>();
  const bool* all_p = all.data_ptr<bool>();
  auto is_set = [](bool b) { return b; };
  for (int64_t lo = 0, n = 0; lo < columns; lo += block, ++n) {
    const int64_t hi = std::min(lo + block, columns);
    if (std::any_of(any_p + lo, any_p + hi, is_set)) {
      row->emplace_back(n, std::all_of(all_p + lo, all_p + hi, is_set));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const std::vector<std::pair<int64_t, bool>>*> BlockTable::Row(
    const std::vector<int64_t>& index, const cuir::SourceLoc& loc) const {
  if (index.size() != extents.size()) {
    return absl::InvalidArgumentError(absl::StrCat(At(loc), "table ", name, " is indexed by [",
                                                   absl::StrJoin(axes, ", "), "], got ",
                                                   index.size(), " indices"));
  }
  int64_t flat = 0;
  for (size_t i = 0; i < index.size(); ++i) {
    if (index[i] < 0 || index[i] >= extents[i]) {
      return absl::OutOfRangeError(absl::StrCat(At(loc), "table ", name, " index ", axes[i],
                                                " = ", index[i], " outside [0, ", extents[i],
                                                ")"));
    }
    flat = flat * extents[i] + index[i];
  }
  return &rows[flat];
}

absl::StatusOr<BlockTable> ComputeBlockTable(
    const cuir::Stmt& table, const cuir::Stmt& grid, const std::vector<int64_t>& grid_extents,
    const cuir::ScalarEnv& globals,
    const absl::flat_hash_map<std::string, torch::Tensor>& buffers, int64_t seqlen_q,
    int64_t seqlen_kv) {
  auto block_m = TileParam(globals, "BLOCK_M", table);
  if (!block_m.ok()) return block_m.status();
  auto block_n = TileParam(globals, "BLOCK_N", table);
  if (!block_n.ok()) return block_n.status();

  BlockTable out;
  out.name = table.name;
  for (const std::string& axis : table.names) {
    auto pos = std::find(grid.names.begin(), grid.names.end(), axis);
    if (pos == grid.names.end()) {
      return absl::InvalidArgumentError(absl::StrCat(At(table.loc), "table ", table.name,
                                                     ": `per ", axis, "` is not a grid axis"));
    }
    out.axes.push_back(axis);
    out.extents.push_back(grid_extents[pos - grid.names.begin()]);
  }
  const bool transposed = !table.attr.empty();
  const TableAxes tile = transposed
                             ? TableAxes{"kv_idx", "q_idx", seqlen_kv, *block_n, seqlen_q, *block_m}
                             : TableAxes{"q_idx", "kv_idx", seqlen_q, *block_m, seqlen_kv, *block_n};
  const int64_t m_blocks = (tile.row_len + tile.row_block - 1) / tile.row_block;
  out.axes.push_back(transposed ? "n_block" : "m_block");
  out.extents.push_back(m_blocks);
  int64_t total = 1;
  for (int64_t e : out.extents) total *= e;
  out.rows.resize(total);

  cuir::ScalarEnv scope = globals;
  TensorEnv env;
  env.scalars = &scope;
  env.buffers = buffers;
  env.tensors[tile.column_var] =
      torch::arange(tile.column_len, torch::kLong).view({1, tile.column_len});
  const size_t n_axes = table.names.size();
  for (int64_t flat = 0; flat < total; flat += m_blocks) {
    int64_t rest = flat / m_blocks;
    for (size_t i = n_axes; i-- > 0;) {
      scope.vars[table.names[i]] = rest % out.extents[i];
      rest /= out.extents[i];
    }
    for (int64_t m = 0; m < m_blocks; ++m) {
      const int64_t r0 = m * tile.row_block;
      const int64_t rows = std::min(tile.row_block, tile.row_len - r0);
      if (auto s = ClassifyTile(table, env, tile, r0, rows, &out.rows[flat + m]); !s.ok()) {
        return s;
      }
    }
  }
  return out;
}

}  // namespace cubridge::interp
