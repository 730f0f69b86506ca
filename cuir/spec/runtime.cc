// Running the user's compiled spec functions on whole index tensors (oracle and probe).
#include <torch/csrc/jit/api/compilation_unit.h>

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
      args.emplace_back(it->second);
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
    return " (a buffer holds one value per token, seqlen_q or seqlen_kv of them: its index must "
           "stay within them)";
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

  torch::NoGradGuard no_grad;
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

}  // namespace cubridge::spec::internal
