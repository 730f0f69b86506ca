#include "cuir/pipeline/verify_backward.h"

#include <algorithm>
#include <chrono>
#include <set>

#include <torch/types.h>
#include <torch/utils.h>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cuir/interp/interp.h"
#include "cuir/spec/oracle.h"

namespace cubridge::pipeline {
namespace {

double MaxAbs(const torch::Tensor& t) { return t.numel() > 0 ? t.abs().max().item<double>() : 0.0; }

// `floor`: the least scale (GradResult), so that a gradient that is 0 everywhere (a single key
// gives dS = P (dP - D) = 0) meets fp32 rounding with a tolerance rather than none.
GradResult Compare(const std::string& name, const torch::Tensor& got, const torch::Tensor& want,
                   const GradTolerance& tol, double floor) {
  GradResult r;
  r.name = name;
  r.scale = std::max(MaxAbs(want), floor);
  r.atol = tol.atol_rel * r.scale;
  r.rtol = tol.rtol;
  r.error = CompareOutputs(got, want, r.atol, r.rtol);
  return r;
}

constexpr double kScaleFloor = 1e-3;

// A buffer's gradient: each element is a sum over scores, |got - want| <= atol_rel * mass +
// rtol * |want| with mass its error scale (AttentionGrads::buffer_masses).
GradResult CompareSum(const std::string& name, const torch::Tensor& got, const torch::Tensor& want,
                      const torch::Tensor& mass, const GradTolerance& tol) {
  GradResult r;
  r.name = name;
  r.scale = MaxAbs(mass);
  r.atol = tol.atol_rel * r.scale;  // the largest element's, for reports
  r.rtol = tol.rtol;
  r.error = CompareOutputs(got, want, mass.to(torch::kFloat64) * tol.atol_rel, tol.rtol);
  return r;
}

bool Passed(const GradResult& g) { return g.error.violations == 0 && g.error.unwritten == 0; }

}  // namespace

std::vector<VerifyShape> BackwardVerifyShapes() {
  // Ragged for the backward's tiles (BLOCK_M 64, BLOCK_N 128) and the forward's, seqlen_q !=
  // seqlen_kv both ways, a batch of 2, one smaller than a tile; smaller than the forward's
  // shapes because the float64 autograd oracle is the slow part.
  return {{2, 130, 130}, {1, 157, 200}, {1, 200, 157}, {1, 65, 65}};
}

GradTolerance GradToleranceFor(cuir::DType dtype) {
  // P and dS are rounded to the input dtype before their products, as in the kernels.
  return dtype == cuir::DType::kBF16 ? GradTolerance{2e-2, 2e-2} : GradTolerance{4e-3, 4e-3};
}

std::vector<std::string> LearnableBuffers(const spec::Spec& spec) {
  std::vector<std::string> names;
  if (!spec.score) return names;
  std::vector<std::string> read;
  cuir::CollectBuffers(spec.score, &read);
  for (const spec::SpecBuffer& b : spec.buffers) {
    const bool floating = cuir::ElementType(b.dtype) == cuir::Type::kFloat;
    if (floating && std::find(read.begin(), read.end(), b.name) != read.end()) {
      names.push_back(b.name);
    }
  }
  return names;
}

BackwardShapeResult CompareGrads(const spec::AttentionGrads& got, const spec::AttentionGrads& want,
                                 const std::map<std::string, torch::Tensor>& masses,
                                 const std::vector<std::string>& grad_buffers, cuir::DType dtype) {
  const GradTolerance tol = GradToleranceFor(dtype);
  BackwardShapeResult r;
  const double floor =
      kScaleFloor * std::max({MaxAbs(want.dq), MaxAbs(want.dk), MaxAbs(want.dv)});
  r.grads.push_back(Compare("dq", got.dq, want.dq, tol, floor));
  r.grads.push_back(Compare("dk", got.dk, want.dk, tol, floor));
  r.grads.push_back(Compare("dv", got.dv, want.dv, tol, floor));
  for (const std::string& name : grad_buffers) {
    const torch::Tensor& w = want.buffers.at(name);
    auto it = got.buffers.find(name);
    // No buffer_grad for it: the program says its gradient is 0 (and nothing added into it).
    const torch::Tensor g = it != got.buffers.end() ? it->second : torch::zeros_like(w);
    auto m = masses.find(name);
    const torch::Tensor mass = m != masses.end() ? m->second : torch::zeros_like(w);
    r.grads.push_back(CompareSum(name, g, w, mass, tol));
  }
  r.passed = std::all_of(r.grads.begin(), r.grads.end(), Passed);
  return r;
}

namespace {

// Both verifications: `run` null compares the interpreter's gradients, else the kernel's.
absl::StatusOr<BackwardVerifyReport> VerifyBackward(
    const cuir::Program& program, const spec::Spec& spec, const cuir::AttentionConfig& config,
    const std::map<std::string, spec::BufferSource>& buffers,
    const std::vector<std::string>& grad_buffers, uint64_t seed, const VerifyOptions& options,
    const BackwardKernelRun* run) {
  BackwardVerifyReport report;
  report.level = run != nullptr ? "gpu" : "ir";
  report.seed = seed;
  report.grad_buffers = grad_buffers;
  const std::set<std::string> wanted(grad_buffers.begin(), grad_buffers.end());
  const auto shapes = options.shapes.empty() ? BackwardVerifyShapes() : options.shapes;
  uint64_t shape_seed = seed;
  for (const auto& shape : shapes) {
    const auto start = std::chrono::steady_clock::now();
    cuir::AttentionConfig c;
    auto inputs = InputsAtShape(spec, config, shape, buffers, ++shape_seed, &c);
    if (!inputs.ok()) return inputs.status();
    auto forward = spec::RunOracle(spec, c, *inputs);
    if (!forward.ok()) return forward.status();
    if (!forward->lse.defined()) {
      return absl::FailedPreconditionError(
          "the backward needs the forward's LSE, which this reference spec does not return");
    }
    torch::manual_seed(static_cast<int64_t>(shape_seed));
    const torch::ScalarType dtype = inputs->q.scalar_type();
    const spec::BackwardInputs backward{forward->o.to(dtype), forward->lse.to(torch::kFloat),
                                        torch::randn(inputs->q.sizes()).to(dtype)};
    auto want = spec::RunBackwardOracle(spec, c, *inputs, backward.grad_o, wanted);
    if (!want.ok()) return want.status();
    interp::InterpStats stats;
    auto got = interp::InterpretBackward(program, c, *inputs, backward, &stats);
    if (!got.ok()) {
      return absl::Status(got.status().code(),
                          absl::StrFormat("interpreting the backward program at %s: %s",
                                          ShapeName(shape), got.status().message()));
    }
    BackwardShapeResult r;
    if (run == nullptr) {
      r = CompareGrads(*got, *want, got->buffer_masses, grad_buffers, c.dtype);
    } else {
      auto kernel = (*run)(c, *inputs, backward);
      if (!kernel.ok()) return kernel.status();
      r.passed = kernel->repeatable;
      r.repeatable = kernel->repeatable;
      for (size_t i = 0; i < kernel->runs.size(); ++i) {
        BackwardShapeResult one = CompareGrads(kernel->runs[i].second, *want, got->buffer_masses,
                                               grad_buffers, c.dtype);
        r.passed = r.passed && one.passed;
        for (GradResult& g : one.grads) {
          if (i > 0) g.name += " (" + kernel->runs[i].first + ")";
          r.grads.push_back(std::move(g));
        }
      }
    }
    r.shape = shape;
    r.blocks_visited = stats.blocks_visited;
    r.blocks_masked = stats.blocks_masked;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.shapes.push_back(std::move(r));
  }
  report.passed = std::all_of(report.shapes.begin(), report.shapes.end(),
                              [](const BackwardShapeResult& s) { return s.passed; });
  return report;
}

}  // namespace

absl::StatusOr<BackwardVerifyReport> VerifyBackwardOnCpu(
    const cuir::Program& program, const spec::Spec& spec, const cuir::AttentionConfig& config,
    const std::map<std::string, spec::BufferSource>& buffers,
    const std::vector<std::string>& grad_buffers, uint64_t seed, const VerifyOptions& options) {
  return VerifyBackward(program, spec, config, buffers, grad_buffers, seed, options, nullptr);
}

absl::StatusOr<BackwardVerifyReport> VerifyBackwardKernel(
    const cuir::Program& program, const spec::Spec& spec, const cuir::AttentionConfig& config,
    const std::map<std::string, spec::BufferSource>& buffers,
    const std::vector<std::string>& grad_buffers, uint64_t seed, const VerifyOptions& options,
    const BackwardKernelRun& run) {
  return VerifyBackward(program, spec, config, buffers, grad_buffers, seed, options, &run);
}

nlohmann::json BackwardVerifyReport::ToJson() const {
  nlohmann::json shapes_json = nlohmann::json::array();
  for (const auto& s : shapes) {
    nlohmann::json grads = nlohmann::json::object();
    for (const GradResult& g : s.grads) {
      grads[g.name] = ErrorJson(g.error, g.atol, g.rtol);
      grads[g.name]["max_abs_want"] = g.scale;
    }
    shapes_json.push_back({{"batch", s.shape.batch},
                           {"seqlen_q", s.shape.seqlen_q},
                           {"seqlen_kv", s.shape.seqlen_kv},
                           {"passed", s.passed},
                           {"seconds", s.seconds},
                           {"blocks_visited", s.blocks_visited},
                           {"blocks_masked", s.blocks_masked},
                           {"repeatable", s.repeatable},
                           {"grads", grads}});
  }
  return {{"level", level},  {"device", level == "gpu" ? "gpu" : "cpu"}, {"direction", "backward"},
          {"passed", passed}, {"seed", seed},             {"grad_buffers", grad_buffers},
          {"shapes", shapes_json}};
}

std::string BackwardVerifyReport::Summary() const {
  // Per gradient: max over shapes (and a kernel's runs) of max_abs / max|want|.
  std::map<std::string, double> worst;
  for (const auto& s : shapes) {
    for (const GradResult& g : s.grads) {
      const double rel = g.scale > 0 ? g.error.max_abs / g.scale : g.error.max_abs;
      const std::string name = g.name.substr(0, g.name.find(" ("));
      worst[name] = std::max(worst[name], rel);
    }
  }
  std::vector<std::string> parts;
  for (const char* name : {"dq", "dk", "dv"}) {
    parts.push_back(absl::StrFormat("%s %.1e", name, worst[name]));
  }
  for (const std::string& name : grad_buffers) {
    parts.push_back(absl::StrFormat("d%s %.1e", name, worst[name]));
  }
  return absl::StrFormat("backward: %d shapes %s, max error / max|grad|: %s, seed %d",
                         shapes.size(), passed ? "match the oracle's gradients" : "FAILED",
                         absl::StrJoin(parts, ", "), seed);
}

std::string BackwardVerifyReport::FailureDetail() const {
  std::vector<std::string> parts;
  for (const auto& s : shapes) {
    if (!s.repeatable) {
      parts.push_back(ShapeName(s.shape) + ": two deterministic runs gave different bits");
    }
    for (const GradResult& g : s.grads) {
      if (!Passed(g)) parts.push_back(ShapeName(s.shape) + ": " + DescribeError(g.name, g.error));
    }
  }
  return absl::StrJoin(parts, "\n");
}

}  // namespace cubridge::pipeline
