#include "tests/service/cluster.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include <cstdlib>

namespace cubridge::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string FromBinDir(const char* name, const char* built) {
  const char* dir = std::getenv("CUBRIDGE_TEST_BIN_DIR");
  return dir != nullptr && *dir != '\0' ? absl::StrCat(dir, "/", name) : built;
}

}  // namespace

std::string CoordinatorBinary() { return FromBinDir("cubridge-coordinator", CUBRIDGE_COORDINATOR); }
std::string WorkerBinary() { return FromBinDir("cubridge-worker", CUBRIDGE_WORKER); }
std::string CliBinary() { return FromBinDir("cubridge-cli", CUBRIDGE_CLI); }

Process::Process(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
                 std::string log_path)
    : log_path_(std::move(log_path)) {
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a crashed test leaves no daemons behind
    const int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) dup2(fd, STDOUT_FILENO), dup2(fd, STDERR_FILENO);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
}

Process::~Process() {
  if (Alive()) {
    kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  }
}

bool Process::Alive() {
  if (pid_ <= 0 || exit_code_ >= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  return true;
}

void Process::Signal(int sig) {
  if (Alive()) kill(pid_, sig);
}

int Process::Wait(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (Alive() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return exit_code_;
}

std::string Process::Log() const { return ReadAll(log_path_); }

bool Process::WaitForLog(const std::string& text, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (Log().find(text) != std::string::npos) return true;
    if (!Alive()) return Log().find(text) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

void Cluster::SetUp() {
  ASSERT_TRUE(redis_.running()) << redis_.error();
  char tmpl[] = "/tmp/cubridge-cluster-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  dir_ = tmpl;
}

void Cluster::TearDown() {
  workers_.clear();
  coordinator_.reset();
  if (HasFailure()) {
    std::cerr << "---- cluster logs ----\n" << Logs() << "----\n";
  } else {
    // Not std::filesystem::remove_all: the CUDA LibTorch exports a broken one (docs/gpu.md).
    (void)std::system(("rm -rf " + dir_).c_str());
  }
}

void Cluster::StartCoordinator(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {CoordinatorBinary(), "--listen",
                                   absl::StrCat("127.0.0.1:", port_), "--redis",
                                   absl::StrCat("127.0.0.1:", redis_.port()), "--lease-seconds",
                                   "2", "--retry-backoff-seconds", "0.2", "--sweep-ms", "200"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const std::string log = absl::StrCat(dir_, "/coordinator-", starts_++, ".log");
  coordinator_ = std::make_unique<Process>(
      argv,
      std::map<std::string, std::string>{{"CUBRIDGE_CLIENT_TOKENS", kClientToken},
                                         {"CUBRIDGE_WORKER_TOKEN", kWorkerToken}},
      log);
  ASSERT_TRUE(coordinator_->WaitForLog("listening on port", std::chrono::seconds(60)))
      << coordinator_->Log();
  std::smatch m;
  const std::string text = coordinator_->Log();
  ASSERT_TRUE(std::regex_search(text, m, std::regex("listening on port (\\d+)")));
  port_ = std::stoi(m[1]);
}

Process* Cluster::StartWorker(const std::map<std::string, std::string>& env,
                              const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {WorkerBinary(), "--coordinator", Address(), "--arch", "cpu",
                                   "--drain-seconds", "30"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  std::map<std::string, std::string> e = env;
  e["CUBRIDGE_WORKER_TOKEN"] = kWorkerToken;
  const std::string log = absl::StrCat(dir_, "/worker-", workers_.size(), ".log");
  workers_.push_back(std::make_unique<Process>(argv, e, log));
  return workers_.back().get();
}

std::unique_ptr<store::RedisClient> Cluster::Redis() {
  store::RedisOptions o;
  o.port = redis_.port();
  auto c = store::RedisClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

std::string Cluster::StoredTasks(const std::string& job_id) {
  auto redis = Redis();
  if (redis == nullptr) return "(Redis unreachable)\n";
  auto job = redis->Command({"HKEYS", "cubridge:job:" + job_id});
  if (!job.ok()) return absl::StrCat("(job record: ", job.status().ToString(), ")\n");
  std::string out;
  for (const auto& field : job->elements) {
    if (!absl::StartsWith(field.str, "planned:")) continue;
    const std::string task = field.str.substr(8);
    auto f = redis->Command({"HMGET", "cubridge:task:" + task, "state", "attempt", "token", "worker",
                             "class", "entry", "error"});
    if (!f.ok() || f->elements.size() != 7) {
      absl::StrAppend(&out, "  task ", task, ": unreadable\n");
      continue;
    }
    const auto& v = f->elements;
    const std::string stream = "cubridge:tasks:" + v[4].str;
    auto entry = redis->Command({"XRANGE", stream, v[5].str, v[5].str});
    auto pending = redis->Command({"XPENDING", stream, "workers", v[5].str, v[5].str, "1"});
    absl::StrAppend(&out, "  task ", task, ": state=", v[0].str, " attempt=", v[1].str, " token=",
                    v[2].str, " worker=", v[3].str, " entry=", v[5].str,
                    entry.ok() && !entry->elements.empty() ? " (in stream" : " (not in stream",
                    pending.ok() && !pending->elements.empty() ? ", delivered)" : ", not delivered)",
                    v[6].str.empty() ? "" : " error=" + v[6].str, "\n");
  }
  return out.empty() ? "  (no planned tasks)\n" : out;
}

std::unique_ptr<v1::CuBridge::Stub> Cluster::ClientStub() {
  return v1::CuBridge::NewStub(grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials()));
}

grpc::Status Cluster::GetKernel(const std::string& spec_hash, const std::string& arch,
                                v1::Kernel* out, const std::string& job_id) {
  v1::GetKernelRequest req;
  req.set_spec_hash(spec_hash);
  req.set_arch(arch);
  req.set_job_id(job_id);
  auto ctx = Context(kClientToken);
  return ClientStub()->GetKernel(ctx.get(), req, out);
}

std::unique_ptr<v1::Workers::Stub> Cluster::WorkerStub() {
  return v1::Workers::NewStub(grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials()));
}

std::unique_ptr<grpc::ClientContext> Cluster::Context(const std::string& token,
                                                      std::chrono::milliseconds deadline) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + deadline);
  return ctx;
}

v1::SubmitJobRequest Cluster::Request(const std::string& example,
                                      const std::map<std::string, std::string>& params) {
  v1::SubmitJobRequest r;
  r.mutable_spec()->set_file_name(example + ".py");
  r.mutable_spec()->set_source(
      ReadAll(absl::StrCat(CUBRIDGE_SOURCE_ROOT, "/examples/specs/", example, ".py")));
  for (const auto& [k, v] : params) (*r.mutable_spec()->mutable_params())[k] = v;
  auto* c = r.mutable_config();
  c->set_batch(1);
  c->set_heads_q(4);
  c->set_heads_kv(2);
  c->set_head_dim(64);
  c->set_seqlen_q(200);
  c->set_seqlen_kv(200);
  c->set_dtype("bf16");
  r.add_archs("sm_80");
  r.set_verification(v1::VERIFICATION_LEVEL_IR);
  return r;
}

absl::StatusOr<v1::Job> Cluster::Submit(const v1::SubmitJobRequest& request) {
  v1::Job job;
  auto ctx = Context(kClientToken);
  grpc::Status s = ClientStub()->SubmitJob(ctx.get(), request, &job);
  if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  return job;
}

absl::StatusOr<v1::Job> Cluster::Get(const std::string& job_id) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::Job job;
  auto ctx = Context(kClientToken, std::chrono::seconds(5));
  grpc::Status s = ClientStub()->GetJob(ctx.get(), req, &job);
  if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  return job;
}

v1::Job Cluster::WaitUntil(const std::string& job_id,
                           const std::function<bool(const v1::Job&)>& done,
                           std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  v1::Job last;
  while (std::chrono::steady_clock::now() < end) {
    auto job = Get(job_id);
    if (job.ok()) {
      last = *job;
      if (done(last)) return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return last;
}

v1::Job Cluster::WaitEnded(const std::string& job_id, std::chrono::milliseconds timeout) {
  return WaitUntil(job_id, Ended, timeout);
}

std::string Cluster::CoordinatorLogs() const {
  std::string out;
  for (int i = 0; i < starts_; ++i) out += ReadAll(absl::StrCat(dir_, "/coordinator-", i, ".log"));
  return out;
}

std::string Cluster::Logs() const {
  std::string out;
  for (int i = 0; i < starts_; ++i) {
    absl::StrAppend(&out, "== coordinator ", i, "\n",
                    ReadAll(absl::StrCat(dir_, "/coordinator-", i, ".log")));
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    absl::StrAppend(&out, "== worker ", i, "\n", workers_[i]->Log());
  }
  return out.size() > 60000 ? out.substr(out.size() - 60000) : out;
}

bool Ended(const v1::Job& job) {
  return job.state() == v1::JOB_STATE_SUCCEEDED || job.state() == v1::JOB_STATE_FAILED ||
         job.state() == v1::JOB_STATE_CANCELLED;
}

std::string Describe(const v1::Job& job) {
  std::string out = absl::StrCat(job.job_id(), " ", v1::JobState_Name(job.state()),
                                 job.error().empty() ? "" : " error: " + job.error(),
                                 job.waiting_for().empty() ? "" : " waiting for: " + job.waiting_for(),
                                 "\n");
  for (const auto& e : job.events()) {
    absl::StrAppend(&out, "  [", e.stage(), "] ", e.ok() ? "ok " : "FAIL ", e.detail(), " (",
                    e.worker_id(), ")\n");
  }
  return out;
}

}  // namespace cubridge::testing
