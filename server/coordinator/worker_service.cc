// cubridge.v1.Workers: what worker daemons call (the worker token). Results are accepted only
// with the lease's current fencing token.
#include <algorithm>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cubridge/v1/worker.grpc.pb.h"
#include "server/coordinator/coordinator.h"
#include "service/contract/ids.h"
#include "service/contract/task_contract.h"
#include "service/contract/task_messages.h"

namespace cubridge::coordinator {
namespace {

class WorkerService final : public v1::Workers::Service {
 public:
  explicit WorkerService(Coordinator* c) : c_(c) {}

  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                        v1::RegisterResponse* out) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      // Payloads and results of another shape would fail every task it leased.
      if (req->task_contract() != contract::kTaskContract) {
        return absl::FailedPreconditionError(absl::StrCat(
            "this worker speaks task contract ", req->task_contract(), " and the coordinator ",
            contract::kTaskContract, " (task.proto's messages): run a cubridge-worker of the "
            "coordinator's release"));
      }
      std::string arch = req->arch();
      if (arch != "cpu") {
        auto n = core::NormalizeArch(arch);
        if (!n.ok()) return n.status();
        arch = *n;
      }
      store::WorkerRecord w;
      w.arch = arch;
      w.gpu_name = req->gpu_name();
      w.gpu_ordinal = req->gpu_ordinal();
      w.gpu_uuid = req->gpu_uuid();
      w.memory_bytes = req->memory_bytes();
      w.capabilities = {req->capabilities().begin(), req->capabilities().end()};
      w.hostname = req->hostname();
      auto id = flow.workers().Register(w);
      if (!id.ok()) return id.status();
      out->set_worker_id(*id);
      out->set_lease_millis(c_->options().flow.lease.count());
      spdlog::info("worker={} registered arch={} gpu='{}'{} host={} capabilities={}", *id, arch,
                   w.gpu_name,
                   w.gpu_uuid.empty() ? "" : absl::StrCat(" gpu_ordinal=", w.gpu_ordinal,
                                                          " gpu_uuid=", w.gpu_uuid),
                   w.hostname, absl::StrJoin(w.capabilities, ","));
      return absl::OkStatus();
    });
  }

  grpc::Status LeaseTask(grpc::ServerContext* ctx, const v1::LeaseTaskRequest* req,
                         v1::LeaseTaskResponse* out) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      if (auto s = contract::CheckWorkerId(req->worker_id()); !s.ok()) return s;
      auto worker = flow.workers().Get(req->worker_id());
      if (!worker.ok()) {
        return absl::NotFoundError(absl::StrCat("worker ", req->worker_id(),
                                                " is not registered (expired?): register again"));
      }
      // A GPU worker serves its arch first, then the CPU work every worker can do, then (given an
      // LLM endpoint) the work that needs a model: that waits on the model, not on this machine,
      // so it comes last; lifts of user kernels also need this machine's GPU.
      std::vector<std::string> classes = {worker->arch};
      if (worker->arch != "cpu") classes.push_back("cpu");
      if (std::find(worker->capabilities.begin(), worker->capabilities.end(), contract::kLlmClass) !=
          worker->capabilities.end()) {
        if (worker->arch != "cpu") classes.push_back(contract::LlmGpuClass(worker->arch));
        classes.push_back(contract::kLlmClass);
      }
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::milliseconds(std::clamp<int64_t>(req->wait_millis(), 0, 30000));
      do {
        if (c_->draining()) return absl::OkStatus();  // nothing new while draining
        if (auto s = flow.workers().Touch(worker->id, ""); !s.ok()) return s;
        for (const std::string& cls : classes) {
          auto lease = flow.tasks().LeaseNext(cls, worker->id, Decliner(flow, *worker, cls));
          if (!lease.ok()) return lease.status();
          if (!lease->has_value()) continue;
          const store::Lease& l = **lease;
          if (l.reclaimed) c_->metrics().LeaseExpired();
          auto payload = contract::PayloadFromStore(l.task.payload);
          if (!payload.ok() || payload->kind_case() != contract::PayloadCaseOf(l.task.kind)) {
            // No worker could run it: it ends here, saying why, and the next task is leased.
            const std::string why = payload.ok() ? absl::StrCat("the task's payload is not of its kind (", l.task.kind, ")")
                                                 : std::string(payload.status().message());
            auto dead = flow.tasks().Fail(l.task_id, l.fencing_token, {why, false, "spec", ""});
            if (!dead.ok()) return dead.status();
            spdlog::error("task={} job={}: {}", l.task_id, l.task.job_id, why);
            c_->AdvanceSubscribers(flow, l.task_id);
            continue;
          }
          (void)flow.workers().Touch(worker->id, l.task_id);
          auto* t = out->mutable_task();
          t->set_task_id(l.task_id);
          t->set_job_id(l.task.job_id);
          t->set_kind(KindEnum(l.task.kind));
          t->set_attempt(l.attempt);
          t->set_fencing_token(l.fencing_token);
          // The values its spec names by digest travel with it; one the store lost is left out,
          // and the worker fails the task saying so.
          for (const std::string& digest : contract::TensorDigests(*payload)) {
            auto bytes = flow.tensors().Get(digest);
            if (!bytes.ok()) return bytes.status();
            if (bytes->has_value()) (*t->mutable_tensor_data())[digest] = std::move(**bytes);
          }
          *t->mutable_payload() = *std::move(payload);
          spdlog::info("task={} job={} kind={} leased by worker={} attempt={} token={}{}", l.task_id,
                       l.task.job_id, l.task.kind, worker->id, l.attempt, l.fencing_token,
                       l.reclaimed ? " (taken over from an expired lease)" : "");
          c_->AdvanceSubscribers(flow, l.task_id);  // queued -> running
          return absl::OkStatus();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      } while (std::chrono::steady_clock::now() < deadline && !ctx->IsCancelled());
      return absl::OkStatus();
    });
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse*) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      if (auto s = CheckIds(req->worker_id(), req->task_id()); !s.ok()) return s;
      if (auto s = flow.tasks().Heartbeat(req->task_id(), req->fencing_token()); !s.ok()) return s;
      auto touched = flow.workers().Touch(req->worker_id(), req->task_id());
      // The registry may have been reset under a live lease; the lease itself is what counts.
      if (!touched.ok() && !absl::IsNotFound(touched)) return touched;
      return absl::OkStatus();
    });
  }

  grpc::Status ReportProgress(grpc::ServerContext* ctx, const v1::ReportProgressRequest* req,
                              v1::ReportProgressResponse*) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      if (auto s = contract::CheckTaskId(req->task_id()); !s.ok()) return s;
      auto st = flow.tasks().Get(req->task_id());
      if (!st.ok()) return st.status();
      if (st->state != "leased" || st->fencing_token != req->fencing_token()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "task ", req->task_id(), ": fencing token ", req->fencing_token(), " is stale"));
      }
      auto jobs = flow.tasks().Subscribers(req->task_id());
      if (!jobs.ok()) return jobs.status();
      const auto& e = req->event();
      nlohmann::json ev = {{"stage", e.stage()},       {"ok", e.ok()},
                           {"seconds", e.seconds()},   {"detail", e.detail()},
                           {"worker_id", st->worker},  {"unix_millis", e.unix_millis()}};
      for (const std::string& job : *jobs) (void)flow.jobs().AppendEvent(job, ev.dump());
      return absl::OkStatus();
    });
  }

  grpc::Status CompleteTask(grpc::ServerContext* ctx, const v1::CompleteTaskRequest* req,
                            v1::CompleteTaskResponse*) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      if (auto s = contract::CheckTaskId(req->task_id()); !s.ok()) return s;
      auto st = flow.tasks().Get(req->task_id());
      if (!st.ok()) return st.status();
      const std::string kind = KindOf(req->task_id());
      if (req->result().kind_case() != contract::ResultCaseOf(kind)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "task ", req->task_id(), ": the result is not a ", kind, " result (TaskResult.", kind, ")"));
      }
      auto done = flow.tasks().Complete(req->task_id(), req->fencing_token(),
                                        contract::StoreText(req->result()));
      if (!done.ok()) {
        spdlog::warn("task={} result refused: {}", req->task_id(), std::string(done.message()));
        return done;
      }
      const double seconds = contract::ResultSeconds(req->result());
      c_->metrics().StageSeconds(kind, seconds);
      spdlog::info("task={} done by worker={} in {:.2f}s", req->task_id(), st->worker, seconds);
      c_->AdvanceSubscribers(flow, req->task_id());
      return absl::OkStatus();
    });
  }

  grpc::Status FailTask(grpc::ServerContext* ctx, const v1::FailTaskRequest* req,
                        v1::FailTaskResponse*) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      if (auto s = contract::CheckTaskId(req->task_id()); !s.ok()) return s;
      const std::string cls = ClassName(req->failure_class());
      // Only the machine's own failures are worth another attempt; the class, when the worker
      // gives one, decides (an older worker's `retryable` otherwise).
      const bool retryable = req->failure_class() == v1::FAILURE_CLASS_UNSPECIFIED
                                 ? req->retryable()
                                 : req->failure_class() == v1::FAILURE_CLASS_INFRASTRUCTURE;
      auto state = flow.tasks().Fail(req->task_id(), req->fencing_token(),
                                     {req->error(), retryable, cls,
                                      req->has_partial() ? contract::StoreText(req->partial()) : ""});
      if (!state.ok()) return state.status();
      if (!cls.empty()) c_->metrics().TaskFailed(cls);
      if (*state == "dead") {
        c_->metrics().TaskDead();
      } else {
        c_->metrics().TaskRetried();
      }
      spdlog::warn("task={} failed ({}, {}): {}", req->task_id(), *state,
                   cls.empty() ? "unclassified" : cls, req->error());
      c_->AdvanceSubscribers(flow, req->task_id());
      return absl::OkStatus();
    });
  }

  grpc::Status ReportHealth(grpc::ServerContext* ctx, const v1::ReportHealthRequest* req,
                            v1::ReportHealthResponse*) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      if (auto s = contract::CheckWorkerId(req->worker_id()); !s.ok()) return s;
      const std::string health = req->health() == v1::WORKER_HEALTH_NOT_SERVING ? "not_serving"
                                 : req->health() == v1::WORKER_HEALTH_DRAINING  ? "draining"
                                                                                : "serving";
      if (auto s = flow.workers().SetHealth(req->worker_id(), health, req->reason()); !s.ok()) {
        return s;
      }
      if (health == "not_serving") {
        spdlog::warn("worker={} unhealthy: {}", req->worker_id(), req->reason());
      } else {
        spdlog::info("worker={} {}", req->worker_id(), health);
      }
      return absl::OkStatus();
    });
  }

 private:
  static absl::Status CheckIds(const std::string& worker_id, const std::string& task_id) {
    if (auto s = contract::CheckWorkerId(worker_id); !s.ok()) return s;
    return contract::CheckTaskId(task_id);
  }

  static std::string ClassName(v1::FailureClass c) {
    switch (c) {
      case v1::FAILURE_CLASS_INFRASTRUCTURE: return "infrastructure";
      case v1::FAILURE_CLASS_CANDIDATE: return "candidate";
      case v1::FAILURE_CLASS_SPEC: return "spec";
      default: return "";
    }
  }

  // Whether `w` can lease from the class (the order LeaseTask builds for a worker).
  static bool Serves(const store::WorkerRecord& w, const std::string& cls) {
    const bool llm = std::find(w.capabilities.begin(), w.capabilities.end(), contract::kLlmClass) !=
                     w.capabilities.end();
    if (cls == "cpu" || cls == w.arch) return true;
    if (cls == contract::kLlmClass) return llm;
    return llm && cls == contract::LlmGpuClass(w.arch);
  }

  // A retry goes to a worker that has not failed the task when there is one: a worker that did
  // hands the delivery back while a healthy other worker of the class is alive, for up to three
  // lease periods after the failure (then anyone may take it, so a busy cluster still gets to it).
  store::TaskQueue::Decline Decliner(core::JobFlow& flow, const store::WorkerRecord& me,
                                     const std::string& cls) {
    const int64_t window = 3 * c_->options().flow.lease.count();
    return [&flow, me, cls, window](const std::string& task_id, const std::vector<std::string>& failed_by,
                                    int64_t failed_ms) {
      if (std::find(failed_by.begin(), failed_by.end(), me.id) == failed_by.end()) return false;
      if (store::UnixMillis() - failed_ms > window) return false;
      auto workers = flow.workers().List();
      if (!workers.ok()) return false;
      for (const store::WorkerRecord& w : *workers) {
        if (w.id == me.id || w.health != "serving" || !Serves(w, cls)) continue;
        if (std::find(failed_by.begin(), failed_by.end(), w.id) != failed_by.end()) continue;
        spdlog::debug("task={}: worker={} failed it before; left for worker={}", task_id, me.id, w.id);
        return true;
      }
      return false;
    };
  }

  template <typename F>
  grpc::Status Call(grpc::ServerContext* ctx, F&& body) {
    if (auto s = c_->options().worker_tokens.Check(ctx, "worker"); !s.ok()) return s;
    auto flow = c_->Flow();
    if (!flow.ok()) return ToGrpc(flow.status());
    return ToGrpc(body(**flow));
  }

  static v1::TaskKind KindEnum(const std::string& kind) {
    if (kind == contract::kLiftTask) return v1::TASK_KIND_LIFT;
    if (kind == contract::kTransferTask) return v1::TASK_KIND_TRANSFER;
    if (kind == contract::kCandidateTask) return v1::TASK_KIND_CANDIDATE;
    if (kind == contract::kLiftLlmTask) return v1::TASK_KIND_LIFT_LLM;
    if (kind == contract::kBackwardTask) return v1::TASK_KIND_BACKWARD;
    return v1::TASK_KIND_UNSPECIFIED;
  }
  // Task ids start with what they compute: lift-, transfer-, cand-, liftllm-, bwd-.
  static std::string KindOf(const std::string& task_id) {
    if (task_id.rfind("lift-", 0) == 0) return contract::kLiftTask;
    if (task_id.rfind("transfer-", 0) == 0) return contract::kTransferTask;
    if (task_id.rfind("liftllm-", 0) == 0) return contract::kLiftLlmTask;
    if (task_id.rfind("bwd-", 0) == 0) return contract::kBackwardTask;
    return contract::kCandidateTask;
  }

  Coordinator* c_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeWorkerService(Coordinator* c) {
  return std::make_unique<WorkerService>(c);
}

}  // namespace cubridge::coordinator
