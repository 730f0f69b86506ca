// C++ identifiers for the symbols the lowering introduces.
//
// A name the transfer added (a const, a buffer, a `let full`, a table) lands in the expert's
// scopes, where it must not shadow one of the expert's own identifiers or collide with a C++
// keyword or a math macro. Such names keep their CuIR spelling when it is free and get a numeric
// suffix otherwise (`c` -> `c_2`).
#pragma once

#include <set>
#include <string>
#include "absl/strings/string_view.h"

namespace cubridge::lower {

// Identifiers that occur in C++ code (comments and string literals skipped).
std::set<std::string> CodeIdentifiers(absl::string_view code);

class Namer {
 public:
  // `taken`: identifiers already used (typically CodeIdentifiers of the expert source); C++
  // keywords and the CUDA / libm names generated code calls are always taken.
  explicit Namer(std::set<std::string> taken);

  // `want` if free, else want_2, want_3, ...; the result is taken from then on.
  std::string Fresh(const std::string& want);
  bool IsTaken(const std::string& name) const { return taken_.count(name) > 0; }

 private:
  std::set<std::string> taken_;
};

}  // namespace cubridge::lower
