// Checks a SubmitJob request before anything is stored, with nothing but the request in hand:
// the service's limits (RESOURCE_EXHAUSTED), ids and keys, UTF-8, the spec frontend's lexical
// guard, the attention config, the proposer's name, buffer sources and values (each TensorValue
// whole: dtype, rank, sizes, byte count, bools), and a lift's kernel. No LibTorch here: the
// spec itself is compiled elsewhere (server/core/spec_checker.h), so nothing in this file can be
// made to crash by what a client sends (fuzz/fuzz_submit_checks.cc holds it to that).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cubridge/v1/client.pb.h"
#include "service/contract/proto_values.h"
#include "cuir/ir/config.h"
#include "cuir/ir/tensor_value.h"

namespace cubridge::core {

struct Limits {
  size_t max_source_bytes = 64 * 1024;
  int max_params = 64;
  int max_buffers = 16;  // sources and values together
  size_t max_buffer_source_bytes = 64 * 1024;
  // The bytes of all the buffers a request gives by value (spec.tensors) together; the gRPC
  // message limit grows by as much (coordinator --max-tensor-mb).
  size_t max_tensor_bytes = size_t{64} << 20;
  int max_archs = 8;
  int64_t max_batch = 4096;
  int64_t max_heads = 1024;
  int64_t max_seqlen = 1 << 20;
};

// What a submitted spec is to the kernel cache: its key, the canonical text that key hashes, and
// each buffer's canonical name (a kernel of this hash made for another spec is handed to the job
// under its own spec's names: pipeline::BindBuffers). The spec checker makes it of a spec.
struct SpecKey {
  std::string spec_hash;
  std::string canonical_form;
  std::map<std::string, std::string> canonical_buffers;
};

struct CheckedRequest {
  cuir::AttentionConfig config;
  bool lift = false;        // the request carries a user kernel to lift
  std::string kernel_name;  // lift: the expert name its program declares
  // A lift's (its key needs no compiled spec): the hash of its kernel, name and config; a spec's
  // comes from the spec checker.
  SpecKey key;
};

// Unset sizes take the defaults `adapt --local` uses (batch 1, 8 heads, d 128, 256 tokens,
// bf16); a size that is set must be positive (INVALID_ARGUMENT naming the field otherwise).
absl::StatusOr<cuir::AttentionConfig> ConfigFromProto(const v1::AttentionConfig& c);
// A lift request's kernel name: kernel.name, else its file's stem.
std::string KernelNameOf(const v1::SubmitJobRequest& request);
absl::StatusOr<CheckedRequest> CheckRequest(const v1::SubmitJobRequest& request, const Limits& limits);
// sha256 of the request without its idempotency key: one key may name only one request.
std::string RequestFingerprint(const v1::SubmitJobRequest& request);

// The proto's TensorDType as the IR's (service/contract/proto_values.h).
using contract::TensorDTypeFromProto;
using contract::TensorDTypeToProto;
// A TensorValue as the IR's, bytes copied; INVALID_ARGUMENT naming `what` for an unknown dtype.
// Its data is not checked here (CheckRequest did, or cuir::CheckTensorValue does).
absl::StatusOr<cuir::TensorValue> TensorValueFromProto(const v1::TensorValue& t, const std::string& what);

}  // namespace cubridge::core
