// Shared helpers of the interpreter tests: transferred programs assembled from the base
// program's shape, the spec oracle, and error measures that treat matching infinities as equal.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "cuir/interp/interp.h"
#include "cuir/ir/config.h"
#include "cuir/ir/program.h"
#include "cuir/spec/tensors.h"

namespace cubridge::interp::testing {

// cuir/experts/fa2_sm80/base.cuir as text.
std::string BaseProgramText();
// cuir/experts/<expert>/base.cuir as text, e.g. ExpertBaseText("fa3_sm90").
std::string ExpertBaseText(const std::string& expert);

// The base program with the edits a transfer rule makes. Defaults reproduce the base program.
struct Pieces {
  int64_t block_m = 128, block_n = 64;
  std::vector<std::string> decls;   // top-level declarations before `role` (const, buffer)
  std::vector<std::string> tables;  // after `grid`
  std::string kv_head = "h";        // right side of `let kv_h: int = ...`
  std::string loop = "n_block in [0, cdiv(seqlen_kv, BLOCK_N))";
  bool split = false;                   // ends the loop header with `split`
  std::vector<std::string> block_lets;  // after `let kv_hi`
  std::string k_rows = "kv_lo:kv_hi";   // row range of `load K`
  std::vector<std::string> after_qk;    // score_mod / mask statements
  std::string epilogue = "epilogue";    // e.g. "epilogue sink 0.5"
};
std::string ProgramText(const Pieces& p);

// Parses (and fails the current test on a parse error).
cuir::Program Parse(const std::string& text);

cuir::AttentionConfig Config(cuir::DType dtype, int64_t head_dim, int64_t seqlen_q,
                             int64_t seqlen_kv, int64_t heads_q = 2, int64_t heads_kv = 2,
                             int64_t batch = 1);

// Standard-normal Q, K, V in the config's dtype and shape, no buffers.
spec::AttentionInputs RandomInputs(const cuir::AttentionConfig& c, uint64_t seed);

// Max abs / rel error; equal infinities count as equal, NaN anywhere as infinitely wrong.
struct Errors {
  double max_abs = 0;
  double max_rel = 0;
};
Errors MaxErrors(const at::Tensor& got, const at::Tensor& want);

// Tolerances against the float64 oracle.
double OTolerance(cuir::DType dtype);
constexpr double kLseTolerance = 1e-3;

struct OracleRun {
  spec::AttentionInputs inputs;
  spec::AttentionOutputs got, want;
  InterpStats stats;
  Errors o, lse;
  bool Matches(cuir::DType dtype) const {
    return o.max_abs <= OTolerance(dtype) && lse.max_abs <= kLseTolerance;
  }
};

// Interprets `program_text` and runs the oracle of `spec_source` on the same fresh inputs.
absl::StatusOr<OracleRun> RunAgainstOracle(
    const std::string& program_text, const std::string& spec_source,
    const cuir::AttentionConfig& config,
    const std::map<std::string, spec::BufferSource>& buffers = {}, uint64_t seed = 7);

// The backward: a backward program against RunBackwardOracle on fresh inputs and a fresh dO. The
// program reads the oracle's O (rounded to the input dtype) and LSE, as a kernel reads the
// forward's. Errors are relative to the largest magnitude of each wanted gradient.
struct BackwardRun {
  spec::AttentionInputs inputs;
  spec::AttentionGrads got, want;
  InterpStats stats;
  std::map<std::string, double> error;  // "dq", "dk", "dv", then each buffer's name
};
double GradTolerance(cuir::DType dtype);
absl::StatusOr<BackwardRun> RunBackwardAgainstOracle(
    const std::string& program_text, const std::string& spec_source,
    const cuir::AttentionConfig& config,
    const std::map<std::string, spec::BufferSource>& buffers = {},
    const std::set<std::string>& grad_buffers = {}, uint64_t seed = 7);
// max |got - want| / max |want| (0 when both are 0; NaN anywhere gives infinity).
double RelativeError(const at::Tensor& got, const at::Tensor& want);

// Spec sources (FlexAttention style, as users write them).
inline constexpr char kFullSpec[] =
    "def score_mod(score, b, h, q_idx, kv_idx):\n"
    "    return score\n";
inline constexpr char kCausalSpec[] =
    "def mask_mod(b, h, q_idx, kv_idx):\n"
    "    return q_idx >= kv_idx\n";

}  // namespace cubridge::interp::testing
