#include "service/runtime/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <httplib.h>

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "service/contract/ids.h"

namespace cubridge::service {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

struct Metrics::Families {
  explicit Families(prometheus::Registry& r)
      : jobs(BuildCounter().Name("cubridge_jobs_total").Help("Jobs that ended, by outcome").Register(r)),
        submitted(BuildCounter()
                      .Name("cubridge_jobs_submitted_total")
                      .Help("Submits, by whether the kernel cache answered them")
                      .Register(r)),
        lookups(BuildCounter()
                    .Name("cubridge_kernel_cache_lookups_total")
                    .Help("Kernel cache lookups per (job, arch), by result")
                    .Register(r)),
        stages(BuildHistogram()
                   .Name("cubridge_stage_duration_seconds")
                   .Help("Time a worker spent on one task, by stage")
                   .Register(r)),
        depth(BuildGauge().Name("cubridge_queue_depth").Help("Tasks waiting for a worker").Register(r)),
        expiries(BuildCounter()
                     .Name("cubridge_lease_expiries_total")
                     .Help("Leases taken over after their worker stopped heartbeating")
                     .Register(r)),
        retries(BuildCounter().Name("cubridge_task_retries_total").Help("Failed attempts queued again").Register(r)),
        dead(BuildCounter().Name("cubridge_tasks_dead_total").Help("Tasks dead-lettered").Register(r)),
        failures(BuildCounter()
                     .Name("cubridge_task_failures_total")
                     .Help("Failed task attempts, by whose fault: infrastructure, candidate, spec")
                     .Register(r)),
        workers(BuildGauge().Name("cubridge_workers").Help("Live registered workers, by arch").Register(r)),
        unhealthy(BuildGauge()
                      .Name("cubridge_workers_unhealthy")
                      .Help("Live workers that reported themselves unhealthy (fenced off), by arch")
                      .Register(r)),
        spec_checks(BuildCounter()
                        .Name("cubridge_spec_checks_total")
                        .Help("Submitted specs compiled in a spec-check child, by outcome")
                        .Register(r)),
        spec_check_seconds(BuildHistogram()
                               .Name("cubridge_spec_check_duration_seconds")
                               .Help("Time to check one submitted spec (a child's compile, or the cache)")
                               .Register(r)),
        worker_tasks(BuildCounter()
                         .Name("cubridge_worker_tasks_total")
                         .Help("Tasks this worker ran, by kind and outcome")
                         .Register(r)),
        worker_seconds(BuildHistogram()
                           .Name("cubridge_worker_task_duration_seconds")
                           .Help("Time this worker spent on one task, by kind")
                           .Register(r)),
        llm_tokens(BuildCounter()
                       .Name("cubridge_llm_tokens_total")
                       .Help("Tokens this worker's LLM proposer used, by kind: prompt, completion")
                       .Register(r)),
        llm_requests(BuildCounter()
                         .Name("cubridge_llm_requests_total")
                         .Help("Chat-completion requests this worker's LLM proposer sent, retries "
                               "included")
                         .Register(r)),
        healthy(BuildGauge()
                    .Name("cubridge_worker_healthy")
                    .Help("1 while this worker leases tasks, 0 while it has fenced itself off")
                    .Register(r)),
        fenced(BuildCounter()
                   .Name("cubridge_worker_fenced_total")
                   .Help("Times this worker fenced itself off after failures of its own machine")
                   .Register(r)) {}

  prometheus::Family<prometheus::Counter>& jobs;
  prometheus::Family<prometheus::Counter>& submitted;
  prometheus::Family<prometheus::Counter>& lookups;
  prometheus::Family<prometheus::Histogram>& stages;
  prometheus::Family<prometheus::Gauge>& depth;
  prometheus::Family<prometheus::Counter>& expiries;
  prometheus::Family<prometheus::Counter>& retries;
  prometheus::Family<prometheus::Counter>& dead;
  prometheus::Family<prometheus::Counter>& failures;
  prometheus::Family<prometheus::Gauge>& workers;
  prometheus::Family<prometheus::Gauge>& unhealthy;
  prometheus::Family<prometheus::Counter>& spec_checks;
  prometheus::Family<prometheus::Histogram>& spec_check_seconds;
  prometheus::Family<prometheus::Counter>& worker_tasks;
  prometheus::Family<prometheus::Histogram>& worker_seconds;
  prometheus::Family<prometheus::Counter>& llm_tokens;
  prometheus::Family<prometheus::Counter>& llm_requests;
  prometheus::Family<prometheus::Gauge>& healthy;
  prometheus::Family<prometheus::Counter>& fenced;
};

namespace {
// Tasks run from well under a second (a cached lift) to minutes (autotuning a candidate).
const prometheus::Histogram::BucketBoundaries kSeconds = {0.05, 0.1, 0.25, 0.5, 1,  2.5,
                                                          5,    10,  30,   60,  120, 300};
// A spec check is a cache hit (microseconds) or a compile (tens of milliseconds to seconds).
const prometheus::Histogram::BucketBoundaries kCheckSeconds = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                               0.25,  0.5,   1,    2.5,   5,    15};

// The label values each series can take: all of them are exported from start-up.
const std::vector<std::string> kTaskKinds = {"lift", "transfer", "candidate", "lift_llm"};
const std::vector<std::string> kFailureClasses = {"infrastructure", "candidate", "spec"};
const std::vector<std::string> kSpecCheckOutcomes = {"ok",      "invalid", "crashed",
                                                     "timeout", "cached",  "unavailable"};
const std::vector<std::string> kWorkerOutcomes = {"ok", "failed", "crashed", "lost", "handed_back"};

}  // namespace

