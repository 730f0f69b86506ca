#include "tests/transfer/transfer_test_util.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cuir/ir/eval.h"
#include "gtest/gtest.h"

namespace cubridge::transfer::testing {
namespace {

using cuir::ExprPtr;
using cuir::Program;
using cuir::ScalarEnv;
using cuir::Stmt;
using cuir::StmtKind;

#define SIM_ASSIGN(lhs, expr)                   \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::StatusOr<ScalarEnv> LaunchEnv(const Program& p, const SimShape& s) {
  ScalarEnv env;
  env.vars = {{"batch", s.batch},        {"heads_q", s.heads},     {"heads_kv", s.heads},
              {"head_dim", int64_t{64}}, {"seqlen_q", s.seqlen_q}, {"seqlen_kv", s.seqlen_kv},
              {"softmax_scale", 0.125}};
  for (const auto& [name, ints] : s.buffers) env.buffers[name] = cuir::BufferData::Ints(ints);
  for (const Stmt& st : p.stmts) {
    if (st.kind != StmtKind::kParam && st.kind != StmtKind::kConst) continue;
    if (st.name == "BLOCK_M") {
      env.vars[st.name] = s.block_m;
    } else if (st.name == "BLOCK_N") {
      env.vars[st.name] = s.block_n;
    } else {
      SIM_ASSIGN(v, cuir::EvalScalar(st.value, env));
      env.vars[st.name] = v;
    }
  }
  return env;
}

absl::Status EvalLets(const std::vector<Stmt>& stmts, ScalarEnv* env) {
  for (const Stmt& st : stmts) {
    if (st.kind == StmtKind::kFor) break;
    if (st.kind != StmtKind::kLet) continue;
    SIM_ASSIGN(v, cuir::EvalScalar(st.value, *env));
    env->vars[st.name] = v;
  }
  return absl::OkStatus();
}

// Calls fn(values) for every point of the box [0, extents[0]) x [0, extents[1]) x ...
template <typename Fn>
absl::Status ForEachPoint(const std::vector<int64_t>& extents, Fn fn) {
  std::vector<int64_t> point(extents.size(), 0);
  for (int64_t e : extents) {
    if (e <= 0) return absl::OkStatus();
  }
  while (true) {
    if (absl::Status s = fn(point); !s.ok()) return s;
    size_t i = 0;
    while (i < point.size() && ++point[i] == extents[i]) point[i++] = 0;
    if (i == point.size()) return absl::OkStatus();
  }
}

struct Grid {
  std::vector<std::string> axes;
  std::vector<int64_t> extents;
};

absl::StatusOr<Grid> EvalGrid(const Program& p, const ScalarEnv& env) {
  const Stmt* g = cuir::FindDecl(p, StmtKind::kGrid);
  if (!g) return absl::InvalidArgumentError("no grid");
  Grid grid{g->names, {}};
  for (const ExprPtr& e : g->exprs) {
    SIM_ASSIGN(v, cuir::EvalInt(e, env));
    grid.extents.push_back(v);
  }
  return grid;
}

using TableRow = std::vector<std::pair<int64_t, bool>>;
using Table = std::map<std::vector<int64_t>, TableRow>;

// The table semantics of docs/cuir.md: per listed axes and Q tile, the non-empty KV blocks in
// ascending order with their full flag; transposed, per K tile the non-empty query blocks.
absl::StatusOr<Table> ComputeTable(const Stmt& t, const Grid& grid, const ScalarEnv& env,
                                   const SimShape& s) {
  const bool transposed = !t.attr.empty();
  std::vector<int64_t> extents;
  for (const std::string& axis : t.names) {
    size_t i = std::find(grid.axes.begin(), grid.axes.end(), axis) - grid.axes.begin();
    if (i == grid.axes.size()) return absl::InvalidArgumentError("table axis not in grid");
    extents.push_back(grid.extents[i]);
  }
  Table table;
  absl::Status st = ForEachPoint(extents, [&](const std::vector<int64_t>& pt) -> absl::Status {
    ScalarEnv e = env;
    for (size_t i = 0; i < pt.size(); ++i) e.vars[t.names[i]] = pt[i];
    for (int64_t m = 0; m < CeilDiv(s.seqlen_q, s.block_m); ++m) {
      for (int64_t n = 0; n < CeilDiv(s.seqlen_kv, s.block_n); ++n) {
        std::vector<int64_t> key = pt;
        key.push_back(transposed ? n : m);
        TableRow& row = table[key];
        bool any = false, all = true;
        for (int64_t q = m * s.block_m; q < std::min((m + 1) * s.block_m, s.seqlen_q); ++q) {
          for (int64_t kv = n * s.block_n; kv < std::min((n + 1) * s.block_n, s.seqlen_kv); ++kv) {
            e.vars["q_idx"] = q;
            e.vars["kv_idx"] = kv;
            SIM_ASSIGN(keep, cuir::EvalBool(t.value, e));
            any |= keep;
            all &= keep;
          }
        }
        if (any) row.emplace_back(transposed ? m : n, all);
      }
    }
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  return table;
}

// Visited blocks of one program: n_block -> full flag from a table (false for range loops).
absl::StatusOr<std::map<int64_t, bool>> VisitedBlocks(const Stmt& loop, const ScalarEnv& env,
                                                      const std::map<std::string, Table>& tables,
                                                      BlockStats* stats) {
  std::map<int64_t, bool> visited;
  if (loop.table.empty()) {
    for (const cuir::BlockRange& r : loop.ranges) {
      SIM_ASSIGN(lo, cuir::EvalInt(r.lo, env));
      SIM_ASSIGN(hi, cuir::EvalInt(r.hi, env));
      for (int64_t n = lo; n < hi; ++n) visited[n] = false;
    }
    return visited;
  }
  std::vector<int64_t> key;
  for (const ExprPtr& e : loop.exprs) {
    SIM_ASSIGN(v, cuir::EvalInt(e, env));
    key.push_back(v);
  }
  auto t = tables.find(loop.table);
  if (t == tables.end()) return absl::InvalidArgumentError("unknown table " + loop.table);
  auto row = t->second.find(key);
  if (row == t->second.end()) return visited;
  for (auto [n, full] : row->second) {
    if (visited.count(n)) stats->violations.push_back(absl::StrCat("table lists ", n, " twice"));
    visited[n] = full;
  }
  return visited;
}

struct Tile {
  int64_t b, h, q_lo, q_hi, kv_lo, kv_hi;
};

// Which tile a program keeps and which its loop walks: a forward keeps a Q tile and walks KV
// blocks, a backward keeps a K tile and walks query blocks.
struct Walk {
  bool backward = false;
  const char* own = "q";     // the top-level load's tensor
  const char* walked = "k";  // the loop body's load checked against each block
  int64_t block = 0, len = 0;  // the walked blocks' size and the walked sequence's length
  const char* range = "[0, cdiv(seqlen_kv, BLOCK_N))";
};

Walk WalkOf(const Program& p, const SimShape& s) {
  if (!cuir::IsBackward(p)) return Walk{false, "q", "k", s.block_n, s.seqlen_kv};
  return Walk{true, "k", "q", s.block_m, s.seqlen_q, "[0, cdiv(seqlen_q, BLOCK_M))"};
}

void Classify(const Tile& t, const MaskOracle& mask, bool* any, bool* all) {
  *any = false;
  *all = true;
  for (int64_t q = t.q_lo; q < t.q_hi; ++q) {
    for (int64_t kv = t.kv_lo; kv < t.kv_hi; ++kv) {
      bool keep = mask(t.b, t.h, q, kv);
      *any |= keep;
      *all &= keep;
    }
  }
}

// The mask is skipped for this block when every `mask` statement's `when` is false.
absl::StatusOr<bool> MaskSkipped(const Stmt& loop, const ScalarEnv& env) {
  bool skipped = true;
  for (const Stmt& st : loop.body) {
    if (st.kind != StmtKind::kMask) continue;
    if (!st.aux) return false;
    SIM_ASSIGN(cond, cuir::EvalBool(st.aux, env));
    skipped &= !cond;
  }
  return skipped;
}

void Violation(BlockStats* stats, const std::string& what, const Tile& t, int64_t n) {
  if (stats->violations.size() >= 8) return;
  stats->violations.push_back(absl::StrCat(what, ": b=", t.b, " h=", t.h, " rows [", t.q_lo, ", ",
                                           t.q_hi, ") kv rows [", t.kv_lo, ", ", t.kv_hi,
                                           ") block=", n));
}

absl::Status CheckBlock(const Stmt& loop, const ScalarEnv& program_env, Tile t, int64_t n,
                        bool visited, bool table_full, const Walk& w, const MaskOracle& mask,
                        BlockStats* stats) {
  int64_t& lo_of_walk = w.backward ? t.q_lo : t.kv_lo;
  int64_t& hi_of_walk = w.backward ? t.q_hi : t.kv_hi;
  lo_of_walk = n * w.block;
  hi_of_walk = std::min(lo_of_walk + w.block, w.len);
  bool any = false, all = true;
  Classify(t, mask, &any, &all);
  if (!visited) {
    if (any) Violation(stats, "skipped block holds kept elements", t, n);
    return absl::OkStatus();
  }
  ++stats->visited;
  if (!any) ++stats->visited_empty;
  if (all) ++stats->kept_everywhere;
  ScalarEnv env = program_env;
  env.vars[loop.name] = n;
  if (!loop.full_var.empty()) env.vars[loop.full_var] = table_full;
  if (absl::Status st = EvalLets(loop.body, &env); !st.ok()) return st;
  for (const Stmt& st : loop.body) {
    if (st.kind != StmtKind::kLoad || st.operands[0] != w.walked) continue;
    SIM_ASSIGN(lo, cuir::EvalInt(st.exprs[2], env));
    SIM_ASSIGN(hi, cuir::EvalInt(st.exprs[3], env));
    if (lo != lo_of_walk || hi != hi_of_walk) {
      Violation(stats, absl::StrCat(w.walked, " tile is not the block"), t, n);
    }
  }
  SIM_ASSIGN(skipped, MaskSkipped(loop, env));
  if (skipped) ++stats->skipped_full;
  if (skipped && !all) Violation(stats, "mask skipped on a block with masked elements", t, n);
  return absl::OkStatus();
}

}  // namespace

Program LoadBase(bool backward) {
  std::string path = std::string(CUBRIDGE_SOURCE_ROOT) + "/cuir/experts/fa2_sm80/" +
                     (backward ? "base_bwd.cuir" : "base.cuir");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<Program> p = cuir::ParseProgram(text.str(), path);
  if (!p.ok()) {
    ADD_FAILURE() << p.status();
    return Program{};
  }
  return *std::move(p);
}

ExprPtr E(const std::string& text, const std::string& file) {
  absl::StatusOr<ExprPtr> e = cuir::ParseExpr(text, file);
  if (!e.ok()) {
    ADD_FAILURE() << text << ": " << e.status();
    return cuir::BoolLit(false);
  }
  return *e;
}

VariantSpec MaskSpec(const std::string& mask, const std::vector<IntConst>& consts) {
  VariantSpec spec;
  spec.mask = E(mask);
  spec.mask_loc = cuir::SourceLoc{"variant.py", 3, 1};
  for (const IntConst& c : consts) {
    spec.consts.push_back({c.name, cuir::Type::kInt, cuir::IntLit(c.value), {}});
  }
  return spec;
}

absl::StatusOr<TransferResult> TransferOnBase(const VariantSpec& spec,
                                              const cuir::AttentionConfig& config,
                                              bool backward) {
  return Transfer(LoadBase(backward), spec, config);
}

bool Applied(const TransferResult& r, const std::string& rule) {
  return std::any_of(r.applied.begin(), r.applied.end(),
                     [&](const AppliedRule& a) { return a.name == rule; });
}

void ExpectValidRoundTrip(const Program& p) {
  EXPECT_TRUE(cuir::Validate(p).ok()) << cuir::Validate(p) << "\n" << cuir::PrintProgram(p);
  std::string text = cuir::PrintProgram(p);
  absl::StatusOr<Program> again = cuir::ParseProgram(text);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_TRUE(cuir::Equal(*again, p)) << text << "\nreprinted:\n" << cuir::PrintProgram(*again);
}

const Stmt& KvLoop(const Program& p) {
  const Stmt* loop = cuir::FindKvLoop(p);
  if (!loop) {
    ADD_FAILURE() << "no KV loop";
    static const Stmt empty{};
    return empty;
  }
  return *loop;
}

std::vector<const Stmt*> LoopStmts(const Program& p, StmtKind kind) {
  std::vector<const Stmt*> out;
  for (const Stmt& s : KvLoop(p).body) {
    if (s.kind == kind) out.push_back(&s);
  }
  return out;
}

absl::StatusOr<MaskOracle> DenseOracle(const ExprPtr& mask, const VariantSpec& spec,
                                       const SimShape& s) {
  ScalarEnv env;
  for (const auto& [name, ints] : s.buffers) env.buffers[name] = cuir::BufferData::Ints(ints);
  env.vars = {{"seqlen_q", s.seqlen_q},
              {"seqlen_kv", s.seqlen_kv},
              {"batch", s.batch},
              {"heads_q", s.heads},
              {"heads_kv", s.heads}};
  for (const VariantSpec::Const& c : spec.consts) {
    SIM_ASSIGN(v, cuir::EvalScalar(c.value, env));
    env.vars[c.name] = v;
  }
  auto dense = std::make_shared<std::vector<char>>(s.batch * s.heads * s.seqlen_q * s.seqlen_kv);
  int64_t i = 0;
  absl::Status st = ForEachPoint({s.seqlen_kv, s.seqlen_q, s.heads, s.batch},
                                 [&](const std::vector<int64_t>& pt) -> absl::Status {
                                   env.vars["kv_idx"] = pt[0];
                                   env.vars["q_idx"] = pt[1];
                                   env.vars["h"] = pt[2];
                                   env.vars["b"] = pt[3];
                                   SIM_ASSIGN(keep, cuir::EvalBool(mask, env));
                                   (*dense)[i++] = keep;
                                   return absl::OkStatus();
                                 });
  if (!st.ok()) return st;
  return MaskOracle([dense, s](int64_t b, int64_t h, int64_t q, int64_t kv) {
    return (*dense)[((b * s.heads + h) * s.seqlen_q + q) * s.seqlen_kv + kv] != 0;
  });
}

absl::StatusOr<BlockStats> SimulateBlocks(const Program& p, const SimShape& s,
                                          const MaskOracle& mask) {
  SIM_ASSIGN(env, LaunchEnv(p, s));
  SIM_ASSIGN(grid, EvalGrid(p, env));
  std::map<std::string, Table> tables;
  for (const Stmt& st : p.stmts) {
    if (st.kind != StmtKind::kTable) continue;
    SIM_ASSIGN(table, ComputeTable(st, grid, env, s));
    tables[st.name] = std::move(table);
  }
  const Stmt& loop = KvLoop(p);
  const Walk w = WalkOf(p, s);
  const Stmt* own_load = nullptr;
  const Stmt* q_load = nullptr;  // its batch and head name the mask's b and h
  for (const Stmt& st : p.stmts) {
    if (st.kind == StmtKind::kLoad && st.operands[0] == w.own) own_load = &st;
  }
  for (const Stmt& st : w.backward ? loop.body : p.stmts) {
    if (st.kind == StmtKind::kLoad && st.operands[0] == "q") q_load = &st;
  }
  if (!own_load || !q_load) return absl::InvalidArgumentError("no Q or K load");
  BlockStats stats;
  int64_t n_blocks = CeilDiv(w.len, w.block);
  absl::Status st = ForEachPoint(grid.extents, [&](const std::vector<int64_t>& pt) -> absl::Status {
    ScalarEnv e = env;
    for (size_t i = 0; i < pt.size(); ++i) e.vars[grid.axes[i]] = pt[i];
    if (absl::Status ls = EvalLets(p.stmts, &e); !ls.ok()) return ls;
    Tile t{};
    SIM_ASSIGN(b, cuir::EvalInt(q_load->exprs[0], e));
    SIM_ASSIGN(h, cuir::EvalInt(q_load->exprs[1], e));
    SIM_ASSIGN(lo, cuir::EvalInt(own_load->exprs[2], e));
    SIM_ASSIGN(hi, cuir::EvalInt(own_load->exprs[3], e));
    t.b = b, t.h = h;
    (w.backward ? t.kv_lo : t.q_lo) = lo;
    (w.backward ? t.kv_hi : t.q_hi) = hi;
    SIM_ASSIGN(visited, VisitedBlocks(loop, e, tables, &stats));
    for (auto [n, full] : visited) {
      if (n < 0 || n >= n_blocks) Violation(&stats, absl::StrCat("block outside ", w.range), t, n);
    }
    for (int64_t n = 0; n < n_blocks; ++n) {
      auto it = visited.find(n);
      bool in = it != visited.end();
      absl::Status cs = CheckBlock(loop, e, t, n, in, in && it->second, w, mask, &stats);
      if (!cs.ok()) return cs;
    }
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  return stats;
}

void Totals::Add(const BlockStats& s) {
  visited += s.visited;
  empty += s.visited_empty;
  kept_everywhere += s.kept_everywhere;
  skipped_full += s.skipped_full;
}

void Totals::Add(const Totals& t) {
  visited += t.visited;
  empty += t.empty;
  kept_everywhere += t.kept_everywhere;
  skipped_full += t.skipped_full;
}

std::string Totals::Report() const {
  return absl::StrCat(empty, "/", visited, " visited blocks empty; mask skipped on ", skipped_full,
                      " of ", kept_everywhere, " all-kept blocks");
}

SimShape PlainShape(int64_t seqlen_q, int64_t seqlen_kv) {
  SimShape s;
  s.seqlen_q = seqlen_q;
  s.seqlen_kv = seqlen_kv;
  return s;
}

void CheckBlocksSound(const Program& p, const VariantSpec& spec, const std::string& label,
                      const std::vector<SeqShape>& shapes, const ShapeMaker& make, Totals* totals) {
  static constexpr int64_t kBlocks[] = {1, 2, 4, 8, 16};
  for (SeqShape sh : shapes) {
    SimShape shape = make(sh.sq, sh.skv);
    absl::StatusOr<MaskOracle> oracle = DenseOracle(spec.mask, spec, shape);
    ASSERT_TRUE(oracle.ok()) << label << ": " << oracle.status();
    for (int64_t bm : kBlocks) {
      for (int64_t bn : kBlocks) {
        shape.block_m = bm;
        shape.block_n = bn;
        absl::StatusOr<BlockStats> stats = SimulateBlocks(p, shape, *oracle);
        ASSERT_TRUE(stats.ok()) << label << ": " << stats.status() << "\n" << cuir::PrintProgram(p);
        ASSERT_TRUE(stats->violations.empty())
            << label << " sq=" << sh.sq << " skv=" << sh.skv << " BLOCK_M=" << bm
            << " BLOCK_N=" << bn << ": " << stats->violations[0] << "\n"
            << cuir::PrintProgram(p);
        totals->Add(*stats);
      }
    }
  }
}

int RandomMask::Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

cuir::ExprPtr RandomMask::Tree(int depth) {
  if (depth == 0 || Pick(3) == 0) return Atom();
  int op = Pick(5);
  if (op == 0) return cuir::Unary(cuir::UnaryOp::kNot, Tree(depth - 1));
  cuir::BinaryOp bop = op % 2 ? cuir::BinaryOp::kAnd : cuir::BinaryOp::kOr;
  return cuir::Binary(bop, Tree(depth - 1), Tree(depth - 1));
}

cuir::ExprPtr RandomMask::Term(const char* var, int64_t coef) {
  cuir::ExprPtr v = cuir::Var(var);
  if (coef == 1) return v;
  if (coef == -1) return cuir::Unary(cuir::UnaryOp::kNeg, v);
  return cuir::Binary(cuir::BinaryOp::kMul, cuir::IntLit(coef), v);
}

cuir::ExprPtr RandomMask::Affine() {
  cuir::ExprPtr e =
      cuir::Binary(cuir::BinaryOp::kAdd, Term("q_idx", Pick(5) - 2), Term("kv_idx", Pick(5) - 2));
  return cuir::Binary(cuir::BinaryOp::kSub, e, cuir::IntLit(Pick(21) - 10));
}

cuir::ExprPtr RandomMask::Side() {
  using cuir::BinaryOp;
  cuir::ExprPtr e = Affine();
  switch (Pick(rich_ ? 11 : 6)) {
    case 0:
      return cuir::Binary(BinaryOp::kFloorDiv, e, cuir::IntLit(Pick(4) + 1));
    case 1:
      return cuir::Binary(BinaryOp::kMin, e, cuir::IntLit(Pick(30)));
    case 2:
      return cuir::Unary(cuir::UnaryOp::kAbs, e);
    case 6:
      return cuir::Binary(BinaryOp::kCdiv, e, cuir::IntLit(Pick(3) + 2));
    case 7:
      return cuir::Binary(BinaryOp::kMax, e, Affine());
    case 8:
      return cuir::Select(cuir::Binary(BinaryOp::kLt, cuir::Var("q_idx"), cuir::IntLit(Pick(9))), e,
                          Affine());
    case 9:
      return cuir::Binary(BinaryOp::kMul, cuir::Var("q_idx"), cuir::Var("kv_idx"));
    case 10:
      return cuir::Binary(BinaryOp::kMod, e, cuir::IntLit(Pick(3) + 2));
    default:
      return e;
  }
}

cuir::ExprPtr RandomMask::Atom() {
  static constexpr cuir::BinaryOp kCmps[] = {cuir::BinaryOp::kLt, cuir::BinaryOp::kLe,
                                             cuir::BinaryOp::kGt, cuir::BinaryOp::kGe,
                                             cuir::BinaryOp::kEq, cuir::BinaryOp::kNe};
  cuir::ExprPtr rhs = rich_ && Pick(2) ? Side() : cuir::IntLit(Pick(31) - 5);
  return cuir::Binary(kCmps[Pick(6)], Side(), rhs);
}

}  // namespace cubridge::transfer::testing
