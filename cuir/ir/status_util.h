// Statuses passed up through the layers: each layer names itself in the message, and the code
// and payloads (what kind of failure it is, which callers branch on) stay as they were.
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace cubridge::cuir {

// "<prefix>: <message>" with `s`'s code and payloads; OK stays OK.
inline absl::Status Prefixed(absl::string_view prefix, const absl::Status& s) {
  if (s.ok()) return s;
  absl::Status out(s.code(), absl::StrCat(prefix, ": ", s.message()));
  s.ForEachPayload([&](absl::string_view url, const absl::Cord& value) { out.SetPayload(url, value); });
  return out;
}

}  // namespace cubridge::cuir
