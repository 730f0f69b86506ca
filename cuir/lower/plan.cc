#include "cuir/lower/plan.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cubridge::lower {

// Statement equality through cuir::Equal (locations ignored); loops compare their headers only
// when `header_only`.
bool SameStmt(const cuir::Stmt& a, const cuir::Stmt& b, bool header_only) {
  cuir::Program pa, pb;
  pa.stmts.push_back(a);
  pb.stmts.push_back(b);
  if (header_only) {
    pa.stmts[0].body.clear();
    pb.stmts[0].body.clear();
  }
  return cuir::Equal(pa, pb);
}

namespace {

using cuir::Stmt;
using cuir::StmtKind;


absl::Status Unimplemented(const Stmt& s, absl::string_view what, absl::string_view why) {
  return absl::UnimplementedError(absl::StrCat(
      s.loc.known() ? s.loc.ToString() + ": " : "", "the lowering does not know ", what, " (`",
      StmtHeader(s), "`): ", why));
}

// The base statement with the same kind and name, if any.
const Stmt* Counterpart(const std::vector<Stmt>& base, const Stmt& s) {
  for (const Stmt& b : base) {
    if (b.kind == s.kind && b.name == s.name) return &b;
  }
  return nullptr;
}

// Every base statement the expert always executes must still be there.
absl::Status CheckNothingDropped(const std::vector<Stmt>& program, const std::vector<Stmt>& base,
                                 const cuir::SourceLoc& where) {
  for (const Stmt& b : base) {
    if (b.kind == StmtKind::kParam || b.kind == StmtKind::kExpert) continue;
    if (Counterpart(program, b) == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          where.known() ? where.ToString() + ": " : "",
          "the lowering does not know a program without `", StmtHeader(b), "` (",
          b.loc.ToString(), "): every kernel of this expert executes it; keep it"));
    }
  }
  return absl::OkStatus();
}

// A base statement that no region implements must be unchanged.
absl::Status RequireSame(const Stmt& s, const std::vector<Stmt>& base, absl::string_view what) {
  const Stmt* b = Counterpart(base, s);
  if (b != nullptr && SameStmt(s, *b)) return absl::OkStatus();
  if (b == nullptr) {
    return Unimplemented(s, what, "the expert kernel has no code for it (no region implements it)");
  }
  return Unimplemented(s, what,
                       absl::StrCat("the expert kernel hard-codes `", StmtHeader(*b), "` (",
                                    b->loc.ToString(), "); no region lets it change"));
}

class Matcher {
 public:
  Matcher(const cuir::Program& program, const cuir::Program& base)
      : program_(program), base_(base) {}

  absl::StatusOr<LoweringPlan> Run() {
    plan_.backward = cuir::IsBackward(program_);
    for (const Stmt& s : program_.stmts) {
      if (auto st = TopLevel(s); !st.ok()) return st;
    }
    MergeParams();
    if (auto st = CheckNothingDropped(program_.stmts, base_.stmts, program_.loc); !st.ok()) {
      return st;
    }
    return plan_;
  }

