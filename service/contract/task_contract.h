// What the coordinator and its workers agree on about tasks: the task kinds, the default
// proposer, the verification levels as the store spells them, and a job's spec input. Each kind's
// payload and result are typed messages (proto/cubridge/v1/task.proto; task_messages.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cuir/ir/config.h"
#include "cuir/ir/tensor_value.h"
#include "cuir/spec/tensors.h"
#include "service/contract/ids.h"

namespace cubridge::contract {

inline constexpr char kLiftTask[] = "lift";
inline constexpr char kTransferTask[] = "transfer";
inline constexpr char kCandidateTask[] = "candidate";
inline constexpr char kLiftLlmTask[] = "lift_llm";  // a user's kernel lifted by a model
inline constexpr char kBackwardTask[] = "backward";  // a spec's backward kernel for one arch


// "rules" | "llm" | "hybrid"; a request that names none gets the rules.
inline constexpr char kDefaultProposer[] = "rules";

// Verification levels (the VerificationLevel of the API, as cache entries and payloads spell it).
inline constexpr char kLevelGpu[] = "gpu";
inline constexpr char kLevelIr[] = "ir";

// A buffer given by value as the service passes it around: its dtype and shape, and the sha256
// (hex) of its bytes, under which the store keeps them (server/store/tensors.h). The bytes are
// here only where a worker resolved them (SpecInputFromProto).
struct TensorRef {
  cuir::TensorDType dtype = cuir::TensorDType::kInt32;
  std::vector<int64_t> shape;
  std::string sha256;
  std::optional<std::string> data;
};

// A job's variant: the spec's text, its overrides and the config. A payload carries it as
// v1::SpecInput; the job's record in the store as JSON, where `buffers` maps each name to its
// source string, or for a value to {"dtype", "shape", "sha256"}.
struct SpecInput {
  std::string file_name;
  std::string source;
  std::vector<std::string> params;             // "name=value"
  std::map<std::string, std::string> buffers;  // name -> source ("lengths:..", "random", ...)
  std::map<std::string, TensorRef> tensors;    // name -> a buffer given by value
  cuir::AttentionConfig config;
  uint64_t seed = 0;  // verification inputs; the same for every task of a job

  nlohmann::json ToJson() const;
  static absl::StatusOr<SpecInput> FromJson(const nlohmann::json& j);
  // FAILED_PRECONDITION naming the buffer when a value's bytes were not resolved.
  absl::StatusOr<std::map<std::string, spec::BufferSource>> BufferSources() const;
};

}  // namespace cubridge::contract
