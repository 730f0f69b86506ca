#include "cuir/propose/prompt.h"

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "cuir/pipeline/verify.h"

namespace cubridge::propose {
namespace {

constexpr char kRole[] = R"(You are the transfer proposer of CuBridge. CuBridge adapts an expert CUDA attention kernel to a user's attention variant. The expert kernel is described by a CuIR program (its "base program"); you rewrite that program so that it computes the user's variant. CuIR is an executable IR; its full reference follows below.

How to answer:
- Reply with ONE complete CuIR program in a single fenced block that starts with ```cuir and ends with ```. Text outside the block is ignored.
- Start from the base program. Keep its `expert` line, its `param` declarations, its roles, grid and KV-loop pipeline; change only what the variant needs (mask, score_mod, head mapping, KV block ranges, block tables, the epilogue).
- Declare the spec's parameters as `const` declarations holding the job's values.
- Prefer constructs that skip work: KV ranges or block tables for masks, `when !full` on mask predicates.
- Your program is parsed, validated, run by the CuIR interpreter on random inputs at several ragged shapes and compared element by element with the user's own PyTorch code, then lowered to CUDA. If any step rejects it you get the exact error (with line:col in your program, or the worst mismatching positions); answer with the whole corrected program.)";

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

}  // namespace

absl::StatusOr<std::string> CuirReference() {
  static std::once_flag once;
  static absl::StatusOr<std::string> text = absl::InternalError("unset");
  std::call_once(once, [] {
    // Installed images copy the file and point at it; a build tree uses the source's.
    const char* env = std::getenv("CUBRIDGE_CUIR_REFERENCE");
    const std::string path = env != nullptr && *env != '\0' ? env : CUBRIDGE_CUIR_REFERENCE;
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in || ss.str().empty()) {
      text = absl::NotFoundError(absl::StrCat(
          "cannot read the CuIR reference ", path,
          " (the LLM proposer sends it to the model: set CUBRIDGE_CUIR_REFERENCE to the path of "
          "docs/cuir.md)"));
    } else {
      text = ss.str();
    }
  });
  return text;
}

std::string SystemPrompt(const std::string& cuir_reference) {
  return absl::StrCat(kRole, "\n\n# The CuIR reference\n\n", cuir_reference);
}

std::string SystemPromptForTranscript(const std::string& cuir_reference) {
  return absl::StrCat(kRole, "\n\n# The CuIR reference\n\n[docs/cuir.md, ", cuir_reference.size(),
                      " bytes, sent in full]");
}

std::string TransferPrompt(const cuir::Program& base, const spec::Spec& spec,
                           const cuir::AttentionConfig& config, const std::string& rules_said) {
  std::string params;
  for (const auto& p : spec.params) absl::StrAppend(&params, "- ", p.name, " = ", ParamValue(p), "\n");
  std::string buffers;
  for (const auto& b : spec.buffers) {
    absl::StrAppend(&buffers, "- ", b.name, ": a 1-D int buffer indexed by ",
                    b.indexed_by_q ? "q_idx" : "kv_idx", " (its values come with the job)\n");
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
