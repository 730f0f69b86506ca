#include "worker/daemon/daemon.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <fstream>
#include <sstream>
#include <thread>

#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/files/files.h"
#include "service/contract/task_contract.h"
#include "service/contract/task_messages.h"
#include "worker/daemon/execute.h"
#include "worker/gpu/autotune.h"
#include "worker/gpu/isolate.h"

namespace cubridge::workerd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A file's content, or nothing where there is none (a child that left no progress).
std::string ReadAll(const std::string& path) { return files::ReadFile(path).value_or(""); }

// How long a retry waits at most: a restarted coordinator is back within about a second, and a
// worker should be leasing again within about as long (gRPC's reconnect backoff is capped to match).
constexpr std::chrono::milliseconds kMaxBackoff{1000};

// A failure class as the task child's result document names it.
std::string ClassName(v1::FailureClass c) {
  switch (c) {
    case v1::FAILURE_CLASS_CANDIDATE: return "candidate";
    case v1::FAILURE_CLASS_SPEC: return "spec";
    default: return "infrastructure";
  }
}

v1::FailureClass ClassFromName(const std::string& name) {
  if (name == "candidate") return v1::FAILURE_CLASS_CANDIDATE;
  if (name == "spec") return v1::FAILURE_CLASS_SPEC;
  return v1::FAILURE_CLASS_INFRASTRUCTURE;
}

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

std::string SelfExe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "cubridge-worker" : p.string();
}

std::string Hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// The LLM flags as the task request carries them to the child: everything but the key, which
// has no field here on purpose (the request is a file on disk).
json LlmFlagsJson(const propose::LlmFlags& f) {
  return {{"endpoint", f.endpoint},
          {"model", f.model},
          {"api_key_file", f.api_key_file},
          {"max_rounds", f.max_rounds},
          {"max_tokens", f.max_tokens},
          {"max_cost_usd", f.max_cost_usd},
          {"usd_per_million_prompt", f.usd_per_million_prompt},
          {"usd_per_million_completion", f.usd_per_million_completion},
          {"timeout_seconds", f.timeout_seconds},
          {"retries", f.retries}};
}

propose::LlmFlags LlmFlagsFromJson(const json& j) {
  propose::LlmFlags f;
  f.endpoint = j.value("endpoint", f.endpoint);
  f.model = j.value("model", f.model);
  f.api_key_file = j.value("api_key_file", f.api_key_file);
  f.max_rounds = j.value("max_rounds", f.max_rounds);
  f.max_tokens = j.value("max_tokens", f.max_tokens);
  f.max_cost_usd = j.value("max_cost_usd", f.max_cost_usd);
  f.usd_per_million_prompt = j.value("usd_per_million_prompt", f.usd_per_million_prompt);
  f.usd_per_million_completion = j.value("usd_per_million_completion", f.usd_per_million_completion);
  f.timeout_seconds = j.value("timeout_seconds", f.timeout_seconds);
  f.retries = j.value("retries", f.retries);
  return f;
}

// What a task's LLM conversation cost, from its (possibly partial) result; nothing without one.
void CountLlmUsage(service::Metrics& metrics, const v1::TaskResult& result) {
  const v1::LlmUsage& u = contract::ResultUsage(result);
  if (u.requests() > 0) metrics.LlmUsage(u.requests(), u.prompt_tokens(), u.completion_tokens());
}

// The task's files in its folder: the task as leased (payload and values) for the child, and the
// result it leaves for the daemon; protobuf's binary form, as on the wire.
constexpr char kTaskFile[] = "task.pb";
constexpr char kResultFile[] = "result.pb";

bool WriteMessage(const google::protobuf::Message& m, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  return m.SerializeToOstream(&out) && out.flush().good();
}

