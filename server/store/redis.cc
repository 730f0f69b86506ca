#include "server/store/redis.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <thread>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cubridge::store {
namespace {

timeval ToTimeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000),
                 static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

RedisReply Convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.kind = RedisReply::Kind::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
      out.kind = RedisReply::Kind::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.kind = RedisReply::Kind::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.kind = RedisReply::Kind::kArray;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(Convert(r->element[i]));
      break;
    default:
      break;  // nil
  }
  return out;
}

absl::Status Tagged(absl::Status s, absl::string_view code) {
  s.SetPayload(kStoreErrorPayload, absl::Cord(code));
  return s;
}

}  // namespace

std::string StoreError(const absl::Status& status) {
  auto code = status.GetPayload(kStoreErrorPayload);
  return code ? std::string(*code) : std::string();
}

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::unique_ptr<RedisClient>> RedisClient::Connect(const RedisOptions& options) {
  std::unique_ptr<RedisClient> client(new RedisClient(options));
  if (auto s = client->EnsureConnected(); !s.ok()) return s;
  return client;
}

RedisClient::~RedisClient() {
  if (ctx_ != nullptr) redisFree(ctx_);
}

absl::Status RedisClient::EnsureConnected() {
  if (ctx_ != nullptr && ctx_->err == 0) return absl::OkStatus();
  if (ctx_ != nullptr) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  const std::string where = absl::StrCat(options_.host, ":", options_.port);
  redisContext* c = redisConnectWithTimeout(options_.host.c_str(), options_.port,
                                            ToTimeval(options_.connect_timeout));
  if (c == nullptr || c->err != 0) {
    const std::string why = c != nullptr ? c->errstr : "out of memory";
    if (c != nullptr) redisFree(c);
    return Tagged(absl::UnavailableError(absl::StrCat("cannot reach Redis at ", where, ": ", why)),
                  "io");
  }
  redisSetTimeout(c, ToTimeval(options_.command_timeout));
  ctx_ = c;
  if (!options_.password.empty()) {
    auto auth = Command({"AUTH", options_.password});
    if (!auth.ok()) {
      return Tagged(absl::UnauthenticatedError(absl::StrCat("Redis at ", where,
                                                            " refused the password: ",
                                                            auth.status().message())),
                    "auth");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RedisReply> RedisClient::Command(const std::vector<std::string>& args) {
  if (args.empty()) return Tagged(absl::InternalError("an empty Redis command"), "io");
  const auto deadline = std::chrono::steady_clock::now() + options_.loading_wait;
  auto pause = std::chrono::milliseconds(10);
  while (true) {
    bool loading = false;
    auto reply = CommandOnce(args, &loading);
    if (!loading) return reply;
    if (std::chrono::steady_clock::now() + pause > deadline) {
      return Tagged(absl::UnavailableError(absl::StrCat(
                        "Redis at ", options_.host, ":", options_.port,
                        " is still loading its dataset after ", options_.loading_wait.count(),
                        " ms (", args[0], " not run); retry later or raise the loading wait")),
                    "LOADING");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(250));
  }
}

absl::StatusOr<RedisReply> RedisClient::CommandOnce(const std::vector<std::string>& args,
                                                    bool* loading) {
  if (auto s = EnsureConnected(); !s.ok()) return s;
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(ctx_, static_cast<int>(args.size()), argv.data(), lens.data()));
  if (r == nullptr) {
    // The context is unusable after an I/O error; EnsureConnected() replaces it next time.
    return Tagged(absl::UnavailableError(absl::StrCat("Redis at ", options_.host, ":",
                                                      options_.port, " dropped the connection during ",
                                                      args[0], ": ", ctx_->errstr)),
                  "io");
  }
  std::unique_ptr<redisReply, decltype(&freeReplyObject)> owned(r, freeReplyObject);
  if (r->type == REDIS_REPLY_ERROR) {
    // An error reply starts with its code: "WRONGTYPE Operation against a key ...".
    const absl::string_view error(r->str, r->len);
    const absl::string_view code = error.substr(0, std::min(error.find(' '), error.size()));
    *loading = code == "LOADING";
    return Tagged(absl::InternalError(absl::StrCat("Redis ", args[0], ": ", error)), code);
  }
  return Convert(r);
}

}  // namespace cubridge::store
