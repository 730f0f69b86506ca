#include "server/core/request.h"

#include <algorithm>
#include <cctype>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "absl/strings/str_cat.h"
#include "cuir/lower/lift.h"
#include "cuir/pipeline/proposer_names.h"
#include "cuir/spec/digest.h"
#include "cuir/spec/guard.h"
#include "service/contract/ids.h"

namespace cubridge::core {

// The task contract the coordinator shares with its workers.
using namespace contract;  // NOLINT(build/namespaces)
namespace {

absl::Status Over(const std::string& what, int64_t got, int64_t limit) {
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " is ", got, ", over this service's limit of ", limit));
}

absl::Status CheckLimits(const v1::SubmitJobRequest& r, const Limits& l) {
  const auto& s = r.spec();
  if (s.source().size() > l.max_source_bytes) {
    return Over("the spec source size (bytes)", s.source().size(), l.max_source_bytes);
  }
  if (s.params_size() > l.max_params) return Over("the number of params", s.params_size(), l.max_params);
  if (s.buffers_size() + s.tensors_size() > l.max_buffers) {
    return Over("the number of buffers (sources and values)", s.buffers_size() + s.tensors_size(),
                l.max_buffers);
  }
  for (const auto& [name, source] : s.buffers()) {
    if (source.size() > l.max_buffer_source_bytes) {
      return Over(absl::StrCat("buffer '", name, "' source size (bytes)"), source.size(),
                  l.max_buffer_source_bytes);
    }
  }
  size_t tensor_bytes = 0;
  for (const auto& [name, t] : s.tensors()) tensor_bytes += t.data().size();
  if (tensor_bytes > l.max_tensor_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the buffer values (spec.tensors) take ", tensor_bytes, " bytes together, over this "
        "service's limit of ", l.max_tensor_bytes, " bytes: give each tensor only the sizes the "
        "spec's indexing reaches at the job's shape (docs/spec.md), or ask the operator for a "
        "larger --max-tensor-mb"));
  }
  if (r.archs_size() > l.max_archs) return Over("the number of archs", r.archs_size(), l.max_archs);
  const auto& c = r.config();
  if (c.batch() > l.max_batch) return Over("batch", c.batch(), l.max_batch);
  if (c.heads_q() > l.max_heads) return Over("heads_q", c.heads_q(), l.max_heads);
  if (c.heads_kv() > l.max_heads) return Over("heads_kv", c.heads_kv(), l.max_heads);
  if (c.seqlen_q() > l.max_seqlen) return Over("seqlen_q", c.seqlen_q(), l.max_seqlen);
  if (c.seqlen_kv() > l.max_seqlen) return Over("seqlen_kv", c.seqlen_kv(), l.max_seqlen);
  return absl::OkStatus();
}

// Each buffer given by value, whole: a known dtype, its shape, exactly its bytes, bools 0 or 1;
// and given one way only.
absl::Status CheckTensors(const v1::VariantSpec& s) {
  for (const auto& [name, t] : s.tensors()) {
    const std::string what = absl::StrCat("buffer '", name, "' (spec.tensors)");
    if (auto source = s.buffers().find(name); source != s.buffers().end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " also has the source \"", source->second.substr(0, 80), "\" in spec.buffers: "
          "give each buffer either a source or its values"));
    }
    const auto dtype = TensorDTypeFromProto(t.dtype());
    if (!dtype) {
      const std::string known =
          v1::TensorDType_IsValid(t.dtype()) ? v1::TensorDType_Name(t.dtype()) + " " : "";
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": dtype ", known, "(", static_cast<int>(t.dtype()), ") is not a tensor dtype; set "
          "one of TENSOR_DTYPE_INT32, _INT64, _BOOL, _FLOAT32, _BFLOAT16, _FLOAT16"));
    }
    const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    if (auto st = cuir::CheckTensorData(*dtype, shape, t.data(), what); !st.ok()) return st;
  }
  return absl::OkStatus();
}

bool Identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// A lift job: the kernel instead of a spec, lifted by a model (only), keyed by what it checks.
absl::StatusOr<CheckedRequest> CheckLift(const v1::SubmitJobRequest& r, const Limits& limits,
                                         const cuir::AttentionConfig& config) {
  const auto& k = r.kernel();
  const std::string file = k.file_name().empty() ? "kernel.cu" : k.file_name();
  if (!r.spec().source().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request has both a spec and a kernel (", file, "): a job adapts a spec or lifts a "
        "kernel; send one of them"));
  }
  if (!r.proposer().empty() && r.proposer() != "llm") {
    return absl::InvalidArgumentError(absl::StrCat(
        "proposer \"", r.proposer(), "\" cannot lift a kernel: lifting is done by a language "
        "model; leave proposer empty or set \"llm\""));
  }
  if (k.source().size() > limits.max_source_bytes) {
    return Over("the kernel source size (bytes)", k.source().size(), limits.max_source_bytes);
  }
  if (k.source().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("kernel.source of ", file, " is empty"));
  }
  if (auto s = CheckUtf8(k.source(), file, "kernel source"); !s.ok()) return s;
  auto entries = lower::UserKernelEntries(file, k.source());
  if (!entries.ok()) return entries.status();
  CheckedRequest out;
  out.lift = true;
  out.config = config;
  out.kernel_name = KernelNameOf(r);
  if (!Identifier(out.kernel_name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel.name \"", out.kernel_name, "\" is not an identifier (letters, digits, _)"));
  }
  out.key.canonical_form = absl::StrCat("cubridge lift 1\nname ", out.kernel_name, "\nconfig ",
                                    config.ToString(), "\nsource ", k.source().size(), " bytes\n");
  out.key.spec_hash = spec::Sha256Hex(out.key.canonical_form + k.source());
  return out;
}

}  // namespace