bool ReadMessage(const std::string& path, google::protobuf::Message* m) {
  std::ifstream in(path, std::ios::binary);
  return in.good() && m->ParseFromIstream(&in);
}

}  // namespace

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!options_.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadAll(options_.tls_ca_file);
    creds = grpc::SslCredentials(ssl);
  }
  // A restarted coordinator is found within about half a second (the backoff, up to 20% jitter,
  // and the connect): gRPC's own reconnect backoff (1 s growing to 2 min by default) would
  // otherwise decide when this worker leases again. Two connect attempts a second per worker is
  // little load on a coordinator's host.
  grpc::ChannelArguments args;
  // (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS stays at its default: it is also how long one connect
  // attempt may take, and a loaded machine needs more than a fraction of a second for it.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  // A lease carries the buffer values of its job (as large as the coordinator accepts them).
  args.SetMaxReceiveMessageSize(-1);
  channel_ = grpc::CreateCustomChannel(options_.coordinator, creds, args);
  stub_ = v1::Workers::NewStub(channel_);
}

Daemon::~Daemon() {
  if (health_server_) health_server_->Shutdown();
  if (own_work_dir_) files::RemoveTree(options_.work_dir);
}

template <typename Request, typename Response, typename Method>
grpc::Status Daemon::Call(Method method, const Request& request, Response* response,
                          std::chrono::milliseconds deadline) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + options_.token);
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  return (stub_.get()->*method)(&ctx, request, response);
}

absl::StatusOr<json> ProbeGpus(const std::string& work_root) {
  // The probe runs in the GPU runner child: a broken driver cannot take the daemon down.
  gpu::AutotuneOptions t;
  t.work_root = work_root;
  gpu::GpuAutotuner tuner(t);
  auto found = tuner.Probe(lower::Arch::kSm80);
  if (!found.ok()) return found.status();
  return json{{"device", tuner.device()}, {"devices", tuner.devices()}};
}

absl::Status Daemon::Discover() {
  const bool pick = options_.gpu >= 0;
  if (options_.arch != "auto" && !pick) {
    arch_ = options_.arch;
    return absl::OkStatus();
  }
  if (pick && options_.arch == "cpu") {
    return absl::InvalidArgumentError(absl::StrCat("--gpu ", options_.gpu,
                                                   " with --arch cpu: a CPU worker drives no GPU"));
  }
  // Each probe is a fresh child, so one after CUDA_VISIBLE_DEVICES changed sees the narrowed set.
  absl::StatusOr<json> seen = ProbeGpus((fs::path(options_.work_dir) / "probe").string());
  if (pick) {
    if (!seen.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("--gpu ", options_.gpu,
                                                        ": no usable GPU on this machine (",
                                                        seen.status().message(), ")"));
    }
    const json devices = (*seen)["devices"];
    if (options_.gpu >= static_cast<int>(devices.size())) {
      std::vector<std::string> listed;
      for (const json& d : devices) {
        listed.push_back(absl::StrCat(d.value("ordinal", 0), " ", d.value("name", "?"), " (",
                                      d.value("uuid", "?"), ")"));
      }
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpu ", options_.gpu, ": this machine has ", devices.size(), " GPU",
          devices.size() == 1 ? "" : "s", " (", absl::StrJoin(listed, "; "),
          "): give an ordinal below ", devices.size(),
          visible != nullptr ? absl::StrCat(" (CUDA_VISIBLE_DEVICES=", visible,
                                            " narrows what this worker sees)")
                             : ""));
    }
    const std::string uuid = devices[options_.gpu].value("uuid", "");
    if (uuid.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--gpu ", options_.gpu, ": the driver gives no UUID for it, so this worker cannot "
          "narrow its children to it (CUDA_VISIBLE_DEVICES)"));
    }
    // Every child (probe, runner, task) inherits it: the chosen GPU is their device 0.
    setenv("CUDA_VISIBLE_DEVICES", uuid.c_str(), 1);
    seen = ProbeGpus((fs::path(options_.work_dir) / "probe-gpu").string());
    if (!seen.ok() || (*seen)["device"].value("uuid", "") != uuid) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--gpu ", options_.gpu, " (", uuid, "): narrowed to it with CUDA_VISIBLE_DEVICES, the "
          "probe ", seen.ok() ? absl::StrCat("found ", (*seen)["device"].value("uuid", "?"))
                              : absl::StrCat("failed: ", seen.status().message())));
    }
  }
  if (!seen.ok()) {
    spdlog::info("no usable GPU ({}): serving as a CPU worker (lift, transfer, ir candidates)",
                 std::string(seen.status().message()));
    arch_ = "cpu";
    return absl::OkStatus();
  }
  const json& d = (*seen)["device"];
  arch_ = options_.arch != "auto" ? options_.arch
          : d.value("arch", "cpu") == "sm_90" ? "sm_90" : "sm_80";
  gpu_name_ = d.value("name", "");
  gpu_uuid_ = d.value("uuid", "");
  gpu_ordinal_ = pick ? options_.gpu : d.value("ordinal", 0);
  memory_bytes_ = d.value("memory_bytes", int64_t{0});
  if (!options_.share_gpu && !gpu_uuid_.empty()) {
    auto lock = GpuLock::Acquire(options_.gpu_lock_dir, gpu_uuid_);
    if (!lock.ok()) return lock.status();
    gpu_lock_ = *std::move(lock);
  }
  spdlog::info("driving GPU {} ({}, {}){}", gpu_ordinal_, gpu_name_, gpu_uuid_,
               options_.share_gpu ? ", shared with other workers (--share-gpu)" : "");
  return absl::OkStatus();
}