Metrics::Metrics(Role role)
    : registry_(std::make_shared<prometheus::Registry>()),
      f_(std::make_unique<Families>(*registry_)) {
  ExportZeros(role);
}

void Metrics::ExportZeros(Role role) {
  if (role == Role::kCoordinator) {
    for (const char* o : {"succeeded", "failed", "cancelled"}) f_->jobs.Add({{"outcome", o}});
    for (const char* c : {"hit", "miss", "duplicate"}) f_->submitted.Add({{"cache", c}});
    for (const char* r : {"hit", "miss"}) f_->lookups.Add({{"result", r}});
    for (const std::string& k : kTaskKinds) f_->stages.Add({{"stage", k}}, kSeconds);
    for (const std::string& c : contract::WorkerClasses()) f_->depth.Add({{"class", c}});
    f_->expiries.Add({});
    f_->retries.Add({});
    f_->dead.Add({});
    for (const std::string& c : kFailureClasses) f_->failures.Add({{"class", c}});
    for (const std::string& a : contract::WorkerArchs()) {
      f_->workers.Add({{"arch", a}});
      f_->unhealthy.Add({{"arch", a}});
    }
    for (const std::string& o : kSpecCheckOutcomes) f_->spec_checks.Add({{"outcome", o}});
    f_->spec_check_seconds.Add({}, kCheckSeconds);
    return;
  }
  for (const std::string& k : kTaskKinds) {
    for (const std::string& o : kWorkerOutcomes) f_->worker_tasks.Add({{"kind", k}, {"outcome", o}});
    f_->worker_seconds.Add({{"kind", k}}, kSeconds);
  }
  for (const char* k : {"prompt", "completion"}) f_->llm_tokens.Add({{"kind", k}});
  f_->llm_requests.Add({});
  f_->healthy.Add({}).Set(1);
  f_->fenced.Add({});
}

Metrics::~Metrics() {
  if (http_) http_->stop();
  if (http_thread_.joinable()) http_thread_.join();
}

void Metrics::JobEnded(const std::string& outcome) { f_->jobs.Add({{"outcome", outcome}}).Increment(); }
void Metrics::JobSubmitted(const std::string& cache) { f_->submitted.Add({{"cache", cache}}).Increment(); }
void Metrics::CacheLookup(bool hit) {
  f_->lookups.Add({{"result", hit ? "hit" : "miss"}}).Increment();
}
void Metrics::StageSeconds(const std::string& stage, double s) {
  f_->stages.Add({{"stage", stage}}, kSeconds).Observe(s);
}
void Metrics::QueueDepth(const std::string& cls, double d) { f_->depth.Add({{"class", cls}}).Set(d); }
void Metrics::LeaseExpired() { f_->expiries.Add({}).Increment(); }
void Metrics::TaskRetried() { f_->retries.Add({}).Increment(); }
void Metrics::TaskDead() { f_->dead.Add({}).Increment(); }
void Metrics::TaskFailed(const std::string& c) { f_->failures.Add({{"class", c}}).Increment(); }
void Metrics::Workers(const std::string& arch, double n) { f_->workers.Add({{"arch", arch}}).Set(n); }
void Metrics::UnhealthyWorkers(const std::string& arch, double n) {
  f_->unhealthy.Add({{"arch", arch}}).Set(n);
}
void Metrics::SpecCheck(const std::string& outcome, double s) {
  f_->spec_checks.Add({{"outcome", outcome}}).Increment();
  f_->spec_check_seconds.Add({}, kCheckSeconds).Observe(s);
}
void Metrics::WorkerHealthy(bool healthy) {
  auto& gauge = f_->healthy.Add({});
  if (!healthy && gauge.Value() != 0) f_->fenced.Add({}).Increment();
  gauge.Set(healthy ? 1 : 0);
}
void Metrics::WorkerTask(const std::string& kind, const std::string& outcome, double s) {
  f_->worker_tasks.Add({{"kind", kind}, {"outcome", outcome}}).Increment();
  f_->worker_seconds.Add({{"kind", kind}}, kSeconds).Observe(s);
}

void Metrics::LlmUsage(int64_t requests, int64_t prompt_tokens, int64_t completion_tokens) {
  // Counters only go up: a malformed (negative) usage document counts as nothing.
  f_->llm_requests.Add({}).Increment(static_cast<double>(std::max<int64_t>(requests, 0)));
  f_->llm_tokens.Add({{"kind", "prompt"}})
      .Increment(static_cast<double>(std::max<int64_t>(prompt_tokens, 0)));
  f_->llm_tokens.Add({{"kind", "completion"}})
      .Increment(static_cast<double>(std::max<int64_t>(completion_tokens, 0)));
}

absl::StatusOr<int> Metrics::Serve(const std::string& address) {
  const auto colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "' must be host:port (port 0 picks one)"));
  }
  const std::string host = address.substr(0, colon);
  http_ = std::make_unique<httplib::Server>();
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Render(), "text/plain; version=0.0.4");
  });
  const int bound = port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, " (is the port taken?)"));
  }
  http_thread_ = std::thread([this] { http_->listen_after_bind(); });
  return bound;
}

std::string Metrics::Render() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace cubridge::service
