// The typed task messages (proto/cubridge/v1/task.proto) as both sides use them: the coordinator
// builds payloads from a job and reads results; the worker resolves a payload's spec with the
// bytes that came with its lease and builds results. Also the forms the coordinator's store keeps
// them in, and the bridge between the report fragments (google.protobuf.Struct) and the JSON of
// report.json.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <google/protobuf/message.h>
#include <google/protobuf/struct.pb.h>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cubridge/v1/task.pb.h"
#include "cuir/ir/config.h"
#include "cubridge/v1/worker.pb.h"
#include "service/contract/proto_values.h"

namespace cubridge::contract {

struct SpecInput;  // task_contract.h (which brings LibTorch's headers: the tests of the wire need none)

// The version of task.proto's messages this build speaks (RegisterRequest.task_contract): a
// coordinator and its workers must agree on it.
inline constexpr int kTaskContract = 1;

// Every size must be set (a payload's config is complete); INVALID_ARGUMENT naming the field.
absl::StatusOr<cuir::AttentionConfig> PayloadConfigFromProto(const v1::AttentionConfig& c);

// The payload's spec input (every kind has one); null when the payload has no member.
const v1::SpecInput* SpecOf(const v1::TaskPayload& payload);

// A job's spec input as a payload carries it: values by digest, their bytes left out.
v1::SpecInput SpecInputToProto(const SpecInput& in);
// The worker's side. `lookup`: digest -> the bytes that came with the lease, or null.
using TensorLookup = std::function<const std::string*(const std::string&)>;
// Every value the payload's spec names came, and matches its digest: NOT_FOUND naming the buffer
// when one did not (the store no longer had it), DATA_LOSS when its bytes do not match.
absl::Status CheckTensors(const v1::TaskPayload& payload, const TensorLookup& lookup);
// The spec input with each value's bytes (checked by CheckTensors before; NOT_FOUND if absent).
absl::StatusOr<SpecInput> SpecInputFromProto(const v1::SpecInput& p, const TensorLookup& lookup);

// The digests of the values a payload's spec names: the bytes a lease sends with the task.
std::vector<std::string> TensorDigests(const v1::TaskPayload& payload);

// The member of v1::TaskPayload / v1::TaskResult a task kind ("lift", "transfer", ...) uses.
v1::TaskPayload::KindCase PayloadCaseOf(const std::string& kind);
v1::TaskResult::KindCase ResultCaseOf(const std::string& kind);

// What every kind's result has: how long it took and what it says (0 and "" for no member).
double ResultSeconds(const v1::TaskResult& r);
std::string ResultDetail(const v1::TaskResult& r);
// The model conversation of a transfer or a lift by a model (empty for the other kinds).
const v1::LlmUsage& ResultUsage(const v1::TaskResult& r);
const google::protobuf::ListValue& ResultTranscript(const v1::TaskResult& r);

// The store's form of a payload or result: protobuf's JSON with the proto's field names.
std::string StoreText(const google::protobuf::Message& m);
absl::StatusOr<v1::TaskPayload> PayloadFromStore(const std::string& text);
// A result as stored: a TaskResult, or the bare JSON document of the task's kind that earlier
// versions stored (its keys are the field names of the kind's message). An empty text is an empty
// result of the kind.
absl::StatusOr<v1::TaskResult> ResultFromStore(const std::string& kind, const std::string& text);

// Report fragments: JSON <-> Struct / ListValue. Integral numbers come back as integers.
google::protobuf::Struct ToStruct(const nlohmann::json& object);
google::protobuf::ListValue ToList(const nlohmann::json& array);
nlohmann::json ToJson(const google::protobuf::Struct& s);
nlohmann::json ToJson(const google::protobuf::ListValue& l);
v1::LlmUsage UsageToProto(const nlohmann::json& usage);
nlohmann::json ToJson(const v1::LlmUsage& usage);  // null when no request was made

}  // namespace cubridge::contract
