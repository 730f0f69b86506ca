#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "cubridge/status_details.h"
#include "cuir/files/files.h"
#include "cuir/transfer/transfer.h"
#include "service/contract/task_contract.h"

namespace cubridge::coordinator {

grpc::Status ToGrpc(const absl::Status& s) {
  const std::string store = store::StoreError(s);
  if (store.empty()) return rpc::ToGrpc(s);
  if (absl::IsUnavailable(s)) {
    spdlog::warn("store unavailable: {}", std::string(s.message()));
    return rpc::ToGrpc(rpc::WithReason(
        absl::UnavailableError("the coordinator cannot reach its Redis store at the moment; retry "
                               "shortly (its operators' logs say why)"),
        v1::ERROR_REASON_STORE_UNAVAILABLE));
  }
  static std::atomic<uint64_t> incidents{0};
  const std::string incident = absl::StrCat("i-", store::UnixMillis(), "-", ++incidents);
  spdlog::error("incident={} store error ({}): {}", incident, store, std::string(s.message()));
  v1::ErrorDetail detail;
  detail.set_reason(v1::ERROR_REASON_INTERNAL);
  detail.set_incident(incident);
  return rpc::ToGrpc(rpc::WithDetail(
      absl::InternalError(absl::StrCat("internal error (incident ", incident,
                                       "); the coordinator's log has its cause")),
      detail));
}

Coordinator::Coordinator(CoordinatorOptions options) : options_(std::move(options)) {
  if (options_.flow.ruleset.empty()) options_.flow.ruleset = transfer::RulesetVersion();
  spec_checker_ = std::make_unique<core::SpecChecker>(
      options_.spec_checks,
      [this](const std::string& outcome, double seconds) { metrics_.SpecCheck(outcome, seconds); });
}

Coordinator::~Coordinator() {
  Drain();
  Wait();
}

absl::StatusOr<core::JobFlow*> Coordinator::Flow() {
  struct Local {
    const Coordinator* owner = nullptr;
    std::unique_ptr<store::RedisClient> redis;
    std::unique_ptr<core::JobFlow> flow;
  };
  thread_local Local local;
  if (local.owner != this || !local.flow) {
    auto redis = store::RedisClient::Connect(options_.redis);
    if (!redis.ok()) return redis.status();
    local.redis = *std::move(redis);
    local.flow = std::make_unique<core::JobFlow>(local.redis.get(), options_.flow, &metrics_);
    local.owner = this;
  }
  return local.flow.get();
}

absl::Status Coordinator::Start() {
  if (options_.client_tokens.empty() || options_.worker_tokens.empty()) {
    return absl::InvalidArgumentError(
        "the coordinator needs client tokens and a worker token (--client-tokens-file / "
        "CUBRIDGE_CLIENT_TOKENS and --worker-tokens-file / CUBRIDGE_WORKER_TOKEN): every call is "
        "authenticated");
  }
  auto flow = Flow();  // fail early, with the address, when Redis is not there
  if (!flow.ok()) return flow.status();
  if (auto s = spec_checker_->Start(); !s.ok()) return s;
  if (!options_.metrics_listen.empty()) {
    auto p = metrics_.Serve(options_.metrics_listen);
    if (!p.ok()) return p.status();
    metrics_port_ = *p;
  }

  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!options_.tls_cert_file.empty() || !options_.tls_key_file.empty()) {
    auto cert = files::ReadFile(options_.tls_cert_file);
    if (!cert.ok()) return absl::InvalidArgumentError(absl::StrCat("--tls-cert: ", cert.status().message()));
    auto key = files::ReadFile(options_.tls_key_file);
    if (!key.ok()) return absl::InvalidArgumentError(absl::StrCat("--tls-key: ", key.status().message()));
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  client_service_ = MakeClientService(this);
  worker_service_ = MakeWorkerService(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, creds, &port_);
  // A submit carries its buffers' values: the message limit is the rest's plus theirs.
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<int64_t>(
      int64_t{options_.max_message_bytes} + static_cast<int64_t>(options_.limits.max_tensor_bytes),
      std::numeric_limits<int>::max())));
  builder.RegisterService(client_service_.get());
  builder.RegisterService(worker_service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.listen, " (is the port taken?)"));
  }
  server_->GetHealthCheckService()->SetServingStatus(true);
  sweeper_ = std::thread([this] { SweepLoop(); });
  spdlog::info("coordinator listening on port {} (metrics port {}), redis {}:{}, ruleset {}", port_,
               metrics_port_, options_.redis.host, options_.redis.port, options_.flow.ruleset);
  return absl::OkStatus();
}

