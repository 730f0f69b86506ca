// Statuses across the wire with their reason: an absl::Status may carry a cubridge.v1.ErrorDetail
// (payload kErrorDetailUrl); on the wire it travels in the grpc-status-details-bin trailer as a
// google.rpc.Status whose details hold it. The coordinator sends with ToGrpc, the SDK receives
// with FromGrpc, and callers ask ErrorDetailOf instead of reading messages.
#pragma once

#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "cubridge/v1/common.pb.h"

namespace cubridge::rpc {

inline constexpr char kErrorDetailUrl[] = "type.googleapis.com/cubridge.v1.ErrorDetail";

// `status` with `detail` attached (reason, job id, incident).
absl::Status WithDetail(absl::Status status, const v1::ErrorDetail& detail);
absl::Status WithReason(absl::Status status, v1::ErrorReason reason, const std::string& job_id = "");
// The detail `status` carries, if any.
std::optional<v1::ErrorDetail> ErrorDetailOf(const absl::Status& status);

grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace cubridge::rpc