absl::Status Daemon::Register() {
  v1::RegisterRequest req;
  req.set_arch(arch_);
  req.set_gpu_name(gpu_name_);
  if (!gpu_uuid_.empty()) {
    req.set_gpu_ordinal(gpu_ordinal_);
    req.set_gpu_uuid(gpu_uuid_);
  }
  req.set_memory_bytes(memory_bytes_);
  req.add_capabilities("nvrtc");
  if (arch_ != "cpu") req.add_capabilities("gpu-verify");
  if (options_.llm) req.add_capabilities(contract::kLlmClass);
  req.set_hostname(Hostname());
  req.set_task_contract(contract::kTaskContract);
  auto backoff = std::chrono::milliseconds(200);
  while (!draining_) {
    v1::RegisterResponse resp;
    grpc::Status s = Call(&v1::Workers::Stub::Register, req, &resp, std::chrono::seconds(10));
    if (s.ok()) {
      worker_id_ = resp.worker_id();
      lease_ = std::chrono::milliseconds(resp.lease_millis());
      spdlog::info("registered as {} (arch {}{}) with {}{}", worker_id_, arch_,
                   gpu_name_.empty() ? "" : ", " + gpu_name_, options_.coordinator,
                   options_.llm ? absl::StrCat("; LLM proposer: model ", options_.llm->model, " at ",
                                               options_.llm->endpoint)
                                : "");
      return absl::OkStatus();
    }
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
        s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return FromGrpc(s);
    }
    spdlog::warn("coordinator {} unavailable ({}); retrying", options_.coordinator, s.error_message());
    AwaitCoordinator(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  return absl::CancelledError("drained before registering");
}

absl::Status Daemon::Run() {
  if (options_.work_dir.empty()) {
    std::error_code ec;
    const fs::path tmp = fs::temp_directory_path(ec);
    std::string tmpl = ((ec ? fs::path("/tmp") : tmp) / "cubridge-worker-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create a work dir under ", tmp.string(), ": ", std::strerror(errno),
                       " (pass --work-dir DIR)"));
    }
    options_.work_dir = tmpl;
    own_work_dir_ = true;
  }
  // A work dir that cannot be used stops the worker here, with the reason, before it registers.
  if (auto s = CheckWorkDir(options_.work_dir, options_.min_free_bytes); !s.ok()) return s;
  if (!options_.metrics_listen.empty()) {
    auto port = metrics_.Serve(options_.metrics_listen);
    if (!port.ok()) return port.status();
    spdlog::info("metrics on port {}", *port);
  }
  if (!options_.health_listen.empty()) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(options_.health_listen, grpc::InsecureServerCredentials(), &port);
    health_server_ = builder.BuildAndStart();
    if (!health_server_ || port == 0) {
      return absl::UnavailableError(absl::StrCat("cannot serve grpc.health.v1 on ",
                                                 options_.health_listen, " (is the port taken?)"));
    }
    health_server_->GetHealthCheckService()->SetServingStatus(true);
    spdlog::info("health on port {}", port);
  }
  if (auto s = Discover(); !s.ok()) return s;
  if (auto s = Register(); !s.ok()) return draining_ ? absl::OkStatus() : s;
  auto backoff = std::chrono::milliseconds(100);
  while (!draining_) {
    // Checked before every lease: a task is never taken by a machine that cannot run it.
    if (auto s = SelfCheck(); !s.ok()) {
      Fence(std::string(s.message()));
      continue;
    }
    v1::LeaseTaskRequest req;
    req.set_worker_id(worker_id_);
    req.set_wait_millis(options_.lease_wait.count());
    v1::LeaseTaskResponse resp;
    grpc::Status s = Call(&v1::Workers::Stub::LeaseTask, req, &resp,
                          options_.lease_wait + std::chrono::seconds(10));
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) {  // the coordinator forgot us: register again
      if (auto r = Register(); !r.ok()) return draining_ ? absl::OkStatus() : r;
      continue;
    }
    if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      return FromGrpc(s);
    }
    if (!s.ok()) {
      spdlog::warn("lease: {} ({}); retrying", s.error_message(), static_cast<int>(s.error_code()));
      AwaitCoordinator(backoff);
      backoff = std::min(backoff * 2, kMaxBackoff);
      continue;
    }
    backoff = std::chrono::milliseconds(100);
    if (!resp.has_task()) continue;
    const v1::FailureClass failed = RunTask(resp.task());
    if (failed != v1::FAILURE_CLASS_INFRASTRUCTURE || draining_) {
      infra_failures_ = 0;
      continue;
    }
    if (++infra_failures_ >= options_.max_infra_failures) {
      Fence(absl::StrCat(infra_failures_, " tasks in a row failed on this machine (the last: ",
                         last_failure_, ")"));
    }
  }
  ReportHealth(v1::WORKER_HEALTH_DRAINING, "");
  spdlog::info("drained: exiting");
  return absl::OkStatus();
}

