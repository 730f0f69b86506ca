// The commands that talk to a CuBridge coordinator through the SDK:
//   submit SPEC [config flags] [--arch A ...] [--verification gpu|ir] [--idempotency-key K]
//          [--proposer rules|llm|hybrid] [--watch]
//   status JOB | watch JOB | cancel JOB | get JOB|HASH [--arch A] -o DIR
//   list [--state S] [--limit N] | workers
//   transcript JOB|FILE   (a job's LLM conversation, or a file `adapt --local --transcript` wrote)
// Each takes --address, --token-file, --tls-ca and --json.
//
// Exit codes: 0 ok; 1 the job failed or was cancelled, or something was not found; 2 bad usage
// or a request the coordinator rejected as invalid; 3 coordinator unreachable; 4 not
// authenticated.
#pragma once

#include <vector>

#include "client/cli/common.h"

namespace cubridge::cli {

std::vector<Command> AddServiceCommands(CLI::App& app);

}  // namespace cubridge::cli
