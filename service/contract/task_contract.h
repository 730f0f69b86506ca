// What the coordinator asks of a worker, task by task, and what comes back: the JSON of each
// task kind's payload and result. The coordinator writes payloads and reads results; the worker
// (worker/daemon/execute.h) reads payloads and writes results. docs/service.md lists the fields.
//
//   lift       {expert, arch, level, spec}           -> {detail, seconds[, gpu]}
//   transfer   {spec, proposer}                      -> {detail, seconds, program, transfer,
//                                                        verification, proposer, transcript,
//                                                        llm_usage}; a failed transfer leaves
//                                                        {proposer, transcript, llm_usage}
//   candidate  {spec, program, arch, tile, level}    -> {detail, seconds, passed, tile, cuir,
//                                                        kernel_cu, kernel_h, lowering, check}
//   lift_llm   {kernel: {file_name, source, name},   -> {detail, seconds, program, report,
//               config, arch, seed}                      transcript, llm_usage}; a failed lift
//                                                        leaves {transcript, llm_usage}
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


// "rules" | "llm" | "hybrid"; a request that names none gets the rules.
inline constexpr char kDefaultProposer[] = "rules";

// Verification levels (the VerificationLevel of the API, as cache entries and payloads spell it).
inline constexpr char kLevelGpu[] = "gpu";
inline constexpr char kLevelIr[] = "ir";

// A buffer given by value as the service passes it around: its dtype and shape, and the sha256
// (hex) of its bytes, under which the store keeps them (server/store/tensors.h). The bytes are
// here only where a worker resolved them (ResolveTensors).
struct TensorRef {
  cuir::TensorDType dtype = cuir::TensorDType::kInt32;
  std::vector<int64_t> shape;
  std::string sha256;
  std::optional<std::string> data;
};

// A job's variant as a worker rebuilds it: the spec's text, its overrides and the config.
// As JSON, `buffers` maps each name to its source string, or for a value to
// {"dtype", "shape", "sha256"} (and "data_base64" once resolved).
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

// The digests of the values a task payload's spec names: the bytes a lease sends with the task.
std::vector<std::string> TensorDigests(const nlohmann::json& payload);
// Puts into the payload's spec the bytes of each value it names, from `lookup` (digest -> the
// bytes that came with the lease, or null), each checked against its digest. NOT_FOUND naming the
// buffer when they did not come (the store no longer had them), DATA_LOSS when they do not match.
absl::Status ResolveTensors(nlohmann::json& payload,
                            const std::function<const std::string*(const std::string&)>& lookup);

// A payload or result field that must be there; INVALID_ARGUMENT naming the task kind otherwise.
absl::StatusOr<nlohmann::json> Field(const nlohmann::json& doc, const std::string& name,
                                     const std::string& what);

}  // namespace cubridge::contract