void Daemon::AwaitCoordinator(std::chrono::milliseconds backoff,
                              std::chrono::steady_clock::time_point give_up) {
  // A connected channel means the coordinator itself refused for now: wait out the backoff.
  if (channel_->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) {
    std::this_thread::sleep_for(backoff);
    return;
  }
  // A broken one is watched until it connects (its own reconnect backoff is capped at 1 s), so
  // the next call goes out, and the return is logged, the moment a restarted coordinator listens.
  // Waiting only for the call's backoff left a race: a channel that connected just after the wait
  // ended carried the next lease as a long poll, and nothing said the coordinator was back.
  const auto now = std::chrono::steady_clock::now();
  if (!unreachable_since_) unreachable_since_ = now;
  auto next_note = now + std::chrono::seconds(30);
  while (!draining_ && std::chrono::steady_clock::now() < give_up) {
    const auto slice = std::min(give_up, std::chrono::steady_clock::now() + std::chrono::milliseconds(500));
    if (channel_->WaitForConnected(std::chrono::system_clock::now() +
                                   (slice - std::chrono::steady_clock::now()))) {
      spdlog::info("coordinator {} reachable again after {:.2f} s", options_.coordinator,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - *unreachable_since_)
                       .count());
      unreachable_since_.reset();
      return;
    }
    if (std::chrono::steady_clock::now() >= next_note) {
      spdlog::warn("coordinator {} still unreachable after {:.0f} s", options_.coordinator,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - *unreachable_since_)
                       .count());
      next_note += std::chrono::seconds(30);
    }
  }
}

absl::Status Daemon::SelfCheck() const {
  if (auto s = CheckWorkDir(options_.work_dir, options_.min_free_bytes); !s.ok()) return s;
  const std::string self = SelfExe();
  if (access(self.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the worker's own executable ", self, " (the task child) cannot be run: ",
        std::strerror(errno)));
  }
  return absl::OkStatus();
}

