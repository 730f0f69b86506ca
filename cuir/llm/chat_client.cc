#include "cuir/llm/chat_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"

namespace cubridge::llm {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxServerText = 300;
constexpr char kRedacted[] = "[redacted]";
constexpr char kKeyHint[] = "check CUBRIDGE_LLM_API_KEY or --llm-api-key-file";
constexpr char kEndpointHint[] =
    "check --llm-endpoint / CUBRIDGE_LLM_ENDPOINT (the base URL up to the API version, e.g. "
    "http://127.0.0.1:8000/v1) and that the server is running";

// curl_global_init is not thread-safe and must run before any handle exists; clients are created on
// many threads (one per job), so the first one to arrive does it for all.
CURLcode GlobalInitCurl() {
  static std::once_flag once;
  static CURLcode result = CURLE_OK;
  std::call_once(once, [] { result = curl_global_init(CURL_GLOBAL_DEFAULT); });
  return result;
}

std::string StripTrailingSlashes(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

std::string StripTrailingWhitespace(std::string s) {
  s.erase(std::find_if(s.rbegin(), s.rend(),
                       [](unsigned char c) { return !absl::ascii_isspace(c); })
              .base(),
          s.end());
  return s;
}

// Cuts at a character boundary so a truncated message stays valid UTF-8 (it ends up in JSON).
std::string Truncate(const std::string& s, size_t limit = kMaxServerText) {
  if (s.size() <= limit) return s;
  size_t n = limit;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return absl::StrCat(s.substr(0, n), "... (", s.size() - n, " more bytes)");
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The human part of an error body. OpenAI nests it under error.message, vLLM and SGLang put it
// at the top level, FastAPI-based servers under "detail"; anything else is shown as it came.
std::string ServerMessage(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    if (auto e = j.find("error"); e != j.end()) {
      if (e->is_string()) return e->get<std::string>();
      if (e->is_object()) {
        if (auto m = e->find("message"); m != e->end() && m->is_string()) {
          return m->get<std::string>();
        }
      }
    }
    for (const char* field : {"message", "detail"}) {
      if (auto m = j.find(field); m != j.end()) return m->is_string() ? m->get<std::string>() : Dump(*m);
    }
  }
  std::string text(absl::StripAsciiWhitespace(body));
  return text.empty() ? "(empty body)" : text;
}

// OpenAI answers 429 both for "too fast" and for "no money left"; waiting only helps the first.
bool IsQuotaExhausted(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto e = j.find("error");
  if (e == j.end() || !e->is_object()) return false;
  for (const char* field : {"code", "type"}) {
    if (auto f = e->find(field); f != e->end() && f->is_string() && *f == "insufficient_quota") {
      return true;
    }
  }
  return false;
}

struct Response {
  CURLcode curl = CURLE_OK;
  std::string curl_error;
  long status = 0;
  std::string body;
  std::optional<std::chrono::milliseconds> retry_after;
};

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  static_cast<Response*>(user)->body.append(data, size * count);
  return size * count;
}

// Only Retry-After matters, and only in its delta-seconds form: an HTTP date would need the
// server's clock to agree with ours, so that form falls back to our own backoff.
size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  const size_t n = size * count;
  absl::string_view line(data, n);
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos &&
      absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(line.substr(0, colon)), "retry-after")) {
    double seconds = 0;
    if (absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(colon + 1)), &seconds) &&
        std::isfinite(seconds) && seconds >= 0) {
      // Clamped here so the conversion below cannot overflow; max_backoff caps it further.
      seconds = std::min(seconds, 86400.0);
      static_cast<Response*>(user)->retry_after =
          std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    }
  }
  return n;
}

