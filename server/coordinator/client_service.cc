// cubridge.v1.CuBridge: what clients call (client tokens).
#include <set>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cubridge/v1/client.grpc.pb.h"
#include "cubridge/status_details.h"
#include "cuir/pipeline/report.h"
#include "server/coordinator/coordinator.h"
#include "service/contract/ids.h"
#include "service/contract/task_contract.h"

namespace cubridge::coordinator {
namespace {

bool Ended(const std::string& state) {
  return state == "succeeded" || state == "failed" || state == "cancelled";
}

absl::Status Draining() {
  return rpc::WithReason(absl::UnavailableError("the coordinator is draining; retry against another one"),
                         v1::ERROR_REASON_DRAINING);
}

class ClientService final : public v1::CuBridge::Service {
 public:
  explicit ClientService(Coordinator* c) : c_(c) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::Job* out) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      if (c_->draining()) return Draining();
      auto checked = core::CheckRequest(*req, c_->options().limits);
      if (!checked.ok()) return checked.status();
      auto archs = ResolveArchs(flow, *req);
      if (!archs.ok()) return archs.status();
      if (!checked->lift) {
        // The spec is compiled in a child process: whatever it does, it cannot stop this one.
        auto spec = c_->spec_checker().Check(*req, c_->options().flow.ruleset);
        if (absl::IsUnavailable(spec.status())) {
          return rpc::WithReason(spec.status(), v1::ERROR_REASON_SPEC_CHECKERS_BUSY);
        }
        if (!spec.ok()) return spec.status();
        checked->key = *std::move(spec);
      }
      auto job = flow.Submit(*req, checked->key, *archs);
      if (!job.ok()) return job.status();
      spdlog::info("job={} submitted spec={} archs={} level={} proposer={} cache_hit={}",
                   job->job_id(), job->spec_hash().substr(0, 16), absl::StrJoin(*archs, ","),
                   core::LevelName(req->verification()), job->proposer(), job->cache_hit());
      *out = *std::move(job);
      return absl::OkStatus();
    });
  }

  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* out) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      if (auto s = contract::CheckJobId(req->job_id()); !s.ok()) return s;
      return Assign(flow.Describe(req->job_id(), req->with_transcript()), out);
    });
  }

  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* out) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      if (auto s = contract::CheckJobId(req->job_id()); !s.ok()) return s;
      return Assign(flow.Cancel(req->job_id()), out);
    });
  }

  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* out) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      const int limit = req->limit() > 0 ? std::min(req->limit(), 1000) : 50;
      // A state filter looks further back, so that `limit` matching jobs can be found.
      auto records = flow.jobs().List(req->state() == v1::JOB_STATE_UNSPECIFIED ? limit : 1000);
      if (!records.ok()) return records.status();
      for (const auto& r : *records) {
        auto job = flow.Describe(r.id);
        if (!job.ok()) continue;  // removed meanwhile
        if (req->state() != v1::JOB_STATE_UNSPECIFIED && job->state() != req->state()) continue;
        job->clear_events();  // a listing stays small; GetJob has them
        *out->add_jobs() = *std::move(job);
        if (out->jobs_size() >= limit) break;
      }
      return absl::OkStatus();
    });
  }

  grpc::Status GetKernel(grpc::ServerContext* ctx, const v1::GetKernelRequest* req,
                         v1::Kernel* out) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      if (auto s = contract::CheckSpecHash(req->spec_hash()); !s.ok()) return s;
      auto arch = core::NormalizeArch(req->arch());
      if (!arch.ok()) return arch.status();
      const std::string& ruleset = c_->options().flow.ruleset;
      auto k = flow.kernels().Get(req->spec_hash(), *arch, ruleset, contract::kLevelIr);
      if (!k.ok()) return k.status();
      if (!k->has_value()) {
        return absl::NotFoundError(absl::StrCat("no verified kernel for spec ", req->spec_hash(),
                                                " on ", *arch, " (ruleset ", ruleset, ")"));
      }
      const store::CachedKernel& kernel = **k;
      out->set_spec_hash(kernel.spec_hash);
      out->set_arch(kernel.arch);
      out->set_ruleset(kernel.ruleset);
      out->set_verification(kernel.verification == contract::kLevelGpu ? v1::VERIFICATION_LEVEL_GPU
                                                                   : v1::VERIFICATION_LEVEL_IR);
      out->set_cuir(kernel.cuir);
      out->set_cuda_source(kernel.cuda_source);
      out->set_launcher_header(kernel.launcher_header);
      out->set_report_json(kernel.report_json);
      out->set_backward_cuir(kernel.backward_cuir);
      out->set_backward_cuda_source(kernel.backward_cuda_source);
      out->set_backward_launcher_header(kernel.backward_launcher_header);
      if (!req->job_id().empty()) {
        // The job's own names for the kernel's tensors (it may have been made for another spec).
        if (auto s = contract::CheckJobId(req->job_id()); !s.ok()) return s;
        auto key = flow.KeyOf(req->job_id());
        if (!key.ok()) return key.status();
        if (key->spec_hash != kernel.spec_hash) {
          return absl::InvalidArgumentError(absl::StrCat("job ", req->job_id(), " is of spec ",
                                                         key->spec_hash, ", not ", kernel.spec_hash));
        }
        auto report = nlohmann::json::parse(kernel.report_json, nullptr, false);
        if (!report.is_discarded() && !key->canonical_buffers.empty()) {
          if (auto s = pipeline::BindBuffers(&report, key->canonical_buffers); !s.ok()) return s;
          out->set_report_json(report.dump(2) + "\n");
        }
      }
      if (!kernel.module_file.empty()) {
        const auto symbols = nlohmann::json::parse(kernel.module_symbols_json, nullptr, false);
        if (symbols.is_object()) {
          out->set_module_file(kernel.module_file);
          out->set_module_image(kernel.module_image);
          for (const auto& [expr, name] : symbols.items()) {
            if (name.is_string()) (*out->mutable_module_symbols())[expr] = name.get<std::string>();
          }
        }
      }
      return absl::OkStatus();
    });
  }

  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* out) override {
    return Call(ctx, [&](core::JobFlow& flow) -> absl::Status {
      auto workers = flow.workers().List();
      if (!workers.ok()) return workers.status();
      for (const auto& w : *workers) {
        auto* info = out->add_workers();
        info->set_worker_id(w.id);
        info->set_arch(w.arch);
        info->set_gpu_name(w.gpu_name);
        info->set_gpu_ordinal(w.gpu_ordinal);
        info->set_gpu_uuid(w.gpu_uuid);
        info->set_hostname(w.hostname);
        info->set_memory_bytes(w.memory_bytes);
        for (const auto& cap : w.capabilities) info->add_capabilities(cap);
        info->set_last_heartbeat_unix_millis(w.last_seen_ms);
        info->set_current_task(w.current_task);
        info->set_health(w.health == "not_serving" ? v1::WORKER_HEALTH_NOT_SERVING
                         : w.health == "draining"  ? v1::WORKER_HEALTH_DRAINING
                                                   : v1::WORKER_HEALTH_SERVING);
        info->set_health_reason(w.health_reason);
      }
      return absl::OkStatus();
    });
  }

  // Sends the events recorded so far (from `from_event` on), then each new one, until the job
  // ended and its last event was sent. A drain ends the stream with UNAVAILABLE (DRAINING):
  // clients reconnect and resume from the events they have.
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                        grpc::ServerWriter<v1::StageEvent>* writer) override {
    if (auto s = c_->options().client_tokens.Check(ctx, "client"); !s.ok()) return s;
    if (auto s = contract::CheckJobId(req->job_id()); !s.ok()) return ToGrpc(s);
    int64_t sent = std::max(0, req->from_event());
    while (!ctx->IsCancelled()) {
      if (c_->draining()) return ToGrpc(Draining());
      auto flow = c_->Flow();
      if (!flow.ok()) return ToGrpc(flow.status());
      // The state first: events are recorded before the state that ends a job, so an ended
      // job's events are all there when they are read next.
      auto job = (*flow)->jobs().Get(req->job_id());
      if (!job.ok()) return ToGrpc(job.status());
      auto events = (*flow)->jobs().Events(req->job_id(), sent);
      if (!events.ok()) return ToGrpc(events.status());
      for (const std::string& e : *events) {
        if (!writer->Write(core::EventFromJson(req->job_id(), e))) return grpc::Status::CANCELLED;
        ++sent;
      }
      if (Ended(job->state)) return grpc::Status::OK;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return grpc::Status::CANCELLED;
  }

 private:
  template <typename F>
  grpc::Status Call(grpc::ServerContext* ctx, F&& body) {
    if (auto s = c_->options().client_tokens.Check(ctx, "client"); !s.ok()) return s;
    auto flow = c_->Flow();
    if (!flow.ok()) return ToGrpc(flow.status());
    return ToGrpc(body(**flow));
  }

  template <typename T>
  static absl::Status Assign(absl::StatusOr<T> value, T* out) {
    if (!value.ok()) return value.status();
    *out = *std::move(value);
    return absl::OkStatus();
  }

  // The request's archs, normalized; none = every GPU arch a worker has registered, else sm_80
  // (the expert that also runs on sm_90), waiting for such a worker.
  absl::StatusOr<std::vector<std::string>> ResolveArchs(core::JobFlow& flow,
                                                        const v1::SubmitJobRequest& req) {
    std::set<std::string> archs;
    for (const std::string& a : req.archs()) {
      auto n = core::NormalizeArch(a);
      if (!n.ok()) return n.status();
      archs.insert(*n);
    }
    if (archs.empty()) {
      auto workers = flow.workers().List();
      if (!workers.ok()) return workers.status();
      for (const auto& w : *workers) {
        if (w.arch != "cpu") archs.insert(w.arch);
      }
      if (archs.empty()) archs.insert("sm_80");
    }
    return std::vector<std::string>(archs.begin(), archs.end());
  }

  Coordinator* c_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeClientService(Coordinator* c) {
  return std::make_unique<ClientService>(c);
}

}  // namespace cubridge::coordinator
