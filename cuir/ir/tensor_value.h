// A captured tensor given by its values: dtype, shape and the bytes of its elements. What the
// service carries for a buffer (proto TensorValue), what cubridge-cli reads from a torch.save file
// without LibTorch, and what spec::MakeInputs turns into a tensor. No LibTorch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cuir/ir/dtype.h"

namespace cubridge::cuir {

struct TensorValue {
  TensorDType dtype = TensorDType::kInt32;
  std::vector<int64_t> shape;  // sizes, outermost first; empty: rank 0, one element
  // Row-major and contiguous, each element little-endian: numel * TensorDTypeBytes(dtype) bytes.
  // bool: one byte, 0 or 1; bfloat16 and float16: their raw 16-bit patterns.
  std::string data;
};

// The element count of `shape`: INVALID_ARGUMENT for a rank over kMaxBufferRank, a negative
// size, or a product over 2^40 elements (no buffer a kernel reads is that large; it keeps every
// byte count below int64's range). `what` starts each message ("buffer `x`").
absl::StatusOr<int64_t> TensorElements(const std::vector<int64_t>& shape, absl::string_view what);

// A whole value checked: its shape (TensorElements), data.size() == numel * element size, and
// bool bytes 0 or 1. Linear in the bytes, no allocation; INVALID_ARGUMENT saying what is wrong.
absl::Status CheckTensorData(TensorDType dtype, const std::vector<int64_t>& shape,
                             absl::string_view data, absl::string_view what);
inline absl::Status CheckTensorValue(const TensorValue& v, absl::string_view what) {
  return CheckTensorData(v.dtype, v.shape, v.data, what);
}

// "float32[4, 8]", "bool[]" (rank 0): how messages name a value without its bytes.
std::string TensorValueText(TensorDType dtype, const std::vector<int64_t>& shape);

}  // namespace cubridge::cuir
