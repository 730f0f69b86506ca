// Lower-case hex SHA-256: the spec hash, a lift job's key, a request's fingerprint. Without
// LibTorch, so that the coordinator's own checks can use it.
#pragma once

#include <string>
#include <string_view>

namespace cubridge::spec {

std::string Sha256Hex(std::string_view text);

}  // namespace cubridge::spec