bool IsTransientTransportError(CURLcode code) {
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

std::chrono::milliseconds Backoff(const ChatOptions& o, int retry, const Response& r) {
  if (r.retry_after) return std::min(*r.retry_after, o.max_backoff);
  std::chrono::milliseconds delay = o.initial_backoff;
  for (int i = 1; i < retry && delay < o.max_backoff; ++i) delay *= 2;
  return std::max(std::chrono::milliseconds(0), std::min(delay, o.max_backoff));
}

int64_t TokenCount(const json& usage, const char* field) {
  auto f = usage.find(field);
  if (f == usage.end() || !f->is_number()) return 0;
  return f->is_number_float() ? static_cast<int64_t>(f->get<double>()) : f->get<int64_t>();
}

// Fills what the body has, usage first (so that billed tokens are counted even when the rest is
// unusable), and says what is missing.
// `redact` runs on every excerpt of the body before it is cut, so a cut cannot split the key.
absl::Status ParseCompletion(const std::string& body,
                             const std::function<std::string(const std::string&)>& redact,
                             ChatReply* reply) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InternalError(
        absl::StrCat("the body is not a JSON object: ", Truncate(redact(body))));
  }
  if (auto usage = j.find("usage"); usage != j.end() && usage->is_object()) {
    reply->usage.prompt_tokens = TokenCount(*usage, "prompt_tokens");
    reply->usage.completion_tokens = TokenCount(*usage, "completion_tokens");
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty() ||
      !(*choices)[0].is_object()) {
    // Some proxies answer 200 with an error object.
    const std::string said = j.contains("error") ? ServerMessage(body) : body;
    return absl::InternalError(absl::StrCat("no choices[0] in ", Truncate(redact(said))));
  }
  const json& choice = (*choices)[0];
  if (auto finish = choice.find("finish_reason"); finish != choice.end() && finish->is_string()) {
    reply->finish_reason = finish->get<std::string>();
  }
  auto message = choice.find("message");
  if (message == choice.end() || !message->is_object()) {
    return absl::InternalError("choices[0] has no \"message\" object");
  }
  auto content = message->find("content");
  if (content == message->end() || content->is_null()) {
    return absl::InternalError(absl::StrCat(
        "choices[0].message.content is missing or null (finish_reason \"", reply->finish_reason,
        "\"): the model answered with no text, e.g. a tool call or a refusal by a content filter"));
  }
  if (!content->is_string()) {
    return absl::InternalError(absl::StrCat("choices[0].message.content is not a string but ",
                                            content->type_name()));
  }
  reply->content = content->get<std::string>();
  return absl::OkStatus();
}

struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using Slist = std::unique_ptr<curl_slist, SlistDeleter>;

bool Append(Slist& list, const std::string& line) {
  curl_slist* grown = curl_slist_append(list.get(), line.c_str());
  if (grown == nullptr) return false;
  list.release();
  list.reset(grown);
  return true;
}

}  // namespace

absl::Status ResolveKey(const std::string& key_file, ChatOptions& options) {
  auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value == nullptr ? "" : value);
  };
  if (options.endpoint.empty()) options.endpoint = env("CUBRIDGE_LLM_ENDPOINT");
  if (options.model.empty()) options.model = env("CUBRIDGE_LLM_MODEL");

  if (key_file.empty()) {
    if (options.api_key.empty()) options.api_key = StripTrailingWhitespace(env("CUBRIDGE_LLM_API_KEY"));
    return absl::OkStatus();
  }

  // Only the path and the OS's reason go into these messages: the content is the secret.
  auto fail = [&](int err) {
    absl::StatusCode code = absl::StatusCode::kFailedPrecondition;
    if (err == ENOENT || err == ENOTDIR) code = absl::StatusCode::kNotFound;
    if (err == EACCES || err == EPERM) code = absl::StatusCode::kPermissionDenied;
    if (err == EISDIR) code = absl::StatusCode::kInvalidArgument;
    return absl::Status(code, absl::StrCat("cannot read the API key file ", key_file, ": ",
                                           std::generic_category().message(err),
                                           "; give a readable file whose first line is the key, or "
                                           "set CUBRIDGE_LLM_API_KEY instead"));
  };
  errno = 0;
  std::FILE* file = std::fopen(key_file.c_str(), "rb");
  if (file == nullptr) return fail(errno);
  std::string first_line;
  char buffer[4096];
  bool newline = false;
  // A key is a line; reading a bounded prefix keeps a wrong path (a device, a huge file) harmless.
  while (!newline && first_line.size() < (64 << 10)) {
    const size_t n = std::fread(buffer, 1, sizeof buffer, file);
    absl::string_view chunk(buffer, n);
    if (const size_t eol = chunk.find('\n'); eol != absl::string_view::npos) {
      chunk = chunk.substr(0, eol);
      newline = true;
    }
    first_line.append(chunk.data(), chunk.size());
    if (n < sizeof buffer) break;
  }
  const bool read_error = std::ferror(file) != 0;
  const int err = errno;
  std::fclose(file);
  if (read_error) return fail(err == 0 ? EIO : err);
  first_line = StripTrailingWhitespace(std::move(first_line));
  if (first_line.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the API key file ", key_file, " has an empty first line; put the key on its first line"));
  }
  options.api_key = std::move(first_line);
  return absl::OkStatus();
}

