// Runs one task of the service on this machine: the worker side of server/core/task_contract.h.
// `cubridge-worker run-task` calls this in a child process, so a task that crashes or hangs
// takes only the child down.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace cubridge::workerd {

struct ExecuteOptions {
  double gpu_timeout_seconds = 120;  // per GPU candidate (its runner child)
  std::string work_dir;              // scratch; must exist
};

// The task's result document. Errors are the task's failure; Retryable() says whether another
// attempt could succeed (a bad spec or a mismatch cannot; a missing GPU or a crash can).
absl::StatusOr<nlohmann::json> ExecuteTask(const std::string& kind, const nlohmann::json& payload,
                                           const ExecuteOptions& options,
                                           const std::function<void(const std::string&)>& progress);
bool Retryable(const absl::Status& status);

}  // namespace cubridge::workerd
