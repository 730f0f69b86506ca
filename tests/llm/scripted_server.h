// A real chat-completions server on a free loopback port (cpp-httplib) that replays scripted
// replies in order: what the tests use in place of an LLM endpoint, the one thing that cannot
// exist on a test machine. It records every request it received.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cubridge::testing {

struct ScriptedReply {
  int status = 200;
  std::string content;  // the assistant message of a 200 chat completion
  std::string body;     // sent verbatim instead of a chat completion when non-empty
  std::chrono::milliseconds delay{0};  // before answering (timeouts)
  std::map<std::string, std::string> headers;  // e.g. {"Retry-After", "1"}
  int64_t prompt_tokens = 100, completion_tokens = 50;  // the reply's "usage"
};

// Shorthands.
ScriptedReply Say(const std::string& content);
ScriptedReply HttpError(int status, const std::string& message = "scripted error");

class ScriptedLlmServer {
 public:
  // Replies in order; once the script is used up every request gets 500 "script exhausted".
  explicit ScriptedLlmServer(std::vector<ScriptedReply> script);
  ~ScriptedLlmServer();
  ScriptedLlmServer(const ScriptedLlmServer&) = delete;
  ScriptedLlmServer& operator=(const ScriptedLlmServer&) = delete;

  std::string endpoint() const;  // "http://127.0.0.1:PORT/v1"
  int port() const;

  struct Request {
    std::string authorization;  // the Authorization header as received ("" when absent)
    nlohmann::json body;        // the parsed request body
  };
  std::vector<Request> requests() const;  // received so far, in order
  int request_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cubridge::testing
