// Checks a SubmitJob request before anything is stored: the service's limits (RESOURCE_EXHAUSTED),
// the attention config, the proposer's name and the spec itself (INVALID_ARGUMENT with the spec
// frontend's "file:line:col: ..." message), and computes the spec hash the job and the cache are
// keyed by.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "cubridge/v1/client.pb.h"
#include "cuir/ir/config.h"

namespace cubridge::core {

struct Limits {
  size_t max_source_bytes = 64 * 1024;
  int max_params = 64;
  int max_buffers = 16;
  size_t max_buffer_source_bytes = 64 * 1024;
  int64_t max_batch = 4096;
  int64_t max_heads = 1024;
  int64_t max_seqlen = 1 << 20;
  size_t max_idempotency_key_bytes = 256;
};

struct CheckedSubmit {
  cuir::AttentionConfig config;
  std::string spec_hash;  // a lift job: the hash of its kernel, name and config
  std::string canonical_form;
  bool lift = false;        // the request carries a user kernel to lift
  std::string kernel_name;  // lift: the expert name its program declares
};

// Zero fields take the defaults `adapt --local` uses (batch 1, 8 heads, d 128, 256 tokens, bf16).
absl::StatusOr<cuir::AttentionConfig> ConfigFromProto(const v1::AttentionConfig& c);
// A lift request's kernel name: kernel.name, else its file's stem.
std::string KernelNameOf(const v1::SubmitJobRequest& request);
absl::StatusOr<CheckedSubmit> CheckSubmit(const v1::SubmitJobRequest& request, const Limits& limits,
                                          const std::string& ruleset);

}  // namespace cubridge::core
