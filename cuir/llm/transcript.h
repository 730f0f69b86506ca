// An LLM conversation as CuBridge stores it (JSON: one object per turn, written by
// cuir/propose/conversation.cc) and as the CLI shows it. Here, not in cuir/propose, because
// `cubridge-cli transcript` must not link LibTorch.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace cubridge::llm {

// Turns in order, each headed by its round, role, token counts and verdict; code blocks kept.
std::string RenderTranscript(const nlohmann::json& transcript);

}  // namespace cubridge::llm