void Daemon::ReportHealth(v1::WorkerHealth health, const std::string& reason) {
  if (health_server_) {
    health_server_->GetHealthCheckService()->SetServingStatus(health == v1::WORKER_HEALTH_SERVING);
  }
  metrics_.WorkerHealthy(health == v1::WORKER_HEALTH_SERVING);
  if (worker_id_.empty()) return;
  v1::ReportHealthRequest req;
  req.set_worker_id(worker_id_);
  req.set_health(health);
  req.set_reason(reason);
  v1::ReportHealthResponse unused;
  grpc::Status s = Call(&v1::Workers::Stub::ReportHealth, req, &unused, std::chrono::seconds(5));
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
    // Its registration expired while it waited: a fresh one, with the health it reports.
    if (Register().ok()) (void)Call(&v1::Workers::Stub::ReportHealth, req, &unused, std::chrono::seconds(5));
  }
}

void Daemon::Fence(const std::string& reason) {
  spdlog::error("unhealthy, leasing nothing until the self-check passes: {}", reason);
  ReportHealth(v1::WORKER_HEALTH_NOT_SERVING, reason);
  auto backoff = options_.unhealthy_backoff;
  for (;;) {
    // Waits out the backoff in steps, staying registered (the report refreshes it) and drainable.
    const auto until = std::chrono::steady_clock::now() + backoff;
    while (!draining_ && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
          lease_ / 3, std::chrono::duration_cast<std::chrono::milliseconds>(
                          until - std::chrono::steady_clock::now()) + std::chrono::milliseconds(1)));
      ReportHealth(v1::WORKER_HEALTH_NOT_SERVING, reason);
    }
    if (draining_) return;
    auto s = SelfCheck();
    if (s.ok()) break;
    spdlog::error("self-check still fails: {}", std::string(s.message()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(300000));
  }
  infra_failures_ = 0;
  spdlog::info("self-check passes: leasing again");
  ReportHealth(v1::WORKER_HEALTH_SERVING, "");
}

