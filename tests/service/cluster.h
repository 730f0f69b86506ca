// A CuBridge cluster of real processes on loopback for the service tests: a redis-server (AOF on),
// the cubridge-coordinator binary and cubridge-worker binaries, talking real gRPC. Tests kill and
// restart any of them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "cubridge/v1/client.grpc.pb.h"
#include "cubridge/v1/worker.grpc.pb.h"
#include "server/store/redis.h"
#include "tests/server/redis_server.h"

namespace cubridge::testing {

// A child process whose stdout and stderr go to a log file.
class Process {
 public:
  Process(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
          std::string log_path);
  ~Process();  // SIGKILL, reaped
  pid_t pid() const { return pid_; }
  bool Alive();
  void Signal(int sig);
  // The exit code (128 + signal when killed), or -1 when it did not end within the timeout.
  int Wait(std::chrono::milliseconds timeout);
  std::string Log() const;
  // Waits until the log contains `text`; false after the timeout or when the process died.
  bool WaitForLog(const std::string& text, std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string log_path_;
};

class Cluster : public ::testing::Test {
 protected:
  static constexpr char kClientToken[] = "client-secret-1";
  static constexpr char kWorkerToken[] = "worker-secret-1";

  void SetUp() override;
  void TearDown() override;

  // Starts (or restarts, on the same port once one was chosen) the coordinator.
  void StartCoordinator(const std::vector<std::string>& extra = {});
  Process* StartWorker(const std::map<std::string, std::string>& env = {},
                       const std::vector<std::string>& extra = {});

  std::string Address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::unique_ptr<v1::CuBridge::Stub> ClientStub();
  std::unique_ptr<v1::Workers::Stub> WorkerStub();
  // A context with `authorization: Bearer <token>` and a deadline.
  static std::unique_ptr<grpc::ClientContext> Context(const std::string& token,
                                                      std::chrono::milliseconds deadline =
                                                          std::chrono::seconds(30));

  // GetKernel with the client's token: (spec hash, arch), and through a job when job_id is set.
  grpc::Status GetKernel(const std::string& spec_hash, const std::string& arch, v1::Kernel* out,
                         const std::string& job_id = "");

  // A request for an example spec (examples/specs/NAME.py) at the IR level for sm_80.
  static v1::SubmitJobRequest Request(const std::string& example,
                                      const std::map<std::string, std::string>& params = {});
  absl::StatusOr<v1::Job> Submit(const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::Job> Get(const std::string& job_id);
  // Polls until `done(job)`; the last job seen otherwise (the test then says what it was).
  v1::Job WaitUntil(const std::string& job_id, const std::function<bool(const v1::Job&)>& done,
                    std::chrono::milliseconds timeout);
  v1::Job WaitEnded(const std::string& job_id, std::chrono::milliseconds timeout);
  // A client of the cluster's Redis, to look at (or tamper with) what the service stored.
  std::unique_ptr<store::RedisClient> Redis();
  // The tasks a job planned, as Redis holds them: one line each with its state, attempt, worker,
  // and whether its stream entry exists and is delivered (pending). For the failure message of
  // a job that never ends, before the logs (which CI's output may cut).
  std::string StoredTasks(const std::string& job_id);
  // Every log of the cluster, for failure messages (the last 60 kB).
  std::string Logs() const;
  // Every coordinator's log, whole, in the order they ran.
  std::string CoordinatorLogs() const;

  RedisServer redis_{/*appendonly=*/true};
  std::string dir_;
  int port_ = 0;
  std::unique_ptr<Process> coordinator_;
  std::vector<std::unique_ptr<Process>> workers_;
  int starts_ = 0;
};

// The binaries under test: the build's, or those in $CUBRIDGE_TEST_BIN_DIR when it is set (to run
// a new test against an earlier build and see it fail there first).
std::string CoordinatorBinary();
std::string WorkerBinary();
std::string CliBinary();

bool Ended(const v1::Job& job);
std::string Describe(const v1::Job& job);  // state, error, events: one block for messages

}  // namespace cubridge::testing
