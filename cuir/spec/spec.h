// A user's attention variant: FlexAttention-style mask_mod / score_mod in a Python file,
// compiled by LibTorch's TorchScript frontend and translated into CuIR expressions; or, for
// variants the mods cannot express, a `reference(q, k, v, scale, ...)` function computing the
// whole attention, which only the oracle runs (the LLM proposer writes its CuIR program).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "cuir/ir/config.h"
#include "cuir/ir/dtype.h"
#include "cuir/ir/expr.h"
#include "cuir/spec/digest.h"  // Sha256Hex

namespace torch::jit {
struct CompilationUnit;
}

namespace cubridge::spec {

using cuir::ExprPtr;
using cuir::SourceLoc;
using cuir::Type;

// A scalar keyword parameter: `window: int = 256`. The value may be overridden by the job.
struct SpecParam {
  std::string name;
  Type type = Type::kInt;  // int, float or bool
  std::variant<bool, int64_t, double> value;
  SourceLoc loc;
};

// A tensor parameter without default (`doc`, `slopes`, `bias`): a captured tensor whose values,
// shape and dtype come with the job. Its dtype is the job's (int32 where the job names none: the
// dtype decides how the spec translates, `slopes[h] * x` is float for a float tensor); its rank is
// what the spec's indexing says: every use indexes it with the same number of integer
// expressions (`table[h, bucket]`: 2), a rank-0 tensor is used as a value.
struct SpecBuffer {
  std::string name;
  cuir::TensorDType dtype = cuir::TensorDType::kInt32;
  int rank = -1;     // -1: the spec never reads it
  SourceLoc loc;     // the parameter
  SourceLoc use_loc;  // the first use, which fixed the rank
};

// Buffer dtypes a job gives (name -> dtype); absent names are int32.
using BufferDTypes = std::map<std::string, cuir::TensorDType>;

struct Spec {
  std::string path;    // file it came from (for messages)
  std::string source;  // full text as read

  // Translated bodies, over canonical names: b, h, q_idx, kv_idx (and `score` for score_mod),
  // the params' and buffers' own names. Null when the function is absent.
  ExprPtr mask;   // bool
  ExprPtr score;  // float
  SourceLoc mask_loc, score_loc;  // the `def` lines

  // A `reference(q, k, v, scale: float, <scalar params>)` spec: mask and score stay null, the
  // rules do not cover it, the oracle calls the compiled function. It returns O [B, Hq, Sq, D]
  // or (O, LSE [B, Hq, Sq]); k and v come with Hkv heads (it repeats them itself for GQA).
  bool has_reference = false;
  SourceLoc reference_loc;     // the `def` line
  std::string reference_code;  // its TorchScript graph, inlined, without source positions:
                               // what the spec hash takes in place of the translated mods

  std::vector<SpecParam> params;    // union over both functions (or the reference's), each once
  std::vector<SpecBuffer> buffers;  // likewise; always empty for a reference spec

  // The compiled TorchScript functions, kept for the oracle.
  std::shared_ptr<torch::jit::CompilationUnit> compiled;

  const SpecParam* FindParam(const std::string& name) const;
};

// Reads and compiles a spec file. Errors are INVALID_ARGUMENT "file:line:col: what (how to fix)";
// an unreadable file is NOT_FOUND / PERMISSION_DENIED with the path.
// `dtypes`: the job's buffer dtypes (BufferDTypesOf in tensors.h reads them off its sources).
absl::StatusOr<Spec> LoadSpecFile(const std::string& path, const BufferDTypes& dtypes = {});
absl::StatusOr<Spec> LoadSpecSource(const std::string& source, const std::string& path,
                                    const BufferDTypes& dtypes = {});

// Per dimension of a buffer the spec reads, the least size its indexing reaches, as an
// expression of the builtins (batch, heads_q, seqlen_q, seqlen_kv, ...) with the parameters'
// current values; null where an index depends on data (another buffer's values). Python's
// negative indices count: `ids[-1]` reaches size 1. Empty for an unused buffer.
std::vector<ExprPtr> BufferExtents(const Spec& spec, const SpecBuffer& b);
// Where the spec indexes buffer `name` (first use), with the index text, for messages.
std::string BufferUseText(const Spec& spec, const std::string& name);

// Overrides parameter values from "name=value" strings (the job's --param flags).
absl::Status OverrideParams(Spec& spec, const std::vector<std::string>& assignments);

// sha256 (hex) over the canonical form: the translated expressions with parameter values
// substituted and buffers renamed by position (for a reference spec: its TorchScript code and the
// parameter values), the kernel-relevant config (head_dim, dtype, heads_q, heads_kv, softmax
// scale) and the ruleset version. See docs/spec.md.
std::string SpecHash(const Spec& spec, const cuir::AttentionConfig& config,
                     const std::string& ruleset_version);
// Each buffer's name in the canonical form (buf0, buf1, ...: by first use, then the unused ones):
// two specs with one hash may name and order their buffers differently, and a kernel cached for
// one is bound to the other's tensors through these.
std::map<std::string, std::string> CanonicalBufferNames(const Spec& spec);
// The canonical text that SpecHash hashes (also stored in reports for debugging).
std::string CanonicalForm(const Spec& spec, const cuir::AttentionConfig& config,
                          const std::string& ruleset_version);

}  // namespace cubridge::spec
