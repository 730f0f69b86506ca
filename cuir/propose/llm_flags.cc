#include "cuir/propose/llm_flags.h"

#include "absl/strings/str_cat.h"

namespace cubridge::propose {

void AddLlmFlags(CLI::App* cmd, LlmFlags& f) {
  cmd->add_option("--llm-endpoint", f.endpoint,
                  "OpenAI-compatible API base URL, e.g. http://127.0.0.1:8000/v1 "
                  "(default: $CUBRIDGE_LLM_ENDPOINT)");
  cmd->add_option("--llm-model", f.model, "Model name sent with each request (default: $CUBRIDGE_LLM_MODEL)");
  cmd->add_option("--llm-api-key-file", f.api_key_file,
                  "File whose first line is the API key (default: $CUBRIDGE_LLM_API_KEY; none for "
                  "local servers)");
  cmd->add_option("--llm-max-rounds", f.max_rounds,
                  "Proposals per job: each rejected one goes back to the model with its error");
  cmd->add_option("--llm-max-tokens", f.max_tokens, "Token budget per job (0 = unlimited)");
  cmd->add_option("--llm-max-cost-usd", f.max_cost_usd, "Cost budget per job in USD (0 = unlimited)");
  cmd->add_option("--llm-usd-per-million-prompt", f.usd_per_million_prompt,
                  "Price of a million prompt tokens, for the cost budget");
  cmd->add_option("--llm-usd-per-million-completion", f.usd_per_million_completion,
                  "Price of a million completion tokens, for the cost budget");
  cmd->add_option("--llm-timeout", f.timeout_seconds, "Seconds one request may take");
  cmd->add_option("--llm-retries", f.retries, "Retries of a request on 429, 5xx or timeouts");
}

absl::StatusOr<LlmSettings> ResolveLlmSettings(const LlmFlags& f) {
  if (f.max_rounds < 1) return absl::InvalidArgumentError("--llm-max-rounds must be at least 1");
  if (f.max_tokens < 0 || f.max_cost_usd < 0 || f.usd_per_million_prompt < 0 ||
      f.usd_per_million_completion < 0) {
    return absl::InvalidArgumentError("--llm-max-tokens, --llm-max-cost-usd and the prices must not be negative");
  }
  if (f.timeout_seconds <= 0) return absl::InvalidArgumentError("--llm-timeout must be positive");
  if (f.retries < 0) return absl::InvalidArgumentError("--llm-retries must not be negative");
  LlmSettings s;
  s.chat.endpoint = f.endpoint;
  s.chat.model = f.model;
  s.chat.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_seconds * 1000));
  s.chat.max_retries = f.retries;
  if (auto st = llm::ResolveKey(f.api_key_file, s.chat); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("--llm-api-key-file: ", st.message()));
  }
  s.budget.max_tokens = f.max_tokens;
  s.budget.max_cost_usd = f.max_cost_usd;
  s.budget.usd_per_million_prompt = f.usd_per_million_prompt;
  s.budget.usd_per_million_completion = f.usd_per_million_completion;
  s.max_rounds = f.max_rounds;
  return s;
}

}  // namespace cubridge::propose
