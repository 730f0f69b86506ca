#include "worker/daemon/daemon.h"

#include <unistd.h>

#include <filesystem>
#include <optional>
#include <fstream>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "cuir/pipeline/files.h"
#include "server/core/task_contract.h"
#include "worker/daemon/execute.h"
#include "worker/gpu/autotune.h"
#include "worker/gpu/isolate.h"

namespace cubridge::workerd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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
void CountLlmUsage(core::Metrics& metrics, const json& result) {
  if (!result.is_object()) return;
  const json usage = result.value("llm_usage", json());
  if (!usage.is_object()) return;
  try {
    metrics.LlmUsage(usage.value("requests", int64_t{0}), usage.value("prompt_tokens", int64_t{0}),
                     usage.value("completion_tokens", int64_t{0}));
  } catch (const json::exception&) {
    // A usage document of the wrong shape is a bug in the child, not a reason to lose the task.
  }
}

}  // namespace

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!options_.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadAll(options_.tls_ca_file);
    creds = grpc::SslCredentials(ssl);
  }
  stub_ = v1::Workers::NewStub(grpc::CreateChannel(options_.coordinator, creds));
}

Daemon::~Daemon() {
  if (own_work_dir_) pipeline::RemoveTree(options_.work_dir);
}

template <typename Request, typename Response, typename Method>
grpc::Status Daemon::Call(Method method, const Request& request, Response* response,
                          std::chrono::milliseconds deadline) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + options_.token);
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  return (stub_.get()->*method)(&ctx, request, response);
}

absl::Status Daemon::Discover() {
  if (options_.arch != "auto") {
    arch_ = options_.arch;
    return absl::OkStatus();
  }
  // The probe runs in the GPU runner child: a broken driver cannot take the daemon down.
  gpu::AutotuneOptions t;
  t.work_root = (fs::path(options_.work_dir) / "probe").string();
  gpu::GpuAutotuner tuner(t);
  auto found = tuner.Probe(lower::Arch::kSm80);
  if (!found.ok()) {
    spdlog::info("no usable GPU ({}): serving as a CPU worker (lift, transfer, ir candidates)",
                 std::string(found.status().message()));
    arch_ = "cpu";
    return absl::OkStatus();
  }
  const json& d = tuner.device();
  arch_ = d.value("arch", "cpu") == "sm_90" ? "sm_90" : "sm_80";
  gpu_name_ = d.value("name", "");
  memory_bytes_ = d.value("memory_bytes", int64_t{0});
  return absl::OkStatus();
}

absl::Status Daemon::Register() {
  v1::RegisterRequest req;
  req.set_arch(arch_);
  req.set_gpu_name(gpu_name_);
  req.set_memory_bytes(memory_bytes_);
  req.add_capabilities("nvrtc");
  if (arch_ != "cpu") req.add_capabilities("gpu-verify");
  if (options_.llm) req.add_capabilities(core::kLlmClass);
  req.set_hostname(Hostname());
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
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) return FromGrpc(s);
    spdlog::warn("coordinator {} unavailable ({}); retrying", options_.coordinator, s.error_message());
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
  return absl::CancelledError("drained before registering");
}

absl::Status Daemon::Run() {
  if (options_.work_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "cubridge-worker-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("cannot create a work folder");
    options_.work_dir = tmpl;
    own_work_dir_ = true;
  }
  fs::create_directories(options_.work_dir);
  if (!options_.metrics_listen.empty()) {
    auto port = metrics_.Serve(options_.metrics_listen);
    if (!port.ok()) return port.status();
    spdlog::info("metrics on port {}", *port);
  }
  if (auto s = Discover(); !s.ok()) return s;
  if (auto s = Register(); !s.ok()) return draining_ ? absl::OkStatus() : s;
  auto backoff = std::chrono::milliseconds(200);
  while (!draining_) {
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
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
      continue;
    }
    backoff = std::chrono::milliseconds(200);
    if (resp.has_task()) RunTask(resp.task());
  }
  spdlog::info("drained: exiting");
  return absl::OkStatus();
}

