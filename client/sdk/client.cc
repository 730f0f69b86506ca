#include "cubridge/client.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "cubridge/status_details.h"
#include "cubridge/v1/client.grpc.pb.h"

namespace cubridge {
namespace {

using Clock = std::chrono::system_clock;
constexpr Clock::time_point kNever = Clock::time_point::max();
// Doubling stops here: a coordinator back from a restart should be found within about a second,
// however long it was gone (gRPC's own reconnect backoff is capped to match, in Connect).
constexpr std::chrono::milliseconds kMaxBackoff{1000};
// A Watch stream that lasted this long was connected: its break starts a new reconnect window.
constexpr std::chrono::milliseconds kStreamWasUp{1000};

template <class Req, class Resp>
using Method = grpc::Status (v1::CuBridge::Stub::*)(grpc::ClientContext*, const Req&, Resp*);

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a ", what));
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read the ", what));
  }
  std::string text;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return absl::ErrnoToStatus(err, absl::StrCat(path, ": cannot read the ", what));
  return text;
}

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// 128 random bits: two clients never pick the same key within the key's 24-hour lifetime.
std::string RandomIdempotencyKey() {
  std::random_device rd;
  return absl::StrFormat("sdk-%08x%08x%08x%08x", rd(), rd(), rd(), rd());
}

absl::Status Validate(const ClientOptions& o) {
  if (o.address.empty()) {
    return absl::InvalidArgumentError(
        "no coordinator address: set ClientOptions::address (or CUBRIDGE_ADDRESS) to HOST:PORT");
  }
  if (o.max_attempts < 0 || o.deadline.count() <= 0 || o.initial_backoff.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions: need max_attempts >= 0, deadline > 0 and initial_backoff >= 0; got ",
        o.max_attempts, ", ", o.deadline.count(), "ms, ", o.initial_backoff.count(), "ms"));
  }
  // gRPC fails every call whose metadata holds such a character; say so once, here.
  const bool printable = std::all_of(o.token.begin(), o.token.end(),
                                     [](char c) { return c >= 0x20 && c < 0x7f; });
  if (!printable) {
    return absl::InvalidArgumentError(
        "the client token has a control or non-ASCII character; check the token file");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const ClientOptions& o) {
  if (!o.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!o.root_certs_file.empty()) {
    auto pem = ReadWholeFile(o.root_certs_file, "TLS CA bundle (--tls-ca / CUBRIDGE_TLS_CA)");
    if (!pem.ok()) return pem.status();
    ssl.pem_root_certs = *std::move(pem);
  }
  return grpc::SslCredentials(ssl);
}

int Millis(std::chrono::milliseconds d) {
  return static_cast<int>(std::min<int64_t>(d.count(), std::numeric_limits<int>::max()));
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  auto text = ReadWholeFile(path, "token file");
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the token file is empty; put the client token in it"));
  }
  return token;
}

absl::StatusOr<ClientOptions> ClientOptions::FromEnvironment() {
  ClientOptions o;
  if (std::string a = Getenv("CUBRIDGE_ADDRESS"); !a.empty()) o.address = a;
  o.token = Getenv("CUBRIDGE_TOKEN");
  if (std::string file = Getenv("CUBRIDGE_TOKEN_FILE"); o.token.empty() && !file.empty()) {
    auto token = ReadTokenFile(file);
    if (!token.ok()) {
      return absl::Status(token.status().code(),
                          absl::StrCat("CUBRIDGE_TOKEN_FILE: ", token.status().message()));
    }
    o.token = *token;
  }
  o.root_certs_file = Getenv("CUBRIDGE_TLS_CA");
  o.tls = !o.root_certs_file.empty();
  return o;
}

