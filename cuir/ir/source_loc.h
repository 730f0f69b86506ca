// Source positions for error messages: every error a user sees names file:line:col.
#pragma once

#include <string>

namespace cubridge::cuir {

struct SourceLoc {
  std::string file;  // empty when unknown or built in code
  int line = 0;      // 1-based; 0 = unknown
  int col = 0;       // 1-based; 0 = unknown

  bool known() const { return line > 0; }
  // "file:line:col", or "line:col" without a file, or "<unknown>".
  std::string ToString() const;
};

}  // namespace cubridge::cuir
