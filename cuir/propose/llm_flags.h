// The LLM settings' command-line flags, one definition for `cubridge-cli adapt` and
// `cubridge-worker`, so both take the same spellings, defaults and environment fallbacks:
//   --llm-endpoint --llm-model --llm-api-key-file --llm-max-rounds --llm-max-tokens
//   --llm-max-cost-usd --llm-usd-per-million-prompt --llm-usd-per-million-completion
//   --llm-timeout --llm-retries
// The key itself is never a flag (it would show in `ps`): a file, or CUBRIDGE_LLM_API_KEY.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "absl/status/statusor.h"
#include "cuir/propose/llm_proposer.h"

namespace cubridge::propose {

struct LlmFlags {
  std::string endpoint, model, api_key_file;
  int max_rounds = 4;
  int64_t max_tokens = 200000;
  double max_cost_usd = 0, usd_per_million_prompt = 0, usd_per_million_completion = 0;
  double timeout_seconds = 120;
  int retries = 4;
};

void AddLlmFlags(CLI::App* cmd, LlmFlags& flags);

// Environment fallbacks applied (CUBRIDGE_LLM_ENDPOINT, CUBRIDGE_LLM_MODEL, CUBRIDGE_LLM_API_KEY)
// and values checked: INVALID_ARGUMENT names the flag; an unreadable key file names its path.
absl::StatusOr<LlmSettings> ResolveLlmSettings(const LlmFlags& flags);

}  // namespace cubridge::propose