std::optional<v1::ErrorDetail> ErrorDetailOf(const absl::Status& status) {
  return rpc::ErrorDetailOf(status);
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

absl::StatusOr<v1::SubmitJobRequest> RequestFromSpecFile(const std::string& path) {
  auto source = ReadWholeFile(path, "spec file");
  if (!source.ok()) return source.status();
  v1::SubmitJobRequest request;
  request.mutable_spec()->set_file_name(path);
  request.mutable_spec()->set_source(*std::move(source));
  return request;
}

absl::StatusOr<v1::SubmitJobRequest> RequestFromKernelFile(const std::string& path,
                                                           const std::string& name) {
  auto source = ReadWholeFile(path, "kernel file");
  if (!source.ok()) return source.status();
  v1::SubmitJobRequest request;
  request.mutable_kernel()->set_file_name(path);
  request.mutable_kernel()->set_source(*std::move(source));
  request.mutable_kernel()->set_name(name);
  return request;
}

struct Client::Impl {
  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::CuBridge::Stub> stub;

  void Prepare(grpc::ClientContext& ctx, Clock::time_point deadline) const {
    if (deadline != kNever) ctx.set_deadline(deadline);
    if (!options.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options.token);
  }

  std::chrono::milliseconds BackoffFor(int failures) const {
    auto delay = options.initial_backoff * (int64_t{1} << std::min(failures - 1, 20));
    delay = std::min<std::chrono::milliseconds>(delay, kMaxBackoff);
    // Jitter keeps the clients that lost the coordinator together from retrying in lockstep.
    thread_local std::mt19937 rng{std::random_device{}()};
    const double factor = std::uniform_real_distribution<double>(0.8, 1.2)(rng);
    return std::chrono::duration_cast<std::chrono::milliseconds>(delay * factor);
  }

  // Between attempts: back as soon as the channel is connected again (a restarted coordinator),
  // else after the backoff; false (at once) when the next attempt would start after `until`.
  bool Pause(int failures, const absl::Status& failed, Clock::time_point until) const {
    const auto wake = Clock::now() + BackoffFor(failures);
    if (until != kNever && wake >= until) return false;
    if (options.on_retry) options.on_retry(failed, failures);
    // A channel that is up (the coordinator itself said UNAVAILABLE: draining, its store down)
    // gives nothing to wait for: the backoff is the pause.
    if (channel->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) {
      std::this_thread::sleep_until(wake);
    } else {
      (void)channel->WaitForConnected(wake);
    }
    return true;
  }

  template <class Req, class Resp>
  absl::StatusOr<Resp> Unary(Method<Req, Resp> method, const Req& request,
                             Clock::time_point until = kNever) const {
    const Clock::time_point deadline = std::min(Clock::now() + options.deadline, until);
    for (int attempt = 1;; ++attempt) {
      grpc::ClientContext ctx;
      Prepare(ctx, deadline);
      Resp response;
      absl::Status status = rpc::FromGrpc((stub.get()->*method)(&ctx, request, &response));
      if (status.ok()) return response;
      if (!absl::IsUnavailable(status) ||
          (options.max_attempts > 0 && attempt >= options.max_attempts) ||
          !Pause(attempt, status, deadline)) {
        return status;
      }
    }
  }

  absl::StatusOr<v1::Job> GetJob(const std::string& job_id, Clock::time_point until) const {
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    return Unary(&v1::CuBridge::Stub::GetJob, request, until);
  }

  // One WatchJob stream from the event after the `delivered` ones; `delivered` counts the events
  // it passes on.
  absl::Status StreamOnce(const std::string& job_id,
                          const std::function<void(const v1::StageEvent&)>& on_event,
                          Clock::time_point until, size_t& delivered) const {
    grpc::ClientContext ctx;
    Prepare(ctx, until);
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    request.set_from_event(static_cast<int32_t>(delivered));
    auto reader = stub->WatchJob(&ctx, request);
    v1::StageEvent event;
    while (reader->Read(&event)) {
      ++delivered;
      if (on_event) on_event(event);
    }
    return rpc::FromGrpc(reader->Finish());
  }

  // Watch and Wait: streams until the job ended, re-opening a stream that broke, for as long as
  // streams keep coming back within the deadline (or max_attempts breaks in a row brought
  // nothing, when that is set).
  absl::StatusOr<v1::Job> Follow(const std::string& job_id,
                                 const std::function<void(const v1::StageEvent&)>& on_event,
                                 Clock::time_point until) const {
    size_t delivered = 0;
    int failures = 0;
    Clock::time_point window = Clock::now();  // when the stream was last known to be up
    for (;;) {
      const size_t before = delivered;
      const Clock::time_point opened = Clock::now();
      absl::Status status = StreamOnce(job_id, on_event, until, delivered);
      if (status.ok()) {
        auto job = GetJob(job_id, until);
        if (!job.ok() || IsTerminal(job->state())) return job;
        status = absl::UnavailableError(
            absl::StrCat("the event stream of job ", job_id, " ended before the job did"));
      }
      if (!absl::IsUnavailable(status)) return status;
      if (delivered > before || Clock::now() - opened >= kStreamWasUp) {
        failures = 0;
        window = Clock::now();
      }
      ++failures;
      if (options.max_attempts > 0 && failures >= options.max_attempts) return status;
      const Clock::time_point give_up = std::min(until, window + options.deadline);
      if (!Pause(failures, status, give_up)) return status;
    }
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (auto st = Validate(options); !st.ok()) return st;
  auto credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  // gRPC re-dials an unreachable address only after its own backoff (1 s, growing to 2 min by
  // default); capping it at ours means a coordinator back from a restart is dialled within a
  // second, and a call waiting in Pause goes through as soon as it is.
  // (Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: it is also the time one connect attempt may take.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::max(1, Millis(options.initial_backoff)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, Millis(kMaxBackoff));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->channel = grpc::CreateCustomChannel(options.address, *credentials, args);
  impl->stub = v1::CuBridge::NewStub(impl->channel);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const ClientOptions& Client::options() const { return impl_->options; }

absl::StatusOr<v1::Job> Client::Submit(const v1::SubmitJobRequest& request) {
  if (!request.idempotency_key().empty()) {
    return impl_->Unary(&v1::CuBridge::Stub::SubmitJob, request);
  }
  v1::SubmitJobRequest keyed = request;
  keyed.set_idempotency_key(RandomIdempotencyKey());
  return impl_->Unary(&v1::CuBridge::Stub::SubmitJob, keyed);
}

absl::StatusOr<v1::Job> Client::Get(const std::string& job_id) {
  return impl_->GetJob(job_id, kNever);
}

absl::StatusOr<std::string> Client::Transcript(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  request.set_with_transcript(true);
  auto job = impl_->Unary(&v1::CuBridge::Stub::GetJob, request);
  if (!job.ok()) return job.status();
  return job->transcript_json();
}

absl::StatusOr<v1::Job> Client::Watch(const std::string& job_id,
                                      std::function<void(const v1::StageEvent&)> on_event) {
  return impl_->Follow(job_id, on_event, kNever);
}

absl::StatusOr<v1::Job> Client::Wait(const std::string& job_id,
                                     std::chrono::milliseconds timeout) {
  auto job = impl_->Follow(job_id, nullptr, Clock::now() + timeout);
  if (absl::IsDeadlineExceeded(job.status())) {
    return absl::DeadlineExceededError(
        absl::StrCat("job ", job_id, " has not ended within ",
                     absl::FormatDuration(absl::FromChrono(timeout)), "; wait again or cancel it"));
  }
  return job;
}

absl::StatusOr<v1::Job> Client::Cancel(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  return impl_->Unary(&v1::CuBridge::Stub::CancelJob, request);
}

absl::StatusOr<std::vector<v1::Job>> Client::List(int limit, v1::JobState state) {
  v1::ListJobsRequest request;
  request.set_limit(limit);
  request.set_state(state);
  auto response = impl_->Unary(&v1::CuBridge::Stub::ListJobs, request);
  if (!response.ok()) return response.status();
  return std::vector<v1::Job>(response->jobs().begin(), response->jobs().end());
}

absl::StatusOr<v1::Kernel> Client::GetKernel(const std::string& spec_hash, const std::string& arch,
                                             const std::string& job_id) {
  v1::GetKernelRequest request;
  request.set_spec_hash(spec_hash);
  request.set_arch(arch);
  request.set_job_id(job_id);
  return impl_->Unary(&v1::CuBridge::Stub::GetKernel, request);
}

absl::StatusOr<std::vector<v1::WorkerInfo>> Client::Workers() {
  auto response = impl_->Unary(&v1::CuBridge::Stub::ListWorkers, v1::ListWorkersRequest());
  if (!response.ok()) return response.status();
  return std::vector<v1::WorkerInfo>(response->workers().begin(), response->workers().end());
}

}  // namespace cubridge
