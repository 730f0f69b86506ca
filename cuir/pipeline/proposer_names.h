// The proposers a job may name, checked without the pipeline (and so without LibTorch): the
// coordinator refuses an unknown name before anything else runs.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cubridge::pipeline {

// "rules" | "llm" | "hybrid"; anything else is INVALID_ARGUMENT saying what is accepted.
inline absl::Status CheckProposerName(const std::string& name) {
  if (name == "rules" || name == "llm" || name == "hybrid") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown proposer \"", name,
      "\": use rules (the rule engine, default), llm (a language model proposes the transferred "
      "CuIR) or hybrid (rules first, the model for what they do not cover)"));
}

}  // namespace cubridge::pipeline
