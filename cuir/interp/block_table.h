// Block classification tables (`table T = blocks(PRED) per AXES`), computed before the launch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "cuir/ir/eval.h"
#include "cuir/ir/program.h"

namespace cubridge::interp {

struct BlockTable {
  std::string name;
  std::vector<std::string> axes;  // the `per` grid axes, then "m_block" ("n_block" transposed)
  std::vector<int64_t> extents;   // one per entry of `axes`
  // Row-major over `extents`: the non-empty n_blocks of that query tile (transposed: the
  // non-empty m_blocks of that KV tile), ascending, each with its "full" flag (PRED true on
  // every element of the tile).
  std::vector<std::vector<std::pair<int64_t, bool>>> rows;

  // The row at (axis values..., m_block); OUT_OF_RANGE naming the bad index otherwise.
  absl::StatusOr<const std::vector<std::pair<int64_t, bool>>*> Row(
      const std::vector<int64_t>& index, const cuir::SourceLoc& loc) const;
};

// Classifies every (per-axes..., m_block, n_block) tile of the table's predicate. `globals` holds
// builtins, params (BLOCK_M, BLOCK_N) and consts; `buffers` the job's buffer values.
absl::StatusOr<BlockTable> ComputeBlockTable(
    const cuir::Stmt& table, const cuir::Stmt& grid, const std::vector<int64_t>& grid_extents,
    const cuir::ScalarEnv& globals,
    const absl::flat_hash_map<std::string, at::Tensor>& buffers, int64_t seqlen_q,
    int64_t seqlen_kv);

}  // namespace cubridge::interp
