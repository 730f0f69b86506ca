// How the service commands show jobs, kernels and workers: human text by default, the protobuf
// messages as JSON (one document per line) with --json.
#pragma once

#include <string>
#include <vector>

#include <google/protobuf/message.h>

#include "cubridge/v1/client.pb.h"

namespace cubridge::cli {

// One line of JSON with the proto field names and every field, set or not, so scripts can rely
// on the keys.
void PrintJson(const google::protobuf::Message& message);

std::string StateName(v1::JobState state);  // "running"
// "verified on GPU" / "verified at the IR level only"
std::string VerificationText(v1::VerificationLevel level);
void PrintEvent(const v1::StageEvent& event);  // the stage line `adapt --local` prints
void PrintJobStatus(const v1::Job& job);        // `status`: fields, then the events
void PrintOutcome(const v1::Job& job);          // the last line of `watch`
void PrintJobTable(const std::vector<v1::Job>& jobs);
void PrintWorkerTable(const std::vector<v1::WorkerInfo>& workers);

}  // namespace cubridge::cli
