// Inside a runner child: load one compiled candidate, check it against the spec's oracle on the
// GPU, and profile it. The parent never runs this itself (see isolate.h).
#pragma once

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "worker/gpu/run_request.h"

namespace cubridge::gpu {

// The result document: {"device", "module", "verification", "passed", "profile"}. A CUDA error
// while the candidate runs (illegal address, launch failure) comes back as a status: the CUDA
// context is unusable afterwards, so the runner reports it and exits.
absl::StatusOr<nlohmann::json> CheckOnGpu(const RunRequest& request);

// {"device": {"name", "arch", "uuid", "ordinal", "memory_bytes", ...} of GPU 0 (the one a
// child uses), "devices": every GPU this process sees, by ordinal}, or why there is none.
absl::StatusOr<nlohmann::json> ProbeJson();

}  // namespace cubridge::gpu
