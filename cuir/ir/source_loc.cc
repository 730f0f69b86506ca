#include "cuir/ir/source_loc.h"

#include "absl/strings/str_cat.h"

namespace cubridge::cuir {

std::string SourceLoc::ToString() const {
  if (!known()) return "<unknown>";
  std::string pos = absl::StrCat(line, ":", col);
  return file.empty() ? pos : absl::StrCat(file, ":", pos);
}

}  // namespace cubridge::cuir
