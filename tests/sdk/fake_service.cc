#include "fake_service.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_format.h"

namespace cubridge::testing {
namespace {

bool Ended(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

grpc::Status NoSuchJob(const std::string& job_id) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + job_id);
}

}  // namespace

void FakeCuBridge::FailNext(const std::string& method, std::vector<grpc::Status> statuses) {
  std::lock_guard lock(mu_);
  for (auto& s : statuses) failures_[method].push_back(std::move(s));
}

void FakeCuBridge::RequireToken(const std::string& token) {
  std::lock_guard lock(mu_);
  token_ = token;
}

void FakeCuBridge::BreakWatch(int streams, int events) {
  std::lock_guard lock(mu_);
  watch_breaks_ = streams;
  watch_break_after_ = events;
}

void FakeCuBridge::EndSubmittedJobs(v1::JobState state, std::vector<v1::StageEvent> events) {
  std::lock_guard lock(mu_);
  end_submitted_.emplace(state, std::move(events));
}

void FakeCuBridge::AddJob(const v1::Job& job) {
  std::lock_guard lock(mu_);
  jobs_[job.job_id()] = job;
}

void FakeCuBridge::AddKernel(const v1::Kernel& kernel) {
  std::lock_guard lock(mu_);
  kernels_[{kernel.spec_hash(), kernel.arch()}] = kernel;
}

void FakeCuBridge::AddWorker(const v1::WorkerInfo& worker) {
  std::lock_guard lock(mu_);
  workers_.push_back(worker);
}

std::vector<v1::SubmitJobRequest> FakeCuBridge::submits() const {
  std::lock_guard lock(mu_);
  return submits_;
}

std::vector<std::string> FakeCuBridge::authorizations() const {
  std::lock_guard lock(mu_);
  return authorizations_;
}

int FakeCuBridge::calls(const std::string& method) const {
  std::lock_guard lock(mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

v1::ListJobsRequest FakeCuBridge::last_list() const {
  std::lock_guard lock(mu_);
  return last_list_;
}

std::optional<grpc::Status> FakeCuBridge::Enter(const std::string& method,
                                                grpc::ServerContext* ctx) {
  std::lock_guard lock(mu_);
  ++calls_[method];
  const auto& metadata = ctx->client_metadata();
  auto auth = metadata.find("authorization");
  const std::string sent =
      auth == metadata.end() ? "" : std::string(auth->second.data(), auth->second.size());
  authorizations_.push_back(sent);
  if (!token_.empty() && sent != "Bearer " + token_) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or unknown client token");
  }
  auto& queued = failures_[method];
  if (queued.empty()) return std::nullopt;
  grpc::Status status = queued.front();
  queued.pop_front();
  return status;
}

std::optional<v1::Job> FakeCuBridge::FindJob(const std::string& job_id) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return std::nullopt;
  return it->second;
}

grpc::Status FakeCuBridge::SubmitJob(grpc::ServerContext* ctx,
                                     const v1::SubmitJobRequest* request, v1::Job* job) {
  {
    std::lock_guard lock(mu_);
    submits_.push_back(*request);  // every attempt, the failed ones too
  }
  if (auto answer = Enter("SubmitJob", ctx)) return *answer;
  std::lock_guard lock(mu_);
  const std::string& key = request->idempotency_key();
  if (auto known = jobs_by_key_.find(key); !key.empty() && known != jobs_by_key_.end()) {
    *job = jobs_[known->second];
    return grpc::Status::OK;
  }
  job->set_job_id(absl::StrFormat("j-%04x", jobs_.size() + 1));
  job->set_spec_hash(absl::StrFormat("%064x", jobs_.size() + 1));
  job->mutable_archs()->CopyFrom(request->archs());
  job->set_verification(request->verification());
  job->set_proposer(request->proposer().empty() ? "rules" : request->proposer());
  job->set_state(v1::JOB_STATE_QUEUED);
  if (end_submitted_) {
    job->set_state(end_submitted_->first);
    for (auto e : end_submitted_->second) {
      e.set_job_id(job->job_id());
      *job->add_events() = e;
    }
    if (job->state() == v1::JOB_STATE_FAILED) job->set_error("transfer: not covered by the rules");
  }
  jobs_[job->job_id()] = *job;
  if (!key.empty()) jobs_by_key_[key] = job->job_id();
  return grpc::Status::OK;
}