v1::FailureClass Daemon::RunTask(const v1::Task& task) {
  const std::string kind = task.kind() == v1::TASK_KIND_LIFT       ? contract::kLiftTask
                           : task.kind() == v1::TASK_KIND_TRANSFER ? contract::kTransferTask
                           : task.kind() == v1::TASK_KIND_LIFT_LLM ? contract::kLiftLlmTask
                           : task.kind() == v1::TASK_KIND_BACKWARD ? contract::kBackwardTask
                                                                   : contract::kCandidateTask;
  spdlog::info("task={} job={} attempt={} token={}: running", task.task_id(), task.job_id(),
               task.attempt(), task.fencing_token());
  // Every failure names this worker and says what happened, for the user who reads the job.
  auto fail = [&](v1::FailureClass c, const std::string& why,
                  const std::optional<v1::TaskResult>& partial = std::nullopt) {
    if (c == v1::FAILURE_CLASS_INFRASTRUCTURE) last_failure_ = why;
    Fail(task, c, absl::StrCat(why, " (worker ", worker_id_, ")"), partial);
    return c;
  };
  const fs::path dir = fs::path(options_.work_dir) / absl::StrCat("task-", task.fencing_token());
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    metrics_.WorkerTask(kind, "failed", 0);
    return fail(v1::FAILURE_CLASS_INFRASTRUCTURE,
                absl::StrCat("cannot create the task folder ", dir.string(), ": ", ec.message()));
  }
  const std::string progress_path = (dir / "progress.txt").string();
  // The buffers the spec gives by value came with the lease, keyed by digest.
  const auto resolved = contract::CheckTensors(task.payload(), [&](const std::string& digest) {
    auto it = task.tensor_data().find(digest);
    return it == task.tensor_data().end() ? nullptr : &it->second;
  });
  if (!resolved.ok()) {
    metrics_.WorkerTask(kind, "failed", 0);
    // Values the store lost are the job's to send again; bytes that do not match their digest
    // were damaged on the way, which another attempt may not be.
    return fail(absl::IsNotFound(resolved) ? v1::FAILURE_CLASS_SPEC : v1::FAILURE_CLASS_INFRASTRUCTURE,
                std::string(resolved.message()));
  }
  if (!WriteMessage(task, (dir / kTaskFile).string())) {
    metrics_.WorkerTask(kind, "failed", 0);
    return fail(v1::FAILURE_CLASS_INFRASTRUCTURE,
                absl::StrCat("cannot write ", (dir / kTaskFile).string(), ": ", std::strerror(errno)));
  }
  json request = {{"kind", kind},
                  {"gpu_timeout_seconds", options_.gpu_timeout_seconds},
                  {"work_dir", dir.string()},
                  {"progress", progress_path}};
  // Only the tasks that talk to a model get the endpoint (the key stays in the environment).
  if (options_.llm && (kind == contract::kTransferTask || kind == contract::kLiftLlmTask)) {
    request["llm"] = LlmFlagsJson(*options_.llm);
  }

  // The daemon's side of a running task: heartbeats, progress lines, and the decision to stop.
  auto next_beat = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> drain_deadline;
  size_t progress_sent = 0;
  bool lost = false;
  gpu::IsolateOptions iso;
  iso.runner = SelfExe();
  iso.timeout_seconds = options_.task_timeout_seconds;
  iso.work_dir = dir.string();
  iso.what = absl::StrCat("the ", kind, " task");
  iso.should_stop = [&]() {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_beat) {
      next_beat = now + lease_ / 3;
      v1::HeartbeatRequest hb;
      hb.set_worker_id(worker_id_);
      hb.set_task_id(task.task_id());
      hb.set_fencing_token(task.fencing_token());
      v1::HeartbeatResponse unused;
      grpc::Status s = Call(&v1::Workers::Stub::Heartbeat, hb, &unused, lease_ / 3);
      // Lost for good: another worker owns the task now. A coordinator that is merely down is
      // not a lost lease; the result is sent when it is back.
      if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) lost = true;
    }
    const std::string progress = ReadAll(progress_path);
    while (progress.find('\n', progress_sent) != std::string::npos) {
      const size_t end = progress.find('\n', progress_sent);
      v1::ReportProgressRequest pr;
      pr.set_task_id(task.task_id());
      pr.set_fencing_token(task.fencing_token());
      pr.mutable_event()->set_stage(kind == "candidate" ? "gpu" : kind);
      pr.mutable_event()->set_ok(true);
      pr.mutable_event()->set_detail(progress.substr(progress_sent, end - progress_sent));
      pr.mutable_event()->set_worker_id(worker_id_);
      v1::ReportProgressResponse unused;
      (void)Call(&v1::Workers::Stub::ReportProgress, pr, &unused, std::chrono::seconds(5));
      progress_sent = end + 1;
    }
    if (draining_ && !drain_deadline) drain_deadline = now + options_.drain_timeout;
    return lost || (drain_deadline && now > *drain_deadline);
  };
  auto outcome = gpu::RunChild("run-task", request, iso);
  const double seconds = outcome.ok() ? outcome->seconds : 0;
  v1::FailureClass failed = v1::FAILURE_CLASS_UNSPECIFIED;
  // What the machine itself says, for failures that left no reason of their own.
  auto machine = [&]() -> std::string {
    auto s = SelfCheck();
    return s.ok() ? "" : absl::StrCat("; ", s.message());
  };
  if (!outcome.ok()) {
    metrics_.WorkerTask(kind, "failed", seconds);
    failed = fail(v1::FAILURE_CLASS_INFRASTRUCTURE,
                  absl::StrCat("the task could not be started: ", outcome.status().message(), machine()));
  } else if (lost) {
    metrics_.WorkerTask(kind, "lost", seconds);
    spdlog::warn("task={}: lease lost to another worker; dropped", task.task_id());
  } else if (outcome->stopped) {
    metrics_.WorkerTask(kind, "handed_back", seconds);
    failed = fail(v1::FAILURE_CLASS_INFRASTRUCTURE,
                  "the worker was drained before the task finished; handed back");
  } else if (v1::TaskResult result;
             outcome->ok && ReadMessage((dir / kResultFile).string(), &result)) {
    metrics_.WorkerTask(kind, "ok", seconds);
    CountLlmUsage(metrics_, result);
    Complete(task, result);
  } else if (outcome->result.contains("failure_class")) {  // the task itself failed
    metrics_.WorkerTask(kind, "failed", seconds);
    v1::TaskResult partial;
    const bool has_partial = outcome->result.value("partial", false) &&
                             ReadMessage((dir / kResultFile).string(), &partial);
    CountLlmUsage(metrics_, partial);
    failed = fail(ClassFromName(outcome->result.value("failure_class", "")),
                  outcome->result.value("error", "failed"),
                  has_partial ? std::optional<v1::TaskResult>(partial) : std::nullopt);
  } else {  // crashed, hung, or could not write its result: this machine's problem
    metrics_.WorkerTask(kind, "crashed", seconds);
    failed = fail(v1::FAILURE_CLASS_INFRASTRUCTURE,
                  absl::StrCat(outcome->error, machine(),
                               outcome->stderr_tail.empty() ? "" : "; last output: ",
                               outcome->stderr_tail));
  }
  if (std::getenv("CUBRIDGE_KEEP_TASK_FILES") == nullptr) files::RemoveTree(dir.string());
  return failed;
}

