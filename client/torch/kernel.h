// A kernel CuBridge produced, as the PyTorch op library sees it: the folder `adapt` (or the
// service's `get`) wrote, read once per process. What the op checks a call against comes from
// its report.json (the config it was lowered and verified for, its captured tensors) and its
// kernel.cu (the device entry points); nothing is inferred from the tensors of a call.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cubridge::torch_op {

// One captured tensor of the kernel, in its launcher slot order.
struct KernelBuffer {
  std::string name;
  int dtype = 0;  // CUBRIDGE_DTYPE_* (launch_abi.cuh)
  // Per dimension, the least size its indexing reaches, as CuIR prints it (`heads_q`,
  // `max(seqlen_q, seqlen_kv)`, `32`), or "?" where that depends on the data.
  std::vector<std::string> extents;
  int rank() const { return static_cast<int>(extents.size()); }
};

// The folder's backward kernel (kernel_bwd.cu, the report's `backward`), where adapt made one.
struct BackwardInfo {
  bool available = false;
  std::string reason;  // why there is none
  std::string source;  // kernel_bwd.cu
  std::map<std::string, std::string> entries;
  // Per captured tensor of the forward's slot order: its slot in the backward's params, and
  // whether the backward computes its gradient (the floating tensors the score_mod reads).
  std::vector<int> slots;
  std::vector<bool> learns;
};

struct KernelInfo {
  std::string dir;
  std::string spec_hash;
  std::string arch;    // "sm_80" | "sm_90": the arch it was lowered and verified for
  std::string source;  // kernel.cu
  std::map<std::string, std::string> entries;  // device entry points by role
  int dtype = 0;       // 0 = bf16, 1 = fp16 (the launcher ABI's)
  int head_dim = 0, heads_q = 0, heads_kv = 0;
  std::vector<KernelBuffer> buffers;
  BackwardInfo backward;
};

// NOT_FOUND when the folder lacks report.json or kernel.cu, INVALID_ARGUMENT naming the field
// when the report is not one adapt writes. A folder without a backward kernel reads fine: its
// `backward.reason` says why (and what to do), for the op's backward to raise.
absl::StatusOr<KernelInfo> ReadKernel(const std::string& dir);

// The shape of one call, for the extents: the kernel's indexing is in these names.
struct CallShape {
  int64_t batch = 0, heads_q = 0, heads_kv = 0, seqlen_q = 0, seqlen_kv = 0, head_dim = 0;
};

// The least size of a buffer dimension at this call's shape; nullopt where the extent depends on
// the data ("?") or is not an expression of the shape alone (the kernel's own plan then checks).
std::optional<int64_t> LeastSize(const std::string& extent, const CallShape& shape);

}  // namespace cubridge::torch_op
