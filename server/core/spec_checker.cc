#include "server/core/spec_checker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "cuir/spec/digest.h"
#include "server/core/request.h"

namespace cubridge::core {
namespace {

using Clock = std::chrono::steady_clock;

// A frame: the payload's length as 4 little-endian bytes, then the payload.
constexpr size_t kMaxFrame = 16 << 20;

std::string Frame(const std::string& payload) {
  std::string out(4, '\0');
  const uint32_t n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + payload;
}

// Waits until `fd` is readable or the deadline passes; false on timeout.
bool WaitReadable(int fd, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;  // the read that follows reports the error
  }
}

enum class Io { kOk, kClosed, kTimeout };

Io ReadExactly(int fd, char* out, size_t n, Clock::time_point deadline) {
  size_t got = 0;
  while (got < n) {
    if (!WaitReadable(fd, deadline)) return Io::kTimeout;
    const ssize_t r = read(fd, out + got, n - got);
    if (r == 0) return Io::kClosed;
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Io::kClosed;
    }
    got += static_cast<size_t>(r);
  }
  return Io::kOk;
}

bool WriteAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    // MSG_NOSIGNAL: a child that died must not take the coordinator down with SIGPIPE.
    const ssize_t w = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    sent += static_cast<size_t>(w);
  }
  return true;
}

// Reads one frame; kClosed also for a frame longer than any answer can be.
Io ReadFrame(int fd, std::string* payload, Clock::time_point deadline) {
  char len[4];
  if (Io r = ReadExactly(fd, len, 4, deadline); r != Io::kOk) return r;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<unsigned char>(len[i])) << (8 * i);
  if (n > kMaxFrame) return Io::kClosed;
  payload->assign(n, '\0');
  return ReadExactly(fd, payload->data(), n, deadline);
}

std::string SelfExe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (a stack overflow or a bad memory access)";
    case SIGABRT: return "SIGABRT (an abort, e.g. memory exhausted)";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    default: return "a signal";
  }
}

// What a check reads of a request: its spec and config, the buffers given by value without their
// bytes (the check needs their dtypes and shapes; the coordinator checked the bytes), no kernel.
v1::SubmitJobRequest CheckedPart(const v1::SubmitJobRequest& r) {
  v1::SubmitJobRequest part;
  *part.mutable_spec() = r.spec();
  for (auto& [name, t] : *part.mutable_spec()->mutable_tensors()) t.clear_data();
  *part.mutable_config() = r.config();
  return part;
}

// What a check is keyed by in the cache: everything of the request its answer depends on.
std::string CacheKey(const v1::SubmitJobRequest& part, const std::string& ruleset) {
  return spec::Sha256Hex(absl::StrCat(ruleset, "\n", RequestFingerprint(part)));
}

}  // namespace

SpecChecker::SpecChecker(SpecCheckerOptions options, SpecCheckObserver observer)
    : options_(std::move(options)), observer_(std::move(observer)) {
  if (options_.program.empty()) options_.program = SelfExe();
  children_.resize(std::max(1, options_.children));
}

SpecChecker::~SpecChecker() {
  std::lock_guard lock(mu_);
  for (Child& c : children_) Reap(c);
}

