#include "cuir/llm/transcript.h"

#include "absl/strings/str_cat.h"

namespace cubridge::llm {

std::string RenderTranscript(const nlohmann::json& transcript) {
  if (!transcript.is_array() || transcript.empty()) return "(no LLM conversation)\n";
  std::string out;
  for (const auto& turn : transcript) {
    const int round = turn.value("round", 0);
    const std::string role = turn.value("role", "?");
    absl::StrAppend(&out, "=== ", round == 0 ? std::string("setup") : absl::StrCat("round ", round),
                    " · ", role);
    if (turn.contains("prompt_tokens")) {
      absl::StrAppend(&out, " · ", turn.value("prompt_tokens", 0), " prompt + ",
                      turn.value("completion_tokens", 0), " completion tokens");
    }
    if (turn.contains("verdict")) absl::StrAppend(&out, " · ", turn.value("verdict", ""));
    absl::StrAppend(&out, " ===\n", turn.value("content", ""), "\n\n");
  }
  return out;
}

}  // namespace cubridge::llm
