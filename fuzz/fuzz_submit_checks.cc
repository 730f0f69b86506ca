// The coordinator's own checks of a SubmitJob request (server/core/request.h, ids.h) on arbitrary
// input: everything they do runs in the coordinator's process, so they may only answer. The
// first byte picks what the rest is: 'R' a serialized SubmitJobRequest as a client sends it,
// anything else the text of a spec in an otherwise ordinary request (so the guard and the UTF-8
// check see spec-like text), and every id and key check sees the bytes too.
// Oracles besides not crashing: the fingerprint is a function of the request (a round trip
// through the wire format does not change it), and an accepted spec is UTF-8 and passes the
// guard on its own.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuir/spec/guard.h"
#include "google/protobuf/stubs/logging.h"
#include "service/contract/ids.h"
#include "server/core/request.h"

// protobuf logs each string field that is not UTF-8; at thousands of inputs a second that is
// most of the run's time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int,
                                     const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cubridge;
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  v1::SubmitJobRequest request;
  if (data[0] == 'R') {
    if (!request.ParseFromString(rest)) return 0;
  } else {
    request.mutable_spec()->set_file_name("fuzz.py");
    request.mutable_spec()->set_source(rest);
    request.mutable_config()->set_head_dim(64);
    request.set_idempotency_key(rest.substr(0, 300));
  }
  for (auto check : {contract::CheckJobId, contract::CheckSpecHash, contract::CheckWorkerId, contract::CheckTaskId,
                     contract::CheckIdempotencyKey}) {
    (void)check(rest);
  }
  auto checked = core::CheckRequest(request, core::Limits{});
  const std::string fingerprint = core::RequestFingerprint(request);
  // A string field that is not UTF-8 does not parse back (proto3), as the server would refuse it.
  v1::SubmitJobRequest again;
  if (again.ParseFromString(request.SerializeAsString()) &&
      core::RequestFingerprint(again) != fingerprint) {
    std::abort();
  }
  if (checked.ok() && !checked->lift) {
    const std::string& source = request.spec().source();
    if (contract::FirstInvalidUtf8(source).has_value()) std::abort();
    if (!spec::GuardSpecSource(source, "fuzz.py").ok()) std::abort();
  }
  return 0;
}
