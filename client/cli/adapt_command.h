// `cubridge-cli adapt SPEC --local [config flags] --arch sm_80|sm_90 --out DIR`: the whole
// pipeline in this process, no service.
#pragma once

#include "client/cli/common.h"

namespace cubridge::cli {

// Its one-line help, which cubridge-cli lists too (local_handoff.h).
inline constexpr char kAdaptSummary[] = "Adapt the expert kernel to an attention variant spec";

Command AddAdaptCommand(CLI::App& app);

}  // namespace cubridge::cli
