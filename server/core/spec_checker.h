// Compiles submitted specs where a crash costs nothing: in a small pool of child processes
// (`cubridge-coordinator check-specs`), each under a memory and a stack limit, one spec at a time
// under a time limit. The spec frontend (TorchScript's parser and compiler, probe runs of the
// user's functions) is LibTorch code run on untrusted text; a spec that crashes it, loops or
// allocates without bound kills or stalls only its child, which is replaced, and the submitter
// gets a status saying what happened. The coordinator itself never runs that code.
//
// Children are long-lived (LibTorch takes about half a second to load), talk over a socket pair
// in length-prefixed protobuf frames (cubridge/v1/spec_check.proto), and hold nothing between
// requests. Results of specs that compiled are kept in a small cache keyed by the request's
// spec-relevant fields, so many submits of one spec compile it once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cubridge/v1/client.pb.h"
#include "cubridge/v1/spec_check.pb.h"
#include "server/core/request.h"

namespace cubridge::core {

struct SpecCheckerOptions {
  std::string program;  // the executable run as `program check-specs`; empty = this one
  int children = 2;
  std::chrono::milliseconds timeout{15000};      // one spec's compile and probe runs
  std::chrono::milliseconds queue_wait{30000};   // for a free child, under load
  int64_t memory_bytes = int64_t{4} << 30;       // RLIMIT_AS of a child
  int64_t stack_bytes = int64_t{16} << 20;       // RLIMIT_STACK of a child's main thread
  size_t cache_entries = 1024;
};

// What became of one check, for metrics: ok, invalid (the frontend refused the spec), crashed,
// timeout, or unavailable (no child could run it).
using SpecCheckObserver = std::function<void(const std::string& outcome, double seconds)>;

class SpecChecker {
 public:
  explicit SpecChecker(SpecCheckerOptions options, SpecCheckObserver observer = nullptr);
  ~SpecChecker();  // kills the children
  SpecChecker(const SpecChecker&) = delete;
  SpecChecker& operator=(const SpecChecker&) = delete;

  // Starts the children; UNAVAILABLE naming the program when one cannot be started.
  absl::Status Start();
  // The spec's hash and canonical form, or: INVALID_ARGUMENT with the frontend's
  // "file:line:col: ..." message, or saying the spec crashed the frontend; RESOURCE_EXHAUSTED when
  // it ran past the time or memory limit; UNAVAILABLE when no child was free in time.
  absl::StatusOr<SpecKey> Check(const v1::SubmitJobRequest& request,
                                        const std::string& ruleset);

 private:
  struct Child {
    pid_t pid = -1;
    int fd = -1;  // our end of the socket pair
    bool busy = false;
  };
  absl::Status Spawn(Child& child);
  void Reap(Child& child);  // kills (if alive) and waits for it
  absl::StatusOr<SpecKey> RunOn(Child& child, const std::string& frame,
                                        const std::string& file, std::string* outcome);

  SpecCheckerOptions options_;
  SpecCheckObserver observer_;
  std::mutex mu_;
  std::condition_variable free_;
  std::vector<Child> children_;
  // Compiled specs, most recently used first, and where each is in that order.
  std::list<std::pair<std::string, SpecKey>> lru_;
  std::map<std::string, std::list<std::pair<std::string, SpecKey>>::iterator> cached_;
};

// The child side: answers frames on `fd` until it closes; a check that runs longer than
// `max_seconds` (0: no limit) ends the process. `check` is the spec frontend's work
// (server/core/spec_check.h); the loop around it is kept apart so that it can be tested without it.
int ServeSpecChecks(int fd, int max_seconds,
                    const std::function<v1::SpecCheckResponse(const v1::SpecCheckRequest&)>& check);

}  // namespace cubridge::core
