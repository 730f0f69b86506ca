// Random attention inputs and the values of the spec's buffers.
#include "cuir/spec/tensors.h"

#include <ATen/CPUGeneratorImpl.h>

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cuir/files/torch_save.h"
#include "cuir/ir/eval.h"
#include "cuir/ir/status_util.h"
#include "cuir/spec/internal.h"

namespace cubridge::spec {
namespace {

// The most elements a buffer's value takes (a random source's shape, a tensor file's tensor).
constexpr int64_t kMaxBufferElements = int64_t{1} << 31;

torch::ScalarType InputDtype(cuir::DType d) {
  return d == cuir::DType::kBF16 ? torch::kBFloat16 : torch::kHalf;
}

// The int sources (documents, values, files) give int32, what token ids and lengths fit in and
// kernels read at half the bytes; a larger value needs a tensor file of int64.
absl::StatusOr<torch::Tensor> Int32(const std::vector<int64_t>& values, const std::string& where) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < INT32_MIN || values[i] > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": value #", i + 1, " (", values[i], ") does not fit in int32; give int64 values "
          "as a tensor file (tensor:PATH, torch.save of an int64 tensor)"));
    }
  }
  return torch::tensor(values, torch::kInt64).to(torch::kInt32);
}

// A few documents (1 to 5) of random lengths: ids 0,0,..,1,1,..; nondecreasing.
torch::Tensor RandomDocuments(int64_t length, at::Generator& gen) {
  if (length <= 1) return torch::zeros({length}, torch::kInt32);
  const int64_t docs = 1 + torch::randint(0, std::min<int64_t>(5, length), {1}, gen).item<int64_t>();
  const auto cuts = torch::randperm(length - 1, gen, torch::kInt64).slice(0, 0, docs - 1) + 1;
  auto ids = torch::zeros({length}, torch::kInt64);
  ids.index_put_({cuts}, 1);
  return ids.cumsum(0).to(torch::kInt32);
}

absl::StatusOr<std::vector<int64_t>> ParseInts(const std::string& text, const std::string& where) {
  std::vector<int64_t> out;
  for (absl::string_view tok : absl::StrSplit(text, absl::ByAnyChar(", \t\r\n"), absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(tok, &v)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": value #", out.size() + 1, " `", tok,
                                                     "` is not an integer"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> ReadIntsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("buffer file ", path, " cannot be read"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseInts(ss.str(), path);
}

absl::StatusOr<torch::Tensor> DocumentsFromLengths(const std::vector<int64_t>& lengths,
                                                   const std::string& where) {
  std::vector<int64_t> ids;
  for (size_t d = 0; d < lengths.size(); ++d) {
    if (lengths[d] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": document lengths must be positive, #", d + 1, " is ", lengths[d]));
    }
    ids.insert(ids.end(), lengths[d], static_cast<int64_t>(d));
  }
  return Int32(ids, where);
}

struct ParsedSource {
  std::string kind, arg;
};

ParsedSource Split(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return {spec, ""};
  return {spec.substr(0, colon), spec.substr(colon + 1)};
}

absl::Status UnknownSource(const std::string& where) {
  return absl::InvalidArgumentError(absl::StrCat(
      where, ": unknown source; use random, random:DTYPE, random:DTYPE[D0,D1,..], lengths:A,B,.. "
             "(document lengths), values:1,2,.., file:PATH (integers) or tensor:PATH (torch.save)"));
}

// `random:DTYPE` or `random:DTYPE[D0,D1,...]`.
absl::StatusOr<std::pair<cuir::TensorDType, std::optional<std::vector<int64_t>>>> RandomArg(
    const std::string& arg, const std::string& where) {
  const size_t open = arg.find('[');
  const std::string name = arg.substr(0, open);
  const auto dtype = cuir::TensorDTypeFromName(name);
  if (!dtype) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": unknown dtype `", name, "`; use one of ",
                                                   cuir::TensorDTypeNames()));
  }
  if (open == std::string::npos) return std::pair{*dtype, std::optional<std::vector<int64_t>>()};
  if (arg.back() != ']') {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": write the shape as random:", name, "[D0,D1,..]"));
  }
  auto dims = ParseInts(arg.substr(open + 1, arg.size() - open - 2), where);
  if (!dims.ok()) return dims.status();
  if (dims->size() > cuir::kMaxBufferRank) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", dims->size(),
                                                   " dimensions; at most ", cuir::kMaxBufferRank));
  }
  int64_t elements = 1;
  for (int64_t d : *dims) {
    if (d < 0 || d > kMaxBufferElements) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": dimension ", d, " out of range"));
    }
    elements *= std::max<int64_t>(d, 1);
    if (elements > kMaxBufferElements) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": more than 2^31 elements"));
    }
  }
  return std::pair{*dtype, std::optional<std::vector<int64_t>>(*dims)};
}

