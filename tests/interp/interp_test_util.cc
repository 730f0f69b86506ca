#include "tests/interp/interp_test_util.h"

#include <fstream>
#include <limits>
#include <sstream>

#include <torch/types.h>
#include <torch/utils.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/spec/oracle.h"
#include "cuir/spec/spec.h"
#include "gtest/gtest.h"

namespace cubridge::interp::testing {

std::string BaseProgramText() { return ExpertBaseText("fa2_sm80"); }

std::string ExpertBaseText(const std::string& expert) {
  const std::string path =
      std::string(CUBRIDGE_SOURCE_ROOT) + "/cuir/experts/" + expert + "/base.cuir";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

std::string Lines(const std::vector<std::string>& lines, const char* indent) {
  std::string out;
  for (const std::string& l : lines) absl::StrAppend(&out, indent, l, "\n");
  return out;
}

}  // namespace

std::string ProgramText(const Pieces& p) {
  return absl::StrCat(
      "cuir 1\n"
      "kernel attn_fwd {\n"
      "  expert \"fa2_sm80\"\n"
      "  param BLOCK_M: int = ", p.block_m, "\n",
      "  param BLOCK_N: int = ", p.block_n, "\n",
      "  param STAGES: int = 2\n"
      "  param WARPS: int = 4\n",
      Lines(p.decls, "  "),
      "  role compute warps WARPS\n"
      "  grid m_block < cdiv(seqlen_q, BLOCK_M), h < heads_q, b < batch\n",
      Lines(p.tables, "  "),
      "  let kv_h: int = ", p.kv_head, "\n",
      "  let q_lo: int = m_block * BLOCK_M\n"
      "  let q_hi: int = min(q_lo + BLOCK_M, seqlen_q)\n"
      "  load Q = q[b, h, q_lo:q_hi]\n"
      "  softmax.init\n"
      "  for ", p.loop, " pipeline STAGES", p.split ? " split" : "", " {\n",
      "    let kv_lo: int = n_block * BLOCK_N\n"
      "    let kv_hi: int = min(kv_lo + BLOCK_N, seqlen_kv)\n",
      Lines(p.block_lets, "    "),
      "    load K = k[b, kv_h, ", p.k_rows, "]\n",
      "    load V = v[b, kv_h, kv_lo:kv_hi]\n"
      "    S = qk Q, K scale softmax_scale\n",
      Lines(p.after_qk, "    "),
      "    P = softmax.online S\n"
      "    pv P, V\n"
      "  }\n"
      "  ", p.epilogue, "\n"
      "}\n");
}

cuir::Program Parse(const std::string& text) {
  auto p = cuir::ParseProgram(text, "test.cuir");
  EXPECT_TRUE(p.ok()) << p.status() << "\n" << text;
  return p.ok() ? *std::move(p) : cuir::Program{};
}

cuir::AttentionConfig Config(cuir::DType dtype, int64_t head_dim, int64_t seqlen_q,
                             int64_t seqlen_kv, int64_t heads_q, int64_t heads_kv,
                             int64_t batch) {
  cuir::AttentionConfig c;
  c.dtype = dtype;
  c.head_dim = head_dim;
  c.seqlen_q = seqlen_q;
  c.seqlen_kv = seqlen_kv;
  c.heads_q = heads_q;
  c.heads_kv = heads_kv;
  c.batch = batch;
  return c;
}

spec::AttentionInputs RandomInputs(const cuir::AttentionConfig& c, uint64_t seed) {
  torch::manual_seed(seed);
  const auto dtype = c.dtype == cuir::DType::kBF16 ? torch::kBFloat16 : torch::kHalf;
  return {torch::randn({c.batch, c.heads_q, c.seqlen_q, c.head_dim}).to(dtype),
          torch::randn({c.batch, c.heads_kv, c.seqlen_kv, c.head_dim}).to(dtype),
          torch::randn({c.batch, c.heads_kv, c.seqlen_kv, c.head_dim}).to(dtype),
          {}};
}

Errors MaxErrors(const torch::Tensor& got, const torch::Tensor& want) {
  const torch::Tensor g = got.to(torch::kDouble);
  const torch::Tensor w = want.to(torch::kDouble);
  const double inf = std::numeric_limits<double>::infinity();
  torch::Tensor diff = (g - w).abs();
  diff = torch::where(torch::isinf(g) & torch::isinf(w) & (g == w), torch::zeros_like(diff), diff);
  diff = torch::where(torch::isnan(diff), torch::full_like(diff, inf), diff);
  if (diff.numel() == 0) return {};
  const torch::Tensor rel = diff / w.abs().clamp_min(1e-6);
  return {diff.max().item<double>(), rel.max().item<double>()};
}

double OTolerance(cuir::DType dtype) { return dtype == cuir::DType::kBF16 ? 2e-2 : 3e-3; }

absl::StatusOr<OracleRun> RunAgainstOracle(
    const std::string& program_text, const std::string& spec_source,
    const cuir::AttentionConfig& config,
    const std::map<std::string, spec::BufferSource>& buffers, uint64_t seed) {
  auto program = cuir::ParseProgram(program_text, "test.cuir");
  if (!program.ok()) return program.status();
  auto spec = spec::LoadSpecSource(spec_source, "spec.py");
  if (!spec.ok()) return spec.status();
  OracleRun run;
  auto inputs = spec::MakeInputs(*spec, config, buffers, seed);
  if (!inputs.ok()) return inputs.status();
  run.inputs = *std::move(inputs);
  auto got = Interpret(*program, config, run.inputs, &run.stats);
  if (!got.ok()) return got.status();
  run.got = *std::move(got);
  auto want = spec::RunOracle(*spec, config, run.inputs);
  if (!want.ok()) return want.status();
  run.want = *std::move(want);
  run.o = MaxErrors(run.got.o, run.want.o);
  run.lse = MaxErrors(run.got.lse, run.want.lse);
  return run;
}

double GradTolerance(cuir::DType dtype) { return dtype == cuir::DType::kBF16 ? 2e-2 : 4e-3; }

double RelativeError(const torch::Tensor& got, const torch::Tensor& want) {
  const torch::Tensor g = got.to(torch::kDouble), w = want.to(torch::kDouble);
  if (g.sizes() != w.sizes() || !torch::isfinite(g).all().item<bool>()) {
    return std::numeric_limits<double>::infinity();
  }
  const double scale = w.abs().max().item<double>();
  const double diff = (g - w).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

absl::StatusOr<BackwardRun> RunBackwardAgainstOracle(
    const std::string& program_text, const std::string& spec_source,
    const cuir::AttentionConfig& config,
    const std::map<std::string, spec::BufferSource>& buffers,
    const std::set<std::string>& grad_buffers, uint64_t seed) {
  auto program = cuir::ParseProgram(program_text, "test_bwd.cuir");
  if (!program.ok()) return program.status();
  auto dtypes = spec::BufferDTypesOf(buffers);
  if (!dtypes.ok()) return dtypes.status();
  auto spec = spec::LoadSpecSource(spec_source, "spec.py", *dtypes);
  if (!spec.ok()) return spec.status();
  BackwardRun run;
  auto inputs = spec::MakeInputs(*spec, config, buffers, seed);
  if (!inputs.ok()) return inputs.status();
  run.inputs = *std::move(inputs);
  auto forward = spec::RunOracle(*spec, config, run.inputs);
  if (!forward.ok()) return forward.status();
  torch::manual_seed(seed + 1);
  const torch::Tensor grad_o = torch::randn(run.inputs.q.sizes()).to(run.inputs.q.scalar_type());
  const spec::BackwardInputs backward{forward->o.to(run.inputs.q.scalar_type()),
                                      forward->lse.to(torch::kFloat), grad_o};
  auto got = InterpretBackward(*program, config, run.inputs, backward, &run.stats);
  if (!got.ok()) return got.status();
  run.got = *std::move(got);
  auto want = spec::RunBackwardOracle(*spec, config, run.inputs, grad_o, grad_buffers);
  if (!want.ok()) return want.status();
  run.want = *std::move(want);
  run.error["dq"] = RelativeError(run.got.dq, run.want.dq);
  run.error["dk"] = RelativeError(run.got.dk, run.want.dk);
  run.error["dv"] = RelativeError(run.got.dv, run.want.dv);
  for (const std::string& name : grad_buffers) {
    auto it = run.got.buffers.find(name);
    run.error[name] = it == run.got.buffers.end()
                          ? std::numeric_limits<double>::infinity()
                          : RelativeError(it->second, run.want.buffers.at(name));
  }
  return run;
}

}  // namespace cubridge::interp::testing
