// Early return on an error Status, for the whole code base (one copy, not one per layer).
//   CUBRIDGE_RETURN_IF_ERROR(DoThing());
//   CUBRIDGE_ASSIGN_OR_RETURN(auto value, MakeValue());   // lhs is a declaration or an lvalue
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CUBRIDGE_STATUS_CONCAT_INNER(a, b) a##b
#define CUBRIDGE_STATUS_CONCAT(a, b) CUBRIDGE_STATUS_CONCAT_INNER(a, b)

#define CUBRIDGE_RETURN_IF_ERROR(expr)                         \
  do {                                                         \
    if (absl::Status _cubridge_status = (expr); !_cubridge_status.ok()) { \
      return _cubridge_status;                                 \
    }                                                          \
  } while (0)

#define CUBRIDGE_ASSIGN_OR_RETURN(lhs, expr) \
  CUBRIDGE_ASSIGN_OR_RETURN_IMPL(CUBRIDGE_STATUS_CONCAT(_cubridge_statusor_, __LINE__), lhs, expr)
#define CUBRIDGE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = *std::move(tmp)
