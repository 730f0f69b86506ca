#include "cuir/pipeline/verify.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <torch/types.h>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cuir/interp/interp.h"
#include "cuir/spec/oracle.h"

namespace cubridge::pipeline {
namespace {

std::vector<int64_t> Unravel(int64_t flat, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> idx(sizes.size());
  for (int i = static_cast<int>(sizes.size()) - 1; i >= 0; --i) {
    idx[i] = flat % sizes[i];
    flat /= sizes[i];
  }
  return idx;
}

}  // namespace

nlohmann::json ErrorJson(const OutputError& e, double atol, double rtol) {
  nlohmann::json worst = nlohmann::json::array();
  for (const auto& m : e.worst) {
    worst.push_back({{"index", m.index}, {"got", m.got}, {"want", m.want}});
  }
  return {{"max_abs", e.max_abs}, {"rel_l2", e.rel_l2},    {"violations", e.violations},
          {"unwritten", e.unwritten}, {"atol", atol}, {"rtol", rtol}, {"worst", worst}};
}

std::string ShapeName(const VerifyShape& s) {
  return absl::StrFormat("b=%d sq=%d skv=%d", s.batch, s.seqlen_q, s.seqlen_kv);
}

std::string DescribeError(const std::string& what, const OutputError& e) {
  std::string out = absl::StrFormat("%s: %d elements out of tolerance, %d unwritten, max abs %g",
                                    what, e.violations, e.unwritten, e.max_abs);
  for (const auto& m : e.worst) {
    out += absl::StrFormat("; at [%s] got %g want %g", absl::StrJoin(m.index, ","), m.got,
                           m.want);
  }
  return out;
}

namespace {

// Recomputed from every failure kind, so CompareShape and CheckOPadding may run in either order.
bool Passed(const ShapeResult& r) {
  return r.o.violations == 0 && r.o.unwritten == 0 && r.lse.violations == 0 &&
         r.lse.unwritten == 0 && r.o_padding_written == 0;
}

// The elements as integers of their width: NaNs then compare by their bits, not as unordered.
torch::Tensor Bits(const torch::Tensor& t) {
  const torch::ScalarType type = t.element_size() == 2   ? torch::kInt16
                                 : t.element_size() == 4 ? torch::kInt32
                                                         : torch::kInt64;
  return t.contiguous().view(type);
}

}  // namespace

Tolerance ToleranceFor(cuir::DType dtype, const VerifyOptions& o) {
  Tolerance t = dtype == cuir::DType::kBF16 ? Tolerance{1e-2, 1e-2, 1e-3, 1e-4}
                                            : Tolerance{2e-3, 2e-3, 1e-3, 1e-4};
  if (o.o_atol > 0) t.o_atol = o.o_atol;
  if (o.o_rtol > 0) t.o_rtol = o.o_rtol;
  return t;
}

nlohmann::json ConfigJson(const cuir::AttentionConfig& c) {
  return {{"batch", c.batch},         {"heads_q", c.heads_q},     {"heads_kv", c.heads_kv},
          {"head_dim", c.head_dim},   {"seqlen_q", c.seqlen_q},   {"seqlen_kv", c.seqlen_kv},
          {"dtype", cuir::DTypeName(c.dtype)}, {"softmax_scale", c.scale()}};
}

absl::StatusOr<cuir::AttentionConfig> ConfigFromJson(const nlohmann::json& j) {
  cuir::AttentionConfig c;
  try {
    c.batch = j.at("batch").get<int64_t>();
    c.heads_q = j.at("heads_q").get<int64_t>();
    c.heads_kv = j.at("heads_kv").get<int64_t>();
    c.head_dim = j.at("head_dim").get<int64_t>();
    c.seqlen_q = j.at("seqlen_q").get<int64_t>();
    c.seqlen_kv = j.at("seqlen_kv").get<int64_t>();
    const std::string dtype = j.at("dtype").get<std::string>();
    if (dtype != "bf16" && dtype != "fp16") {
      return absl::InvalidArgumentError("config: dtype must be \"bf16\" or \"fp16\", got \"" + dtype + "\"");
    }
    c.dtype = dtype == "bf16" ? cuir::DType::kBF16 : cuir::DType::kFP16;
    c.softmax_scale = j.value("softmax_scale", 0.0);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(std::string("config: ") + e.what());
  }
  if (auto s = cuir::ValidateConfig(c); !s.ok()) return s;
  return c;
}

absl::StatusOr<spec::AttentionInputs> InputsAtShape(
    const spec::Spec& spec, const cuir::AttentionConfig& job, const VerifyShape& shape,
    const std::map<std::string, spec::BufferSource>& buffers, uint64_t seed,
    cuir::AttentionConfig* at) {
  *at = job;
  at->batch = shape.batch;
  at->seqlen_q = shape.seqlen_q;
  at->seqlen_kv = shape.seqlen_kv;
  return spec::MakeInputs(spec, *at, spec::SourcesForShape(spec, buffers, job, *at), seed);
}

std::vector<VerifyShape> DefaultVerifyShapes(const cuir::AttentionConfig& config) {
  // Ragged with respect to every tile size we use (64, 128), seqlen_q != seqlen_kv both ways,
  // more than one batch, and a problem smaller than one tile.
  std::vector<VerifyShape> shapes = {{1, 257, 300}, {2, 300, 257}, {1, 65, 65}};
  const bool small = config.seqlen_q <= 1024 && config.seqlen_kv <= 1024 &&
                     config.seqlen_q * config.seqlen_kv * config.heads_q <= (1 << 24);
  if (small) {
    shapes.insert(shapes.begin(),
                  VerifyShape{std::min<int64_t>(config.batch, 2), config.seqlen_q,
                              config.seqlen_kv});
  }
  return shapes;
}

OutputError CompareOutputs(const torch::Tensor& got_in, const torch::Tensor& want_in, double atol,
                           double rtol) {
  return CompareOutputs(got_in, want_in, torch::scalar_tensor(atol, torch::kFloat64), rtol);
}

OutputError CompareOutputs(const torch::Tensor& got_in, const torch::Tensor& want_in,
                           const torch::Tensor& atol_in, double rtol) {
  OutputError e;
  const torch::Tensor atol = atol_in.to(torch::kFloat64);
  auto got = got_in.to(torch::kFloat64).contiguous();
  auto want = want_in.to(torch::kFloat64).contiguous();
  const std::vector<int64_t> sizes(want.sizes().begin(), want.sizes().end());

  auto both_inf_same = got.isinf() & want.isinf() & (got == want);
  auto finite_want = torch::isfinite(want);
  e.unwritten = (got.isnan() & ~want.isnan()).sum().item<int64_t>();
  auto diff = (got - want).abs();
  diff = torch::where(both_inf_same, torch::zeros_like(diff), diff);
  // NaN or an infinity on one side only is a violation with infinite error.
  diff = torch::where(diff.isnan(), torch::full_like(diff, INFINITY), diff);
  auto bound = atol + rtol * torch::where(finite_want, want.abs(), torch::zeros_like(want));
  e.violations = (diff > bound).sum().item<int64_t>();
  e.max_abs = diff.numel() ? diff.max().item<double>() : 0.0;

  auto fin = finite_want & torch::isfinite(got);
  auto num = torch::where(fin, got - want, torch::zeros_like(got)).norm().item<double>();
  auto den = torch::where(fin, want, torch::zeros_like(want)).norm().item<double>();
  e.rel_l2 = den > 0 ? num / den : num;

  if (diff.numel() > 0 && e.max_abs > 0) {
    auto flat = diff.flatten();
    auto top = flat.topk(std::min<int64_t>(3, flat.numel()));
    auto idx = std::get<1>(top);
    for (int64_t i = 0; i < idx.numel(); ++i) {
      int64_t f = idx[i].item<int64_t>();
      if (flat[f].item<double>() <= 0) break;
      e.worst.push_back({Unravel(f, sizes), got.flatten()[f].item<double>(),
                         want.flatten()[f].item<double>()});
    }
  }
  return e;
}

void CompareShape(const torch::Tensor& got_o, const torch::Tensor& got_lse,
                  const torch::Tensor& want_o, const torch::Tensor& want_lse, ShapeResult* r) {
  r->o = CompareOutputs(got_o, want_o, r->o_atol, r->o_rtol);
  r->lse_checked = want_lse.defined();
  r->lse = r->lse_checked ? CompareOutputs(got_lse, want_lse, r->lse_atol, r->lse_rtol)
                          : OutputError{};
  r->passed = Passed(*r);
}

torch::Tensor PaddedPoison(const torch::Tensor& like) {
  std::vector<int64_t> sizes(like.sizes().begin(), like.sizes().end());
  sizes.back() += kOPadColumns;
  return torch::full(sizes, std::nan(""), like.options());
}

void CheckOPadding(const torch::Tensor& padded, int64_t head_dim, ShapeResult* r) {
  const torch::Tensor pad = padded.narrow(-1, head_dim, padded.size(-1) - head_dim);
  // NaN's 16-bit pattern depends on the code converting it (c10's and CUDA's __float2half
  // differ): the expected bits come from the same fill, on the same device, as PaddedPoison's.
  const torch::Tensor written = Bits(pad) != Bits(torch::full_like(pad, std::nan("")));
  r->o_padded = true;
  r->o_padding_written = written.sum().item<int64_t>();
  r->o_padding_at.clear();
  if (r->o_padding_written > 0) {
    const torch::Tensor first = written.nonzero()[0].cpu();
    for (int64_t i = 0; i < first.numel(); ++i) r->o_padding_at.push_back(first[i].item<int64_t>());
    r->o_padding_at.back() += head_dim;
  }
  r->passed = Passed(*r);
}

bool VerifyReport::lse_checked() const {
  return std::all_of(shapes.begin(), shapes.end(),
                     [](const ShapeResult& s) { return s.lse_checked; });
}

nlohmann::json VerifyReport::ToJson() const {
  nlohmann::json shapes_json = nlohmann::json::array();
  for (const auto& s : shapes) {
    nlohmann::json shape = {{"batch", s.shape.batch},
                            {"seqlen_q", s.shape.seqlen_q},
                            {"seqlen_kv", s.shape.seqlen_kv},
                            {"passed", s.passed},
                            {"seconds", s.seconds},
                            {"blocks_visited", s.blocks_visited},
                            {"blocks_masked", s.blocks_masked},
                            {"o", ErrorJson(s.o, s.o_atol, s.o_rtol)},
                            {"lse_checked", s.lse_checked},
                            {"o_padded", s.o_padded}};
    if (s.lse_checked) shape["lse"] = ErrorJson(s.lse, s.lse_atol, s.lse_rtol);
    if (s.o_padded) {
      shape["o_padding"] = {{"row_stride", absl::StrFormat("head_dim + %d", kOPadColumns)},
                            {"written", s.o_padding_written}};
      if (!s.o_padding_at.empty()) shape["o_padding"]["first_written"] = s.o_padding_at;
    }
    if (s.o_padding_refused) shape["o_padding_refused"] = true;
    if (s.combined) shape["combined"] = true;
    shapes_json.push_back(std::move(shape));
  }
  nlohmann::json out = {{"level", "ir"}, {"device", "cpu"}, {"passed", passed}, {"seed", seed},
                        {"lse_checked", lse_checked()}, {"shapes", shapes_json}};
  if (!lse_checked()) out["note"] = kLseNotChecked;
  return out;
}

std::string VerifyReport::Summary() const {
  double o_abs = 0, lse_abs = 0;
  int64_t padded = 0, written = 0;
  for (const auto& s : shapes) {
    o_abs = std::max(o_abs, s.o.max_abs);
    lse_abs = std::max(lse_abs, s.lse.max_abs);
    padded += s.o_padded;
    written += s.o_padding_written;
  }
  const double tol = shapes.empty() ? 0 : shapes.front().o_atol;
  const std::string lse = lse_checked() ? absl::StrFormat("max |dLSE| %.2e", lse_abs)
                                        : std::string(kLseNotChecked);
  // How many shapes checked a kernel's stores into unaligned rows; said only where some did, so
  // CPU reports (never padded) read as before.
  std::string layout;
  if (padded > 0) {
    layout = absl::StrFormat(" (%d with padded O rows%s)", padded,
                             written > 0 ? absl::StrFormat(", %d padding elements written", written)
                                         : "");
  }
  return absl::StrFormat("%d shapes%s %s, max |dO| %.2e (atol %.0e), %s, seed %d", shapes.size(),
                         layout, passed ? "match the oracle" : "FAILED", o_abs, tol, lse, seed);
}

std::string VerifyReport::FailureDetail() const {
  std::vector<std::string> parts;
  for (const auto& s : shapes) {
    if (s.passed) continue;
    std::string part = absl::StrFormat("%s: %s | %s", ShapeName(s.shape), DescribeError("O", s.o),
                                       s.lse_checked ? DescribeError("LSE", s.lse)
                                                     : std::string(kLseNotChecked));
    if (s.o_padding_written > 0) {
      part += absl::StrFormat(
          " | O: %d elements written outside the rows (the padding columns of an O with row "
          "stride head_dim + %d), first at [%s]",
          s.o_padding_written, kOPadColumns, absl::StrJoin(s.o_padding_at, ","));
    }
    parts.push_back(std::move(part));
  }
  return absl::StrJoin(parts, "\n");
}

absl::StatusOr<VerifyReport> VerifyOnCpu(const cuir::Program& program, const spec::Spec& spec,
                                         const cuir::AttentionConfig& config,
                                         const std::map<std::string, spec::BufferSource>& buffers,
                                         uint64_t seed, const VerifyOptions& options) {
  VerifyReport report;
  report.seed = seed;
  const Tolerance tol = ToleranceFor(config.dtype, options);
  const auto shapes = options.shapes.empty() ? DefaultVerifyShapes(config) : options.shapes;
  uint64_t shape_seed = seed;
  for (const auto& shape : shapes) {
    const auto start = std::chrono::steady_clock::now();
    cuir::AttentionConfig c;
    auto inputs = InputsAtShape(spec, config, shape, buffers, ++shape_seed, &c);
    if (!inputs.ok()) return inputs.status();
    auto want = spec::RunOracle(spec, c, *inputs);
    if (!want.ok()) return want.status();
    interp::InterpStats stats;
    auto got = interp::Interpret(program, c, *inputs, &stats);
    if (!got.ok()) {
      return absl::Status(got.status().code(),
                          absl::StrFormat("interpreting the program at %s: %s", ShapeName(shape),
                                          got.status().message()));
    }
    ShapeResult r;
    r.shape = shape;
    r.o_atol = tol.o_atol;
    r.o_rtol = tol.o_rtol;
    r.lse_atol = tol.lse_atol;
    r.lse_rtol = tol.lse_rtol;
    CompareShape(got->o, got->lse, want->o, want->lse, &r);
    r.blocks_visited = stats.blocks_visited;
    r.blocks_masked = stats.blocks_masked;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.shapes.push_back(std::move(r));
  }
  report.passed = std::all_of(report.shapes.begin(), report.shapes.end(),
                              [](const ShapeResult& s) { return s.passed; });
  return report;
}

}  // namespace cubridge::pipeline
