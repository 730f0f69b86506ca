#include "cuir/propose/prompt.h"

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "cuir/files/files.h"
#include "cuir/pipeline/verify.h"

namespace cubridge::propose {
namespace {

constexpr char kRole[] = R"(You are the transfer proposer of CuBridge. CuBridge adapts an expert CUDA attention kernel to a user's attention variant. The expert kernel is described by a CuIR program (its "base program"); you rewrite that program so that it computes the user's variant. CuIR is an executable IR; its full reference follows below.

How to answer:
- Reply with ONE complete CuIR program in a single fenced block that starts with ```cuir and ends with ```. Text outside the block is ignored.
- Start from the base program. Keep its `expert` line, its `param` declarations, its roles, grid and KV-loop `pipeline` and `split` clauses; change only what the variant needs (mask, score_mod, head mapping, KV block ranges, block tables, the epilogue).
- Declare the spec's parameters as `const` declarations holding the job's values.
- Prefer constructs that skip work: KV ranges or block tables for masks, `when !full` on mask predicates.
- Your program is parsed, validated, run by the CuIR interpreter on random inputs at several ragged shapes and compared element by element with the user's own PyTorch code, then lowered to CUDA. If any step rejects it you get the exact error (with line:col in your program, or the worst mismatching positions); answer with the whole corrected program.)";

constexpr char kLiftRole[] = R"(You are the lift proposer of CuBridge. CuBridge adapts expert CUDA attention kernels to users' attention variants through CuIR, an executable IR whose full reference follows below. To lift a kernel is to write the CuIR program that says what the kernel computes and how one program instance (one thread block) orchestrates it: its grid and head mapping, the query tile it keeps, the KV blocks it visits, its masks and score modifications, the online softmax, the epilogue.

How to answer:
- Reply with ONE complete CuIR program in a single fenced block that starts with ```cuir and ends with ```. Text outside the block is ignored.
- Declare `expert` with the name you are given, and the kernel's tile sizes as `param` declarations holding the kernel's values. Numbers the kernel hard-codes (a window size, a softcap, a slope) are `const` declarations.
- Say exactly what the kernel computes: which (q, kv) pairs it masks, how it modifies the scores and with which scale, how query heads map to KV heads, which KV blocks each program visits. The kernel's own code is the truth, not what its comments or names suggest.
- Your program is parsed, validated, checked against the lift contract, run by the CuIR interpreter, and then compared element by element (O and LSE) with the user's kernel, compiled and run on a GPU on random inputs at several ragged shapes. If any step rejects it you get the exact error (with line:col in your program, or the worst mismatching positions and values); answer with the whole corrected program.)";

std::string ParamValue(const spec::SpecParam& p) {
  return std::visit(
      [](auto v) -> std::string {
        using T = decltype(v);
        if constexpr (std::is_same_v<T, bool>) return v ? "True" : "False";
        else if constexpr (std::is_same_v<T, int64_t>) return absl::StrCat(v);
        else return absl::StrFormat("%.17g", v);
      },
      p.value);
}

// Transcripts keep the conversation, not a copy of the reference per job.
std::string ReferenceMention(const std::string& cuir_reference) {
  return absl::StrCat("[docs/cuir.md, ", cuir_reference.size(), " bytes, sent in full]");
}

}  // namespace

absl::StatusOr<std::string> CuirReference() {
  static std::once_flag once;
  static absl::StatusOr<std::string> text = absl::InternalError("unset");
  std::call_once(once, [] {
    // Installed images copy the file and point at it; a build tree uses the source's.
    const char* env = std::getenv("CUBRIDGE_CUIR_REFERENCE");
    const std::string path = env != nullptr && *env != '\0' ? env : CUBRIDGE_CUIR_REFERENCE;
    auto read = files::ReadFile(path);
    if (!read.ok() || read->empty()) {
      text = absl::NotFoundError(absl::StrCat(
          "cannot read the CuIR reference ", path,
          " (the LLM proposer sends it to the model: set CUBRIDGE_CUIR_REFERENCE to the path of "
          "docs/cuir.md)"));
    } else {
      text = *std::move(read);
    }
  });
  return text;
}

std::string SystemPrompt(const std::string& cuir_reference) {
  return absl::StrCat(kRole, "\n\n# The CuIR reference\n\n", cuir_reference);
}

std::string SystemPromptForTranscript(const std::string& cuir_reference) {
  return absl::StrCat(kRole, "\n\n# The CuIR reference\n\n", ReferenceMention(cuir_reference));
}

std::string LiftSystemPrompt(const std::string& cuir_reference) {
  return absl::StrCat(kLiftRole, "\n\n# The CuIR reference\n\n", cuir_reference);
}

std::string LiftSystemPromptForTranscript(const std::string& cuir_reference) {
  return absl::StrCat(kLiftRole, "\n\n# The CuIR reference\n\n", ReferenceMention(cuir_reference));
}

std::string LiftPrompt(const std::string& kernel_path, const std::string& kernel_source,
                       const std::string& name, const cuir::Program& example,
                       const cuir::AttentionConfig& config) {
  return absl::StrCat(
      "## The kernel to lift: ", kernel_path, "\n\n```cuda\n", kernel_source,
      absl::EndsWith(kernel_source, "\n") ? "" : "\n",
      "```\n\nIt follows CuBridge's launcher ABI: the `cubridge_attn_fwd_params` struct (tensors "
      "[batch, heads, seqlen, head_dim], strides in elements, `softmax_scale` as given), a plan "
      "kernel that chooses the grid, and the attention kernel.\n\n"
      "## An example of the form: the base program of CuBridge's own sm_80 expert\n\n```cuir\n",
      cuir::PrintProgram(example),
      "```\n\n## Checks\n\nThe comparison runs the job configuration below and ragged shapes "
      "derived from it (batch, seqlen_q and seqlen_kv varied):\n\n",
      pipeline::ConfigJson(config).dump(), "\n\nWrite the base program of this kernel, with `expert \"",
      name, "\"`.");
}

std::string TransferPrompt(const cuir::Program& base, const spec::Spec& spec,
                           const cuir::AttentionConfig& config, const std::string& rules_said) {
  std::string params;
  for (const auto& p : spec.params) absl::StrAppend(&params, "- ", p.name, " = ", ParamValue(p), "\n");
  std::string buffers;
  for (const auto& b : spec.buffers) {
    if (b.rank < 0) continue;
    std::vector<std::string> dims;
    for (const auto& e : spec::BufferExtents(spec, b)) dims.push_back(e ? cuir::PrintExpr(e) : "?");
    absl::StrAppend(&buffers, "- ", b.name, ": a captured ", cuir::TensorDTypeName(b.dtype),
                    " tensor of rank ", b.rank, ", declare it `buffer ", b.name, ": ",
                    cuir::TensorDTypeName(b.dtype), "[", absl::StrJoin(dims, ", "),
                    "]` (its values come with the job)\n");
  }
  std::string out = absl::StrCat(
      "## Base program (the expert's lifted CuIR)\n\n```cuir\n", cuir::PrintProgram(base),
      "```\n\n## The user's variant: ", spec.path, "\n\n```python\n", spec.source,
      absl::EndsWith(spec.source, "\n") ? "" : "\n", "```\n\n");
  if (!params.empty()) absl::StrAppend(&out, "Parameter values for this job:\n", params, "\n");
  if (!buffers.empty()) absl::StrAppend(&out, "Buffers:\n", buffers, "\n");
  absl::StrAppend(&out, "## Job configuration\n\n", pipeline::ConfigJson(config).dump(), "\n\n");
  if (!rules_said.empty()) {
    absl::StrAppend(&out, "## Why the rule engine did not transfer it\n\n", rules_said, "\n\n");
  }
  absl::StrAppend(&out, "Write the transferred CuIR program for this variant.");
  return out;
}

std::string Feedback(int round, int max_rounds, const std::string& stage,
                     const std::string& error) {
  return absl::StrCat("Your program of round ", round, " of ", max_rounds, " was rejected by the ",
                      stage, ":\n\n", error,
                      "\n\nFix it and reply with the whole corrected program in one ```cuir block.");
}

absl::StatusOr<std::string> ExtractProgram(const std::string& reply) {
  struct Block {
    std::string info, body;
  };
  std::vector<Block> blocks;
  size_t pos = 0;
  while ((pos = reply.find("```", pos)) != std::string::npos) {
    const size_t info_end = reply.find('\n', pos);
    if (info_end == std::string::npos) break;
    const size_t close = reply.find("```", info_end + 1);
    if (close == std::string::npos) break;
    blocks.push_back({std::string(absl::StripAsciiWhitespace(reply.substr(pos + 3, info_end - pos - 3))),
                      reply.substr(info_end + 1, close - info_end - 1)});
    pos = close + 3;
  }
  auto is_program = [](const std::string& body) {
    return absl::StartsWith(absl::StripLeadingAsciiWhitespace(body), "cuir 1");
  };
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (it->info == "cuir") return it->body;
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (is_program(it->body)) return it->body;
  }
  if (is_program(reply)) return reply;
  return absl::NotFoundError(
      "the reply holds no CuIR program: expected one fenced block starting with ```cuir whose "
      "first line is `cuir 1`");
}

}  // namespace cubridge::propose