void Daemon::Complete(const v1::Task& task, const v1::TaskResult& result) {
  v1::CompleteTaskRequest req;
  req.set_task_id(task.task_id());
  req.set_fencing_token(task.fencing_token());
  *req.mutable_result() = result;
  Report<v1::CompleteTaskRequest, v1::CompleteTaskResponse>(task, &v1::Workers::Stub::CompleteTask, req);
}

void Daemon::Fail(const v1::Task& task, v1::FailureClass failure_class, const std::string& error,
                  const std::optional<v1::TaskResult>& partial_result) {
  v1::FailTaskRequest req;
  req.set_task_id(task.task_id());
  req.set_fencing_token(task.fencing_token());
  req.set_error(error);
  req.set_failure_class(failure_class);
  req.set_retryable(failure_class == v1::FAILURE_CLASS_INFRASTRUCTURE);  // for older coordinators
  if (partial_result) *req.mutable_partial() = *partial_result;
  spdlog::warn("task={}: failed ({}): {}", task.task_id(), v1::FailureClass_Name(failure_class),
               error.substr(0, 300));
  Report<v1::FailTaskRequest, v1::FailTaskResponse>(task, &v1::Workers::Stub::FailTask, req);
}

template <typename Request, typename Response, typename Method>
void Daemon::Report(const v1::Task& task, Method method, const Request& request) {
  auto backoff = std::chrono::milliseconds(100);
  // A coordinator restart takes a few seconds; the lease lasts longer than that only if we keep
  // beating, so keep trying for about three lease periods and then let the lease expire.
  const auto give_up = std::chrono::steady_clock::now() + std::max(lease_ * 3, std::chrono::milliseconds(30000));
  while (std::chrono::steady_clock::now() < give_up) {
    Response unused;
    grpc::Status s = Call(method, request, &unused, std::chrono::seconds(30));
    if (s.ok()) {
      spdlog::info("task={}: {}", task.task_id(),
                   std::is_same_v<Request, v1::CompleteTaskRequest> ? "completed" : "failure reported");
      return;
    }
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
        s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      spdlog::warn("task={}: outcome refused: {}", task.task_id(), s.error_message());
      return;
    }
    AwaitCoordinator(backoff, give_up);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  spdlog::warn("task={}: coordinator unreachable; the lease will expire and the task be retried",
               task.task_id());
}

