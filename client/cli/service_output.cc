#include "client/cli/service_output.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/cli/common.h"

namespace cubridge::cli {
namespace {

std::string Archs(const v1::Job& job) {
  return job.archs().empty() ? "every registered arch" : absl::StrJoin(job.archs(), ", ");
}

// "42s ago", "3m ago", ...; "-" for a time never set.
std::string Age(int64_t unix_millis) {
  if (unix_millis <= 0) return "-";
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const int64_t s = std::max<int64_t>(0, (now - unix_millis) / 1000);  // clocks may disagree
  if (s < 60) return absl::StrCat(s, "s ago");
  if (s < 3600) return absl::StrCat(s / 60, "m ago");
  if (s < 86400) return absl::StrCat(s / 3600, "h ago");
  return absl::StrCat(s / 86400, "d ago");
}

std::string Memory(int64_t bytes) {
  if (bytes <= 0) return "-";
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
}

void PrintField(const char* name, const std::string& value) {
  std::printf("%-13s %s\n", name, value.c_str());
}

// rows[0] is the header; every column is as wide as its widest cell.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += i + 1 < row.size() ? absl::StrFormat("%-*s  ", widths[i], row[i]) : row[i];
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace

void PrintJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  // Printing fails only for Any fields of unknown types; the service's messages have none.
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  std::printf("%s\n", json.c_str());
  std::fflush(stdout);
}

std::string StateName(v1::JobState state) {
  return absl::AsciiStrToLower(absl::StripPrefix(v1::JobState_Name(state), "JOB_STATE_"));
}

std::string VerificationText(v1::VerificationLevel level) {
  // UNSPECIFIED is served as GPU-verified (common.proto).
  return level == v1::VERIFICATION_LEVEL_IR ? "verified at the IR level only" : "verified on GPU";
}

void PrintEvent(const v1::StageEvent& e) {
  PrintStageLine(e.stage(), e.ok(), e.seconds(), e.detail());
}

void PrintJobStatus(const v1::Job& job) {
  PrintField("job", job.job_id());
  PrintField("state", StateName(job.state()) + (job.cache_hit() ? " (cache hit)" : ""));
  const bool lift = job.job_kind() == v1::JOB_KIND_LIFT || job.kind() == "lift";  // older coordinators
  if (lift) {
    PrintField("kind", "lift (a user kernel; cubridge-cli get " + job.job_id() +
                           " --out DIR writes the lifted program)");
  }
  PrintField(lift ? "kernel hash" : "spec hash",
             job.spec_hash().empty() ? "-" : job.spec_hash());
  PrintField("archs", Archs(job));
  PrintField("verification", job.verification() == v1::VERIFICATION_LEVEL_IR ? "ir" : "gpu");
  const std::string proposer = job.proposer().empty() ? "rules" : job.proposer();
  PrintField("proposer",
             proposer == "rules" || job.cache_hit()
                 ? proposer
                 : absl::StrCat(proposer, " (the conversation: cubridge-cli transcript ",
                                job.job_id(), ")"));
  if (!job.waiting_for().empty()) PrintField("waiting for", job.waiting_for());
  if (!job.error().empty()) PrintField("error", job.error());
  PrintField("created", Age(job.created_unix_millis()));
  if (job.finished_unix_millis() > 0) PrintField("finished", Age(job.finished_unix_millis()));
  if (job.events().empty()) return;
  std::printf("events:\n");
  for (const auto& e : job.events()) PrintEvent(e);
}

void PrintOutcome(const v1::Job& job) {
  if (job.state() == v1::JOB_STATE_SUCCEEDED) {
    std::printf("job %s succeeded: spec %s for %s, %s; fetch it with `cubridge-cli get %s -o DIR`\n",
                job.job_id().c_str(), job.spec_hash().c_str(), Archs(job).c_str(),
                VerificationText(job.verification()).c_str(), job.job_id().c_str());
  } else if (job.state() == v1::JOB_STATE_FAILED) {
    std::printf("job %s failed: %s\n", job.job_id().c_str(), job.error().c_str());
    // What the model proposed and was told is the first thing to look at.
    if (!job.proposer().empty() && job.proposer() != "rules") {
      std::printf("the LLM conversation: cubridge-cli transcript %s\n", job.job_id().c_str());
    }
  } else {
    std::printf("job %s %s\n", job.job_id().c_str(), StateName(job.state()).c_str());
  }
}

void PrintJobTable(const std::vector<v1::Job>& jobs) {
  if (jobs.empty()) {
    std::printf("no jobs\n");
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "STATE", "ARCHS", "SPEC", "CREATED", "NOTE"}};
  for (const auto& j : jobs) {
    rows.push_back({j.job_id(), StateName(j.state()), absl::StrJoin(j.archs(), ","),
                    j.spec_hash().substr(0, 12), Age(j.created_unix_millis()),
                    j.error().empty() ? j.waiting_for() : j.error()});
  }
  PrintTable(rows);
}

void PrintWorkerTable(const std::vector<v1::WorkerInfo>& workers) {
  if (workers.empty()) {
    std::printf("no workers have registered\n");
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"WORKER", "ARCH", "GPU", "MEMORY", "HEARTBEAT", "HEALTH", "TASK"}};
  std::vector<std::string> reasons;
  for (const auto& w : workers) {
    const std::string health = w.health() == v1::WORKER_HEALTH_NOT_SERVING ? "UNHEALTHY"
                               : w.health() == v1::WORKER_HEALTH_DRAINING  ? "draining"
                                                                           : "ok";
    // The GPU as "#ordinal name" on its host, so that two workers of one host are told apart.
    const std::string gpu = w.gpu_name().empty() ? "-"
                            : w.gpu_uuid().empty()
                                ? w.gpu_name()
                                : absl::StrCat("#", w.gpu_ordinal(), " ", w.gpu_name());
    rows.push_back({w.worker_id(), w.arch(), gpu,
                    Memory(w.memory_bytes()), Age(w.last_heartbeat_unix_millis()), health,
                    w.current_task().empty() ? "idle" : w.current_task()});
    if (!w.health_reason().empty()) reasons.push_back(w.worker_id() + ": " + w.health_reason());
  }
  PrintTable(rows);
  // Why a worker fenced itself off is one line each, after the table (it does not fit a column).
  for (const std::string& r : reasons) std::printf("%s\n", r.c_str());
}

}  // namespace cubridge::cli
