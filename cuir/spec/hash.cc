// The spec hash: the kernel cache key. It identifies what a generated kernel computes, so it is
// taken over the translated expressions (not the file text) with parameter values substituted:
// renaming arguments, comments and formatting keep it; any change in the math changes it.
#include <algorithm>
#include <map>


#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

#include "cuir/spec/spec.h"

namespace cubridge::spec {
namespace {

ExprPtr Literal(const SpecParam& p, const SourceLoc& loc) {
  if (const auto* b = std::get_if<bool>(&p.value)) return cuir::BoolLit(*b, loc);
  if (const auto* i = std::get_if<int64_t>(&p.value)) return cuir::IntLit(*i, loc);
  return cuir::FloatLit(std::get<double>(p.value), loc);
}

// Parameters become their values; buffers are renamed buf0, buf1, ... in order of first use
// (the printed order: left to right, a buffer before its index).
ExprPtr Canonicalize(const ExprPtr& e, const Spec& spec,
                     std::map<std::string, std::string>* buffer_names) {
  if (e == nullptr) return e;
  if (e->kind == cuir::ExprKind::kVar) {
    const SpecParam* p = spec.FindParam(e->name);
    return p ? Literal(*p, e->loc) : e;
  }
  std::string buffer;
  if (e->kind == cuir::ExprKind::kIndex) {
    auto [it, added] = buffer_names->try_emplace(e->name, "");
    if (added) it->second = absl::StrCat("buf", buffer_names->size() - 1);
    buffer = it->second;
  }
  std::vector<ExprPtr> args;  // in order: the numbering depends on it
  for (const ExprPtr& a : e->args) args.push_back(Canonicalize(a, spec, buffer_names));
  switch (e->kind) {
    case cuir::ExprKind::kIndex: return cuir::Index(buffer, std::move(args), e->loc);
    case cuir::ExprKind::kUnary: return cuir::Unary(e->unary_op, args[0], e->loc);
    case cuir::ExprKind::kBinary: return cuir::Binary(e->binary_op, args[0], args[1], e->loc);
    case cuir::ExprKind::kSelect: return cuir::Select(args[0], args[1], args[2], e->loc);
    default: return e;
  }
}


// The config lines every canonical form starts with.
std::string Header(const cuir::AttentionConfig& config, const std::string& ruleset_version) {
  std::string out = absl::StrCat("cubridge-spec 1\nruleset ", ruleset_version, "\n");
  absl::StrAppendFormat(&out, "head_dim %d\ndtype %s\nheads_q %d\nheads_kv %d\nscale %.17g\n",
                        config.head_dim, cuir::DTypeName(config.dtype), config.heads_q,
                        config.heads_kv, config.scale());
  return out;
}

// A reference has no translation to canonicalise: its TorchScript code stands for the math, with
// the parameter values (which the code reads by name) listed after it, so an override counts.
std::string ReferenceForm(const Spec& spec, const cuir::AttentionConfig& config,
                          const std::string& ruleset_version) {
  std::string out = Header(config, ruleset_version);
  absl::StrAppend(&out, "reference\n");
  for (absl::string_view line : absl::StrSplit(spec.reference_code, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, "  ", line, "\n");
  }
  for (const SpecParam& p : spec.params) {
    absl::StrAppend(&out, "param ", p.name, " = ", cuir::PrintExpr(Literal(p, p.loc)), "\n");
  }
  return out;
}

struct Canonical {
  ExprPtr mask, score;
  std::map<std::string, std::string> buffer_names;
};

Canonical CanonicalizeSpec(const Spec& spec) {
  Canonical c;
  c.mask = Canonicalize(spec.mask, spec, &c.buffer_names);
  c.score = Canonicalize(spec.score, spec, &c.buffer_names);
  // Declared but unused buffers still are kernel arguments; they come after the used ones.
  for (const SpecBuffer& b : spec.buffers) {
    c.buffer_names.try_emplace(b.name, absl::StrCat("buf", c.buffer_names.size()));
  }
  return c;
}

}  // namespace

std::map<std::string, std::string> CanonicalBufferNames(const Spec& spec) {
  if (!spec.has_reference) return CanonicalizeSpec(spec).buffer_names;
  // A reference spec's form keeps its code, names included: its buffers are their own names.
  std::map<std::string, std::string> out;
  for (const SpecBuffer& b : spec.buffers) out[b.name] = b.name;
  return out;
}

std::string CanonicalForm(const Spec& spec, const cuir::AttentionConfig& config,
                          const std::string& ruleset_version) {
  if (spec.has_reference) return ReferenceForm(spec, config, ruleset_version);
  const auto [mask, score, buffer_names] = CanonicalizeSpec(spec);
  std::string out = Header(config, ruleset_version);
  absl::StrAppend(&out, "mask ", mask ? cuir::PrintExpr(mask) : "none", "\n");
  absl::StrAppend(&out, "score ", score ? cuir::PrintExpr(score) : "none", "\n");
  // A buffer's dtype and rank shape the kernel (its loads, the element type); its sizes and
  // values are the call's.
  std::vector<std::pair<std::string, const SpecBuffer*>> ordered;
  for (const SpecBuffer& b : spec.buffers) ordered.emplace_back(buffer_names.at(b.name), &b);
  std::sort(ordered.begin(), ordered.end(), [](const auto& x, const auto& y) {
    return x.first.size() != y.first.size() ? x.first.size() < y.first.size() : x.first < y.first;
  });
  absl::StrAppend(&out, "buffers ", buffer_names.size(), "\n");
  for (const auto& [canonical, b] : ordered) {
    absl::StrAppend(&out, "buffer ", canonical, " ", cuir::TensorDTypeName(b->dtype), " ",
                    b->rank < 0 ? std::string("unused") : absl::StrCat("rank ", b->rank), "\n");
  }
  return out;
}

std::string SpecHash(const Spec& spec, const cuir::AttentionConfig& config,
                     const std::string& ruleset_version) {
  return Sha256Hex(CanonicalForm(spec, config, ruleset_version));
}

}  // namespace cubridge::spec