absl::Status SpecChecker::Start() {
  std::lock_guard lock(mu_);
  for (Child& c : children_) {
    if (auto s = Spawn(c); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status SpecChecker::Spawn(Child& child) {
  if (access(options_.program.c_str(), X_OK) != 0) {
    return absl::UnavailableError(absl::StrCat("the spec checker ", options_.program,
                                               " is not an executable file"));
  }
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::UnavailableError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  // The child ends itself if one spec outlasts twice the limit: the backstop for a coordinator
  // that died without killing it (an idle child ends when the socket closes).
  const int64_t backstop = std::max<int64_t>(1, 2 * options_.timeout.count() / 1000 + 1);
  std::vector<std::string> args = {options_.program, "check-specs", "--fd", "3", "--max-seconds",
                                   std::to_string(backstop)};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = {"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1",
                                          "MKL_NUM_THREADS=1"};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0 && std::strncmp(*e, "OPENBLAS_NUM_THREADS=", 21) != 0 &&
        std::strncmp(*e, "MKL_NUM_THREADS=", 16) != 0) {
      env_strings.emplace_back(*e);
    }
  }
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const rlimit memory{static_cast<rlim_t>(options_.memory_bytes), static_cast<rlim_t>(options_.memory_bytes)};
  const rlimit stack{static_cast<rlim_t>(options_.stack_bytes), static_cast<rlim_t>(options_.stack_bytes)};
  const rlimit no_core{0, 0};
  const int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);

  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]), close(fds[1]);
    if (devnull >= 0) close(devnull);
    return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // No PR_SET_PDEATHSIG: it follows the thread that forks, and children are replaced from
    // whichever gRPC thread found one dead; the socket closing is what ends an orphan.
    setpgid(0, 0);  // a kill reaches whatever it started
    // stdout stays away from the protocol: a spec may print() from its probe runs.
    if (devnull >= 0) dup2(devnull, STDIN_FILENO), dup2(devnull, STDOUT_FILENO);
    dup2(fds[1], 3);
    syscall(SYS_close_range, 4, ~0U, 0);  // no Redis or gRPC sockets of the coordinator
    setrlimit(RLIMIT_AS, &memory);
    setrlimit(RLIMIT_STACK, &stack);
    setrlimit(RLIMIT_CORE, &no_core);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  if (devnull >= 0) close(devnull);
  child.pid = pid;
  child.fd = fds[0];
  child.busy = false;
  return absl::OkStatus();
}

void SpecChecker::Reap(Child& child) {
  if (child.fd >= 0) close(child.fd);
  if (child.pid > 0) {
    kill(-child.pid, SIGKILL);
    kill(child.pid, SIGKILL);
    waitpid(child.pid, nullptr, 0);
  }
  child = Child{};
}

absl::StatusOr<SpecKey> SpecChecker::Check(const v1::SubmitJobRequest& request,
                                                   const std::string& ruleset) {
  const auto start = Clock::now();
  const std::string file = request.spec().file_name().empty() ? "spec.py" : request.spec().file_name();
  v1::SpecCheckRequest req;
  *req.mutable_request() = CheckedPart(request);
  req.set_ruleset(ruleset);
  const std::string key = CacheKey(req.request(), ruleset);
  std::string outcome = "unavailable";
  auto observe = [&](absl::StatusOr<SpecKey> result) {
    if (observer_) observer_(outcome, std::chrono::duration<double>(Clock::now() - start).count());
    return result;
  };

  Child* child = nullptr;
  {
    std::unique_lock lock(mu_);
    if (auto hit = cached_.find(key); hit != cached_.end()) {
      lru_.splice(lru_.begin(), lru_, hit->second);
      outcome = "cached";
      return observe(hit->second->second);
    }
    const bool got = free_.wait_for(lock, options_.queue_wait, [&] {
      for (Child& c : children_) {
        if (!c.busy) return true;
      }
      return false;
    });
    if (!got) {
      return observe(absl::UnavailableError(
          "every spec checker is busy; retry shortly (the coordinator compiles specs in a few "
          "child processes, --spec-checkers)"));
    }
    for (Child& c : children_) {
      if (!c.busy) {
        child = &c;
        break;
      }
    }
    child->busy = true;
  }
  // The child's process is replaced outside the lock: starting LibTorch takes a while.
  absl::StatusOr<SpecKey> result;
  if (child->pid <= 0) {
    if (auto s = Spawn(*child); !s.ok()) result = s;
  }
  if (child->pid > 0) {
    result = RunOn(*child, Frame(req.SerializeAsString()), file, &outcome);
  }
  {
    std::lock_guard lock(mu_);
    child->busy = false;
    if (result.ok()) {
      lru_.emplace_front(key, *result);
      cached_[key] = lru_.begin();
      if (lru_.size() > options_.cache_entries) {
        cached_.erase(lru_.back().first);
        lru_.pop_back();
      }
    }
  }
  free_.notify_one();
  return observe(result);
}