// A value's bytes as they are: little-endian elements, this machine's order.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "values are little-endian bytes");
absl::StatusOr<torch::Tensor> ValueTensor(const cuir::TensorValue& v, const std::string& where) {
  if (auto s = cuir::CheckTensorValue(v, where); !s.ok()) return s;
  torch::Tensor t = torch::empty(v.shape, TorchDType(v.dtype));
  if (!v.data.empty()) std::memcpy(t.data_ptr(), v.data.data(), v.data.size());
  return t;
}

absl::StatusOr<torch::Tensor> LoadTensorFile(const std::string& path, const std::string& where) {
  // CuBridge's own reader of torch.save's format (cuir/files/torch_save.h, fuzzed), not
  // LibTorch's unpickler: it checks every length and count before it allocates and says what is
  // wrong whichever PyTorch wrote the file (LibTorch 2.11 threw "Expected length to be 8, got 5"
  // at a storage of 2^32 elements, whose count pickles in 5 bytes).
  files::TorchSaveOptions options;
  options.max_elements = kMaxBufferElements;
  options.max_bytes = kMaxBufferElements * 8;  // the widest buffer dtype's (int64) bytes
  auto v = files::ReadTorchSaveFile(path, options);
  if (!v.ok()) return cuir::Prefixed(where, v.status());
  return ValueTensor(*v, where);
}

torch::Tensor RandomTensor(cuir::TensorDType dtype, const std::vector<int64_t>& shape,
                           int64_t int_range, at::Generator& gen) {
  switch (cuir::ElementType(dtype)) {
    case Type::kFloat: return torch::randn(shape, gen, torch::kFloat32).to(TorchDType(dtype));
    case Type::kBool: return torch::randint(0, 2, shape, gen, torch::kInt64).to(torch::kBool);
    default: return torch::randint(0, int_range + 1, shape, gen, torch::kInt64).to(TorchDType(dtype));
  }
}

absl::StatusOr<torch::Tensor> BufferValues(const Spec& spec, const SpecBuffer& b,
                                           const BufferSource& src,
                                           const cuir::AttentionConfig& config, at::Generator& gen) {
  const std::string where = absl::StrCat("buffer `", b.name, "` source `", src.Text(), "`");
  if (src.value) return ValueTensor(*src.value, where);
  const auto [kind, arg] = Split(src.spec);
  std::vector<int64_t> shape = RequiredBufferShape(spec, b, config);
  const int64_t tokens = std::max(config.seqlen_q, config.seqlen_kv);
  for (int64_t& d : shape) d = d < 0 ? tokens : d;  // reach unknown: one per token
  if (b.rank < 0) shape = {tokens};
  if (src.spec == "random") {
    if (shape.size() == 1) return RandomDocuments(shape[0], gen);
    return RandomTensor(cuir::TensorDType::kInt32, shape, tokens, gen);
  }
  if (kind == "random") {
    auto r = RandomArg(arg, where);
    if (!r.ok()) return r.status();
    return RandomTensor(r->first, r->second.value_or(shape), tokens, gen);
  }
  if (kind == "tensor") return LoadTensorFile(arg, where);
  if (kind == "lengths" || kind == "values" || kind == "file") {
    auto ints = kind == "file" ? ReadIntsFile(arg) : ParseInts(arg, where);
    if (!ints.ok()) return ints.status();
    if (kind == "lengths") return DocumentsFromLengths(*ints, where);
    return Int32(*ints, where);
  }
  return UnknownSource(where);
}

