// Spec parameters: lookup and the job's `--param name=value` overrides.
#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/spec/spec.h"

namespace cubridge::spec {
namespace {

absl::StatusOr<std::variant<bool, int64_t, double>> ParseValue(Type type, const std::string& text) {
  if (type == Type::kInt) {
    int64_t v = 0;
    if (absl::SimpleAtoi(text, &v)) return v;
  } else if (type == Type::kFloat) {
    double v = 0;
    if (absl::SimpleAtod(text, &v)) return v;
  } else {
    const std::string lower = absl::AsciiStrToLower(text);
    if (lower == "true" || lower == "1") return true;
    if (lower == "false" || lower == "0") return false;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("`", text, "` is not a", type == Type::kInt ? "n " : " ", cuir::TypeName(type),
                   type == Type::kBool ? " (write true or false)" : ""));
}

}  // namespace

const SpecParam* Spec::FindParam(const std::string& name) const {
  for (const SpecParam& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

absl::Status OverrideParams(Spec& spec, const std::vector<std::string>& assignments) {
  for (const std::string& a : assignments) {
    const size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--param `", a, "`: expected NAME=VALUE, e.g. window=128"));
    }
    const std::string name(absl::StripAsciiWhitespace(a.substr(0, eq)));
    const std::string text(absl::StripAsciiWhitespace(a.substr(eq + 1)));
    auto p = std::find_if(spec.params.begin(), spec.params.end(),
                          [&](const SpecParam& q) { return q.name == name; });
    if (p == spec.params.end()) {
      std::vector<std::string> known;
      for (const SpecParam& q : spec.params) {
        known.push_back(absl::StrCat(q.name, ": ", cuir::TypeName(q.type)));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "--param ", a, ": ", spec.path, " has no parameter `", name, "`; ",
          known.empty() ? "it has no parameters" : "its parameters: " + absl::StrJoin(known, ", ")));
    }
    auto v = ParseValue(p->type, text);
    if (!v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--param ", a, ": `", name, "` is ",
                                                     cuir::TypeName(p->type), "; ",
                                                     v.status().message()));
    }
    p->value = *v;
  }
  return absl::OkStatus();
}

}  // namespace cubridge::spec
