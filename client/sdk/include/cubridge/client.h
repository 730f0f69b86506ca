// The C++ SDK of the CuBridge service: submit adaptation jobs to a coordinator, follow them, and
// fetch the verified kernels.
//
//   auto options = cubridge::ClientOptions::FromEnvironment();
//   auto client = cubridge::Client::Connect(*options);
//   auto request = cubridge::RequestFromSpecFile("doc.py");
//   request->set_proposer("hybrid");  // optional: "rules" (default), "llm" or "hybrid"
//   auto job = (*client)->Submit(*request);
//   auto done = (*client)->Watch(job->job_id(), [](const cubridge::v1::StageEvent& e) { ... });
//
// Every call returns the server's gRPC status as an absl::Status with the same code and message;
// ErrorDetailOf(status) says why where the code alone does not (e.g. the coordinator is up but
// its Redis store is not, or an idempotency key already names another request's job).
//
// A coordinator that restarts is ridden through: calls wait for the connection and retry
// UNAVAILABLE with backoff until their deadline, and Watch resumes its stream after the events it
// already delivered.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cubridge/v1/client.pb.h"
#include "cubridge/v1/common.pb.h"

namespace cubridge {

struct ClientOptions {
  std::string address = "localhost:50051";  // host:port of the coordinator
  std::string token;  // sent as "authorization: Bearer <token>" metadata on every call
  bool tls = false;
  std::string root_certs_file;  // PEM CA bundle for TLS; empty = the system's roots
  // Per unary call, reconnects and retries included; for Watch, how long it keeps trying to get
  // a stream back after one broke (a stream itself may last as long as the job).
  std::chrono::milliseconds deadline{30000};
  int max_attempts = 0;  // attempts per call (0: as many as fit the deadline); only UNAVAILABLE is retried
  std::chrono::milliseconds initial_backoff{100};  // doubles after every failed attempt, up to 1 s
  // Called before each retry with the status that failed (e.g. to say "waiting for the
  // coordinator"); may be empty. Runs on the calling thread.
  std::function<void(const absl::Status& failed, int attempt)> on_retry;

  // The defaults above, overridden by CUBRIDGE_ADDRESS, CUBRIDGE_TOKEN (else the contents of
  // the file CUBRIDGE_TOKEN_FILE names) and CUBRIDGE_TLS_CA (a CA bundle; turns TLS on). Fails
  // only when CUBRIDGE_TOKEN_FILE names a file that cannot be read or is empty.
  static absl::StatusOr<ClientOptions> FromEnvironment();
};

// A token file's contents without surrounding whitespace; NOT_FOUND / PERMISSION_DENIED when it
// cannot be read, INVALID_ARGUMENT when it is empty.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// SUCCEEDED, FAILED and CANCELLED: the job will not change any more.
bool IsTerminal(v1::JobState state);

// Why a call failed, when the coordinator said (STORE_UNAVAILABLE, DRAINING, SPEC_CHECKERS_BUSY,
// IDEMPOTENCY_CONFLICT with the job, INTERNAL with its incident id); nullopt otherwise, e.g. for
// a coordinator that could not be reached at all.
std::optional<v1::ErrorDetail> ErrorDetailOf(const absl::Status& status);

// Safe to use from several threads at once: after Connect nothing in it changes.
class Client {
 public:
  // Creates the channel; the coordinator need not be up (calls retry UNAVAILABLE). Fails only on
  // unusable options: no address, a token that cannot be sent as metadata, an unreadable CA file.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Retrying is safe: a request without an idempotency key gets a random one before the first
  // attempt, so every attempt names the same job.
  absl::StatusOr<v1::Job> Submit(const v1::SubmitJobRequest& request);
  // The job without its transcript (see Transcript).
  absl::StatusOr<v1::Job> Get(const std::string& job_id);
  // The LLM conversation of the job's transfer, as the service stores it: a JSON array of turns
  // (docs/llm.md; `cubridge-cli transcript JOB` renders it). Kept whether the conversation led to
  // an accepted program or not. "" when the job has none: its proposer is the rules (or a hybrid
  // whose rules covered the spec), its transfer has not ended, or it was a cache hit. NOT_FOUND
  // for an unknown job.
  absl::StatusOr<std::string> Transcript(const std::string& job_id);
  // Calls on_event for each of the job's stage events, from the first, and returns the job once
  // it ended. A broken stream is re-opened from the next event (none is repeated), for as long as
  // a new stream comes within the deadline.
  absl::StatusOr<v1::Job> Watch(const std::string& job_id,
                                std::function<void(const v1::StageEvent&)> on_event);
  // The ended job; DEADLINE_EXCEEDED when it has not ended within `timeout`.
  absl::StatusOr<v1::Job> Wait(const std::string& job_id, std::chrono::milliseconds timeout);
  // FAILED_PRECONDITION when the job already ended.
  absl::StatusOr<v1::Job> Cancel(const std::string& job_id);
  // Newest first; limit 0 = the server's default (50); UNSPECIFIED = every state.
  absl::StatusOr<std::vector<v1::Job>> List(int limit = 0,
                                            v1::JobState state = v1::JOB_STATE_UNSPECIFIED);
  // NOT_FOUND when the cache has no verified kernel for (spec_hash, arch).
  // With `job_id` (a job of this hash), the report names the kernel's tensors as that job's spec
  // does: a kernel made for another spec of the same hash may name them otherwise.
  absl::StatusOr<v1::Kernel> GetKernel(const std::string& spec_hash, const std::string& arch,
                                       const std::string& job_id = "");
  absl::StatusOr<std::vector<v1::WorkerInfo>> Workers();

  const ClientOptions& options() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A request carrying the spec file at `path` (file_name is the path as given, so the server's
// "file:line:col" errors point at it). Config, archs and verification are left for the caller.
// NOT_FOUND when the file does not exist; PERMISSION_DENIED / INVALID_ARGUMENT when it cannot be
// read.
absl::StatusOr<v1::SubmitJobRequest> RequestFromSpecFile(const std::string& path);
// A lift request carrying the CUDA kernel at `path` (docs/llm.md): the job asks a model for the
// kernel's base CuIR program, accepted when it agrees with the compiled kernel on a GPU. `name`:
// the expert name the program declares (empty: the file's stem). Same errors as above.
absl::StatusOr<v1::SubmitJobRequest> RequestFromKernelFile(const std::string& path,
                                                           const std::string& name = "");

}  // namespace cubridge