int RunTaskChild(const std::string& request_path, const std::string& result_path) {
  const json request = json::parse(ReadAll(request_path), nullptr, false);
  const fs::path dir = request.is_discarded() ? fs::path() : fs::path(request.value("work_dir", ""));
  v1::Task task;
  json result;
  if (request.is_discarded() || !ReadMessage((dir / kTaskFile).string(), &task)) {
    result = {{"ok", false},
              {"error", absl::StrCat("the task request ", request_path, " or its task file is unreadable")},
              {"failure_class", ClassName(v1::FAILURE_CLASS_INFRASTRUCTURE)}};
  } else {
    // Fault injection for the service tests (docs/service.md): a task slow enough to kill its
    // worker mid-way, and a task of a kind that crashes its process.
    if (const char* ms = std::getenv("CUBRIDGE_TEST_TASK_DELAY_MS"); ms != nullptr) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
    }
    const std::string kind = request.value("kind", "");
    // ("*": every kind, a worker whose every task dies.)
    if (const char* crash = std::getenv("CUBRIDGE_TEST_TASK_CRASH");
        crash && (kind == crash || std::string(crash) == "*")) {
      std::abort();
    }
    ExecuteOptions o;
    o.work_dir = dir.string();
    o.gpu_timeout_seconds = request.value("gpu_timeout_seconds", 120.0);
    if (request.contains("llm") && request["llm"].is_object()) o.llm = LlmFlagsFromJson(request["llm"]);
    std::ofstream progress(request.value("progress", "/dev/null"), std::ios::app);
    v1::TaskResult partial;
    auto r = ExecuteTask(task, o, [&](const std::string& line) { progress << line << std::endl; },
                         &partial);
    const v1::TaskResult* kept = r.ok() ? &*r : partial.kind_case() != v1::TaskResult::KIND_NOT_SET ? &partial : nullptr;
    if (kept != nullptr && !WriteMessage(*kept, (dir / kResultFile).string())) {
      std::cerr << "cannot write the task result " << (dir / kResultFile).string() << ": "
                << std::strerror(errno) << "\n";
      return 3;
    }
    if (r.ok()) {
      result = {{"ok", true}};
    } else {
      const v1::FailureClass c = Classify(kind, r.status());
      result = {{"ok", false},
                {"error", std::string(r.status().message())},
                {"failure_class", ClassName(c)},
                {"retryable", c == v1::FAILURE_CLASS_INFRASTRUCTURE},
                {"partial", kept != nullptr}};
    }
  }
  std::ofstream out(result_path);
  out << result.dump();
  out.close();
  if (out.fail()) {
    // No result reaches the daemon; this line does (its stderr tail), when the disk takes it.
    std::cerr << "cannot write the task result " << result_path << ": " << std::strerror(errno) << "\n";
    return 3;
  }
  return result.value("ok", false) ? 0 : 1;
}

absl::Status CheckWorkDir(const std::string& dir, int64_t min_free_bytes) {
  auto bad = [&](const std::string& what) {
    return absl::FailedPreconditionError(absl::StrCat("work dir ", dir, ": ", what));
  };
  std::error_code ec;
  fs::create_directories(dir, ec);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return bad(absl::StrCat("cannot be created or read: ", std::strerror(errno),
                            " (pass --work-dir with a writable directory)"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return bad("is not a directory (pass --work-dir with a directory, or remove the file)");
  }
  // Written, synced and removed: a full or read-only disk shows here, not in a task.
  const std::string probe = absl::StrCat(dir, "/.cubridge-probe-", getpid());
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return bad(absl::StrCat("cannot create a file: ", std::strerror(errno)));
  const std::string block(4096, 'x');
  const bool wrote = write(fd, block.data(), block.size()) == static_cast<ssize_t>(block.size()) &&
                     fsync(fd) == 0;
  const int err = errno;
  close(fd);
  unlink(probe.c_str());
  if (!wrote) return bad(absl::StrCat("cannot write a file: ", std::strerror(err)));
  struct statvfs vfs;
  if (statvfs(dir.c_str(), &vfs) == 0) {
    const int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
    if (free_bytes < min_free_bytes) {
      return bad(absl::StrCat("has ", free_bytes >> 20, " MiB free, under the ",
                              min_free_bytes >> 20, " MiB a task may need (free space, or lower "
                              "--min-free-mb)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace cubridge::workerd
