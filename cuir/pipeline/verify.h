// CPU verification: a transferred CuIR program, run by the interpreter with kernel numerics,
// against the spec's float64 oracle on fresh random inputs at several (ragged) shapes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cuir/ir/program.h"
#include "cuir/spec/tensors.h"

namespace cubridge::pipeline {

struct VerifyShape {
  int64_t batch = 1;
  int64_t seqlen_q = 0;
  int64_t seqlen_kv = 0;
};

struct VerifyOptions {
  // Empty = DefaultVerifyShapes(config). Heads, head dim, dtype and scale always come from the
  // job's config: head-dependent variants (ALiBi) must be checked on every head.
  std::vector<VerifyShape> shapes;
  double o_atol = 0, o_rtol = 0;  // 0 = per-dtype default (see ToleranceFor)
};

// Element (b, h, row[, col]) and both values, for the worst mismatches.
struct Mismatch {
  std::vector<int64_t> index;
  double got = 0, want = 0;
};

struct OutputError {
  double max_abs = 0;
  double rel_l2 = 0;      // ||got - want|| / ||want|| over finite elements
  int64_t violations = 0; // elements outside atol + rtol * |want| (or infinities that differ)
  int64_t unwritten = 0;  // NaN in the output where the oracle is finite (poison survived)
  std::vector<Mismatch> worst;  // up to 3, largest abs error first
};

struct ShapeResult {
  VerifyShape shape;
  OutputError o, lse;
  // False when the oracle has no LSE (a reference spec that returns O only): `lse` is then empty
  // and does not decide `passed`.
  bool lse_checked = true;
  double o_atol = 0, o_rtol = 0, lse_atol = 0, lse_rtol = 0;
  // O was a view of wider rows (PaddedPoison): the GPU verifier's check of the stores a kernel
  // uses when O's rows are not 16-byte aligned. The CPU verifier never pads.
  bool o_padded = false;
  // The kernel's plan refused the padded O, so this shape ran with a contiguous one: refusing a
  // layout is allowed by the launcher ABI (fa2_sm80 needs 16-byte aligned rows), writing past a
  // row is not.
  bool o_padding_refused = false;
  // Padding elements no longer bitwise the poison (a kernel storing past head_dim), and the first
  // of them as (b, h, row, col) with col >= head_dim. Any decides `passed`.
  int64_t o_padding_written = 0;
  std::vector<int64_t> o_padding_at;
  int64_t blocks_visited = 0, blocks_masked = 0;
  // The launch split its last wave and a combine kernel merged the parts (the GPU verifier, on a
  // plan that names a combine only for a launch that splits). The CPU verifier never sets it.
  bool combined = false;
  double seconds = 0;
  bool passed = false;
};

struct VerifyReport {
  bool passed = false;
  uint64_t seed = 0;
  std::vector<ShapeResult> shapes;
  // Whether LSE was compared on every shape; reports say "LSE not checked" otherwise.
  bool lse_checked() const;
  nlohmann::json ToJson() const;
  std::string Summary() const;  // one line for the CLI
  std::string FailureDetail() const;  // what failed where, for error messages and LLM feedback
};

std::vector<VerifyShape> DefaultVerifyShapes(const cuir::AttentionConfig& config);

// One verification shape of a job: `*at` is the job's config at the shape, and the inputs are
// fresh random q, k, v and the job's captured tensors where they fit the shape (else random ones
// of their dtypes), drawn from `seed`.
absl::StatusOr<spec::AttentionInputs> InputsAtShape(
    const spec::Spec& spec, const cuir::AttentionConfig& job, const VerifyShape& shape,
    const std::map<std::string, spec::BufferSource>& buffers, uint64_t seed,
    cuir::AttentionConfig* at);

// Per-dtype tolerances (options override O's when non-zero): shared by the CPU and GPU verifiers.
struct Tolerance {
  double o_atol, o_rtol, lse_atol, lse_rtol;
};
Tolerance ToleranceFor(cuir::DType dtype, const VerifyOptions& options);

// The job config as reports and worker requests carry it, and back (clear errors on bad fields).
nlohmann::json ConfigJson(const cuir::AttentionConfig& c);
absl::StatusOr<cuir::AttentionConfig> ConfigFromJson(const nlohmann::json& j);

// How reports name a shape ("b=1 sq=257 skv=300"), show an output's error (with its tolerances)
// and describe it in a failure ("O: 3 elements out of tolerance, ...; at [0,1,5,2] got .. want ..").
std::string ShapeName(const VerifyShape& s);
nlohmann::json ErrorJson(const OutputError& e, double atol, double rtol);
std::string DescribeError(const std::string& what, const OutputError& e);

// Compares got (any float dtype) against want (float64) elementwise.
OutputError CompareOutputs(const at::Tensor& got, const at::Tensor& want, double atol, double rtol);
// The same with an absolute tolerance per element (atol broadcasts against want).
OutputError CompareOutputs(const at::Tensor& got, const at::Tensor& want, const at::Tensor& atol,
                           double rtol);

// Fills r's O and LSE errors (r's tolerances must be set), lse_checked and passed. `want_lse`
// undefined (the oracle of a reference spec returning O only) skips LSE. Shared by the CPU and
// GPU verifiers, so both treat a missing LSE alike.
void CompareShape(const at::Tensor& got_o, const at::Tensor& got_lse, const at::Tensor& want_o,
                  const at::Tensor& want_lse, ShapeResult* r);

// Columns past head_dim in a padded O's rows: with 16-bit elements, rows 2 * (head_dim + 2) bytes
// apart are 4-byte aligned but never 16-byte aligned, whatever head_dim (a multiple of 8) is.
inline constexpr int64_t kOPadColumns = 2;

// The NaN poison of a padded O for `like` ([b, h, s, head_dim], its dtype and device): a
// [b, h, s, head_dim + kOPadColumns] tensor whose narrow(3, 0, head_dim) is the O a kernel gets.
at::Tensor PaddedPoison(const at::Tensor& like);

// After the call, on `padded` from PaddedPoison (same device): sets r's o_padded and
// o_padding_written / o_padding_at for the padding columns, and clears passed if any was written.
void CheckOPadding(const at::Tensor& padded, int64_t head_dim, ShapeResult* r);

// What reports say when LSE was not compared.
inline constexpr char kLseNotChecked[] = "LSE not checked: the reference returns O only";

absl::StatusOr<VerifyReport> VerifyOnCpu(const cuir::Program& program, const spec::Spec& spec,
                                         const cuir::AttentionConfig& config,
                                         const std::map<std::string, spec::BufferSource>& buffers,
                                         uint64_t seed, const VerifyOptions& options);

}  // namespace cubridge::pipeline
