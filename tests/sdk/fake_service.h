// An in-test stand-in for the coordinator: the client API (cubridge.v1.CuBridge) on a real
// loopback gRPC server, with scripted failures and a record of what clients sent. The real
// coordinator replaces it for end-to-end tests.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "cubridge/v1/client.grpc.pb.h"

namespace cubridge::testing {

class FakeCuBridge final : public v1::CuBridge::Service {
 public:
  // The next calls of `method` ("SubmitJob", "GetJob", ...) answer these statuses, in order,
  // before it works again.
  void FailNext(const std::string& method, std::vector<grpc::Status> statuses);
  // Every call must carry "authorization: Bearer <token>"; UNAUTHENTICATED otherwise.
  void RequireToken(const std::string& token);
  // The next `streams` WatchJob streams send the job's first `events` events, then break with
  // UNAVAILABLE.
  void BreakWatch(int streams, int events);
  // Jobs that SubmitJob creates from now on have ended already, in `state` with these events.
  void EndSubmittedJobs(v1::JobState state, std::vector<v1::StageEvent> events);

  void AddJob(const v1::Job& job);
  void AddKernel(const v1::Kernel& kernel);
  void AddWorker(const v1::WorkerInfo& worker);

  std::vector<v1::SubmitJobRequest> submits() const;  // every SubmitJob call, failed ones too
  std::vector<std::string> authorizations() const;  // one per call, "" when none was sent
  int calls(const std::string& method) const;
  v1::ListJobsRequest last_list() const;

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* request,
                         v1::Job* job) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* request,
                      v1::Job* job) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::GetJobRequest* request,
                        grpc::ServerWriter<v1::StageEvent>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::GetJobRequest* request,
                         v1::Job* job) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status GetKernel(grpc::ServerContext* ctx, const v1::GetKernelRequest* request,
                         v1::Kernel* kernel) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;

 private:
  // Records the call; a scripted failure or a missing token is the answer instead of the method.
  std::optional<grpc::Status> Enter(const std::string& method, grpc::ServerContext* ctx);
  std::optional<v1::Job> FindJob(const std::string& job_id) const;

  mutable std::mutex mu_;
  std::map<std::string, std::deque<grpc::Status>> failures_;
  std::map<std::string, int> calls_;
  std::vector<std::string> authorizations_;
  std::string token_;
  int watch_breaks_ = 0;
  int watch_break_after_ = 0;
  std::optional<std::pair<v1::JobState, std::vector<v1::StageEvent>>> end_submitted_;
  std::vector<v1::SubmitJobRequest> submits_;
  std::map<std::string, std::string> jobs_by_key_;
  std::map<std::string, v1::Job> jobs_;
  std::map<std::pair<std::string, std::string>, v1::Kernel> kernels_;
  std::vector<v1::WorkerInfo> workers_;
  v1::ListJobsRequest last_list_;
};

// The fake on 127.0.0.1 at a port the system picks.
class FakeServer {
 public:
  FakeServer();
  ~FakeServer();
  FakeCuBridge& service() { return service_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  FakeCuBridge service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

v1::StageEvent Event(const std::string& stage, bool ok = true, const std::string& detail = "");

// A loopback port nothing listens on (bound, then released).
int DeadPort();

}  // namespace cubridge::testing
