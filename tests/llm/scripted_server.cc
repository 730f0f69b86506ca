#include "tests/llm/scripted_server.h"

#include <httplib.h>

#include <atomic>
#include <csignal>
#include <stdexcept>
#include <thread>
#include <utility>

namespace cubridge::testing {
namespace {

using json = nlohmann::json;

json ErrorBody(int status, const std::string& message) {
  return {{"error", {{"message", message}, {"type", "scripted_error"}, {"code", status}}}};
}

json Completion(const ScriptedReply& reply, const json& request, int serial) {
  const json model = request.is_object() && request.contains("model") ? request["model"] : json("");
  return {{"id", "chatcmpl-scripted-" + std::to_string(serial)},
          {"object", "chat.completion"},
          {"created", 1700000000},
          {"model", model},
          {"choices",
           json::array({{{"index", 0},
                         {"message", {{"role", "assistant"}, {"content", reply.content}}},
                         {"finish_reason", "stop"}}})},
          {"usage",
           {{"prompt_tokens", reply.prompt_tokens},
            {"completion_tokens", reply.completion_tokens},
            {"total_tokens", reply.prompt_tokens + reply.completion_tokens}}}};
}

}  // namespace

ScriptedReply Say(const std::string& content) {
  ScriptedReply r;
  r.content = content;
  return r;
}

ScriptedReply HttpError(int status, const std::string& message) {
  ScriptedReply r;
  r.status = status;
  r.body = ErrorBody(status, message).dump();
  return r;
}

struct ScriptedLlmServer::Impl {
  httplib::Server server;
  std::thread thread;
  int port = -1;
  std::atomic<bool> stopping{false};

  mutable std::mutex mu;
  std::vector<ScriptedReply> script;
  size_t next = 0;
  std::vector<Request> received;

  // The next reply, recorded under the lock; the delay is served outside it so that a slow reply
  // does not hold up requests() or other connections.
  ScriptedReply Take(const httplib::Request& req, json* body, int* serial) {
    std::lock_guard<std::mutex> lock(mu);
    *body = json::parse(req.body, nullptr, false);
    if (body->is_discarded()) *body = json(req.body);  // kept as text so a test can see it
    received.push_back({req.get_header_value("Authorization"), *body});
    *serial = static_cast<int>(received.size());
    if (next < script.size()) return script[next++];
    ScriptedReply exhausted;
    exhausted.status = 500;
    exhausted.body = ErrorBody(500, "script exhausted").dump();
    return exhausted;
  }

  void Handle(const httplib::Request& req, httplib::Response& res) {
    json body;
    int serial = 0;
    const ScriptedReply reply = Take(req, &body, &serial);
    // Short sleeps so that the destructor never waits out a long scripted delay.
    const auto until = std::chrono::steady_clock::now() + reply.delay;
    while (!stopping && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    res.status = reply.status;
    for (const auto& [name, value] : reply.headers) res.set_header(name, value);
    if (!reply.body.empty()) {
      res.set_content(reply.body, "application/json");
    } else if (reply.status >= 200 && reply.status < 300) {
      res.set_content(Completion(reply, body, serial).dump(), "application/json");
    } else {
      res.set_content(ErrorBody(reply.status, reply.content.empty() ? "scripted error" : reply.content)
                          .dump(),
                      "application/json");
    }
  }
};

ScriptedLlmServer::ScriptedLlmServer(std::vector<ScriptedReply> script)
    : impl_(std::make_unique<Impl>()) {
  // This cpp-httplib build writes with plain send(): a reply to a client that gave up (a timeout
  // test) would otherwise kill the test process with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  impl_->script = std::move(script);
  // A client that keeps its connection open must not hold the destructor for the default 5 s.
  impl_->server.set_keep_alive_timeout(1);
  // Without it Nagle and delayed ACKs add 40 ms to every reply on a reused connection.
  impl_->server.set_tcp_nodelay(true);
  impl_->server.Post("/v1/chat/completions",
                     [impl = impl_.get()](const httplib::Request& req, httplib::Response& res) {
                       impl->Handle(req, res);
                     });
  impl_->port = impl_->server.bind_to_any_port("127.0.0.1");
  if (impl_->port < 0) throw std::runtime_error("ScriptedLlmServer: cannot bind a loopback port");
  impl_->thread = std::thread([impl = impl_.get()] { impl->server.listen_after_bind(); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!impl_->server.is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      impl_->server.stop();
      impl_->thread.join();
      throw std::runtime_error("ScriptedLlmServer: the server did not start listening in 10 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

ScriptedLlmServer::~ScriptedLlmServer() {
  impl_->stopping = true;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string ScriptedLlmServer::endpoint() const {
  return "http://127.0.0.1:" + std::to_string(impl_->port) + "/v1";
}

int ScriptedLlmServer::port() const { return impl_->port; }

std::vector<ScriptedLlmServer::Request> ScriptedLlmServer::requests() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->received;
}

int ScriptedLlmServer::request_count() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int>(impl_->received.size());
}

}  // namespace cubridge::testing
