#include "cuir/lower/lift.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cuir/lower/expert.h"
#include "cuir/lower/lower.h"
#include "cuir/lower/plan.h"
#include "cuir/lower/regions.h"

namespace cubridge::lower {
namespace {

// `constexpr int NAME = VALUE;` lines of a region.
absl::StatusOr<std::map<std::string, int64_t>> ConstexprInts(const std::string& body,
                                                             const std::string& where) {
  std::map<std::string, int64_t> out;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || absl::StartsWith(line, "//")) continue;
    if (!absl::ConsumePrefix(&line, "constexpr int ") || !absl::ConsumeSuffix(&line, ";")) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": tile_params holds `", line, "`; only `constexpr int NAME = VALUE;` lines "
          "can be matched with the base program's params"));
    }
    std::vector<std::string> parts = absl::StrSplit(line, '=');
    int64_t value = 0;
    if (parts.size() != 2 ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(parts[1]), &value)) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": cannot read `constexpr int ", line, ";`"));
    }
    out[std::string(absl::StripAsciiWhitespace(parts[0]))] = value;
  }
  return out;
}

}  // namespace

const std::vector<std::string>& KnownRegions() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const RegionKind& r : RegionKinds()) out.push_back(r.name);
    return out;
  }();
  return names;
}

absl::StatusOr<LiftResult> LiftExpert(const std::string& name, bool backward) {
  auto expert = LoadExpert(name, backward);
  if (!expert.ok()) return expert.status();
  if (auto s = cuir::Validate(expert->base); !s.ok()) return s;
  const std::string file = expert->source.filename;
  LiftResult out;
  out.base = expert->base;

  std::vector<std::string> regions;
  for (const Region& r : expert->source.regions) {
    const auto& known = KnownRegions();
    if (std::find(known.begin(), known.end(), r.name) == known.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          file, ": region `", r.name, "` is not one the lowering knows (",
          absl::StrJoin(known, ", "), ")"));
    }
    regions.push_back(r.name);
  }
  for (const char* required : {"abi", "tile_params"}) {
    if (expert->source.Find(required) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(file, ": no `", required, "` region"));
    }
  }
  out.checks.push_back(absl::StrCat(regions.size(), " regions, all known to the lowering"));

  auto tiles = ConstexprInts(expert->source.Body(*expert->source.Find("tile_params")), file);
  if (!tiles.ok()) return tiles.status();
  std::map<std::string, int64_t> params;
  for (const cuir::Stmt& s : expert->base.stmts) {
    if (s.kind != cuir::StmtKind::kParam) continue;
    if (s.value == nullptr || s.value->kind != cuir::ExprKind::kIntLit) {
      return absl::FailedPreconditionError(absl::StrCat(
          s.loc.ToString(), ": param `", s.name, "` needs an int literal default to match ", file));
    }
    params[s.name] = s.value->int_value;
  }
  for (const auto& [param, value] : params) {
    auto it = tiles->find(param);
    if (it == tiles->end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          file, ": tile_params does not declare `", param, "`, which base.cuir declares (= ",
          value, ")"));
    }
    if (it->second != value) {
      return absl::FailedPreconditionError(absl::StrCat(
          file, ": tile_params says ", param, " = ", it->second, " but base.cuir says ", value));
    }
  }
  if (tiles->size() != params.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        file, ": tile_params declares ", tiles->size(), " constants, base.cuir ", params.size(),
        " params; every tile constant must be a param of the base program"));
  }
  out.checks.push_back(absl::StrCat("tile params agree (", params.size(), ")"));

  std::vector<std::string> roles;
  for (const std::string& text : expert->source.lines) {
    absl::string_view line = absl::StripLeadingAsciiWhitespace(text);
    if (absl::ConsumePrefix(&line, "// @cuir-entry ")) {
      roles.push_back(std::string(line.substr(0, line.find(' '))));
    }
  }
  // A backward call runs D's preprocessing before and dQ's conversion after its attention.
  const std::vector<std::string> needed =
      backward ? std::vector<std::string>{"plan", "classify", "compact", "preprocess", "attention",
                                          "postprocess"}
               : std::vector<std::string>{"plan", "classify", "compact", "attention"};
  for (const std::string& role : needed) {
    if (std::find(roles.begin(), roles.end(), role) == roles.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          file, ": no `// @cuir-entry ", role, " NAME` line (the device entry points a "
          "run-time loader needs)"));
    }
  }
  out.checks.push_back(absl::StrCat("device entry points ", absl::StrJoin(needed, ", ")));
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> UserKernelEntries(const std::string& path,
                                                                     const std::string& source) {
  auto entries = DeviceEntries(source);
  for (const char* role : {"plan", "attention"}) {
    if (!entries.count(role)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": no `// @cuir-entry ", role, " NAME` line; a lifted kernel names its plan and "
          "attention entry points (cuir/experts/common/launch_abi.cuh says what each must be)"));
    }
  }
  for (const auto& [role, name] : entries) {
    if (role != "plan" && role != "attention") {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": `@cuir-entry ", role, "`: a lifted kernel has only plan and attention entries"));
    }
  }
  return entries;
}

