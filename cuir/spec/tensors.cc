// Random attention inputs and the values of the spec's buffers.
#include "cuir/spec/tensors.h"

#include <ATen/CPUGeneratorImpl.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cubridge::spec {
namespace {

torch::ScalarType TorchDtype(cuir::DType d) {
  return d == cuir::DType::kBF16 ? torch::kBFloat16 : torch::kHalf;
}

torch::Tensor Int64(const std::vector<int64_t>& values) {
  return torch::tensor(values, torch::kInt64);
}

// A few documents (1 to 5) of random lengths: ids 0,0,..,1,1,..; nondecreasing.
torch::Tensor RandomDocuments(int64_t length, at::Generator& gen) {
  if (length <= 1) return torch::zeros({length}, torch::kInt64);
  const int64_t docs = 1 + torch::randint(0, std::min<int64_t>(5, length), {1}, gen).item<int64_t>();
  const auto cuts = torch::randperm(length - 1, gen, torch::kInt64).slice(0, 0, docs - 1) + 1;
  auto ids = torch::zeros({length}, torch::kInt64);
  ids.index_put_({cuts}, 1);
  return ids.cumsum(0);
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
  return Int64(ids);
}

absl::StatusOr<torch::Tensor> BufferValues(const SpecBuffer& b, const BufferSource& src,
                                           int64_t length, at::Generator& gen) {
  const std::string where = absl::StrCat("buffer `", b.name, "` source `", src.spec, "`");
  const size_t colon = src.spec.find(':');
  const std::string kind = src.spec.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : src.spec.substr(colon + 1);
  if (kind == "random" && colon == std::string::npos) return RandomDocuments(length, gen);
  if (kind == "lengths" || kind == "values" || kind == "file") {
    auto ints = kind == "file" ? ReadIntsFile(arg) : ParseInts(arg, where);
    if (!ints.ok()) return ints.status();
    if (kind == "lengths") return DocumentsFromLengths(*ints, where);
    return Int64(*ints);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      where, ": unknown source; use random, lengths:A,B,.. (document lengths), values:1,2,.. or "
             "file:PATH (whitespace-separated integers)"));
}

std::string LengthReason(const SpecBuffer& b, const cuir::AttentionConfig& c) {
  std::vector<std::string> uses;
  if (b.indexed_by_q) uses.push_back(absl::StrCat("seqlen_q = ", c.seqlen_q));
  if (b.indexed_by_kv) uses.push_back(absl::StrCat("seqlen_kv = ", c.seqlen_kv));
  if (uses.empty()) return "max(seqlen_q, seqlen_kv)";
  return absl::StrCat("indexed by ", b.indexed_by_q ? "q_idx" : "",
                      b.indexed_by_q && b.indexed_by_kv ? " and " : "",
                      b.indexed_by_kv ? "kv_idx" : "", ": ", absl::StrJoin(uses, ", "));
}

}  // namespace

int64_t RequiredBufferLength(const SpecBuffer& b, const cuir::AttentionConfig& config) {
  int64_t n = 0;
  if (b.indexed_by_q) n = std::max(n, config.seqlen_q);
  if (b.indexed_by_kv) n = std::max(n, config.seqlen_kv);
  return n > 0 ? n : std::max(config.seqlen_q, config.seqlen_kv);
}

absl::StatusOr<AttentionInputs> MakeInputs(const Spec& spec, const cuir::AttentionConfig& config,
                                           const std::map<std::string, BufferSource>& sources,
                                           uint64_t seed) {
  if (auto s = cuir::ValidateConfig(config); !s.ok()) return s;
  for (const auto& [name, src] : sources) {
    bool known = false;
    std::vector<std::string> names;
    for (const SpecBuffer& b : spec.buffers) {
      known |= b.name == name;
      names.push_back(b.name);
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer source for `", name, "`: ", spec.path, " has no such buffer; ",
          names.empty() ? "it has no buffers" : "its buffers: " + absl::StrJoin(names, ", ")));
    }
  }
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto normal = [&](int64_t heads, int64_t seqlen) {
    return torch::randn({config.batch, heads, seqlen, config.head_dim}, gen, torch::kFloat32)
        .to(TorchDtype(config.dtype));
  };
  AttentionInputs in;
  in.q = normal(config.heads_q, config.seqlen_q);
  in.k = normal(config.heads_kv, config.seqlen_kv);
  in.v = normal(config.heads_kv, config.seqlen_kv);
  for (const SpecBuffer& b : spec.buffers) {
    auto it = sources.find(b.name);
    const BufferSource src = it == sources.end() ? BufferSource{} : it->second;
    const int64_t length = RequiredBufferLength(b, config);
    auto values = BufferValues(b, src, length, gen);
    if (!values.ok()) return values.status();
    if (values->numel() != length) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer `", b.name, "` from `", src.spec, "` has ", values->numel(),
          " values but needs ", length, " (", LengthReason(b, config), ")"));
    }
    in.buffers[b.name] = *values;
  }
  return in;
}

}  // namespace cubridge::spec
