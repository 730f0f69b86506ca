// What the LLM tests of this folder share: settings pointing at a scripted server, the fenced
// reply a model would send, and the user messages the model received.
#pragma once

#include <string>
#include <vector>

#include "cuir/propose/conversation.h"
#include "tests/llm/scripted_server.h"

namespace cubridge::testing {

inline const std::string kKey = "sk-test-0123456789-secret";

inline propose::LlmSettings TestSettings(const ScriptedLlmServer& server, int rounds = 3) {
  propose::LlmSettings s;
  s.chat.endpoint = server.endpoint();
  s.chat.model = "scripted-model";
  s.chat.api_key = kKey;
  s.chat.initial_backoff = std::chrono::milliseconds(5);
  s.chat.timeout = std::chrono::milliseconds(5000);
  s.max_rounds = rounds;
  return s;
}

inline std::string Fenced(const std::string& program,
                          const std::string& prose = "Here is the program.") {
  return prose + "\n\n```cuir\n" + program + "```\n";
}

// The user messages of the last request, in order (index 0: the task).
inline std::vector<std::string> UserMessages(const ScriptedLlmServer& server) {
  auto requests = server.requests();
  std::vector<std::string> out;
  if (requests.empty()) return out;
  for (const auto& m : requests.back().body["messages"]) {
    if (m["role"] == "user") out.push_back(m["content"]);
  }
  return out;
}

}  // namespace cubridge::testing
