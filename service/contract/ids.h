// The formats of the ids and keys that arrive from outside (clients, workers), checked before any
// of them is used in a Redis key: an id is only ever a lookup of its own record, never a way into
// another key ("j-<id>:events") or a pattern. INVALID_ARGUMENT saying what the id should look like.
#pragma once

#include <optional>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace cubridge::contract {

absl::Status CheckJobId(absl::string_view id);           // j- and 16 hex digits
absl::Status CheckSpecHash(absl::string_view hash);      // 64 hex digits (sha256)
// The archs a worker registers as: cpu, sm_80, sm_90 (worker ids, queues and metric labels).
const std::vector<std::string>& WorkerArchs();
// The worker class (queue) of llm and hybrid transfers, and the capability a worker registers
// when it has a chat-completions endpoint: only such workers lease from that queue.
inline constexpr char kLlmClass[] = "llm";
// Lifting a user's kernel needs both a model and a GPU of the arch to check its proposals on:
// the queue "llm-<arch>", leased by workers of that arch that registered the llm capability.
inline std::string LlmGpuClass(const std::string& arch) { return std::string(kLlmClass) + "-" + arch; }
// The worker classes whose queues exist: each arch of WorkerArchs(), llm, and llm-<arch> for the
// GPU archs (lifts by a model).
const std::vector<std::string>& WorkerClasses();

absl::Status CheckWorkerId(absl::string_view id);        // w-<arch>-<10 hex digits>
absl::Status CheckTaskId(absl::string_view id);          // lift-, transfer-, cand-, liftllm-...
absl::Status CheckIdempotencyKey(absl::string_view key); // 1-256 of [A-Za-z0-9._:@/+=-]

// The offset of the first byte of `text` that does not start or continue a well-formed UTF-8
// sequence (overlong forms, surrogates and code points past U+10FFFF included); nullopt when it
// is all well formed.
std::optional<size_t> FirstInvalidUtf8(absl::string_view text);
// OK, or INVALID_ARGUMENT "<file>:LINE:COL: byte 0xNN is not UTF-8 ..." for `what` (e.g. "spec").
absl::Status CheckUtf8(absl::string_view text, const std::string& file, const std::string& what);

}  // namespace cubridge::contract
