// Runs one task of the service on this machine: the worker side of service/contract/task_contract.h.
// `cubridge-worker run-task` calls this in a child process, so a task that crashes or hangs
// takes only the child down.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cubridge/v1/task.pb.h"
#include "cubridge/v1/worker.pb.h"
#include "cuir/propose/llm_flags.h"

namespace cubridge::workerd {

struct ExecuteOptions {
  double gpu_timeout_seconds = 120;  // per GPU candidate (its runner child)
  std::string work_dir;              // scratch; must exist
  // This worker's LLM endpoint, for llm and hybrid transfers; none: it has none. Flags, not
  // resolved settings: the key is read where it is used, from the file they name or from
  // CUBRIDGE_LLM_API_KEY, so it never travels through a request file.
  std::optional<propose::LlmFlags> llm;
};

// The task's result (the member of its kind), from its payload and the values that came with it.
// Errors are the task's failure; Classify() says whose fault it was
// (a bad spec or a mismatch: the spec's; a candidate that does not lower or compile: the
// candidate's; a missing GPU or an unwritable folder: this machine's, which another worker may
// not share).
// A failure may still have produced something worth keeping (a transfer's LLM transcript and
// token usage): it goes to `partial_result` when that is given, else it stays unset.
absl::StatusOr<v1::TaskResult> ExecuteTask(const v1::Task& task, const ExecuteOptions& options,
                                           const std::function<void(const std::string&)>& progress,
                                           v1::TaskResult* partial_result = nullptr);
v1::FailureClass Classify(const std::string& kind, const absl::Status& status);

}  // namespace cubridge::workerd
