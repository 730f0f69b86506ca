// Runs a runner child (cubridge-gpu-runner) for one candidate with a time limit. Whatever the
// candidate does (illegal address, trap, infinite loop), the caller gets a result back and lives
// on: a crash or a timeout is a failed candidate with a message saying which.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace cubridge::gpu {

struct IsolateOptions {
  std::string runner;            // empty = RunnerPath()
  double timeout_seconds = 120;  // the child is killed (SIGKILL, whole process group) after this
  std::string work_dir;          // request/result files; must exist
  // Polled while the child runs (every 20 ms); true kills it (the outcome says `stopped`).
  std::function<bool()> should_stop;
  std::string what = "the candidate";  // what the child runs, for messages
};

struct ChildOutcome {
  bool ok = false;          // exit 0 and a readable result
  int exit_code = -1;       // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  bool stopped = false;     // killed because should_stop said so
  double seconds = 0;
  nlohmann::json result;    // the runner's result document (may hold {"ok": false, "error"})
  std::string error;        // one line: why the candidate failed, when it did
  std::string stderr_tail;  // last lines the child printed
};

// $CUBRIDGE_GPU_RUNNER, else cubridge-gpu-runner beside the running executable, else the build
// tree's (CUBRIDGE_GPU_RUNNER_PATH).
std::string RunnerPath();

// Runs `runner MODE [--request FILE] --result FILE`; the request file is written unless `request`
// is null. Errors only for what is wrong on this side (no runner binary, unwritable work dir); a
// failing child is an outcome.
absl::StatusOr<ChildOutcome> RunChild(const std::string& mode, const nlohmann::json& request,
                                      const IsolateOptions& options);

}  // namespace cubridge::gpu