ChatClient::ChatClient(ChatOptions options, Budget budget, UsageObserver observer)
    : options_(std::move(options)), budget_(budget), observer_(std::move(observer)) {
  options_.endpoint = StripTrailingSlashes(options_.endpoint);
  if (GlobalInitCurl() == CURLE_OK) curl_ = curl_easy_init();
}

ChatClient::~ChatClient() {
  if (curl_ != nullptr) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

double ChatClient::cost_usd() const {
  return static_cast<double>(used_.prompt_tokens) / 1e6 * budget_.usd_per_million_prompt +
         static_cast<double>(used_.completion_tokens) / 1e6 * budget_.usd_per_million_completion;
}

std::string ChatClient::Redact(const std::string& text) const {
  const std::string& key = options_.api_key;
  if (key.empty()) return text;
  std::string out = absl::StrReplaceAll(text, {{key, kRedacted}});
  // A server that echoes the key inside a JSON string may have escaped it ("/" or quotes).
  std::string escaped = Dump(json(key));
  escaped = escaped.substr(1, escaped.size() - 2);
  if (escaped != key) out = absl::StrReplaceAll(out, {{escaped, kRedacted}});
  return out;
}

absl::StatusOr<ChatReply> ChatClient::Complete(const std::vector<ChatMessage>& messages) {
  const auto start = Clock::now();
  const std::string url = absl::StrCat(options_.endpoint, "/chat/completions");
  const std::string where = absl::StrCat(url, " (model \"", options_.model, "\")");
  auto error = [&](absl::StatusCode code, const std::string& message) {
    return absl::Status(code, Redact(message));
  };

  if (options_.endpoint.empty()) {
    return error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("no LLM endpoint is set (model \"", options_.model,
                              "\"); set --llm-endpoint or CUBRIDGE_LLM_ENDPOINT, e.g. "
                              "http://127.0.0.1:8000/v1"));
  }
  if (options_.model.empty()) {
    return error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("no LLM model is set for ", url,
                              "; set --llm-model or CUBRIDGE_LLM_MODEL to a model the server serves"));
  }
  if (curl_ == nullptr) {
    return error(absl::StatusCode::kInternal,
                 absl::StrCat("cannot create an HTTP client (libcurl) for ", where,
                              "; libcurl failed to initialize, which usually means it is out of "
                              "memory or broken"));
  }

  // The budget is checked before anything is sent: a job over its limit must cost nothing more.
  const int64_t used_tokens = used_.prompt_tokens + used_.completion_tokens;
  const std::string usage_text = absl::StrCat(used_tokens, " tokens (", used_.prompt_tokens,
                                              " prompt + ", used_.completion_tokens, " completion)");
  if (budget_.max_tokens > 0 && used_tokens >= budget_.max_tokens) {
    return error(absl::StatusCode::kResourceExhausted,
                 absl::StrCat("LLM token budget spent for ", where, ": used ", usage_text,
                              " of the limit of ", budget_.max_tokens,
                              " tokens per job; nothing more was sent. Raise --llm-max-tokens "
                              "(0 = unlimited)"));
  }
  if (budget_.max_cost_usd > 0 && cost_usd() >= budget_.max_cost_usd) {
    return error(absl::StatusCode::kResourceExhausted,
                 absl::StrFormat("LLM cost budget spent for %s: used $%.6f (%s) of the limit of "
                                 "$%.6f per job; nothing more was sent. Raise --llm-max-cost-usd "
                                 "(0 = unlimited)",
                                 where, cost_usd(), usage_text, budget_.max_cost_usd));
  }

  json request = {{"model", options_.model},
                  {"messages", json::array()},
                  {"temperature", options_.temperature},
                  {"max_tokens", options_.max_tokens}};
  for (const ChatMessage& m : messages) {
    request["messages"].push_back({{"role", m.role}, {"content", m.content}});
  }
  const std::string body = Dump(request);

  Slist headers;
  bool headers_ok = Append(headers, "Content-Type: application/json") &&
                    Append(headers, "Accept: application/json") &&
                    // curl would otherwise wait up to a second for "100 Continue" on large
                    // prompts, which many servers never send.
                    Append(headers, "Expect:");
  if (headers_ok && !options_.api_key.empty()) {
    headers_ok = Append(headers, "Authorization: Bearer " + options_.api_key);
  }
  if (!headers_ok) {
    return error(absl::StatusCode::kInternal,
                 absl::StrCat("out of memory building the request headers for ", where));
  }

  CURL* curl = static_cast<CURL*>(curl_);
  Response response;
  char curl_error[CURL_ERROR_SIZE];
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "cubridge-llm/0.1");
  curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.timeout.count()));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout.count()));
  // Timeouts must not use SIGALRM: this runs on worker threads of a multithreaded process.
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
  // The handle outlives this call (keep-alive); it must not keep pointers into this frame.
  struct Detach {
    CURL* curl;
    ~Detach() {
      curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, nullptr);
      curl_easy_setopt(curl, CURLOPT_WRITEDATA, nullptr);
      curl_easy_setopt(curl, CURLOPT_HEADERDATA, nullptr);
      curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
    }
  } detach{curl};

  const int attempts_allowed = std::max(0, options_.max_retries) + 1;
  for (int attempt = 1;; ++attempt) {
    response = Response{};
    curl_error[0] = '\0';
    spdlog::debug("llm: POST {} attempt {} of {} ({} messages, {} bytes)", Redact(where), attempt,
                  attempts_allowed, messages.size(), body.size());
    response.curl = curl_easy_perform(curl);
    if (response.curl == CURLE_OK) {
      curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
    } else {
      response.curl_error = curl_error[0] != '\0' ? curl_error : curl_easy_strerror(response.curl);
    }
    spdlog::debug("llm: {} answered {} after {:.3f}s", Redact(where),
                  response.curl == CURLE_OK ? absl::StrCat("HTTP ", response.status)
                                            : Redact(response.curl_error),
                  std::chrono::duration<double>(Clock::now() - start).count());

    const std::string attempts_text =
        attempt == 1 ? "" : absl::StrCat(" after ", attempt, " attempts");
    absl::Status failure;
    bool retryable = false;
    if (response.curl != CURLE_OK) {
      const std::string detail = absl::StrCat(response.curl_error, " (curl error ",
                                              static_cast<int>(response.curl), ")");
      retryable = IsTransientTransportError(response.curl);
      if (response.curl == CURLE_OPERATION_TIMEDOUT) {
        failure = error(absl::StatusCode::kDeadlineExceeded,
                        absl::StrCat("LLM request to ", where, " timed out", attempts_text, ": ",
                                     detail, "; the limit is ", options_.timeout.count(),
                                     " ms per request (connect ", options_.connect_timeout.count(),
                                     " ms): raise --llm-timeout, or check that the server is up "
                                     "and not overloaded"));
      } else if (response.curl == CURLE_URL_MALFORMAT || response.curl == CURLE_UNSUPPORTED_PROTOCOL) {
        failure = error(absl::StatusCode::kInvalidArgument,
                        absl::StrCat("bad LLM endpoint for ", where, ": ", detail, "; ",
                                     kEndpointHint));
      } else {
        failure = error(absl::StatusCode::kUnavailable,
                        absl::StrCat("cannot reach the LLM server at ", where, attempts_text, ": ",
                                     detail, "; ", kEndpointHint));
      }
    } else if (response.status >= 200 && response.status < 300) {
      ChatReply reply;
      const absl::Status parsed = ParseCompletion(
          response.body, [this](const std::string& t) { return Redact(t); }, &reply);
      // Tokens the server reports were billed even when the reply turns out unusable.
      used_.prompt_tokens += reply.usage.prompt_tokens;
      used_.completion_tokens += reply.usage.completion_tokens;
      if (!parsed.ok()) {
        if (observer_) observer_("failed", reply.usage);
        return error(absl::StatusCode::kInternal,
                     absl::StrCat("HTTP ", response.status, " from ", where, attempts_text,
                                  " is not a chat completion: ", parsed.message(),
                                  "; check that the endpoint speaks the OpenAI chat-completions "
                                  "API (", kEndpointHint, ")"));
      }
      reply.attempts = attempt;
      reply.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (reply.finish_reason == "length") {
        spdlog::debug("llm: the reply from {} was cut at max_tokens ({})", Redact(where),
                      options_.max_tokens);
      }
      if (observer_) observer_("ok", reply.usage);
      return reply;
    } else {
      const long status = response.status;
      const std::string said =
          Truncate(Redact(ServerMessage(response.body)));  // redacted first: a cut may split the key
      const std::string http = absl::StrCat("HTTP ", status, " from ", where, attempts_text, ": ", said);
      if (status == 401) {
        failure = error(absl::StatusCode::kUnauthenticated,
                        absl::StrCat(http, options_.api_key.empty()
                                               ? "; no API key was sent: set one ("
                                               : "; the API key was rejected (",
                                     kKeyHint, ")"));
      } else if (status == 403) {
        failure = error(absl::StatusCode::kPermissionDenied,
                        absl::StrCat(http, "; the API key may not use this model (", kKeyHint,
                                     ", and --llm-model)"));
      } else if (status == 429) {
        retryable = !IsQuotaExhausted(response.body);
        failure = error(absl::StatusCode::kResourceExhausted,
                        absl::StrCat(http, retryable
                                               ? "; the server is rate limiting: wait, send fewer "
                                                 "requests, or raise --llm-retries"
                                               : "; the account's quota is used up: add credit or "
                                                 "use another key"));
      } else if (status >= 500) {
        retryable = true;
        failure = error(absl::StatusCode::kUnavailable,
                        absl::StrCat(http, "; the server is failing or overloaded: try again later "
                                           "or raise --llm-retries"));
      } else if (status == 404) {
        failure = error(absl::StatusCode::kInvalidArgument,
                        absl::StrCat(http, "; the endpoint or the model does not exist: ",
                                     kEndpointHint, ", and --llm-model / CUBRIDGE_LLM_MODEL"));
      } else {
        failure = error(absl::StatusCode::kInvalidArgument,
                        absl::StrCat(http, "; the server refused the request: check --llm-model "
                                           "and that the prompt plus max_tokens (",
                                     options_.max_tokens, ") fits the model's context"));
      }
    }

    if (retryable && attempt < attempts_allowed) {
      const std::chrono::milliseconds delay = Backoff(options_, attempt, response);
      spdlog::debug("llm: retrying {} in {} ms: {}", Redact(where), delay.count(),
                    std::string(failure.message()));
      if (observer_) observer_("retried", Usage{});
      std::this_thread::sleep_for(delay);
      continue;
    }
    if (observer_) observer_("failed", Usage{});
    return failure;
  }
}

}  // namespace cubridge::llm
