// Running the user's compiled spec functions on whole index tensors (oracle and probe).
#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/types.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cuir/spec/internal.h"

namespace cubridge::spec::internal {

IndexGrid MakeIndexGrid(int64_t b0, int64_t batch, int64_t h0, int64_t heads, int64_t seqlen_q,
                        int64_t seqlen_kv, torch::Device device) {
  const auto opt = torch::TensorOptions().dtype(torch::kInt64).device(device);
  return IndexGrid{torch::arange(b0, b0 + batch, opt).view({batch, 1, 1, 1}),
                   torch::arange(h0, h0 + heads, opt).view({1, heads, 1, 1}),
                   torch::arange(seqlen_q, opt).view({1, 1, seqlen_q, 1}),
                   torch::arange(seqlen_kv, opt).view({1, 1, 1, seqlen_kv})};
}

namespace {

torch::jit::IValue ParamValue(const SpecParam& p) {
  return std::visit([](auto v) { return torch::jit::IValue(v); }, p.value);
}

absl::StatusOr<std::vector<torch::jit::IValue>> BuildArguments(
    const Spec& spec, const torch::jit::FunctionSchema& schema,
    std::vector<torch::jit::IValue> positional,
    const std::map<std::string, torch::Tensor>& buffers) {
  std::vector<torch::jit::IValue> args = std::move(positional);
  for (size_t i = args.size(); i < schema.arguments().size(); ++i) {
    const std::string& name = schema.arguments()[i].name();
    if (const SpecParam* p = spec.FindParam(name)) {
      args.push_back(ParamValue(*p));
    } else if (auto it = buffers.find(name); it != buffers.end()) {
      // Integer tensors go in as int64: LibTorch 1.13 indexes with int64 tensors only (torch 2
      // takes int32 too), and an int32 element meets the int64 index tensors anyway.
      const torch::Tensor& t = it->second;
      const bool int32 = t.scalar_type() == torch::kInt32;
      args.emplace_back(int32 ? t.to(torch::kInt64) : t);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          spec.path, ": no values for buffer `", name, "` (give them with the job's buffer sources)"));
    }
  }
  return args;
}

absl::StatusOr<torch::Tensor> ResultTensor(const torch::jit::IValue& r, const std::string& what) {
  if (r.isTensor()) return r.toTensor();
  if (r.isBool()) return torch::scalar_tensor(r.toBool(), torch::kBool);
  if (r.isInt()) return torch::scalar_tensor(r.toInt(), torch::kInt64);
  if (r.isDouble()) return torch::scalar_tensor(r.toDouble(), torch::kFloat64);
  return absl::InvalidArgumentError(
      absl::StrCat(what, " returned a ", r.tagKind(), "; it must return a tensor"));
}

// What usually causes a TorchScript runtime error in a spec, and its fix.
std::string Hint(const std::string& error) {
  const std::string lower = absl::AsciiStrToLower(error);
  if (absl::StrContains(lower, "out of bounds")) {
    return " (an index leaves a captured tensor: give a tensor that covers every index the "
           "spec reads at this shape, or keep the index in range, e.g. with torch.clamp)";
  }
  if (absl::StrContains(lower, "scalar") || absl::StrContains(lower, "convert")) {
    return " (spec functions run on broadcast index tensors, as under FlexAttention's vmap: use "
           "torch.minimum/torch.maximum instead of min/max and x.float()/x.int() instead of "
           "float(x)/int(x))";
  }
  return "";
}

}  // namespace

absl::StatusOr<torch::Tensor> CallSpecFunction(const Spec& spec, bool is_score,
                                               const IndexGrid& grid, const torch::Tensor& score,
                                               const std::map<std::string, torch::Tensor>& buffers) {
  const char* name = is_score ? kScoreFn : kMaskFn;
  torch::jit::Function* fn = spec.compiled ? spec.compiled->find_function(name) : nullptr;
  if (fn == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(spec.path, ": the spec has no ", name));
  }
  std::vector<torch::jit::IValue> positional;
  if (is_score) positional.emplace_back(score);
  for (const torch::Tensor& t : {grid.b, grid.h, grid.q, grid.kv}) positional.emplace_back(t);
  auto args = BuildArguments(spec, fn->getSchema(), std::move(positional), buffers);
  if (!args.ok()) return args.status();

  // No grad guard here: autograd records only where the caller's tensors require grad (the
  // backward oracle); the forward oracle and the frontend's probes run without.
  DefaultDoubleGuard double_default;
  torch::jit::IValue result;
  try {
    result = (*fn)(std::move(*args));
  } catch (const std::exception& e) {
    const TorchScriptError err = ParseTorchScriptError(e.what(), /*innermost_last=*/true);
    const std::string message =
        absl::StrCat(name, " failed on whole index tensors: ", err.headline, Hint(err.headline));
    if (err.line > 0) return ErrorAt(cuir::SourceLoc{spec.path, err.line, err.col}, message);
    return absl::InvalidArgumentError(absl::StrCat(spec.path, ": ", message));
  }
  auto tensor = ResultTensor(result, name);
  if (!tensor.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(spec.path, ": ", tensor.status().message()));
  }
  return tensor;
}

