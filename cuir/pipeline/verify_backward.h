// CPU verification of the backward: a transferred backward program, run by the interpreter with
// kernel numerics, against the float64 autograd of the spec itself (spec::RunBackwardOracle) on
// fresh random inputs and a fresh dO at the forward's ragged shapes. Each gradient is reported on
// its own: dQ, dK, dV and every learnable captured tensor's.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cuir/ir/program.h"
#include "cuir/pipeline/verify.h"
#include "cuir/spec/spec.h"
#include "cuir/spec/tensors.h"

namespace cubridge::pipeline {

// A gradient's error. Gradients have no natural unit (dQ scales with the keys, a bias table's
// with how many scores read an element), so the absolute tolerance is relative to the largest
// wanted magnitude of that gradient: |got - want| <= atol_rel * scale + rtol * |want|, where
// scale = max|want|, but at least a thousandth of the largest of dQ's, dK's and dV's (a
// gradient that is 0 everywhere, as dQ and dK are for a single key, still gets fp32 rounding).
// A captured tensor's gradient is a sum over scores of dS * partial, where dS = P (dP - D) loses
// what dP and D share and the sum may cancel (a learned slope sums dS * (kv - q) over rows whose
// dS sum to 0), so each element's scale is sum P (|dP| + sum_d |dO O|) |partial| over what was
// added into it (AttentionGrads::buffer_masses): the first-order bound of that computation's
// error, D = sum_d dO O being taken from the stored O in the input dtype.
struct GradResult {
  std::string name;  // dq, dk, dv, or a captured tensor's name
  OutputError error;
  double atol = 0, rtol = 0;  // absolute tolerance as applied, i.e. atol_rel * scale
  double scale = 0;           // max|want|, or the floor; a buffer's: its largest mass
};

struct BackwardShapeResult {
  VerifyShape shape;
  // dQ, dK, dV and the buffers' of the first run; a kernel's later runs (VerifyBackwardKernel)
  // add theirs, named "dq (deterministic)" and so on.
  std::vector<GradResult> grads;
  int64_t blocks_visited = 0, blocks_masked = 0;
  double seconds = 0;
  bool repeatable = true;  // a kernel's runs that must give the same bits did
  bool passed = false;
};

struct BackwardVerifyReport {
  std::string level = "ir";  // "ir": the interpreter on the CPU; "gpu": a compiled kernel
  bool passed = false;
  uint64_t seed = 0;
  std::vector<std::string> grad_buffers;
  std::vector<BackwardShapeResult> shapes;
  nlohmann::json ToJson() const;
  std::string Summary() const;
  std::string FailureDetail() const;
};

// The shapes a backward is verified at when the options name none.
std::vector<VerifyShape> BackwardVerifyShapes();

// Per-dtype tolerances of the gradients: atol relative to max|want| and rtol.
struct GradTolerance {
  double atol_rel, rtol;
};
GradTolerance GradToleranceFor(cuir::DType dtype);

// The captured tensors whose gradient a training job gets by default: the floating ones the
// score_mod reads (a tensor read only by the mask, or an integer one, has none).
std::vector<std::string> LearnableBuffers(const spec::Spec& spec);

// One shape's gradients against the oracle's by the rules above: dQ, dK, dV, and each buffer in
// `grad_buffers` (one `got` lacks counts as 0), `masses` its error scales (the interpreter's
// AttentionGrads::buffer_masses; a buffer absent there has scale 0). Sets grads and passed.
BackwardShapeResult CompareGrads(const spec::AttentionGrads& got, const spec::AttentionGrads& want,
                                 const std::map<std::string, at::Tensor>& masses,
                                 const std::vector<std::string>& grad_buffers, cuir::DType dtype);

// `program` is a backward program (cuir::IsBackward); `grad_buffers` names the captured tensors
// whose gradients are compared (each must have a buffer_grad in the program or a zero gradient).
// The program reads the oracle's O (in the input dtype) and LSE, as a kernel reads the forward's.
absl::StatusOr<BackwardVerifyReport> VerifyBackwardOnCpu(
    const cuir::Program& program, const spec::Spec& spec, const cuir::AttentionConfig& config,
    const std::map<std::string, spec::BufferSource>& buffers,
    const std::vector<std::string>& grad_buffers, uint64_t seed, const VerifyOptions& options);

// A compiled kernel's gradients for one shape's inputs: one or more runs by name (e.g. "fast",
// "deterministic"), each compared with the oracle; `repeatable` false (two runs that must give
// the same bits did not) fails the shape.
struct KernelGrads {
  std::vector<std::pair<std::string, spec::AttentionGrads>> runs;
  bool repeatable = true;
};
using BackwardKernelRun = std::function<absl::StatusOr<KernelGrads>(
    const cuir::AttentionConfig&, const spec::AttentionInputs&, const spec::BackwardInputs&)>;

// VerifyBackwardOnCpu's shapes, inputs, dO and oracle, with the gradients `run` gives (a kernel
// compiled from `program`, on a GPU): the interpreter still runs the program, for the buffers'
// error scales. The report's level is "gpu".
absl::StatusOr<BackwardVerifyReport> VerifyBackwardKernel(
    const cuir::Program& program, const spec::Spec& spec, const cuir::AttentionConfig& config,
    const std::map<std::string, spec::BufferSource>& buffers,
    const std::vector<std::string>& grad_buffers, uint64_t seed, const VerifyOptions& options,
    const BackwardKernelRun& run);

}  // namespace cubridge::pipeline
