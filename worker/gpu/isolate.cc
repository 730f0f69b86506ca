#include "worker/gpu/isolate.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cuir/files/files.h"

namespace cubridge::gpu {
namespace {

namespace fs = std::filesystem;

// What the child left, or nothing where it left nothing.
std::string ReadAll(const fs::path& p) { return files::ReadFile(p.string()).value_or(""); }

std::string Tail(const std::string& text, int lines) {
  std::vector<std::string> all = absl::StrSplit(text, '\n', absl::SkipEmpty());
  const size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  std::string out;
  for (size_t i = from; i < all.size(); ++i) absl::StrAppend(&out, all[i], "\n");
  return out;
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGKILL: return "SIGKILL";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    default: return "a signal";
  }
}

}  // namespace

std::string RunnerPath() {
  if (const char* env = std::getenv("CUBRIDGE_GPU_RUNNER"); env != nullptr && *env != '\0') {
    return env;
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = self.parent_path() / "cubridge-gpu-runner";
    if (fs::exists(beside)) return beside.string();
  }
#ifdef CUBRIDGE_GPU_RUNNER_PATH
  return CUBRIDGE_GPU_RUNNER_PATH;
#else
  return "cubridge-gpu-runner";
#endif
}

absl::StatusOr<ChildOutcome> RunChild(const std::string& mode, const nlohmann::json& request,
                                      const IsolateOptions& options) {
  const std::string runner = options.runner.empty() ? RunnerPath() : options.runner;
  if (access(runner.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the GPU runner ", runner, " is not an executable file (build cubridge-gpu-runner or set "
        "CUBRIDGE_GPU_RUNNER)"));
  }
  const fs::path dir = options.work_dir;
  const fs::path request_path = dir / "request.json", result_path = dir / "result.json",
                 stderr_path = dir / "stderr.txt";
  unlink(result_path.c_str());
  if (!request.is_null()) {
    std::ofstream out(request_path);
    out << request.dump(2);
    out.close();  // a full disk shows when the buffer is written out, not before
    if (out.fail()) {
      return absl::UnavailableError(absl::StrCat("cannot write ", request_path.string(), ": ",
                                                 std::strerror(errno)));
    }
  }
  std::vector<std::string> args = {runner, mode};
  if (!request.is_null()) args.insert(args.end(), {"--request", request_path.string()});
  args.insert(args.end(), {"--result", result_path.string()});

  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);  // its own group: a timeout kills whatever the child started too
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // and it does not outlive a killed worker
    const int err = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) dup2(err, STDERR_FILENO), dup2(err, STDOUT_FILENO);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  ChildOutcome out;
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out.stopped = options.should_stop && options.should_stop();
    if (out.seconds > options.timeout_seconds || out.stopped) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      out.timed_out = !out.stopped;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.stderr_tail = Tail(ReadAll(stderr_path), 20);
  if (WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) out.signal = WTERMSIG(status);
  auto parsed = nlohmann::json::parse(ReadAll(result_path), nullptr, false);
  if (!parsed.is_discarded()) out.result = parsed;

  if (out.stopped) {
    out.error = absl::StrCat(options.what, " was stopped before it finished");
  } else if (out.timed_out) {
    out.error = absl::StrCat(options.what, " ran past the ", options.timeout_seconds,
                             " s time limit and was killed (a hang or a very slow kernel)");
  } else if (out.signal != 0) {
    out.error = absl::StrCat("the runner died of ", SignalName(out.signal), " (signal ",
                             out.signal, ") while running ", options.what);
  } else if (out.exit_code != 0 || parsed.is_discarded()) {
    const std::string said = Tail(out.stderr_tail, 3);
    out.error = out.result.contains("error")
                    ? out.result["error"].get<std::string>()
                    : absl::StrCat(options.what, " exited with code ", out.exit_code,
                                   " and wrote no result",
                                   said.empty() ? " (and printed nothing)" : ": " + said);
  } else {
    out.ok = true;
  }
  return out;
}

}  // namespace cubridge::gpu