namespace {

// Tensors the reference creates itself (torch.zeros, torch.full) follow q's float dtype, as a
// PyTorch user calling it with q would see with that default.
class DefaultDtypeGuard {
 public:
  explicit DefaultDtypeGuard(caffe2::TypeMeta dtype) : saved_(torch::get_default_dtype()) {
    torch::set_default_dtype(dtype);
  }
  ~DefaultDtypeGuard() { torch::set_default_dtype(saved_); }
  DefaultDtypeGuard(const DefaultDtypeGuard&) = delete;
  DefaultDtypeGuard& operator=(const DefaultDtypeGuard&) = delete;

 private:
  caffe2::TypeMeta saved_;
};

std::string Shape(c10::IntArrayRef sizes) { return c10::str(sizes); }

}  // namespace

absl::StatusOr<ReferenceResult> CallReference(const Spec& spec, const torch::Tensor& q,
                                              const torch::Tensor& k, const torch::Tensor& v,
                                              double scale) {
  torch::jit::Function* fn = spec.compiled ? spec.compiled->find_function(kReferenceFn) : nullptr;
  if (fn == nullptr || !spec.has_reference) {
    return absl::FailedPreconditionError(absl::StrCat(spec.path, ": the spec has no reference"));
  }
  const std::string at = absl::StrCat(spec.reference_loc.ToString(), ": ");
  auto args = BuildArguments(spec, fn->getSchema(), {q, k, v, scale}, {});
  if (!args.ok()) return args.status();

  DefaultDtypeGuard dtype_default(q.dtype());  // grads as in CallSpecFunction
  torch::jit::IValue result;
  try {
    result = (*fn)(std::move(*args));
  } catch (const std::exception& e) {
    const TorchScriptError err = ParseTorchScriptError(e.what(), /*innermost_last=*/true);
    const std::string message = absl::StrCat(
        "reference failed on q ", Shape(q.sizes()), ", k and v ", Shape(k.sizes()), ": ",
        err.headline,
        q.size(1) != k.size(1)
            ? " (q has more heads than k and v: with GQA the reference repeats k and v itself, "
              "e.g. k.repeat_interleave(q.size(1) // k.size(1), dim=1))"
            : "");
    if (err.line > 0) return ErrorAt(cuir::SourceLoc{spec.path, err.line, err.col}, message);
    return absl::InvalidArgumentError(at + message);
  }

  const std::vector<int64_t> o_shape = q.sizes().vec();
  const std::vector<int64_t> lse_shape(o_shape.begin(), o_shape.end() - 1);
  const std::string want = absl::StrCat(
      "; return O ", Shape(o_shape), " ([batch, heads_q, seqlen_q, head_dim], shaped like q) or "
      "the tuple (O, LSE) with LSE ", Shape(lse_shape), " ([batch, heads_q, seqlen_q])");
  ReferenceResult out;
  if (result.isTensor()) {
    out.o = result.toTensor();
  } else if (result.isTuple() && result.toTupleRef().elements().size() == 2 &&
             result.toTupleRef().elements()[0].isTensor() &&
             result.toTupleRef().elements()[1].isTensor()) {
    out.o = result.toTupleRef().elements()[0].toTensor();
    out.lse = result.toTupleRef().elements()[1].toTensor();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(at, "reference returned ", result.type()->str(), want));
  }
  for (const auto& [name, t, shape] : {std::tuple{"O", out.o, o_shape}, {"LSE", out.lse, lse_shape}}) {
    if (!t.defined()) continue;
    if (t.sizes().vec() != shape) {
      return absl::InvalidArgumentError(absl::StrCat(at, "reference returned ", name, " of shape ",
                                                     Shape(t.sizes()), ", expected ",
                                                     Shape(shape), want));
    }
    if (!t.is_floating_point()) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, "reference returned ", name, " of dtype ", c10::toString(t.scalar_type()),
          "; it must hold floating-point values (compute in q's dtype)"));
    }
  }
  return out;
}

}  // namespace cubridge::spec::internal