// A tensor of `dtype` (named `dtype_name`; nullopt: no buffer dtype) and `sizes` against the
// spec: dtype, rank, and the sizes the indexing reaches. `what` names it ("buffer `x` from ..").
absl::Status CheckAgainstSpec(const Spec& spec, const SpecBuffer& b, const std::string& what,
                              std::optional<cuir::TensorDType> dtype, const std::string& dtype_name,
                              c10::IntArrayRef sizes, const cuir::AttentionConfig& config) {
  if (!dtype || *dtype != b.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", dtype_name, " but the spec was loaded for ",
        cuir::TensorDTypeName(b.dtype), " (load the spec with the job's buffer dtypes: "
        "BufferDTypesOf)"));
  }
  if (b.rank < 0) return absl::OkStatus();  // the spec never reads it
  const int64_t rank = static_cast<int64_t>(sizes.size());
  if (rank != b.rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " has shape ", internal::ShapeText(sizes), " (rank ", rank, ") but the spec indexes it ",
        b.rank == 0 ? "as a value (rank 0)" : absl::StrCat("with ", b.rank, " indices"), ", as in ",
        BufferUseText(spec, b.name), ": give a tensor of rank ", b.rank));
  }
  const std::vector<int64_t> need = RequiredBufferShape(spec, b, config);
  for (size_t d = 0; d < need.size(); ++d) {
    if (need[d] < 0 || sizes[d] >= need[d]) continue;
    std::vector<std::string> least;
    for (size_t i = 0; i < need.size(); ++i) {
      least.push_back(need[i] < 0 ? std::to_string(sizes[i]) : std::to_string(need[i]));
    }
    const std::vector<ExprPtr> extents = BufferExtents(spec, b);
    return absl::InvalidArgumentError(absl::StrCat(
        what, " has shape ", internal::ShapeText(sizes), " but the spec's indexing (",
        BufferUseText(spec, b.name), ") reaches size ", need[d], " along dimension ", d, " (",
        cuir::PrintExpr(extents[d]), " at ", config.ToString(), "): give at least [",
        absl::StrJoin(least, ", "), "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckBuffer(const Spec& spec, const SpecBuffer& b, const BufferSource& src,
                         const torch::Tensor& t, const cuir::AttentionConfig& config) {
  return CheckAgainstSpec(spec, b, absl::StrCat("buffer `", b.name, "` from `", src.Text(), "`"),
                          TensorDTypeOf(t.scalar_type()), c10::toString(t.scalar_type()), t.sizes(),
                          config);
}

// Every source names a buffer of the spec.
absl::Status CheckNames(const Spec& spec, const std::map<std::string, BufferSource>& sources) {
  for (const auto& source : sources) {
    const std::string& name = source.first;  // a lambda cannot capture a structured binding in C++17
    if (std::any_of(spec.buffers.begin(), spec.buffers.end(),
                    [&](const SpecBuffer& b) { return b.name == name; })) {
      continue;
    }
    std::vector<std::string> names;
    for (const SpecBuffer& b : spec.buffers) names.push_back(b.name);
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer source for `", name, "`: ", spec.path, " has no such buffer; ",
        names.empty() ? "it has no buffers" : "its buffers: " + absl::StrJoin(names, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace

BufferSource BufferSource::Of(cuir::TensorValue v) {
  BufferSource s;
  s.spec.clear();
  s.value = std::move(v);
  return s;
}

std::string BufferSource::Text() const {
  return value ? absl::StrCat(cuir::TensorValueText(value->dtype, value->shape), " value") : spec;
}

std::string internal::ShapeText(c10::IntArrayRef shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

torch::ScalarType TorchDType(cuir::TensorDType d) {
  switch (d) {
    case cuir::TensorDType::kInt32: return torch::kInt32;
    case cuir::TensorDType::kInt64: return torch::kInt64;
    case cuir::TensorDType::kBool: return torch::kBool;
    case cuir::TensorDType::kFloat32: return torch::kFloat32;
    case cuir::TensorDType::kBFloat16: return torch::kBFloat16;
    case cuir::TensorDType::kFloat16: return torch::kHalf;
  }
  return torch::kInt64;
}

std::optional<cuir::TensorDType> TensorDTypeOf(torch::ScalarType t) {
  for (int i = 0; i < cuir::kTensorDTypeCount; ++i) {
    const auto d = static_cast<cuir::TensorDType>(i);
    if (TorchDType(d) == t) return d;
  }
  return std::nullopt;
}

std::vector<int64_t> RequiredBufferShape(const Spec& spec, const SpecBuffer& b,
                                         const cuir::AttentionConfig& config) {
  cuir::ScalarEnv env;
  for (const auto& [name, value] : cuir::BuiltinSizes(config)) env.vars[name] = value;
  std::vector<int64_t> shape;
  for (const ExprPtr& extent : BufferExtents(spec, b)) {
    auto n = extent ? cuir::EvalInt(extent, env) : absl::StatusOr<int64_t>(-1);
    shape.push_back(n.ok() ? *n : -1);
  }
  return shape;
}

std::map<std::string, BufferSource> SourcesForShape(
    const Spec& spec, const std::map<std::string, BufferSource>& job_sources,
    const cuir::AttentionConfig& job, const cuir::AttentionConfig& shape) {
  if (shape.batch == job.batch && shape.seqlen_q == job.seqlen_q &&
      shape.seqlen_kv == job.seqlen_kv) {
    return job_sources;
  }
  std::map<std::string, BufferSource> out;
  for (const SpecBuffer& b : spec.buffers) {
    // int32 keeps plain `random` (documents for token-indexed ids), the others name their dtype.
    out[b.name].spec = b.dtype == cuir::TensorDType::kInt32
                           ? "random"
                           : absl::StrCat("random:", cuir::TensorDTypeName(b.dtype));
  }
  return out;
}

absl::StatusOr<BufferDTypes> BufferDTypesOf(const std::map<std::string, BufferSource>& sources) {
  BufferDTypes out;
  for (const auto& [name, src] : sources) {
    const std::string where = absl::StrCat("buffer `", name, "` source `", src.Text(), "`");
    const auto [kind, arg] = Split(src.spec);
    if (src.value) {
      out[name] = src.value->dtype;
    } else if (kind == "random" && !arg.empty()) {
      auto r = RandomArg(arg, where);
      if (!r.ok()) return r.status();
      out[name] = r->first;
    } else if (kind == "tensor") {
      auto t = LoadTensorFile(arg, where);
      if (!t.ok()) return t.status();
      out[name] = *TensorDTypeOf(t->scalar_type());
    } else if (kind == "random" || kind == "lengths" || kind == "values" || kind == "file") {
      out[name] = cuir::TensorDType::kInt32;
    } else {
      return UnknownSource(where);
    }
  }
  return out;
}

absl::Status CheckBufferSources(const Spec& spec, const cuir::AttentionConfig& config,
                                const std::map<std::string, BufferSource>& sources) {
  if (auto s = CheckNames(spec, sources); !s.ok()) return s;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0);
  for (const SpecBuffer& b : spec.buffers) {
    auto it = sources.find(b.name);
    if (it == sources.end()) continue;  // random values fit by construction
    auto values = BufferValues(spec, b, it->second, config, gen);
    if (!values.ok()) return values.status();
    if (auto s = CheckBuffer(spec, b, it->second, *values, config); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckBufferValueShapes(const Spec& spec, const cuir::AttentionConfig& config,
                                    const std::map<std::string, BufferSource>& sources) {
  if (auto s = CheckNames(spec, sources); !s.ok()) return s;
  for (const SpecBuffer& b : spec.buffers) {
    auto it = sources.find(b.name);
    if (it == sources.end() || !it->second.value) continue;
    const cuir::TensorValue& v = *it->second.value;
    const std::string what = absl::StrCat("buffer `", b.name, "` from `", it->second.Text(), "`");
    if (auto n = cuir::TensorElements(v.shape, what); !n.ok()) return n.status();
    if (auto s = CheckAgainstSpec(spec, b, what, v.dtype, cuir::TensorDTypeName(v.dtype), v.shape, config);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<AttentionInputs> MakeInputs(const Spec& spec, const cuir::AttentionConfig& config,
                                           const std::map<std::string, BufferSource>& sources,
                                           uint64_t seed) {
  if (auto s = cuir::ValidateConfig(config); !s.ok()) return s;
  if (auto s = CheckNames(spec, sources); !s.ok()) return s;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto normal = [&](int64_t heads, int64_t seqlen) {
    return torch::randn({config.batch, heads, seqlen, config.head_dim}, gen, torch::kFloat32)
        .to(InputDtype(config.dtype));
  };
  AttentionInputs in;
  in.q = normal(config.heads_q, config.seqlen_q);
  in.k = normal(config.heads_kv, config.seqlen_kv);
  in.v = normal(config.heads_kv, config.seqlen_kv);
  for (const SpecBuffer& b : spec.buffers) {
    auto it = sources.find(b.name);
    const BufferSource src = it == sources.end() ? BufferSource{} : it->second;
    auto values = BufferValues(spec, b, src, config, gen);
    if (!values.ok()) return values.status();
    if (auto s = CheckBuffer(spec, b, src, *values, config); !s.ok()) return s;
    in.buffers[b.name] = *values;
  }
  return in;
}

}  // namespace cubridge::spec
