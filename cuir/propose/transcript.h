// An LLM conversation as CuBridge stores it (JSON: one object per turn, see llm_proposer.cc) and
// as the CLI shows it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace cubridge::propose {

// Turns in order, each headed by its round, role, token counts and verdict; code blocks kept.
std::string RenderTranscript(const nlohmann::json& transcript);

}  // namespace cubridge::propose