absl::StatusOr<SpecKey> SpecChecker::RunOn(Child& child, const std::string& frame,
                                                   const std::string& file, std::string* outcome) {
  const auto deadline = Clock::now() + options_.timeout;
  std::string payload;
  Io io = WriteAll(child.fd, frame) ? ReadFrame(child.fd, &payload, deadline) : Io::kClosed;
  v1::SpecCheckResponse response;
  if (io == Io::kOk && response.ParseFromString(payload)) {
    if (response.code() != 0) {
      *outcome = "invalid";
      return absl::Status(static_cast<absl::StatusCode>(response.code()), response.message());
    }
    *outcome = "ok";
    return SpecKey{response.spec_hash(), response.canonical_form(),
                           {response.canonical_buffers().begin(), response.canonical_buffers().end()}};
  }
  // The child is gone or stuck: whatever it was doing, it is replaced before the next spec.
  const pid_t pid = child.pid;
  if (io == Io::kTimeout) {
    Reap(child);
    *outcome = "timeout";
    spdlog::warn("spec check of {}: no answer within {} ms; child {} killed", file,
                 options_.timeout.count(), pid);
    return absl::ResourceExhaustedError(absl::StrCat(
        file, ": compiling the spec took longer than ", options_.timeout.count() / 1000.0,
        " s, this service's limit; a mask_mod or score_mod must be a few operations per element "
        "(no loops that run long)"));
  }
  int status = 0;
  if (child.fd >= 0) close(child.fd);
  child.fd = -1;
  // A closed socket means the child is exiting; give it a moment, then make sure.
  for (int i = 0; i < 100 && waitpid(pid, &status, WNOHANG) == 0; ++i) usleep(10000);
  if (waitpid(pid, &status, WNOHANG) == 0) {
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  child = Child{};
  *outcome = "crashed";
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  spdlog::warn("spec check of {}: child {} ended ({}{}); replaced", file, pid,
               sig != 0 ? "signal " : "exit code ", sig != 0 ? sig : WEXITSTATUS(status));
  if (sig == SIGKILL || sig == SIGXCPU) {
    return absl::ResourceExhaustedError(absl::StrCat(
        file, ": compiling the spec was stopped by ", SignalName(sig),
        ", usually for using more memory than this service allows; simplify the spec"));
  }
  if (sig != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": the spec frontend crashed on this spec with ", SignalName(sig),
        "; the crash was contained and nothing else was affected. Simplify the spec (fewer "
        "nested expressions, shorter chains); if it is a valid spec, report it with the file"));
  }
  return absl::InternalError(absl::StrCat(
      file, ": the spec checker exited with code ", WEXITSTATUS(status),
      " without an answer; it was restarted, retry the submit"));
}

int ServeSpecChecks(int fd, int max_seconds,
                    const std::function<v1::SpecCheckResponse(const v1::SpecCheckRequest&)>& check) {
  for (;;) {
    std::string payload;
    const Io io = ReadFrame(fd, &payload, Clock::time_point::max());
    if (io != Io::kOk) return 0;  // the coordinator closed its end: done
    v1::SpecCheckRequest request;
    v1::SpecCheckResponse response;
    if (!request.ParseFromString(payload)) {
      response.set_code(static_cast<int>(absl::StatusCode::kInternal));
      response.set_message("the spec checker received a request it cannot parse");
    } else {
      if (max_seconds > 0) alarm(static_cast<unsigned>(max_seconds));  // SIGALRM ends it
      response = check(request);
      alarm(0);
    }
    if (!WriteAll(fd, Frame(response.SerializeAsString()))) return 1;
  }
}

}  // namespace cubridge::core
