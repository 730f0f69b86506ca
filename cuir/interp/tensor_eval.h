// Elementwise evaluation of CuIR expressions on tensors: the numerics of score_mod / mask bodies
// and block-table predicates as a kernel computes them (int64 indices, fp32 floats).
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "cuir/ir/eval.h"
#include "cuir/ir/expr.h"

namespace cubridge::interp {

// Names an expression may use, looked up in this order: `tensors` (per-element symbols such as
// score [rows, cols], q_idx [rows, 1], kv_idx [1, cols]; they broadcast against each other),
// `values`, then `scalars->vars`. Buffers are the captured tensors, any rank and dtype (read as
// int64, the float type or bool); indexing one gathers with Python's negative indices and a
// bounds check.
struct TensorEnv {
  absl::flat_hash_map<std::string, at::Tensor> tensors;
  absl::flat_hash_map<std::string, cuir::Value> values;
  const cuir::ScalarEnv* scalars = nullptr;  // not owned; may be null
  absl::flat_hash_map<std::string, at::Tensor> buffers;
  // Float math in float64 instead of the kernel's fp32 (for reference computations).
  bool float64 = false;
};

// The CuIR type of an evaluation result, from its dtype (bool, int64, floating).
cuir::Type TensorType(const at::Tensor& t);

}  // namespace cubridge::interp
