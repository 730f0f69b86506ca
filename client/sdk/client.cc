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
#include "cubridge/v1/client.grpc.pb.h"

namespace cubridge {
namespace {

using Clock = std::chrono::system_clock;
constexpr Clock::time_point kNever = Clock::time_point::max();
// Doubling stops here: a coordinator that is down for minutes should not push the next attempt
// further out than a restart takes.
constexpr std::chrono::milliseconds kMaxBackoff{10000};

template <class Req, class Resp>
using Method = grpc::Status (v1::CuBridge::Stub::*)(grpc::ClientContext*, const Req&, Resp*);

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  // gRPC and absl share the canonical code numbering.
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

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
  if (o.max_attempts < 1 || o.deadline.count() <= 0 || o.initial_backoff.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions: need max_attempts >= 1, deadline > 0 and initial_backoff >= 0; got ",
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
  std::unique_ptr<v1::CuBridge::Stub> stub;

  void Prepare(grpc::ClientContext& ctx, Clock::time_point deadline) const {
    if (deadline != kNever) ctx.set_deadline(deadline);
    if (!options.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options.token);
  }

  // Sleeps before the attempt that follows `failures` failed ones; false (without sleeping) when
  // that attempt would start after `until`.
  bool Backoff(int failures, Clock::time_point until) const {
    auto delay = options.initial_backoff * (int64_t{1} << std::min(failures - 1, 20));
    delay = std::min<std::chrono::milliseconds>(delay, kMaxBackoff);
    // Jitter keeps the clients that lost the coordinator together from retrying in lockstep.
    thread_local std::mt19937 rng{std::random_device{}()};
    const double factor = std::uniform_real_distribution<double>(0.8, 1.2)(rng);
    const auto sleep = std::chrono::duration_cast<std::chrono::milliseconds>(delay * factor);
    if (until != kNever && Clock::now() + sleep >= until) return false;
    std::this_thread::sleep_for(sleep);
    return true;
  }

  template <class Req, class Resp>
  absl::StatusOr<Resp> Unary(Method<Req, Resp> method, const Req& request,
                             Clock::time_point until = kNever) const {
    for (int attempt = 1;; ++attempt) {
      grpc::ClientContext ctx;
      Prepare(ctx, std::min(Clock::now() + options.deadline, until));
      Resp response;
      absl::Status status = FromGrpc((stub.get()->*method)(&ctx, request, &response));
      if (status.ok()) return response;
      if (!absl::IsUnavailable(status) || attempt >= options.max_attempts ||
          !Backoff(attempt, until)) {
        return status;
      }
    }
  }

  absl::StatusOr<v1::Job> GetJob(const std::string& job_id, Clock::time_point until) const {
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    return Unary(&v1::CuBridge::Stub::GetJob, request, until);
  }

  // One WatchJob stream. It replays the job's events from the first, so the `delivered` events
  // a previous stream passed on are skipped; `delivered` counts the new ones too.
  absl::Status StreamOnce(const std::string& job_id,
                          const std::function<void(const v1::StageEvent&)>& on_event,
                          Clock::time_point until, size_t& delivered) const {
    grpc::ClientContext ctx;
    Prepare(ctx, until);
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    auto reader = stub->WatchJob(&ctx, request);
    v1::StageEvent event;
    for (size_t seen = 0; reader->Read(&event); ++seen) {
      if (seen < delivered) continue;
      ++delivered;
      if (on_event) on_event(event);
    }
    return FromGrpc(reader->Finish());
  }

  // Watch and Wait: streams until the job ended, re-opening a stream that broke. Gives up after
  // max_attempts breaks in a row that delivered nothing new.
  absl::StatusOr<v1::Job> Follow(const std::string& job_id,
                                 const std::function<void(const v1::StageEvent&)>& on_event,
                                 Clock::time_point until) const {
    size_t delivered = 0;
    int failures = 0;
    for (;;) {
      const size_t before = delivered;
      absl::Status status = StreamOnce(job_id, on_event, until, delivered);
      if (status.ok()) {
        auto job = GetJob(job_id, until);
        if (!job.ok() || IsTerminal(job->state())) return job;
        status = absl::UnavailableError(
            absl::StrCat("the event stream of job ", job_id, " ended before the job did"));
      }
      if (!absl::IsUnavailable(status)) return status;
      failures = delivered > before ? 1 : failures + 1;
      if (failures >= options.max_attempts || !Backoff(failures, until)) return status;
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
  // default); matching ours means a retry after a coordinator restart finds a fresh dial instead
  // of the cached failure.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::max(1, Millis(options.initial_backoff)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, Millis(kMaxBackoff));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->stub = v1::CuBridge::NewStub(grpc::CreateCustomChannel(options.address, *credentials, args));
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

absl::StatusOr<v1::Kernel> Client::GetKernel(const std::string& spec_hash,
                                             const std::string& arch) {
  v1::GetKernelRequest request;
  request.set_spec_hash(spec_hash);
  request.set_arch(arch);
  return impl_->Unary(&v1::CuBridge::Stub::GetKernel, request);
}

absl::StatusOr<std::vector<v1::WorkerInfo>> Client::Workers() {
  auto response = impl_->Unary(&v1::CuBridge::Stub::ListWorkers, v1::ListWorkersRequest());
  if (!response.ok()) return response.status();
  return std::vector<v1::WorkerInfo>(response->workers().begin(), response->workers().end());
}

}  // namespace cubridge