void Daemon::RunTask(const v1::Task& task) {
  const std::string kind = task.kind() == v1::TASK_KIND_LIFT       ? core::kLiftTask
                           : task.kind() == v1::TASK_KIND_TRANSFER ? core::kTransferTask
                           : task.kind() == v1::TASK_KIND_LIFT_LLM ? core::kLiftLlmTask
                                                                   : core::kCandidateTask;
  spdlog::info("task={} job={} attempt={} token={}: running", task.task_id(), task.job_id(),
               task.attempt(), task.fencing_token());
  const fs::path dir = fs::path(options_.work_dir) / absl::StrCat("task-", task.fencing_token());
  fs::create_directories(dir);
  const std::string progress_path = (dir / "progress.txt").string();
  json request = {{"kind", kind},
                  {"payload", json::parse(task.payload_json(), nullptr, false)},
                  {"gpu_timeout_seconds", options_.gpu_timeout_seconds},
                  {"work_dir", dir.string()},
                  {"progress", progress_path}};
  // Only the tasks that talk to a model get the endpoint (the key stays in the environment).
  if (options_.llm && (kind == core::kTransferTask || kind == core::kLiftLlmTask)) {
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
  if (!outcome.ok()) {
    metrics_.WorkerTask(kind, "failed", seconds);
    Report(task, false, std::string(outcome.status().message()), true);
  } else if (lost) {
    metrics_.WorkerTask(kind, "lost", seconds);
    spdlog::warn("task={}: lease lost to another worker; dropped", task.task_id());
  } else if (outcome->stopped) {
    metrics_.WorkerTask(kind, "handed_back", seconds);
    Report(task, false, "the worker was drained before the task finished; handed back", true);
  } else if (outcome->ok) {
    metrics_.WorkerTask(kind, "ok", seconds);
    CountLlmUsage(metrics_, outcome->result["result"]);
    Report(task, true, outcome->result["result"].dump(), false);
  } else if (outcome->result.contains("retryable")) {  // the task itself failed
    metrics_.WorkerTask(kind, "failed", seconds);
    const json partial = outcome->result.value("result", json());
    CountLlmUsage(metrics_, partial);
    Report(task, false, outcome->result.value("error", "failed"),
           outcome->result.value("retryable", true), partial.is_null() ? "" : partial.dump());
  } else {  // crashed or hung: another attempt may fare better
    metrics_.WorkerTask(kind, "crashed", seconds);
    Report(task, false, absl::StrCat(outcome->error, outcome->stderr_tail.empty() ? "" : "; last output: ",
                                     outcome->stderr_tail),
           true);
  }
  if (std::getenv("CUBRIDGE_KEEP_TASK_FILES") == nullptr) pipeline::RemoveTree(dir.string());
}

void Daemon::Report(const v1::Task& task, bool ok, const std::string& text, bool retryable,
                    const std::string& partial_result) {
  auto backoff = std::chrono::milliseconds(200);
  // A coordinator restart takes a few seconds; the lease lasts longer than that only if we keep
  // beating, so keep trying for about one lease period and then let the lease expire.
  const auto give_up = std::chrono::steady_clock::now() + std::max(lease_ * 3, std::chrono::milliseconds(30000));
  while (std::chrono::steady_clock::now() < give_up) {
    grpc::Status s;
    if (ok) {
      v1::CompleteTaskRequest req;
      req.set_task_id(task.task_id());
      req.set_fencing_token(task.fencing_token());
      req.set_result_json(text);
      v1::CompleteTaskResponse unused;
      s = Call(&v1::Workers::Stub::CompleteTask, req, &unused, std::chrono::seconds(30));
    } else {
      v1::FailTaskRequest req;
      req.set_task_id(task.task_id());
      req.set_fencing_token(task.fencing_token());
      req.set_error(text);
      req.set_retryable(retryable);
      req.set_result_json(partial_result);
      v1::FailTaskResponse unused;
      s = Call(&v1::Workers::Stub::FailTask, req, &unused, std::chrono::seconds(30));
    }
    if (s.ok()) {
      spdlog::info("task={}: {}", task.task_id(), ok ? "completed" : "failed: " + text.substr(0, 300));
      return;
    }
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
        s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      spdlog::warn("task={}: outcome refused: {}", task.task_id(), s.error_message());
      return;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(3000));
  }
  spdlog::warn("task={}: coordinator unreachable; the lease will expire and the task be retried",
               task.task_id());
}

int RunTaskChild(const std::string& request_path, const std::string& result_path) {
  const json request = json::parse(ReadAll(request_path), nullptr, false);
  json result;
  if (request.is_discarded()) {
    result = {{"ok", false}, {"error", "unreadable task request " + request_path}, {"retryable", true}};
  } else {
    // Fault injection for the service tests (docs/service.md): a task slow enough to kill its
    // worker mid-way, and a task of a kind that crashes its process.
    if (const char* ms = std::getenv("CUBRIDGE_TEST_TASK_DELAY_MS"); ms != nullptr) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
    }
    if (const char* kind = std::getenv("CUBRIDGE_TEST_TASK_CRASH"); kind && request.value("kind", "") == kind) {
      std::abort();
    }
    ExecuteOptions o;
    o.work_dir = request.value("work_dir", fs::temp_directory_path().string());
    o.gpu_timeout_seconds = request.value("gpu_timeout_seconds", 120.0);
    if (request.contains("llm") && request["llm"].is_object()) o.llm = LlmFlagsFromJson(request["llm"]);
    std::ofstream progress(request.value("progress", "/dev/null"), std::ios::app);
    json partial;
    auto r = ExecuteTask(request.value("kind", ""), request["payload"], o,
                         [&](const std::string& line) { progress << line << std::endl; }, &partial);
    result = r.ok() ? json{{"ok", true}, {"result", *r}}
                    : json{{"ok", false},
                           {"error", std::string(r.status().message())},
                           {"retryable", Retryable(r.status())}};
    if (!r.ok() && !partial.is_null()) result["result"] = partial;
  }
  std::ofstream(result_path) << result.dump();
  return result.value("ok", false) ? 0 : 1;
}

}  // namespace cubridge::workerd