std::string KernelNameFromPath(const std::string& path) {
  std::string out = std::filesystem::path(path).stem().string();
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "k_" + out;
  return out;
}

namespace {

bool ExpertDeclaration(const cuir::Stmt& s) {
  return s.kind == cuir::StmtKind::kExpert || s.kind == cuir::StmtKind::kParam ||
         s.kind == cuir::StmtKind::kRole || s.kind == cuir::StmtKind::kGrid;
}

std::vector<const cuir::Stmt*> Declarations(const cuir::Program& p, bool expert_ones) {
  std::vector<const cuir::Stmt*> out;
  for (const cuir::Stmt& s : p.stmts) {
    if (ExpertDeclaration(s) == expert_ones) out.push_back(&s);
  }
  return out;
}

// A KV loop's `split` is its expert's (the scheduler that splits tail walks decides it), so
// the bases' bodies compare without it and a moved loop takes the target base's.
bool SameBodyStmt(const cuir::Stmt& a, const cuir::Stmt& b) {
  cuir::Stmt a_unsplit = a, b_unsplit = b;
  a_unsplit.split = b_unsplit.split = false;
  return SameStmt(a_unsplit, b_unsplit);
}

bool LoopSplit(const cuir::Program& p) {
  const cuir::Stmt* loop = cuir::FindKvLoop(p);
  return loop != nullptr && loop->split;
}

}  // namespace

absl::StatusOr<cuir::Program> Rebase(const cuir::Program& program, const cuir::Program& from,
                                     const cuir::Program& to) {
  const auto from_body = Declarations(from, false), to_body = Declarations(to, false);
  bool same_body = from_body.size() == to_body.size();
  for (size_t i = 0; same_body && i < from_body.size(); ++i) {
    same_body = SameBodyStmt(*from_body[i], *to_body[i]);
  }
  if (!same_body) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel `", program.kernel, "` cannot move from base `", from.kernel, "` to base `",
        to.kernel, "`: the two base programs differ beyond their declarations (transfer from the "
        "target expert's base instead)"));
  }
  // The program's expert declarations must be the source base's (a param may carry another
  // value: tiles are chosen per candidate anyway).
  const auto mine = Declarations(program, true), theirs = Declarations(from, true);
  for (const cuir::Stmt* d : mine) {
    const bool known = std::any_of(theirs.begin(), theirs.end(), [&](const cuir::Stmt* b) {
      return b->kind == d->kind && b->name == d->name &&
             (d->kind == cuir::StmtKind::kParam || SameStmt(*b, *d));
    });
    if (!known) {
      return absl::FailedPreconditionError(absl::StrCat(
          d->loc.ToString(), ": kernel `", program.kernel,
          "` changed a declaration of its base (", cuir::StmtKindName(d->kind), " `", d->name,
          "`), so it cannot move to another expert's base"));
    }
  }
  if (const cuir::Stmt* loop = cuir::FindKvLoop(program); loop && loop->split != LoopSplit(from)) {
    return absl::FailedPreconditionError(absl::StrCat(
        loop->loc.ToString(), ": kernel `", program.kernel, "` ", loop->split ? "added" : "dropped",
        " the `split` of its base's KV loop, so it cannot move to another expert's base"));
  }
  cuir::Program out = program;
  out.stmts.clear();
  for (const cuir::Stmt* d : Declarations(to, true)) out.stmts.push_back(*d);
  for (const cuir::Stmt* s : Declarations(program, false)) {
    out.stmts.push_back(*s);
    if (s->kind == cuir::StmtKind::kFor) out.stmts.back().split = LoopSplit(to);
  }
  return out;
}

}  // namespace cubridge::lower
