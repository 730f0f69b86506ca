#include "cuir/interp/block_table.h"

#include <algorithm>

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

// One query tile [q0, q0 + rows) against all KV columns. Reducing the predicate over the rows
// first leaves per-column any/all flags, from which each block's any/all follow.
absl::Status ClassifyQueryTile(const cuir::Stmt& table, TensorEnv& env, int64_t q0, int64_t rows,
                               int64_t seqlen_kv, int64_t block_n,
                               std::vector<std::pair<int64_t, bool>>* row) {
  env.tensors["q_idx"] = torch::arange(q0, q0 + rows, torch::kLong).view({rows, 1});
  auto pred = EvalTensor(table.value, env);
  if (!pred.ok()) return pred.status();
  if (pred->scalar_type() != torch::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(
        At(table.value->loc), "table ", table.name, ": blocks(...) needs a bool predicate, got ",
        cuir::TypeName(TensorType(*pred))));
  }
  const torch::Tensor full = pred->expand({rows, seqlen_kv});
  const torch::Tensor any = full.any(0).contiguous();
  const torch::Tensor all = full.all(0).contiguous();
  const bool* any_p = any.data_ptr<bool>();
  const bool* all_p = all.data_ptr<bool>();
  auto is_set = [](bool b) { return b; };
  for (int64_t lo = 0, n = 0; lo < seqlen_kv; lo += block_n, ++n) {
    const int64_t hi = std::min(lo + block_n, seqlen_kv);
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
  const int64_t m_blocks = (seqlen_q + *block_m - 1) / *block_m;
  out.axes.push_back("m_block");
  out.extents.push_back(m_blocks);
  int64_t total = 1;
  for (int64_t e : out.extents) total *= e;
  out.rows.resize(total);

  cuir::ScalarEnv scope = globals;
  TensorEnv env;
  env.scalars = &scope;
  env.buffers = buffers;
  env.tensors["kv_idx"] = torch::arange(seqlen_kv, torch::kLong).view({1, seqlen_kv});
  const size_t n_axes = table.names.size();
  for (int64_t flat = 0; flat < total; flat += m_blocks) {
    int64_t rest = flat / m_blocks;
    for (size_t i = n_axes; i-- > 0;) {
      scope.vars[table.names[i]] = rest % out.extents[i];
      rest /= out.extents[i];
    }
    for (int64_t m = 0; m < m_blocks; ++m) {
      const int64_t q0 = m * *block_m;
      const int64_t rows = std::min(*block_m, seqlen_q - q0);
      if (auto s = ClassifyQueryTile(table, env, q0, rows, seqlen_kv, *block_n,
                                     &out.rows[flat + m]);
          !s.ok()) {
        return s;
      }
    }
  }
  return out;
}

}  // namespace cubridge::interp
