#include "server/core/flow.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cuir/experts/expert.h"
#include "cuir/lower/lower.h"
#include "cuir/pipeline/backward.h"
#include "cuir/pipeline/candidates.h"
#include "cuir/pipeline/report.h"
#include "cuir/pipeline/stages.h"
#include "cuir/pipeline/verify.h"
#include "cuir/spec/digest.h"
#include "cubridge/status_details.h"
#include "server/core/request.h"
#include "service/contract/task_contract.h"
#include "service/contract/task_messages.h"

namespace cubridge::core {

// The task contract the coordinator shares with its workers.
using namespace contract;  // NOLINT(build/namespaces)

using nlohmann::json;

struct JobFlow::Job {
  store::JobRecord record;
  std::vector<std::string> archs;
  std::string level;
  std::string proposer;
  std::string backward;  // "auto" | "off" | "require" (BackwardModeName)
  SpecInput input;   // a lift job: the kernel file as the input's file
  bool lift = false;
  std::string kernel_name;
};

namespace {

bool Ended(const std::string& task_state) { return task_state == "done" || task_state == "dead"; }

v1::JobState StateEnum(const std::string& s) {
  if (s == "queued") return v1::JOB_STATE_QUEUED;
  if (s == "running") return v1::JOB_STATE_RUNNING;
  if (s == "succeeded") return v1::JOB_STATE_SUCCEEDED;
  if (s == "failed") return v1::JOB_STATE_FAILED;
  if (s == "cancelled") return v1::JOB_STATE_CANCELLED;
  return v1::JOB_STATE_UNSPECIFIED;
}

// The class of worker that can run a task: GPU work goes to workers of the arch, the rest to
// anyone (GPU workers also lease from the cpu class).
std::string ClassFor(const std::string& level, const std::string& arch) {
  return level == kLevelGpu ? arch : "cpu";
}

// At the `ir` level nothing is profiled, so one candidate is enough: the expert's own tile.
std::vector<experts::TileConfig> TilesFor(const std::string& level,
                                          const cuir::AttentionConfig& config, lower::Arch arch) {
  auto tiles = experts::CandidateTiles(config, arch);
  if (level == kLevelIr && !tiles.empty()) tiles.resize(1);
  return tiles;
}

// Whether a cache entry serves a job of this backward mode: any entry a forward-only job; for
// the others its report must have the `backward` section (a kernel, or why there is none: an
// entry cached before the service made backwards, or by a forward-only job, is made again with
// one), and for "require" a kernel.
bool Serves(const std::optional<store::CachedKernel>& hit, const std::string& backward) {
  if (!hit.has_value()) return false;
  if (backward == "off") return true;
  const auto report = json::parse(hit->report_json, nullptr, false);
  if (!report.is_object() || !report.contains("backward")) return false;
  return backward != "require" || !hit->backward_cuda_source.empty();
}

json ParseOr(const std::string& text, json fallback) {
  auto j = json::parse(text, nullptr, false);
  return j.is_discarded() ? fallback : j;
}

// A worker's errors usually name their stage already ("transfer: ..."); say it once.
std::string InStage(const std::string& stage, const std::string& error) {
  return error.rfind(stage + ": ", 0) == 0 ? error : absl::StrCat(stage, ": ", error);
}

v1::VerificationLevel LevelEnum(const std::string& level) {
  return level == kLevelIr ? v1::VERIFICATION_LEVEL_IR : v1::VERIFICATION_LEVEL_GPU;
}

// A task's stored result (the empty result of its kind while it has none). One the store cannot
// read is reported and read as empty: the job then fails on what is missing, saying so.
v1::TaskResult ResultOf(const std::string& task_id, const std::string& kind, const std::string& text) {
  auto r = ResultFromStore(kind, text);
  if (r.ok()) return *std::move(r);
  spdlog::warn("task={}: {}", task_id, std::string(r.status().message()));
  return ResultFromStore(kind, "").value_or(v1::TaskResult());
}

// "; llm: 1200 prompt + 300 completion tokens in 2 requests" for a result with LLM usage.
std::string UsageText(const v1::TaskResult& result) {
  const v1::LlmUsage& usage = ResultUsage(result);
  if (usage.requests() == 0) return "";
  return absl::StrCat("; llm: ", usage.prompt_tokens(), " prompt + ", usage.completion_tokens(),
                      " completion tokens in ", usage.requests(), " requests");
}

}  // namespace

absl::StatusOr<std::string> NormalizeArch(const std::string& arch) {
  std::string a = absl::AsciiStrToLower(arch);
  a.erase(std::remove(a.begin(), a.end(), '_'), a.end());
  if (a == "sm80") return std::string("sm_80");
  if (a == "sm90" || a == "sm90a") return std::string("sm_90");
  return absl::InvalidArgumentError(
      absl::StrCat("arch \"", arch, "\" is not supported: use sm_80 (A100) or sm_90 (H100)"));
}

std::string BackwardModeName(v1::BackwardMode mode) {
  switch (mode) {
    case v1::BACKWARD_MODE_OFF: return "off";
    case v1::BACKWARD_MODE_REQUIRE: return "require";
    default: return "auto";
  }
}

std::string LevelName(v1::VerificationLevel level) {
  return level == v1::VERIFICATION_LEVEL_IR ? kLevelIr : kLevelGpu;
}

std::string ProposerOf(const v1::SubmitJobRequest& request) {
  return request.proposer().empty() ? kDefaultProposer : request.proposer();
}

std::string LiftLlmTaskId(const std::string& kernel_hash, const std::string& arch) {
  return absl::StrCat("liftllm-", kernel_hash, "-", arch);
}

std::string TransferTaskId(const std::string& spec_hash, const std::string& proposer) {
  return proposer == kDefaultProposer ? absl::StrCat("transfer-", spec_hash)
                                      : absl::StrCat("transfer-", spec_hash, "-", proposer);
}

JobFlow::JobFlow(store::RedisClient* redis, const FlowOptions& options, service::Metrics* metrics)
    : options_(options),
      metrics_(metrics),
      jobs_(redis, options.retention),
      tasks_(redis, options.lease, options.max_attempts, options.retention),
      kernels_(redis),
      // A worker is alive while it heartbeats; three lease periods of silence and it is gone.
      workers_(redis, options.lease * 3),
      tensors_(redis, options.retention) {
  tasks_.set_retry_backoff(options.retry_backoff);
}

absl::Status JobFlow::Event(const std::string& job_id, const std::string& key,
                            const std::string& stage, bool ok, double seconds,
                            const std::string& detail, const std::string& worker) {
  json ev = {{"stage", stage},   {"ok", ok},         {"seconds", seconds},
             {"detail", detail}, {"worker_id", worker}, {"unix_millis", store::UnixMillis()}};
  return jobs_.AppendEventOnce(job_id, key, ev.dump());
}

absl::StatusOr<v1::Job> JobFlow::Submit(const v1::SubmitJobRequest& request, const SpecKey& key,
                                        const std::vector<std::string>& archs) {
  const std::string& spec_hash = key.spec_hash;
  auto config = ConfigFromProto(request.config());
  if (!config.ok()) return config.status();
  SpecInput input;
  const bool lift = request.has_kernel();
  if (lift) {
    input.file_name = request.kernel().file_name().empty() ? "kernel.cu" : request.kernel().file_name();
    input.source = request.kernel().source();
  } else {
    input.file_name = request.spec().file_name().empty() ? "spec.py" : request.spec().file_name();
    input.source = request.spec().source();
  }
  for (const auto& [name, value] : request.spec().params()) input.params.push_back(name + "=" + value);
  input.buffers = {request.spec().buffers().begin(), request.spec().buffers().end()};
  // Values are stored once, by digest; the job's record and its tasks name them by that.
  v1::SubmitJobRequest stored;
  const bool has_values = request.spec().tensors_size() > 0;
  if (has_values) stored = request;
  for (const auto& [name, t] : request.spec().tensors()) {
    auto dtype = TensorDTypeFromProto(t.dtype());
    if (!dtype) return absl::InvalidArgumentError(absl::StrCat("buffer '", name, "': no dtype"));
    TensorRef ref{*dtype, {t.shape().begin(), t.shape().end()}, spec::Sha256Hex(t.data()), std::nullopt};
    if (auto s = tensors_.Put(ref.sha256, t.data()); !s.ok()) return s;
    input.tensors[name] = std::move(ref);
    (*stored.mutable_spec()->mutable_tensors())[name].clear_data();
  }
  input.config = *config;
  input.seed = pipeline::FreshSeed();

  const std::string level = LevelName(request.verification());
  auto created = jobs_.Create(request.idempotency_key(), spec_hash,
                              (has_values ? stored : request).SerializeAsString(),
                              RequestFingerprint(request),
                              {{"archs", absl::StrJoin(archs, ",")},
                               {"level", level},
                               {"proposer", lift ? "llm" : ProposerOf(request)},
                               {"backward", BackwardModeName(request.backward())},
                               {"kind", lift ? "lift" : "adapt"},
                               {"kernel_name", lift ? KernelNameOf(request) : ""},
                               {"canonical_form", key.canonical_form},
                               {"canonical_buffers", json(key.canonical_buffers).dump()},
                               {"input", input.ToJson().dump()}});
  if (!created.ok()) return created.status();
  const std::string id = created->job.id;
  if (created->outcome == store::CreatedJob::Outcome::kConflict) {
    return rpc::WithReason(
        absl::AlreadyExistsError(absl::StrCat(
            "idempotency key \"", request.idempotency_key(), "\" already names job ", id,
            ", submitted with another request (spec hash ", created->job.spec_hash.substr(0, 16),
            "...); a retry must send the same request, a new request needs a new key")),
        v1::ERROR_REASON_IDEMPOTENCY_CONFLICT, id);
  }
  if (created->outcome == store::CreatedJob::Outcome::kExisting) {
    if (metrics_) metrics_->JobSubmitted("duplicate");
    // Idempotent: a retry of a submit that died before its first Advance starts the job.
    if (auto s = Advance(id); !s.ok()) return s;
    return Describe(id);
  }
  if (lift) {  // the kernel cache holds adapted kernels, not lifted programs
    if (metrics_) metrics_->JobSubmitted("miss");
    if (auto s = Advance(id); !s.ok()) return s;
    return Describe(id);
  }
  bool all_cached = true;
  for (const std::string& arch : archs) {
    auto hit = kernels_.Get(spec_hash, arch, options_.ruleset, level);
    if (!hit.ok()) return hit.status();
    const bool serves = Serves(*hit, BackwardModeName(request.backward()));
    if (metrics_) metrics_->CacheLookup(serves);
    all_cached = all_cached && serves;
    if (serves) {
      auto s = Event(id, "cache:" + arch, "cache", true, 0,
                     absl::StrCat("hit ", spec_hash.substr(0, 16), "/", arch, " (verified: ",
                                  (*hit)->verification, ")"));
      if (!s.ok()) return s;
    }
  }
  if (metrics_) metrics_->JobSubmitted(all_cached ? "hit" : "miss");
  if (all_cached) {
    if (auto s = jobs_.SetField(id, "cache_hit", "1"); !s.ok()) return s;
    auto job = Load(id);
    if (!job.ok()) return job.status();
    if (auto s = Finish(*job, "succeeded", ""); !s.ok()) return s;
  } else if (auto s = Advance(id); !s.ok()) {
    return s;
  }
  return Describe(id);
}

absl::StatusOr<SpecKey> JobFlow::KeyOf(const std::string& job_id) {
  auto rec = jobs_.Get(job_id);
  if (!rec.ok()) return rec.status();
  SpecKey key{rec->spec_hash, jobs_.Field(job_id, "canonical_form").value_or(""), {}};
  const json buffers = ParseOr(jobs_.Field(job_id, "canonical_buffers").value_or(""), json::object());
  for (const auto& [name, canonical] : buffers.items()) {
    if (canonical.is_string()) key.canonical_buffers[name] = canonical.get<std::string>();
  }
  return key;
}

absl::StatusOr<JobFlow::Job> JobFlow::Load(const std::string& job_id) {
  Job job;
  auto rec = jobs_.Get(job_id);
  if (!rec.ok()) return rec.status();
  job.record = *std::move(rec);
  auto fields = jobs_.Fields(job_id, "");
  if (!fields.ok()) return fields.status();
  auto& f = *fields;
  if (!f.count("input")) {
    return absl::UnavailableError(absl::StrCat("job ", job_id, " is still being created"));
  }
  job.archs = absl::StrSplit(f["archs"], ',', absl::SkipEmpty());
  job.level = f["level"];
  // Jobs stored before there were other proposers have none: theirs were the rules.
  job.proposer = f["proposer"].empty() ? kDefaultProposer : f["proposer"];
  // Jobs stored before the backward had none: "auto", as now by default.
  job.backward = f["backward"].empty() ? "auto" : f["backward"];
  auto input = SpecInput::FromJson(ParseOr(f["input"], json::object()));
  if (!input.ok()) return input.status();
  job.input = *std::move(input);
  job.lift = f["kind"] == "lift";
  job.kernel_name = f["kernel_name"];
  return job;
}

absl::StatusOr<store::TaskState> JobFlow::Need(const Job& job, const std::string& task_id,
                                               const store::TaskSpec& spec) {
  // Subscribing and queueing are idempotent and repeated on every Advance: a racing Advance of
  // the same job (a sweep during the submit), or one that died half-way, never leaves the job
  // looking at a task nobody queued. Only the revival of a dead task is once per job.
  // Subscribed before it can end, so its completion advances this job.
  if (auto s = tasks_.Subscribe(task_id, job.record.id); !s.ok()) return s;
  auto created = tasks_.EnqueueOnce(task_id, spec);
  if (!created.ok()) return created.status();
  const std::string marker = "planned:" + task_id;
  if (!*created) {
    // Someone else's earlier attempt at the same work died: this new job tries it afresh, with
    // its own inputs (the buffer values or sources of the job that queued it may be what failed).
    // The job is marked as having planned the task only after that, so a racing Advance of it
    // either revives too (a no-op once one did) or finds the task revived, never dead.
    auto planned = jobs_.Field(job.record.id, marker);
    if (!planned.ok()) return planned.status();
    if (planned->empty()) {
      auto revived = tasks_.Revive(task_id, spec.payload);
      if (!revived.ok()) return revived.status();
    }
  }
  if (auto first = jobs_.Once(job.record.id, marker); !first.ok()) return first.status();
  auto state = tasks_.Get(task_id);
  if (!state.ok()) return state.status();
  if (auto s = Observe(job, task_id, *state, spec.kind); !s.ok()) return s;
  return state;
}

absl::Status JobFlow::Observe(const Job& job, const std::string& task_id,
                              const store::TaskState& st, const std::string& kind) {
  if (!Ended(st.state)) return absl::OkStatus();
  const v1::TaskResult result = ResultOf(task_id, kind, st.result);
  const double seconds = ResultSeconds(result);
  // The conversation is kept whatever came of it: a failed one shows why the model failed.
  if (const auto& transcript = ResultTranscript(result); transcript.values_size() > 0) {
    if (auto s = jobs_.KeepTranscript(job.record.id, ToJson(transcript).dump()); !s.ok()) return s;
  }
  if (st.state == "dead") {
    return Event(job.record.id, task_id, kind == kCandidateTask ? "candidate" : kind, false,
                 seconds, st.error + UsageText(result), st.worker);
  }
  if (result.has_transfer()) {
    const v1::TransferResult& t = result.transfer();
    if (auto s = Event(job.record.id, task_id, "transfer", true, t.transfer_seconds(),
                       t.transfer_detail(), st.worker);
        !s.ok()) {
      return s;
    }
    return Event(job.record.id, task_id + ":verify", "verify", true, t.verify_seconds(),
                 t.verify_detail(), st.worker);
  }
  const std::string stage = kind == kLiftTask || kind == kLiftLlmTask ? "lift"
                            : kind == kBackwardTask                    ? "backward"
                            : job.level == kLevelGpu                   ? "gpu"
                                                                       : "compile";
  const bool ok = result.has_candidate()  ? result.candidate().passed()
                  : result.has_backward() ? result.backward().available()
                                          : true;
  return Event(job.record.id, task_id, stage, ok, seconds, ResultDetail(result), st.worker);
}

absl::Status JobFlow::Finish(const Job& job, const std::string& state, const std::string& error) {
  auto s = jobs_.SetState(job.record.id, state, error);
  if (absl::IsFailedPrecondition(s)) return absl::OkStatus();  // someone ended it first
  if (!s.ok()) return s;
  if (metrics_) metrics_->JobEnded(state);
  return absl::OkStatus();
}

absl::Status JobFlow::Advance(const std::string& job_id) {
  auto loaded = Load(job_id);
  if (absl::IsUnavailable(loaded.status())) return absl::OkStatus();  // its submit is mid-way
  if (!loaded.ok()) return loaded.status();
  const Job& job = *loaded;
  const std::string& st = job.record.state;
  if (st == "succeeded" || st == "failed" || st == "cancelled") return absl::OkStatus();
  const std::string& hash = job.record.spec_hash;
  // The job's values stay stored while it runs (and a retention after).
  std::vector<std::string> digests;
  for (const auto& [name, t] : job.input.tensors) digests.push_back(t.sha256);
  if (auto s = tensors_.Keep(digests); !s.ok()) return s;

  std::vector<std::pair<std::string, store::TaskState>> deps;
  auto need = [&](const std::string& id, const std::string& kind, const v1::TaskPayload& payload,
                  const std::string& cls) -> absl::Status {
    auto state = Need(job, id, {job_id, kind, StoreText(payload), cls});
    if (!state.ok()) return state.status();
    deps.emplace_back(kind, *state);
    return absl::OkStatus();
  };
  if (job.lift) return AdvanceLift(job);
  const v1::SpecInput spec = SpecInputToProto(job.input);
  const std::string transfer_id = TransferTaskId(hash, job.proposer);
  // The rules run anywhere; a model is reachable only from workers given an endpoint.
  const bool by_rules = job.proposer == kDefaultProposer;
  v1::TaskPayload transfer;
  *transfer.mutable_transfer()->mutable_spec() = spec;
  transfer.mutable_transfer()->set_proposer(job.proposer);
  if (auto s = need(transfer_id, kTransferTask, transfer, by_rules ? "cpu" : kLlmClass); !s.ok()) {
    return s;
  }
  for (const std::string& arch : job.archs) {
    auto a = lower::ParseArch(arch);
    if (!a.ok()) return a.status();
    const std::string expert = pipeline::ExpertFor(*a);
    v1::TaskPayload payload;
    v1::LiftPayload& lift = *payload.mutable_lift();
    lift.set_expert(expert);
    lift.set_arch(arch);
    lift.set_level(LevelEnum(job.level));
    *lift.mutable_spec() = spec;
    const std::string id = absl::StrCat("lift-", expert, "-", arch, "-", job.level, "-", options_.ruleset);
    if (auto s = need(id, kLiftTask, payload, ClassFor(job.level, arch)); !s.ok()) return s;
  }
  bool ready = true, started = false;
  for (const auto& [kind, state] : deps) {
    if (state.state == "dead") return Finish(job, "failed", InStage(kind, state.error));
    ready = ready && state.state == "done";
    started = started || state.state != "queued";
  }
  if (started && st == "queued") (void)jobs_.SetState(job_id, "running");
  if (!ready) return absl::OkStatus();

  auto transfer_state = tasks_.Get(transfer_id);
  if (!transfer_state.ok()) return transfer_state.status();
  const v1::TaskResult transferred = ResultOf(transfer_id, kTransferTask, transfer_state->result);
  const std::string& program = transferred.transfer().program();
  if (program.empty()) return Finish(job, "failed", "transfer: its result has no program");

  bool all_cached = true;
  for (const std::string& arch : job.archs) {
    auto hit = kernels_.Get(hash, arch, options_.ruleset, job.level);
    if (!hit.ok()) return hit.status();
    if (Serves(*hit, job.backward)) continue;
    all_cached = false;
    auto a = lower::ParseArch(arch);
    if (!a.ok()) return a.status();
    // The backward: a task of its own, beside the candidates (it transfers from its own base),
    // unless the job is forward-only; on the arch's GPUs at the gpu level (its tiles checked and
    // profiled there), on any CPU at the ir level.
    const bool wants_backward = job.backward != "off";
    const std::string backward_id =
        absl::StrCat("bwd-", hash, "-", arch, "-", job.level, "-", options_.ruleset);
    store::TaskState backward;
    if (wants_backward) {
      v1::TaskPayload backward_payload;
      *backward_payload.mutable_backward()->mutable_spec() = spec;
      backward_payload.mutable_backward()->set_arch(arch);
      backward_payload.mutable_backward()->set_level(LevelEnum(job.level));
      auto state = Need(job, backward_id, {job_id, kBackwardTask, StoreText(backward_payload),
                                           ClassFor(job.level, arch)});
      if (!state.ok()) return state.status();
      if (state->state == "dead") return Finish(job, "failed", InStage("backward", state->error));
      backward = *std::move(state);
    }
    std::vector<std::pair<std::string, std::string>> ids;  // task id, tile
    bool all_ended = true;
    for (const experts::TileConfig& tile : TilesFor(job.level, job.input.config, *a)) {
      // Another proposer's program is other work, even for the same spec and tile.
      const std::string id = absl::StrCat("cand-", hash, "-", arch, "-", job.level, "-", tile.Name(),
                                          by_rules ? "" : "-" + job.proposer);
      v1::TaskPayload payload;
      v1::CandidatePayload& c = *payload.mutable_candidate();
      *c.mutable_spec() = spec;
      c.set_program(program);
      c.set_arch(arch);
      c.set_tile(tile.Name());
      c.set_level(LevelEnum(job.level));
      auto state = Need(job, id, {job_id, kCandidateTask, StoreText(payload), ClassFor(job.level, arch)});
      if (!state.ok()) return state.status();
      all_ended = all_ended && Ended(state->state);
      ids.emplace_back(id, tile.Name());
    }
    if (ids.empty()) {
      return Finish(job, "failed", absl::StrCat("no tile configuration of the expert fits ",
                                                job.input.config.ToString(), " on ", arch));
    }
    if (!all_ended || (wants_backward && backward.state != "done")) continue;
    std::optional<v1::BackwardResult> backward_result;
    if (wants_backward) {
      backward_result = ResultOf(backward_id, kBackwardTask, backward.result).backward();
      if (job.backward == "require" && !backward_result->available()) {
        return Finish(job, "failed", InStage("backward", backward_result->detail()));
      }
    }
    auto stored = Select(job, arch, ids, transferred.transfer(),
                         backward_result ? &*backward_result : nullptr);
    // The store failing is not the job's fault: the next advance tries again.
    if (!store::StoreError(stored.status()).empty()) return stored.status();
    if (!stored.ok()) return Finish(job, "failed", std::string(stored.status().message()));
    all_cached = all_cached && *stored;
  }
  if (all_cached) return Finish(job, "succeeded", "");
  return absl::OkStatus();
}

absl::Status JobFlow::AdvanceLift(const Job& job) {
  const std::string& job_id = job.record.id;
  bool ready = true, started = false;
  for (const std::string& arch : job.archs) {
    v1::TaskPayload payload;
    *payload.mutable_lift_llm()->mutable_spec() = SpecInputToProto(job.input);
    payload.mutable_lift_llm()->set_arch(arch);
    payload.mutable_lift_llm()->set_kernel_name(job.kernel_name);
    auto state = Need(job, LiftLlmTaskId(job.record.spec_hash, arch),
                      {job_id, kLiftLlmTask, StoreText(payload), LlmGpuClass(arch)});
    if (!state.ok()) return state.status();
    if (state->state == "dead") return Finish(job, "failed", InStage("lift", state->error));
    ready = ready && state->state == "done";
    started = started || state->state != "queued";
  }
  if (started && job.record.state == "queued") (void)jobs_.SetState(job_id, "running");
  return ready ? Finish(job, "succeeded", "") : absl::OkStatus();
}

absl::StatusOr<bool> JobFlow::Select(const Job& job, const std::string& arch,
                                     const std::vector<std::pair<std::string, std::string>>& ids,
                                     const v1::TransferResult& transferred,
                                     const v1::BackwardResult* backward) {
  json candidates = json::array();
  std::vector<v1::CandidateResult> results;
  std::vector<std::string> errors;
  for (const auto& [id, tile] : ids) {
    auto st = tasks_.Get(id);
    if (!st.ok()) return st.status();
    v1::CandidateResult result = ResultOf(id, kCandidateTask, st->result).candidate();
    json check = ToJson(result.check());
    if (st->state == "dead") check = {{"passed", false}, {"error", st->error}};
    check["name"] = result.tile().empty() ? tile : result.tile();
    check["worker_id"] = st->worker;
    if (!check.value("passed", false)) {
      errors.push_back(absl::StrCat(check["name"].get<std::string>(), ": ",
                                    check.value("error", check.value("failure", std::string("failed")))));
    }
    candidates.push_back(check);
    results.push_back(std::move(result));
  }
  const int best = pipeline::BestCandidate(candidates);
  if (best < 0) {
    return absl::InternalError(absl::StrCat("no candidate verified for ", arch, " (", ids.size(),
                                            " tried): ", absl::StrJoin(errors, "; ")));
  }
  const v1::CandidateResult& best_result = results[best];
  auto key = KeyOf(job.record.id);
  if (!key.ok()) return key.status();
  pipeline::KernelReport account;
  account.spec = job.input.file_name;
  account.spec_hash = job.record.spec_hash;
  account.canonical_form = key->canonical_form;
  account.ruleset = options_.ruleset;
  account.arch = arch;
  account.expert = best_result.expert();
  account.config = pipeline::ConfigJson(job.input.config);
  account.proposer = transferred.proposer().empty() ? job.proposer : transferred.proposer();
  account.transfer = ToJson(transferred.transfer());
  account.verification = ToJson(transferred.verification());
  account.verification_level = job.level;
  account.lowering = ToJson(best_result.lowering());
  account.gpu = {{"candidates", candidates}, {"best", candidates[best]["name"]}};
  if (job.level != kLevelGpu) {
    account.gpu["skipped"] = "verification level ir: the candidates were lowered and compiled, not run";
  }
  if (const json usage = ToJson(transferred.llm_usage()); usage.is_object()) account.llm = usage;
  // The job's events (GetJob) are the service's stages; the report keeps the key empty.
  account.job_id = job.record.id;
  account.canonical_buffers = key->canonical_buffers;
  json report = account.ToJson();
  if (backward != nullptr) {  // a forward-only job's entry has no section
    report["backward"] = backward->has_report()
                             ? ToJson(backward->report())
                             : pipeline::BackwardUnavailableJson("the backward task returned none");
  }
  store::CachedKernel k{job.record.spec_hash,
                        arch,
                        options_.ruleset,
                        job.level,
                        best_result.cuir(),
                        best_result.kernel_cu(),
                        best_result.kernel_h(),
                        report.dump(2) + "\n"};
  // The candidate's compiled module, when its worker sent one (IR-level candidates do).
  if (const v1::ModuleImage& module = best_result.module(); !module.image_base64().empty()) {
    k.module_file = module.file();
    k.module_image = module.image_base64();
    k.module_symbols_json = json(std::map<std::string, std::string>(module.symbols().begin(),
                                                                     module.symbols().end()))
                                .dump();
  }
  if (backward != nullptr && backward->available()) {
    k.backward_cuir = backward->cuir();
    k.backward_cuda_source = backward->kernel_cu();
    k.backward_launcher_header = backward->kernel_h();
  }
  if (auto s = kernels_.Put(k); !s.ok()) return s;
  const std::string detail =
      job.level == kLevelGpu
          ? absl::StrCat("stored ", arch, " kernel ", candidates[best]["name"].get<std::string>(),
                         " (fastest verified of ", ids.size(), ", ",
                         absl::StrFormat("%.1f", pipeline::CandidateScore(candidates[best])),
                         " TFLOP/s on kept elements)")
          : absl::StrCat("stored ", arch, " kernel ", candidates[best]["name"].get<std::string>(),
                         " (verified at the IR level; CUDA compiled, not run)");
  if (auto s = Event(job.record.id, "store:" + arch, "cache", true, 0, detail); !s.ok()) return s;
  return true;
}

absl::StatusOr<v1::Job> JobFlow::Cancel(const std::string& job_id) {
  auto s = jobs_.SetState(job_id, "cancelled", "cancelled by the client");
  if (!s.ok()) return s;
  if (metrics_) metrics_->JobEnded("cancelled");
  auto planned = jobs_.Fields(job_id, "planned:");
  if (!planned.ok()) return planned.status();
  for (const auto& [field, unused] : *planned) {
    auto withdrawn = tasks_.Unsubscribe(field.substr(std::string("planned:").size()), job_id);
    if (!withdrawn.ok()) return withdrawn.status();
  }
  RefreshQueueDepth();
  return Describe(job_id);
}

void JobFlow::RefreshQueueDepth() {
  if (metrics_ == nullptr) return;
  for (const std::string& cls : WorkerClasses()) {
    if (auto d = tasks_.Depth(cls); d.ok()) metrics_->QueueDepth(cls, *d);
  }
}

absl::StatusOr<std::string> JobFlow::WaitingFor(const std::string& job_id) {
  auto planned = jobs_.Fields(job_id, "planned:");
  if (!planned.ok()) return planned.status();
  auto workers = workers_.List();
  if (!workers.ok()) return workers.status();
  std::map<std::string, int> queued;  // class -> tasks waiting
  std::string retrying;
  for (const auto& [field, unused] : *planned) {
    auto st = tasks_.Get(field.substr(std::string("planned:").size()));
    if (!st.ok()) continue;
    if (st->state == "queued") ++queued[st->worker_class];
    if (st->state == "retrying") retrying = st->error;
  }
  for (const auto& [cls, n] : queued) {
    const bool lift = absl::StartsWith(cls, std::string(kLlmClass) + "-");
    const std::string arch = lift ? cls.substr(std::string(kLlmClass).size() + 1) : cls;
    const bool someone = std::any_of(workers->begin(), workers->end(), [&](const auto& w) {
      const bool llm = std::find(w.capabilities.begin(), w.capabilities.end(), kLlmClass) !=
                       w.capabilities.end();
      if (cls == kLlmClass) return llm;
      if (lift) return llm && w.arch == arch;
      return cls == "cpu" || w.arch == cls;
    });
    if (!someone && cls == kLlmClass) {
      return std::string(
          "no worker with an LLM endpoint has registered (start cubridge-worker with "
          "--llm-endpoint and --llm-model)");
    }
    if (!someone && lift) {
      return absl::StrCat("no ", arch, " worker with an LLM endpoint has registered: lifting a "
                          "kernel needs a model and an ", arch, " GPU to check its proposals on "
                          "(start cubridge-worker --arch ", arch, " with --llm-endpoint and "
                          "--llm-model)");
    }
    if (!someone) {
      return cls == "cpu"
                 ? std::string("no worker has registered (start cubridge-worker)")
                 : absl::StrCat("no ", cls, " worker has registered: GPU verification needs a "
                                "worker on an ", cls, " GPU (or submit with --verification ir)");
    }
  }
  if (!queued.empty()) {
    std::vector<std::string> parts;
    for (const auto& [cls, n] : queued) parts.push_back(absl::StrCat(n, " ", cls));
    return absl::StrCat("waiting for a free worker (", absl::StrJoin(parts, ", "), " tasks queued)");
  }
  if (!retrying.empty()) return absl::StrCat("retrying after a failed attempt: ", retrying);
  return std::string();
}

absl::StatusOr<v1::Job> JobFlow::Describe(const std::string& job_id, bool with_transcript) {
  auto rec = jobs_.Get(job_id);
  if (!rec.ok()) return rec.status();
  auto extra = jobs_.Fields(job_id, "");
  if (!extra.ok()) return extra.status();
  v1::Job out;
  out.set_job_id(rec->id);
  out.set_state(StateEnum(rec->state));
  out.set_spec_hash(rec->spec_hash);
  for (absl::string_view a : absl::StrSplit((*extra)["archs"], ',', absl::SkipEmpty())) {
    out.add_archs(std::string(a));
  }
  out.set_verification((*extra)["level"] == kLevelIr ? v1::VERIFICATION_LEVEL_IR
                                                     : v1::VERIFICATION_LEVEL_GPU);
  out.set_cache_hit((*extra)["cache_hit"] == "1");
  out.set_proposer((*extra)["proposer"].empty() ? kDefaultProposer : (*extra)["proposer"]);
  const bool lift = (*extra)["kind"] == "lift";
  out.set_job_kind(lift ? v1::JOB_KIND_LIFT : v1::JOB_KIND_ADAPT);
  out.set_kind(lift ? "lift" : "adapt");
  if (lift && rec->state == "succeeded" && out.archs_size() > 0) {
    // Each arch's GPU accepted a program; the first arch's is the job's answer.
    auto task = tasks_.Get(LiftLlmTaskId(rec->spec_hash, out.archs(0)));
    if (!task.ok()) return task.status();
    const v1::LiftLlmResult result =
        ResultOf(LiftLlmTaskId(rec->spec_hash, out.archs(0)), kLiftLlmTask, task->result).lift_llm();
    out.set_lifted_cuir(result.program());
    out.set_lift_report_json(ToJson(result.report()).dump());
  }
  if (with_transcript) {
    auto transcript = jobs_.Transcript(job_id);
    if (!transcript.ok()) return transcript.status();
    out.set_transcript_json(*transcript);
  }
  out.set_error(rec->error);
  out.set_created_unix_millis(rec->created_ms);
  out.set_finished_unix_millis(rec->finished_ms);
  if (rec->state == "queued" || rec->state == "running") {
    auto why = WaitingFor(job_id);
    if (why.ok()) out.set_waiting_for(*why);
  }
  auto events = jobs_.Events(job_id);
  if (!events.ok()) return events.status();
  for (const std::string& e : *events) *out.add_events() = EventFromJson(job_id, e);
  return out;
}

v1::StageEvent EventFromJson(const std::string& job_id, const std::string& text) {
  const json j = ParseOr(text, json::object());
  v1::StageEvent ev;
  ev.set_job_id(job_id);
  ev.set_stage(j.value("stage", ""));
  ev.set_ok(j.value("ok", false));
  ev.set_seconds(j.value("seconds", 0.0));
  ev.set_detail(j.value("detail", ""));
  ev.set_worker_id(j.value("worker_id", ""));
  ev.set_unix_millis(j.value("unix_millis", int64_t{0}));
  return ev;
}

}  // namespace cubridge::core
