// Buffer sources as JSON, for the files and payloads that carry them from one process to another
// (the worker's task child, the GPU runner child): NAME -> the source string, or
// NAME -> {"dtype", "shape", "data_base64"} for a buffer given by value.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cuir/ir/tensor_value.h"
#include "cuir/spec/tensors.h"

namespace cubridge::spec {

nlohmann::json BufferSourcesJson(const std::map<std::string, BufferSource>& sources);
// Each value is checked whole (cuir::CheckTensorValue); INVALID_ARGUMENT naming the buffer and
// what is wrong otherwise.
absl::StatusOr<std::map<std::string, BufferSource>> BufferSourcesFromJson(const nlohmann::json& j);

// A value's dtype and shape as JSON, {"dtype": "float32", "shape": [4, 8]}, and back (the data
// left empty); INVALID_ARGUMENT naming `what` for a dtype or shape that is not one.
nlohmann::json TensorHeaderJson(cuir::TensorDType dtype, const std::vector<int64_t>& shape);
absl::StatusOr<cuir::TensorValue> TensorHeaderFromJson(const nlohmann::json& j, const std::string& what);

}  // namespace cubridge::spec