grpc::Status FakeCuBridge::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* request,
                                  v1::Job* job) {
  if (auto answer = Enter("GetJob", ctx)) return *answer;
  auto found = FindJob(request->job_id());
  if (!found) return NoSuchJob(request->job_id());
  *job = *found;
  // As the coordinator does: the transcript only when asked for.
  if (!request->with_transcript()) job->clear_transcript_json();
  return grpc::Status::OK;
}

grpc::Status FakeCuBridge::WatchJob(grpc::ServerContext* ctx, const v1::GetJobRequest* request,
                                    grpc::ServerWriter<v1::StageEvent>* writer) {
  if (auto answer = Enter("WatchJob", ctx)) return *answer;
  auto job = FindJob(request->job_id());
  if (!job) return NoSuchJob(request->job_id());
  // As the coordinator: the stream starts after the events the caller already has.
  const int from = std::min(std::max(0, request->from_event()), job->events_size());
  int send = job->events_size() - from;
  bool breaks = false;
  {
    std::lock_guard lock(mu_);
    if (watch_breaks_ > 0) {
      --watch_breaks_;
      send = std::min(send, watch_break_after_);
      breaks = true;
    }
  }
  for (int i = from; i < from + send; ++i) writer->Write(job->events(i));
  if (breaks) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection to worker lost");
  if (Ended(job->state())) return grpc::Status::OK;
  // A job that does not end: hold the stream until the client gives up.
  while (!ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return grpc::Status::CANCELLED;
}

grpc::Status FakeCuBridge::CancelJob(grpc::ServerContext* ctx, const v1::GetJobRequest* request,
                                     v1::Job* job) {
  if (auto answer = Enter("CancelJob", ctx)) return *answer;
  std::lock_guard lock(mu_);
  auto it = jobs_.find(request->job_id());
  if (it == jobs_.end()) return NoSuchJob(request->job_id());
  if (Ended(it->second.state())) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "job " + request->job_id() + " already ended");
  }
  it->second.set_state(v1::JOB_STATE_CANCELLED);
  *job = it->second;
  return grpc::Status::OK;
}

grpc::Status FakeCuBridge::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* request,
                                    v1::ListJobsResponse* response) {
  if (auto answer = Enter("ListJobs", ctx)) return *answer;
  std::lock_guard lock(mu_);
  last_list_ = *request;
  for (const auto& [id, job] : jobs_) {
    if (request->state() == v1::JOB_STATE_UNSPECIFIED || job.state() == request->state()) {
      *response->add_jobs() = job;
    }
  }
  return grpc::Status::OK;
}

grpc::Status FakeCuBridge::GetKernel(grpc::ServerContext* ctx,
                                     const v1::GetKernelRequest* request, v1::Kernel* kernel) {
  if (auto answer = Enter("GetKernel", ctx)) return *answer;
  std::lock_guard lock(mu_);
  auto it = kernels_.find({request->spec_hash(), request->arch()});
  if (it == kernels_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no verified kernel for spec " +
                                                         request->spec_hash() + " on " +
                                                         request->arch());
  }
  *kernel = it->second;
  return grpc::Status::OK;
}

grpc::Status FakeCuBridge::ListWorkers(grpc::ServerContext* ctx,
                                       const v1::ListWorkersRequest* request,
                                       v1::ListWorkersResponse* response) {
  if (auto answer = Enter("ListWorkers", ctx)) return *answer;
  std::lock_guard lock(mu_);
  for (const auto& w : workers_) *response->add_workers() = w;
  return grpc::Status::OK;
}

FakeServer::FakeServer() {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
}

FakeServer::~FakeServer() {
  // Streams held open for a client are cancelled at the deadline, which ends their handlers.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

v1::StageEvent Event(const std::string& stage, bool ok, const std::string& detail) {
  v1::StageEvent e;
  e.set_stage(stage);
  e.set_ok(ok);
  e.set_seconds(0.25);
  e.set_detail(detail.empty() ? stage + " done" : detail);
  return e;
}

int DeadPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), len);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace cubridge::testing