 private:
  absl::Status TopLevel(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::kExpert:
      case StmtKind::kParam: return absl::OkStatus();
      case StmtKind::kConst: plan_.consts.push_back(&s); return absl::OkStatus();
      case StmtKind::kBuffer:
        plan_.buffers.push_back(&s);
        return absl::OkStatus();
      case StmtKind::kTable: plan_.tables.push_back(&s); return absl::OkStatus();
      case StmtKind::kGrid:
        plan_.grid = &s;
        return RequireSame(s, base_.stmts, "this grid");
      case StmtKind::kRole: return RequireSame(s, base_.stmts, absl::StrCat("role `", s.name, "`"));
      case StmtKind::kLet: return TopLet(s);
      case StmtKind::kLoad:
      case StmtKind::kSoftmaxInit:
      case StmtKind::kDelta:
      case StmtKind::kGradInit:
      case StmtKind::kGradEpilogue:
        return RequireSame(s, base_.stmts, absl::StrCat("this `", cuir::StmtKindName(s.kind), "`"));
      case StmtKind::kEpilogue: return Epilogue(s);
      case StmtKind::kFor: return Loop(s);
      default: break;
    }
    return Unimplemented(s, absl::StrCat("a top-level `", cuir::StmtKindName(s.kind), "`"),
                         "the expert runs it only inside its KV loop");
  }

  // The expert's epilogue is fixed; its optional sink has a region of its own (epilogue_sink),
  // which folds the sink into the softmax statistics before the epilogue normalises.
  absl::Status Epilogue(const Stmt& s) {
    Stmt without_sink = s;
    without_sink.value = nullptr;
    if (auto st = RequireSame(without_sink, base_.stmts, "this `epilogue`"); !st.ok()) return st;
    if (s.value != nullptr) plan_.sink = &s;
    return absl::OkStatus();
  }

  absl::Status TopLet(const Stmt& s) {
    const Stmt* b = Counterpart(base_.stmts, s);
    if (s.name == kHeadMapLet) {
      plan_.head_map = &s;
      plan_.head_map_changed = b == nullptr || !SameStmt(s, *b);
      return absl::OkStatus();
    }
    if (b == nullptr) {
      plan_.program_lets.push_back(&s);
      return absl::OkStatus();
    }
    return RequireSame(s, base_.stmts, absl::StrCat("a change of `let ", s.name, "`"));
  }

  absl::Status Loop(const Stmt& s) {
    const Stmt* b = cuir::FindKvLoop(base_);
    if (b == nullptr) return Unimplemented(s, "a KV loop", "the expert's base program has none");
    if (plan_.loop != nullptr) {
      return Unimplemented(s, "a second KV loop", "the expert has one KV loop");
    }
    plan_.loop = &s;
    if (b->name != s.name) {
      return Unimplemented(s, absl::StrCat("KV loop variable `", s.name, "`"),
                           absl::StrCat("the expert's loop variable is `", b->name, "`"));
    }
    const bool same_pipeline = (s.pipeline == nullptr && b->pipeline == nullptr) ||
                               (s.pipeline && b->pipeline && cuir::Equal(s.pipeline, b->pipeline));
    if (!same_pipeline) {
      return Unimplemented(s, "a different pipeline depth",
                           "the expert's pipeline depth is fixed by its params");
    }
    if (s.split != b->split) {
      return Unimplemented(s, "a different `split`",
                           absl::StrCat("the expert's tail split is fixed by its scheduler; ",
                                        b->split ? "add" : "drop", " `split` as in its base loop `",
                                        StmtHeader(*b), "`"));
    }
    plan_.table_loop = !s.table.empty();
    plan_.range_changed = plan_.table_loop || !SameStmt(s, *b, /*header_only=*/true);
    for (const Stmt& inner : s.body) {
      if (auto st = LoopBody(inner, b->body); !st.ok()) return st;
    }
    return CheckNothingDropped(s.body, b->body, s.loc);
  }

  absl::Status LoopBody(const Stmt& s, const std::vector<Stmt>& base_body) {
    switch (s.kind) {
      case StmtKind::kLet:
        if (Counterpart(base_body, s) == nullptr) {
          plan_.block_lets.push_back(&s);
          return absl::OkStatus();
        }
        return RequireSame(s, base_body, absl::StrCat("a change of `let ", s.name, "`"));
      case StmtKind::kQK: return Qk(s, base_body);
      case StmtKind::kScoreMod:
      case StmtKind::kMask: return ScoreStage(s);
      case StmtKind::kLoad:
      case StmtKind::kPV:
      case StmtKind::kDV:
      case StmtKind::kDP:
      case StmtKind::kSoftmaxGrad:
      case StmtKind::kDK:
      case StmtKind::kDQ:
        return RequireSame(s, base_body, absl::StrCat("this `", cuir::StmtKindName(s.kind), "`"));
      case StmtKind::kSoftmaxOnline:
      case StmtKind::kSoftmaxRecompute:
        softmax_seen_ = true;
        return RequireSame(s, base_body, absl::StrCat("this `", cuir::StmtKindName(s.kind), "`"));
      case StmtKind::kScoreGrad:
        plan_.score_grad = &s;  // the validator allows one per dS, and the expert has one dS
        return absl::OkStatus();
      case StmtKind::kBufferGrad:
        plan_.buffer_grads.push_back(&s);
        return absl::OkStatus();
      default: break;
    }
    return Unimplemented(s, absl::StrCat("a `", cuir::StmtKindName(s.kind), "` in the KV loop"),
                         "the expert's loop body has no place for it");
  }

  absl::Status Qk(const Stmt& s, const std::vector<Stmt>& base_body) {
    const Stmt* b = Counterpart(base_body, s);
    if (b == nullptr || b->operands != s.operands) {
      return Unimplemented(s, "this `qk`", "the expert multiplies its Q tile by the loaded K");
    }
    plan_.qk = &s;
    plan_.scale_changed = !cuir::Equal(s.value, b->value);
    return absl::OkStatus();
  }

  // score_mod and mask run on the scores between qk and softmax.online; a score_mod after a mask
  // would see -inf where the expert's mask region (which runs last) has not written it yet.
  absl::Status ScoreStage(const Stmt& s) {
    if (plan_.qk == nullptr || softmax_seen_) {
      return Unimplemented(s, absl::StrCat("a `", cuir::StmtKindName(s.kind), "` there"),
                           "the expert applies score_mod and mask between qk and the softmax");
    }
    if (s.kind == StmtKind::kMask) {
      plan_.masks.push_back(&s);
    } else if (!plan_.masks.empty()) {
      return Unimplemented(s, "a score_mod after a mask",
                           "the expert applies every score_mod before the masks");
    } else {
      plan_.score_mods.push_back(&s);
    }
    return absl::OkStatus();
  }

  void MergeParams() {
    for (const Stmt& b : base_.stmts) {
      if (b.kind != StmtKind::kParam) continue;
      const Stmt* p = Counterpart(program_.stmts, b);
      plan_.params.push_back(p != nullptr ? p : &b);
      if (p != nullptr && !SameStmt(*p, b)) plan_.params_changed = true;
    }
    for (const Stmt& p : program_.stmts) {
      if (p.kind == StmtKind::kParam && Counterpart(base_.stmts, p) == nullptr) {
        plan_.params.push_back(&p);
        plan_.params_changed = true;
      }
    }
  }

  const cuir::Program& program_;
  const cuir::Program& base_;
  LoweringPlan plan_;
  bool softmax_seen_ = false;
};

}  // namespace

absl::StatusOr<LoweringPlan> MatchToBase(const cuir::Program& program, const cuir::Program& base) {
  return Matcher(program, base).Run();
}

std::string StmtHeader(const Stmt& s) {
  cuir::Program p;
  p.stmts.push_back(s);
  p.stmts[0].body.clear();
  // Printed as "cuir 1", "kernel K {", the statement, ...: the statement's first line is third.
  std::vector<std::string> lines = absl::StrSplit(cuir::PrintProgram(p), '\n');
  if (lines.size() < 3) return cuir::StmtKindName(s.kind);
  absl::string_view line = absl::StripAsciiWhitespace(lines[2]);
  if (s.kind == StmtKind::kFor) absl::ConsumeSuffix(&line, " {");
  return std::string(line);
}

}  // namespace cubridge::lower
