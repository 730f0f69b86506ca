// What the parent (worker, `adapt --local`) asks a runner child process to do with one compiled
// candidate, and what it gets back. Both travel as JSON files, so a candidate that crashes the
// child (illegal address, trap, hang) costs only that child.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cuir/ir/config.h"
#include "cuir/pipeline/verify.h"
#include "cuir/spec/tensors.h"

namespace cubridge::gpu {

struct ProfileOptions {
  bool enabled = true;
  int warmup = 3;              // calls before timing (module load and first-touch stay out)
  int min_reps = 10;           // timed calls at least ...
  double min_seconds = 0.25;   // ... and for at least this long
  int max_reps = 200;
};

struct RunRequest {
  std::string spec_path;  // empty: no spec (a user kernel's lift check; reference_program set)
  std::vector<std::string> param_overrides;
  std::map<std::string, spec::BufferSource> buffers;
  std::vector<std::string> buffer_order;  // the ABI's buffer slots: the program's declarations
  cuir::AttentionConfig config;           // the job; verification varies batch and seqlens
  std::vector<pipeline::VerifyShape> verify_shapes;  // empty = DefaultVerifyShapes(config)
  pipeline::VerifyOptions verify;
  uint64_t seed = 1;
  std::string image_path;  // cubin or PTX written by the parent
  bool ptx = false;
  std::map<std::string, std::string> entries;  // role -> lowered symbol
  ProfileOptions profile;
  // Empty: the reference is the spec's oracle. Otherwise CuIR text whose interpretation is the
  // reference (the lift check: the expert's base program against its compiled kernel).
  std::string reference_program;
  // A backward kernel (kernel_bwd.cu): reference_program is its backward program, the reference
  // the spec's float64 autograd (pipeline::VerifyBackwardKernel, at BackwardVerifyShapes unless
  // verify_shapes names others), grad_buffers the captured tensors whose gradients it computes;
  // profiled (when `profile` says so) as a backward call at the job's shape.
  bool backward = false;
  std::vector<std::string> grad_buffers;

  nlohmann::json ToJson() const;
  static absl::StatusOr<RunRequest> FromJson(const nlohmann::json& j);
};

}  // namespace cubridge::gpu
