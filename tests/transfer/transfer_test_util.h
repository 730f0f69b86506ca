// Shared helpers of the transfer tests: the base program, specs from text, and a brute-force
// block simulator that checks a transformed program's KV iteration against the mask element by
// element.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "cuir/ir/program.h"
#include "cuir/transfer/transfer.h"

namespace cubridge::transfer::testing {

// cuir/experts/fa2_sm80/base.cuir (base_bwd.cuir when `backward`), parsed (aborts the test on
// failure).
cuir::Program LoadBase(bool backward = false);
cuir::ExprPtr E(const std::string& text, const std::string& file = "");

struct IntConst {
  std::string name;
  int64_t value;
};
VariantSpec MaskSpec(const std::string& mask, const std::vector<IntConst>& consts = {});

// Transfer on the base program (default config: MHA), or on the backward base.
absl::StatusOr<TransferResult> TransferOnBase(const VariantSpec& spec,
                                              const cuir::AttentionConfig& config = {},
                                              bool backward = false);
bool Applied(const TransferResult& r, const std::string& rule);

// The program validates and survives PrintProgram / ParseProgram unchanged.
void ExpectValidRoundTrip(const cuir::Program& p);

// The statements of the KV loop body of `kind`, in order.
std::vector<const cuir::Stmt*> LoopStmts(const cuir::Program& p, cuir::StmtKind kind);
const cuir::Stmt& KvLoop(const cuir::Program& p);

// Sizes of one simulated launch.
struct SimShape {
  int64_t seqlen_q = 16, seqlen_kv = 16;
  int64_t block_m = 4, block_n = 4;
  int64_t batch = 1, heads = 1;
  absl::flat_hash_map<std::string, std::vector<int64_t>> buffers;
};

// The truth: is element (b, h, q, kv) kept by the spec's mask.
using MaskOracle = std::function<bool(int64_t b, int64_t h, int64_t q, int64_t kv)>;

// Evaluates `mask` (consts bound) on every element once, for reuse across block sizes.
absl::StatusOr<MaskOracle> DenseOracle(const cuir::ExprPtr& mask, const VariantSpec& spec,
                                       const SimShape& shape);

struct BlockStats {
  int64_t visited = 0;                  // (program, n_block) pairs the loop entered
  int64_t visited_empty = 0;            // ... of which hold no kept element (wasted work)
  int64_t kept_everywhere = 0;          // visited blocks whose elements are all kept
  int64_t skipped_full = 0;             // visited blocks where the mask was skipped (claimed full)
  std::vector<std::string> violations;  // soundness failures, described
};

// Runs the program's grid, lets, loop and `mask ... when` conditions with scalar evaluation, and
// compares every (m_block, n_block) with the oracle: a block the loop does not visit must hold no
// kept element, a visited block whose mask is skipped must be kept everywhere, visited blocks
// must be inside [0, cdiv(seqlen_kv, BLOCK_N)) and visited once. Table loops are fed from
// tables computed as the CuIR semantics define them. A backward program (cuir::IsBackward) is
// checked transposed: its K tile's walk over query blocks, inside [0, cdiv(seqlen_q, BLOCK_M)).
absl::StatusOr<BlockStats> SimulateBlocks(const cuir::Program& p, const SimShape& shape,
                                          const MaskOracle& mask);

// Sums of BlockStats over many launches, for the tightness reports.
struct Totals {
  int64_t visited = 0, empty = 0, kept_everywhere = 0, skipped_full = 0;
  void Add(const BlockStats& s);
  void Add(const Totals& t);
  // "E/V visited blocks empty; mask skipped on S of K all-kept blocks".
  std::string Report() const;
};

struct SeqShape {
  int64_t sq, skv;
};
// Builds the launch for given lengths (buffers sized to them, heads, batch); block sizes are
// filled in by CheckBlocksSound.
using ShapeMaker = std::function<SimShape(int64_t seqlen_q, int64_t seqlen_kv)>;
SimShape PlainShape(int64_t seqlen_q, int64_t seqlen_kv);

// Simulates `p` for every shape and every BLOCK_M, BLOCK_N in {1, 2, 4, 8, 16} against the spec's
// mask; the first soundness violation fails the test (with the program and the launch).
void CheckBlocksSound(const cuir::Program& p, const VariantSpec& spec, const std::string& label,
                      const std::vector<SeqShape>& shapes, const ShapeMaker& make, Totals* totals);

// Random and/or/not trees of int comparisons over q_idx and kv_idx: affine sides with small
// coefficients, now and then under //, min or abs. `rich` adds shapes the analysis may decline
// (cdiv, max, select on a row condition, products of positions, %).
class RandomMask {
 public:
  RandomMask(uint32_t seed, bool rich) : rng_(seed), rich_(rich) {}
  cuir::ExprPtr Tree(int depth);
  cuir::ExprPtr Atom();
  cuir::ExprPtr Side();

 private:
  int Pick(int n);
  cuir::ExprPtr Term(const char* var, int64_t coef);
  cuir::ExprPtr Affine();

  std::mt19937 rng_;
  bool rich_;
};

}  // namespace cubridge::transfer::testing
