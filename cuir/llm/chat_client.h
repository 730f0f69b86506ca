// An OpenAI-compatible chat-completions client (POST {endpoint}/chat/completions), the one way
// CuBridge talks to a language model: vLLM, SGLang, llama.cpp's server, Ollama and hosted APIs all
// speak it. libcurl + nlohmann-json; blocking; one client per thread.
//
// The API key is sent only in the Authorization header. It never appears in a log line, an error
// message or a transcript: every text this file produces goes through Redact().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cubridge::llm {

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

struct ChatOptions {
  std::string endpoint;  // base URL up to the API version, e.g. "http://127.0.0.1:8000/v1"
  std::string model;
  std::string api_key;   // empty: no Authorization header (local servers)
  std::chrono::milliseconds timeout{120000};      // whole request
  std::chrono::milliseconds connect_timeout{10000};
  int max_retries = 4;                            // on 429, 5xx and transport errors
  std::chrono::milliseconds initial_backoff{1000}; // doubles per retry; Retry-After wins when given
  std::chrono::milliseconds max_backoff{30000};
  double temperature = 0.0;
  int max_tokens = 4096;  // per reply
};

// Where the options come from when not given explicitly: CUBRIDGE_LLM_ENDPOINT,
// CUBRIDGE_LLM_MODEL, and the key from `key_file` (first line, trailing whitespace stripped) or
// else CUBRIDGE_LLM_API_KEY. A key file that cannot be read is an error naming the path
// (NOT_FOUND, PERMISSION_DENIED; INVALID_ARGUMENT for a directory or an empty first line); a key
// already in `options` wins over the environment, never over an explicit file.
absl::Status ResolveKey(const std::string& key_file, ChatOptions& options);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

struct ChatReply {
  std::string content;  // choices[0].message.content
  std::string finish_reason;
  Usage usage;          // from the reply's "usage" (0 when the server omits it)
  int attempts = 1;     // HTTP requests made, retries included
  double seconds = 0;   // wall time of Complete(), retries and their waits included
};

// Token and cost limits for one job. Cost = tokens / 1e6 * price per million (0 = free).
struct Budget {
  int64_t max_tokens = 200000;  // prompt + completion over the job; 0 = unlimited
  double max_cost_usd = 0;      // 0 = unlimited
  double usd_per_million_prompt = 0;
  double usd_per_million_completion = 0;
};

// Called after every completed request (for metrics: tokens by kind, requests by outcome).
// outcome: "ok" | "retried" (one call per retried attempt) | "failed".
using UsageObserver = std::function<void(const std::string& outcome, const Usage& usage)>;

class ChatClient {
 public:
  explicit ChatClient(ChatOptions options, Budget budget = {}, UsageObserver observer = nullptr);
  ~ChatClient();
  ChatClient(const ChatClient&) = delete;
  ChatClient& operator=(const ChatClient&) = delete;

  // One chat completion. Errors (all with the endpoint and model, never the key):
  //  - RESOURCE_EXHAUSTED: the budget is spent (checked before sending: a job over budget sends
  //    nothing more), or 429 after the last retry;
  //  - DEADLINE_EXCEEDED: the request timed out after the last retry;
  //  - UNAUTHENTICATED / PERMISSION_DENIED: 401 / 403 (not retried; says to check the key);
  //  - UNAVAILABLE: connection refused / DNS / 5xx after the last retry;
  //  - RESOURCE_EXHAUSTED without retries for a 429 whose error code is "insufficient_quota"
  //    (no credit left: waiting does not help);
  //  - INVALID_ARGUMENT: other 4xx (the server's error message included, truncated), or no
  //    endpoint / model set (nothing sent);
  //  - INTERNAL: a 200 whose body is not a chat completion (what was missing).
  absl::StatusOr<ChatReply> Complete(const std::vector<ChatMessage>& messages);

  const Usage& used() const { return used_; }  // over this client's lifetime (one job)
  double cost_usd() const;
  const ChatOptions& options() const { return options_; }
  // `text` with every occurrence of the API key replaced by "[redacted]".
  std::string Redact(const std::string& text) const;

 private:
  ChatOptions options_;
  Budget budget_;
  UsageObserver observer_;
  Usage used_;
  void* curl_ = nullptr;  // CURL*, reused across requests (keep-alive)
};

}  // namespace cubridge::llm
