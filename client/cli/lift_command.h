// `cubridge-cli lift KERNEL.cu --out DIR [config flags] --llm-...`: a language model writes the
// base CuIR program of the user's own attention kernel; it is accepted only when the interpreter
// running it agrees with the kernel compiled and run on this machine's GPU (docs/llm.md).
#pragma once

#include "client/cli/common.h"

namespace cubridge::cli {

// Its one-line help, which cubridge-cli lists too (local_handoff.h).
inline constexpr char kLiftSummary[] =
    "Lift your own CUDA attention kernel into CuIR with an LLM, checked on the GPU";

Command AddLiftCommand(CLI::App& app);

}  // namespace cubridge::cli
