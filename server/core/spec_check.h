// The spec frontend's part of checking a submit: compile the spec (TorchScript), apply the
// request's parameter overrides, match its buffers, and compute the spec hash the job and the
// kernel cache are keyed by. LibTorch code on untrusted text: the coordinator runs it only in its
// spec-check children (server/core/spec_checker.h), never in its own process.
#pragma once

#include "cubridge/v1/spec_check.pb.h"

namespace cubridge::core {

// Never throws; a refused spec is a response with the status code and the frontend's
// "file:line:col: ..." message.
v1::SpecCheckResponse CheckSpec(const v1::SpecCheckRequest& request);

// The `cubridge-coordinator check-specs --fd N --max-seconds S` child: serves CheckSpec on fd N
// until it closes, ending itself if one check takes longer than S seconds.
int RunSpecCheckChild(int fd, int max_seconds);

}  // namespace cubridge::core
