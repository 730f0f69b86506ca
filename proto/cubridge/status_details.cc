#include "cubridge/status_details.h"

#include "absl/strings/cord.h"
#include "google/rpc/status.pb.h"

namespace cubridge::rpc {

absl::Status WithDetail(absl::Status status, const v1::ErrorDetail& detail) {
  if (!status.ok()) status.SetPayload(kErrorDetailUrl, absl::Cord(detail.SerializeAsString()));
  return status;
}

absl::Status WithReason(absl::Status status, v1::ErrorReason reason, const std::string& job_id) {
  v1::ErrorDetail detail;
  detail.set_reason(reason);
  detail.set_job_id(job_id);
  return WithDetail(std::move(status), detail);
}

std::optional<v1::ErrorDetail> ErrorDetailOf(const absl::Status& status) {
  auto payload = status.GetPayload(kErrorDetailUrl);
  v1::ErrorDetail detail;
  if (!payload || !detail.ParseFromString(std::string(*payload))) return std::nullopt;
  return detail;
}

grpc::Status ToGrpc(const absl::Status& status) {
  // gRPC and absl share the canonical code numbering.
  const auto code = static_cast<grpc::StatusCode>(status.code());
  const std::string message(status.message());
  const auto detail = ErrorDetailOf(status);
  if (!detail) return grpc::Status(code, message);
  google::rpc::Status wire;
  wire.set_code(static_cast<int>(status.code()));
  wire.set_message(message);
  wire.add_details()->PackFrom(*detail);
  return grpc::Status(code, message, wire.SerializeAsString());
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  google::rpc::Status wire;
  if (status.error_details().empty() || !wire.ParseFromString(status.error_details())) return out;
  for (const auto& any : wire.details()) {
    v1::ErrorDetail detail;
    if (any.UnpackTo(&detail)) return WithDetail(std::move(out), detail);
  }
  return out;
}

}  // namespace cubridge::rpc