absl::StatusOr<cuir::AttentionConfig> ConfigFromProto(const v1::AttentionConfig& p) {
  cuir::AttentionConfig c;
  // Zero is never a size: a field that is set says what it means, one left out takes the default.
  for (const auto& [name, has, value, out] :
       {std::tuple{"batch", p.has_batch(), p.batch(), &c.batch},
        std::tuple{"heads_q", p.has_heads_q(), p.heads_q(), &c.heads_q},
        std::tuple{"heads_kv", p.has_heads_kv(), p.heads_kv(), &c.heads_kv},
        std::tuple{"head_dim", p.has_head_dim(), p.head_dim(), &c.head_dim},
        std::tuple{"seqlen_q", p.has_seqlen_q(), p.seqlen_q(), &c.seqlen_q},
        std::tuple{"seqlen_kv", p.has_seqlen_kv(), p.seqlen_kv(), &c.seqlen_kv}}) {
    if (!has) continue;
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.", name, " must be a positive integer, got ", value,
          " (leave it out for the default)"));
    }
    *out = value;
  }
  if (!p.has_heads_kv()) c.heads_kv = c.heads_q;
  if (p.dtype() == "fp16") {
    c.dtype = cuir::DType::kFP16;
  } else if (!p.dtype().empty() && p.dtype() != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("config.dtype must be \"bf16\" or \"fp16\", got \"", p.dtype(), "\""));
  }
  c.softmax_scale = p.softmax_scale();
  if (auto s = cuir::ValidateConfig(c); !s.ok()) return absl::InvalidArgumentError(s.message());
  return c;
}

std::string KernelNameOf(const v1::SubmitJobRequest& r) {
  const auto& k = r.kernel();
  return k.name().empty() ? lower::KernelNameFromPath(k.file_name().empty() ? "kernel.cu" : k.file_name())
                          : k.name();
}

absl::StatusOr<CheckedRequest> CheckRequest(const v1::SubmitJobRequest& r, const Limits& limits) {
  if (auto s = CheckLimits(r, limits); !s.ok()) return s;
  if (!r.idempotency_key().empty()) {
    if (auto s = CheckIdempotencyKey(r.idempotency_key()); !s.ok()) return s;
  }
  auto config = ConfigFromProto(r.config());
  if (!config.ok()) return config.status();
  if (!v1::BackwardMode_IsValid(r.backward())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backward is ", static_cast<int>(r.backward()),
        ", not a BackwardMode (AUTO, OFF or REQUIRE; unset means AUTO)"));
  }
  if (r.has_kernel() && r.backward() != v1::BACKWARD_MODE_UNSPECIFIED &&
      r.backward() != v1::BACKWARD_MODE_AUTO) {
    return absl::InvalidArgumentError(
        "backward applies to adapt jobs; a lift job makes no kernels (leave it unset)");
  }
  if (r.has_kernel()) return CheckLift(r, limits, *config);
  const std::string file = r.spec().file_name().empty() ? "spec.py" : r.spec().file_name();
  if (r.spec().source().empty()) {
    return absl::InvalidArgumentError(
        "spec.source is empty: send the text of a spec file defining mask_mod and/or score_mod");
  }
  if (!r.proposer().empty()) {
    if (auto s = pipeline::CheckProposerName(r.proposer()); !s.ok()) return s;
  }
  if (auto s = CheckUtf8(r.spec().source(), file, "spec"); !s.ok()) return s;
  // Cheap and linear: what would overflow the frontend's stack is refused before a spec checker
  // spends a process on it.
  if (auto s = spec::GuardSpecSource(r.spec().source(), file); !s.ok()) return s;
  for (const auto& [name, source] : r.spec().buffers()) {
    if (source.rfind("file:", 0) == 0 || source.rfind("tensor:", 0) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer '", name, "': ", source.substr(0, source.find(':')), ": sources name files on "
          "the submitting machine; send the tensor's values in spec.tensors (cubridge-cli submit "
          "--buffer NAME=tensor:PATH reads a torch.save file and does), or values:1,2,.., "
          "lengths:A,B,.. or random:DTYPE[D0,..]"));
    }
  }
  if (auto s = CheckTensors(r.spec()); !s.ok()) return s;
  CheckedRequest out;
  out.config = *config;
  return out;
}

absl::StatusOr<cuir::TensorValue> TensorValueFromProto(const v1::TensorValue& t, const std::string& what) {
  const auto dtype = TensorDTypeFromProto(t.dtype());
  if (!dtype) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": dtype ", static_cast<int>(t.dtype()),
                                                   " is not a tensor dtype"));
  }
  return cuir::TensorValue{*dtype, {t.shape().begin(), t.shape().end()}, t.data()};
}

std::string RequestFingerprint(const v1::SubmitJobRequest& request) {
  v1::SubmitJobRequest keyless = request;
  keyless.clear_idempotency_key();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);  // params and buffers (maps) in key order
    keyless.SerializeToCodedStream(&coded);
  }
  return spec::Sha256Hex(bytes);
}

}  // namespace cubridge::core