void Coordinator::AdvanceSubscribers(core::JobFlow& flow, const std::string& task_id) {
  auto jobs = flow.tasks().Subscribers(task_id);
  if (!jobs.ok()) return;  // the sweep will get to them
  for (const std::string& job : *jobs) {
    if (auto s = flow.Advance(job); !s.ok()) {
      spdlog::warn("job={} task={} advance: {}", job, task_id, std::string(s.message()));
    }
  }
}

void Coordinator::SweepLoop() {
  auto last_gauges = std::chrono::steady_clock::now() - std::chrono::hours(1);
  auto last_forget = last_gauges;
  // Ended jobs' index entries are dropped a while after their records expired.
  const auto forget_every = std::clamp<std::chrono::milliseconds>(options_.flow.retention / 2,
                                                                  std::chrono::milliseconds(500),
                                                                  std::chrono::minutes(1));
  std::unique_lock lock(mu_);
  while (!stopped_) {
    lock.unlock();
    auto flow = Flow();
    if (!flow.ok()) {
      spdlog::warn("sweep: {}", std::string(flow.status().message()));
    } else {
      core::JobFlow& f = **flow;
      if (auto n = f.tasks().PromoteDueRetries(); n.ok() && *n > 0) {
        spdlog::info("sweep: {} backed-off task(s) queued again", *n);
      }
      if (auto active = f.jobs().Active(); active.ok()) {
        for (const std::string& job : *active) {
          if (auto s = f.Advance(job); !s.ok()) spdlog::warn("job={} advance: {}", job, std::string(s.message()));
        }
      }
      if (std::chrono::steady_clock::now() - last_forget > forget_every) {
        last_forget = std::chrono::steady_clock::now();
        if (auto n = f.jobs().ForgetExpired(); n.ok() && *n > 0) {
          spdlog::info("sweep: {} expired job(s) dropped from the index", *n);
        }
      }
      if (std::chrono::steady_clock::now() - last_gauges > std::chrono::seconds(2)) {
        last_gauges = std::chrono::steady_clock::now();
        std::map<std::string, int> by_arch = {{"cpu", 0}, {"sm_80", 0}, {"sm_90", 0}};
        std::map<std::string, int> unhealthy = by_arch;
        if (auto workers = f.workers().List(); workers.ok()) {
          for (const auto& w : *workers) {
            ++by_arch[w.arch];
            if (w.health == "not_serving") ++unhealthy[w.arch];
          }
        }
        for (const auto& [arch, n] : by_arch) {
          metrics_.Workers(arch, n);
          metrics_.UnhealthyWorkers(arch, unhealthy[arch]);
        }
        f.RefreshQueueDepth();
      }
    }
    lock.lock();
    stop_cv_.wait_for(lock, options_.sweep_interval, [&] { return stopped_; });
  }
}

void Coordinator::Drain() {
  if (draining_.exchange(true) || !server_) return;
  spdlog::info("draining: no new jobs or leases; calls in flight get up to {} ms",
               options_.drain_timeout.count());
  server_->GetHealthCheckService()->SetServingStatus(false);
  server_->Shutdown(std::chrono::system_clock::now() + options_.drain_timeout);
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
  }
  stop_cv_.notify_all();
}

void Coordinator::Wait() {
  if (server_) server_->Wait();
  if (sweeper_.joinable()) sweeper_.join();
}

}  // namespace cubridge::coordinator
