#include "client/cli/service_commands.h"

#include <map>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include <cubridge/client.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/config_flags.h"
#include "client/cli/service_output.h"
#include "cuir/files/files.h"
#include "cuir/files/torch_save.h"
#include "cuir/llm/transcript.h"
#include "service/contract/proto_values.h"

namespace cubridge::cli {
namespace {

enum ExitCode { kOk = 0, kFailed = 1, kUsage = 2, kUnreachable = 3, kUnauthenticated = 4 };

// Shared by every service command; each subcommand binds the same variables.
struct ConnectionFlags {
  std::string address;     // empty: CUBRIDGE_ADDRESS, else localhost:50051
  std::string token_file;  // empty: CUBRIDGE_TOKEN, else CUBRIDGE_TOKEN_FILE
  std::string tls_ca;      // empty: CUBRIDGE_TLS_CA; set: TLS with this CA bundle
  double timeout_seconds = 0;  // 0: CUBRIDGE_TIMEOUT, else 30
  bool json = false;
};

constexpr double kDefaultTimeoutSeconds = 30;

void AddConnectionFlags(CLI::App* cmd, ConnectionFlags& c) {
  const char* group = "Connection";
  cmd->add_option("--address", c.address,
                  "Coordinator HOST:PORT (default: $CUBRIDGE_ADDRESS, else localhost:50051)")
      ->group(group);
  cmd->add_option("--token-file", c.token_file,
                  "File holding the client token (default: $CUBRIDGE_TOKEN, else the file "
                  "$CUBRIDGE_TOKEN_FILE names)")
      ->group(group);
  cmd->add_option("--tls-ca", c.tls_ca, "Use TLS, trusting this PEM CA bundle ($CUBRIDGE_TLS_CA)")
      ->group(group);
  cmd->add_option("--timeout", c.timeout_seconds,
                  "Seconds a call may take, waiting for a coordinator that restarts included "
                  "(default: $CUBRIDGE_TIMEOUT, else 30)")
      ->group(group)
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", c.json, "Print the protobuf messages as JSON, one per line")
      ->group(group);
}

// One service command's run: the connection, and how a failure becomes a message and an exit
// code.
class Session {
 public:
  Session(std::string command, const ConnectionFlags& flags)
      : command_(std::move(command)), flags_(flags) {}

  absl::Status Connect() {
    // The flag replaces the environment's token; a broken CUBRIDGE_TOKEN_FILE must not stop it.
    if (!flags_.token_file.empty()) {
      unsetenv("CUBRIDGE_TOKEN");
      unsetenv("CUBRIDGE_TOKEN_FILE");
    }
    auto options = ClientOptions::FromEnvironment();
    if (!options.ok()) return options.status();
    if (!flags_.address.empty()) options->address = flags_.address;
    if (!flags_.token_file.empty()) {
      auto token = ReadTokenFile(flags_.token_file);
      if (!token.ok()) return token.status();
      options->token = *token;
    }
    if (!flags_.tls_ca.empty()) {
      options->tls = true;
      options->root_certs_file = flags_.tls_ca;
    }
    auto timeout = Timeout();
    if (!timeout.ok()) return timeout.status();
    timeout_seconds_ = *timeout;
    options->deadline = std::chrono::milliseconds(static_cast<int64_t>(*timeout * 1000));
    // Said once, when a call first has to wait: a restart is ridden through, not hidden.
    options->on_retry = [this](const absl::Status& failed, int attempt) {
      if (attempt != 1) return;
      std::cerr << "cubridge-cli " << command_ << ": " << Unavailable(failed)
                << "; retrying for up to " << timeout_seconds_ << " s\n";
    };
    address_ = options->address;
    auto client = Client::Connect(*options);
    if (!client.ok()) return client.status();
    client_ = *std::move(client);
    return absl::OkStatus();
  }

  Client& client() { return *client_; }
  bool json() const { return flags_.json; }

  // Who is unavailable: the coordinator itself, or what it said about itself (its Redis store
  // down, a drain, busy spec checkers): told apart by the status's detail, not its text.
  std::string Unavailable(const absl::Status& status) const {
    const auto detail = ErrorDetailOf(status);
    const v1::ErrorReason reason = detail ? detail->reason() : v1::ERROR_REASON_UNSPECIFIED;
    switch (reason) {
      case v1::ERROR_REASON_STORE_UNAVAILABLE:
        return absl::StrCat("the coordinator at ", address_,
                            " answers but cannot reach its Redis store (", status.message(), ")");
      case v1::ERROR_REASON_DRAINING:
        return absl::StrCat("the coordinator at ", address_, " is shutting down (draining)");
      case v1::ERROR_REASON_SPEC_CHECKERS_BUSY:
        return absl::StrCat("the coordinator at ", address_, " is busy: ", status.message());
      default:
        return absl::StrCat("cannot reach the coordinator at ", address_, ": ", status.message());
    }
  }

  // A problem with what this machine was given (flags, local files).
  int UsageError(const absl::Status& status) const {
    std::cerr << "cubridge-cli " << command_ << ": " << status.message() << "\n";
    return kUsage;
  }

  // A call that failed: the message, how to fix it where the code says, and the exit code.
  int Fail(const absl::Status& status) const {
    const std::string prefix = "cubridge-cli " + command_ + ": ";
    switch (status.code()) {
      case absl::StatusCode::kInvalidArgument:
        // The coordinator's message names file:line:col; editors jump to it when it leads.
        std::cerr << status.message() << "\n";
        return kUsage;
      case absl::StatusCode::kUnavailable:
        std::cerr << prefix << Unavailable(status) << "\n";
        if (!ErrorDetailOf(status)) {
          std::cerr << "  Is the coordinator running? Point at it with --address HOST:PORT or "
                    << "CUBRIDGE_ADDRESS (waited " << timeout_seconds_ << " s; --timeout).\n";
        }
        return kUnreachable;
      case absl::StatusCode::kUnauthenticated:
        std::cerr << prefix << status.message() << "\n  The coordinator needs a client token: "
                  << "set --token-file FILE or CUBRIDGE_TOKEN.\n";
        return kUnauthenticated;
      default:
        std::cerr << prefix << status.message() << "\n";
        return kFailed;
    }
  }

 private:
  // --timeout, else CUBRIDGE_TIMEOUT, else the default.
  absl::StatusOr<double> Timeout() const {
    if (flags_.timeout_seconds > 0) return flags_.timeout_seconds;
    const char* env = std::getenv("CUBRIDGE_TIMEOUT");
    if (env == nullptr || *env == '\0') return kDefaultTimeoutSeconds;
    double seconds = 0;
    if (!absl::SimpleAtod(env, &seconds) || !(seconds > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CUBRIDGE_TIMEOUT='", env, "' must be a positive number of seconds"));
    }
    return seconds;
  }

  std::string command_;
  ConnectionFlags flags_;
  std::string address_;
  double timeout_seconds_ = kDefaultTimeoutSeconds;
  std::unique_ptr<Client> client_;
};

// Registers one command: its flags, the connection flags, and a run that connects first.
template <class Flags>
Command Register(CLI::App& app, const std::shared_ptr<ConnectionFlags>& connection,
                 const char* name, const char* help, void (*add_flags)(CLI::App*, Flags&),
                 int (*run)(Session&, const Flags&)) {
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(name, help);
  // A flag given twice takes its last value (lists collect every value), as in `adapt`.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_flags(cmd, *flags);
  AddConnectionFlags(cmd, *connection);
  return {cmd, [=] {
            Session session(name, *connection);
            if (auto st = session.Connect(); !st.ok()) return session.UsageError(st);
            return run(session, *flags);
          }};
}

int ExitCodeOf(const v1::Job& job) {
  return job.state() == v1::JOB_STATE_SUCCEEDED ? kOk : kFailed;
}

// Events as they happen, then the outcome; the exit code says whether the job succeeded.
int FollowJob(Session& s, const std::string& job_id) {
  auto job = s.client().Watch(job_id, [&](const v1::StageEvent& e) {
    if (s.json()) {
      PrintJson(e);
    } else {
      PrintEvent(e);
    }
  });
  if (!job.ok()) return s.Fail(job.status());
  if (s.json()) {
    PrintJson(*job);
  } else {
    PrintOutcome(*job);
  }
  return ExitCodeOf(*job);
}

struct JobFlags {
  std::string job_id;
};

void AddJobFlags(CLI::App* cmd, JobFlags& f) {
  cmd->add_option("job", f.job_id, "Job id (j-...)")->required();
}

// ---- submit -----------------------------------------------------------------------------------

struct SubmitFlags {
  std::string spec;
  std::string kernel, kernel_name;  // a lift job instead of a spec
  ConfigFlags config;
  std::vector<std::string> archs;
  std::string verification;
  std::string idempotency_key;
  std::string proposer;
  std::string backward;
  bool watch = false;
};

void AddSubmitFlags(CLI::App* cmd, SubmitFlags& f) {
  cmd->add_option("spec", f.spec, "Python file with mask_mod and/or score_mod");
  cmd->add_option("--kernel", f.kernel,
                  "Instead of a spec: your CUDA attention kernel, lifted into CuIR by a model and "
                  "checked on a GPU worker (docs/llm.md)");
  cmd->add_option("--name", f.kernel_name,
                  "With --kernel: the expert name of the lifted program (default: the file's stem)");
  AddConfigFlags(cmd, f.config);
  cmd->add_option("--arch", f.archs,
                  "Target architecture, repeatable: --arch sm_80 --arch sm_90 (default: every "
                  "arch a worker has registered)");
  cmd->add_option("--verification", f.verification,
                  "gpu (default): checked on a GPU of the arch; ir: CuIR checked on CPU, CUDA "
                  "compiled but not run")
      ->check(CLI::IsMember({"gpu", "ir"}));
  cmd->add_option("--idempotency-key", f.idempotency_key,
                  "Resubmitting with the same key returns the same job (default: a fresh key)");
  cmd->add_option("--proposer", f.proposer,
                  "Who proposes the transferred CuIR: rules (default), llm (a language model, on "
                  "workers given an LLM endpoint) or hybrid (rules first, the model for what they "
                  "do not cover); the CPU verifier checks it either way")
      ->check(CLI::IsMember({"rules", "llm", "hybrid"}));
  cmd->add_option("--backward", f.backward,
                  "auto (default): also the backward kernel where the pipeline can make one; "
                  "off: forward only; require: the job fails without one")
      ->check(CLI::IsMember({"auto", "off", "require"}));
  cmd->add_flag("--watch", f.watch, "Follow the job as `watch` does");
}

// The coordinator cannot read this machine's files, so a file: buffer travels as its values
// (a tensor: file as a TensorValue, AddBuffer).
absl::StatusOr<std::string> WireBufferSource(const std::string& name, const std::string& source) {
  if (!absl::StartsWith(source, "file:")) return source;
  auto text = files::ReadFile(source.substr(5));
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--buffer ", name, "=", source, ": ", text.status().message()));
  }
  std::vector<std::string> values =
      absl::StrSplit(*text, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty());
  return absl::StrCat("values:", absl::StrJoin(values, ","));
}

// `--buffer NAME=SOURCE` into the request: a torch.save file read here (no LibTorch) and sent as
// its values, anything else as a source string.
absl::Status AddBuffer(const std::string& name, const std::string& source, v1::VariantSpec& spec) {
  if (!absl::StartsWith(source, "tensor:")) {
    auto wire = WireBufferSource(name, source);
    if (!wire.ok()) return wire.status();
    (*spec.mutable_buffers())[name] = *wire;
    return absl::OkStatus();
  }
  auto value = files::ReadTorchSaveFile(source.substr(7));
  if (!value.ok()) {
    return absl::Status(value.status().code(),
                        absl::StrCat("--buffer ", name, "=", source, ": ", value.status().message()));
  }
  v1::TensorValue& t = (*spec.mutable_tensors())[name];
  t.set_dtype(contract::TensorDTypeToProto(value->dtype));
  for (int64_t d : value->shape) t.add_shape(d);
  t.set_data(std::move(value->data));
  return absl::OkStatus();
}

absl::StatusOr<v1::SubmitJobRequest> BuildRequest(const SubmitFlags& f) {
  if (f.spec.empty() == f.kernel.empty()) {
    return absl::InvalidArgumentError(
        "give a spec file to adapt, or --kernel FILE to lift your own kernel (one of them)");
  }
  if (!f.kernel_name.empty() && f.kernel.empty()) {
    return absl::InvalidArgumentError("--name goes with --kernel");
  }
  auto request = f.kernel.empty() ? RequestFromSpecFile(f.spec)
                                  : RequestFromKernelFile(f.kernel, f.kernel_name);
  if (!request.ok()) return request.status();
  auto config = ResolveConfig(f.config);
  if (!config.ok()) return config.status();
  if (!f.kernel.empty() && (!config->params.empty() || !config->buffers.empty())) {
    return absl::InvalidArgumentError("--param and --buffer belong to specs; a lifted kernel takes neither");
  }
  *request->mutable_config() = contract::ConfigToProto(config->attention);
  auto& spec = *request->mutable_spec();
  for (const auto& [name, value] : config->params) (*spec.mutable_params())[name] = value;
  for (const auto& [name, source] : config->buffers) {
    if (auto s = AddBuffer(name, source, spec); !s.ok()) return s;
  }
  for (const auto& arch : f.archs) request->add_archs(arch);
  if (!f.verification.empty()) {
    request->set_verification(f.verification == "ir" ? v1::VERIFICATION_LEVEL_IR
                                                     : v1::VERIFICATION_LEVEL_GPU);
  }
  request->set_idempotency_key(f.idempotency_key);
  request->set_proposer(f.proposer);
  if (!f.backward.empty()) {
    request->set_backward(f.backward == "off"       ? v1::BACKWARD_MODE_OFF
                          : f.backward == "require" ? v1::BACKWARD_MODE_REQUIRE
                                                    : v1::BACKWARD_MODE_AUTO);
  }
  return request;
}

int RunSubmit(Session& s, const SubmitFlags& f) {
  auto request = BuildRequest(f);
  if (!request.ok()) return s.UsageError(request.status());
  auto job = s.client().Submit(*request);
  if (!job.ok()) return s.Fail(job.status());
  if (s.json()) {
    PrintJson(*job);
  } else if (job->cache_hit()) {
    std::printf("%s  cache hit: spec %s is already in the kernel cache\n", job->job_id().c_str(),
                job->spec_hash().c_str());
  } else {
    std::printf("%s  submitted (%s)\n", job->job_id().c_str(), StateName(job->state()).c_str());
  }
  std::fflush(stdout);
  return f.watch ? FollowJob(s, job->job_id()) : kOk;
}

// ---- status, watch, cancel ----------------------------------------------------------------------

int RunStatus(Session& s, const JobFlags& f) {
  auto job = s.client().Get(f.job_id);
  if (!job.ok()) return s.Fail(job.status());
  if (s.json()) {
    PrintJson(*job);
  } else {
    PrintJobStatus(*job);
  }
  return kOk;
}

int RunWatch(Session& s, const JobFlags& f) { return FollowJob(s, f.job_id); }

int RunCancel(Session& s, const JobFlags& f) {
  auto job = s.client().Cancel(f.job_id);
  if (!job.ok()) return s.Fail(job.status());
  if (s.json()) {
    PrintJson(*job);
  } else {
    std::printf("job %s %s\n", job->job_id().c_str(), StateName(job->state()).c_str());
  }
  return kOk;
}

// ---- get ----------------------------------------------------------------------------------------

struct GetFlags {
  std::string target;  // a job id or a spec hash
  std::string arch;
  std::string out;
};

void AddGetFlags(CLI::App* cmd, GetFlags& f) {
  cmd->add_option("target", f.target, "Job id (j-...) or spec hash")->required();
  cmd->add_option("--arch", f.arch, "sm_80 or sm_90 (default for a job: its only arch)");
  cmd->add_option("--out,-o", f.out,
                  "Directory for kernel.cuir, kernel.cu, kernel.h, report.json (a lift job: "
                  "base.cuir, report.json)")
      ->required();
}

// A lift job's answer: the accepted base program and its report.
int WriteLifted(Session& s, const v1::Job& job, const std::string& out) {
  const absl::Status written = files::PublishFiles(
      out, {{"base.cuir", job.lifted_cuir()}, {"report.json", job.lift_report_json() + "\n"}});
  if (!written.ok()) return s.Fail(written);
  if (s.json()) {
    std::printf("%s\n", nlohmann::json::parse(job.lift_report_json(), nullptr, false).dump(2).c_str());
  } else {
    std::printf("lifted program of job %s: base.cuir, report.json in %s\n", job.job_id().c_str(),
                out.c_str());
  }
  return kOk;
}

int RunGet(Session& s, const GetFlags& f) {
  std::string spec_hash = f.target;
  std::string arch = f.arch;
  if (absl::StartsWith(f.target, "j-")) {
    auto job = s.client().Get(f.target);
    if (!job.ok()) return s.Fail(job.status());
    if (job->state() != v1::JOB_STATE_SUCCEEDED) {
      return s.Fail(absl::FailedPreconditionError(
          absl::StrCat("job ", f.target, " is ", StateName(job->state()),
                       "; only a succeeded job has a kernel (follow it: cubridge-cli watch ",
                       f.target, ")")));
    }
    if (job->kind() == "lift") return WriteLifted(s, *job, f.out);
    spec_hash = job->spec_hash();
    if (arch.empty() && job->archs_size() != 1) {
      return s.UsageError(absl::InvalidArgumentError(
          absl::StrCat("job ", f.target, " has kernels for ", absl::StrJoin(job->archs(), ", "),
                       ": pick one with --arch")));
    }
    if (arch.empty()) arch = job->archs(0);
  } else if (arch.empty()) {
    return s.UsageError(
        absl::InvalidArgumentError("--arch is required with a spec hash, e.g. --arch sm_90"));
  }
  // From a job: the report names the tensors as the job's spec does.
  auto kernel = s.client().GetKernel(spec_hash, arch,
                                     absl::StartsWith(f.target, "j-") ? f.target : "");
  if (!kernel.ok()) return s.Fail(kernel.status());
  std::map<std::string, std::string> out = {{"kernel.cuir", kernel->cuir()},
                                            {"kernel.cu", kernel->cuda_source()},
                                            {"kernel.h", kernel->launcher_header()},
                                            {"report.json", kernel->report_json()}};
  // The backward kernel, where the service made one (the report's `backward` says why not).
  if (!kernel->backward_cuda_source().empty()) {
    out["kernel_bwd.cuir"] = kernel->backward_cuir();
    out["kernel_bwd.cu"] = kernel->backward_cuda_source();
    out["kernel_bwd.h"] = kernel->backward_launcher_header();
  }
  // The compiled module, where the service kept one: a plain file name, never a path.
  const std::string& module = kernel->module_file();
  if (!module.empty() && module.find('/') == std::string::npos && module[0] != '.') {
    out[module] = kernel->module_image();
    out[module + ".json"] = nlohmann::json(std::map<std::string, std::string>(
                                               kernel->module_symbols().begin(),
                                               kernel->module_symbols().end()))
                                .dump();
  }
  const absl::Status written = files::PublishFiles(f.out, out);
  if (!written.ok()) return s.Fail(written);
  if (s.json()) {
    // The files are in the directory; the line carries what identifies them.
    v1::Kernel summary = *kernel;
    summary.clear_cuir();
    summary.clear_cuda_source();
    summary.clear_launcher_header();
    summary.clear_report_json();
    summary.clear_module_image();
    summary.clear_module_symbols();
    summary.clear_backward_cuir();
    summary.clear_backward_cuda_source();
    summary.clear_backward_launcher_header();
    PrintJson(summary);
  } else {
    std::printf("kernel for spec %s on %s (ruleset %s), %s: kernel.cuir, kernel.cu, kernel.h, "
                "report.json%s in %s\n",
                spec_hash.c_str(), arch.c_str(), kernel->ruleset().c_str(),
                VerificationText(kernel->verification()).c_str(),
                kernel->backward_cuda_source().empty() ? "" : ", kernel_bwd.{cuir,cu,h}",
                f.out.c_str());
  }
  return kOk;
}

// ---- transcript ---------------------------------------------------------------------------------

struct TranscriptFlags {
  std::string target;  // a job id, or a file `adapt --local --transcript FILE` wrote
};

void AddTranscriptFlags(CLI::App* cmd, TranscriptFlags& f) {
  cmd->add_option("target", f.target,
                  "Job id (j-...), or a transcript file written by `adapt --local --transcript`")
      ->required();
}

bool IsFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

int ShowTranscript(Session& s, const nlohmann::json& transcript) {
  if (s.json()) {
    std::printf("%s\n", transcript.dump().c_str());
  } else {
    std::printf("%s", llm::RenderTranscript(transcript).c_str());
  }
  std::fflush(stdout);
  return kOk;
}

int RunLocalTranscript(Session& s, const std::string& path) {
  auto text = files::ReadFile(path);
  if (!text.ok()) return s.UsageError(text.status());
  const auto transcript = nlohmann::json::parse(*text, nullptr, false);
  if (transcript.is_discarded() || !transcript.is_array()) {
    return s.UsageError(absl::InvalidArgumentError(absl::StrCat(
        path, ": not a transcript (a JSON array of turns, as `adapt --local --transcript FILE` "
              "writes it)")));
  }
  return ShowTranscript(s, transcript);
}

int RunTranscript(Session& s, const TranscriptFlags& f) {
  auto text = s.client().Transcript(f.target);
  if (!text.ok()) return s.Fail(text.status());
  if (text->empty()) {
    // Say why there is none: the job decides, so ask for it.
    auto job = s.client().Get(f.target);
    if (!job.ok()) return s.Fail(job.status());
    const std::string proposer = job->proposer().empty() ? "rules" : job->proposer();
    std::string why;
    if (proposer == "rules") {
      why = "its proposer is the rules (submit with --proposer llm or hybrid to involve a model)";
    } else if (job->cache_hit()) {
      why = "it was answered from the kernel cache";
    } else if (!IsTerminal(job->state()) && job->state() != v1::JOB_STATE_RUNNING) {
      why = absl::StrCat("it is ", StateName(job->state()), " and its transfer has not run yet",
                         job->waiting_for().empty() ? "" : " (" + job->waiting_for() + ")");
    } else if (proposer == "hybrid") {
      why = "the rules covered its spec, or its transfer has not ended yet";
    } else {
      why = "its transfer has not ended yet";
    }
    return s.Fail(absl::NotFoundError(
        absl::StrCat("job ", f.target, " has no LLM transcript: ", why)));
  }
  const auto transcript = nlohmann::json::parse(*text, nullptr, false);
  if (transcript.is_discarded()) {
    return s.Fail(absl::InternalError(
        absl::StrCat("job ", f.target, ": the stored transcript is not JSON")));
  }
  return ShowTranscript(s, transcript);
}

// Like Register, but a local file is shown without connecting: it needs no coordinator, and a
// broken token setting must not stand in its way.
Command RegisterTranscript(CLI::App& app, const std::shared_ptr<ConnectionFlags>& connection) {
  auto flags = std::make_shared<TranscriptFlags>();
  auto* cmd = app.add_subcommand(
      "transcript", "Show the LLM conversation of a job (or of an `adapt --local --transcript` file)");
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  AddTranscriptFlags(cmd, *flags);
  AddConnectionFlags(cmd, *connection);
  return {cmd, [=] {
            Session session("transcript", *connection);
            if (IsFile(flags->target)) return RunLocalTranscript(session, flags->target);
            if (!absl::StartsWith(flags->target, "j-")) {
              return session.UsageError(absl::InvalidArgumentError(absl::StrCat(
                  flags->target, " is neither a file nor a job id (j-...)")));
            }
            if (auto st = session.Connect(); !st.ok()) return session.UsageError(st);
            return RunTranscript(session, *flags);
          }};
}

// ---- list, workers ------------------------------------------------------------------------------

struct ListFlags {
  std::string state;
  int limit = 0;
};

void AddListFlags(CLI::App* cmd, ListFlags& f) {
  cmd->add_option("--state", f.state, "Only jobs in this state: queued, running, succeeded, "
                                      "failed or cancelled");
  cmd->add_option("--limit", f.limit, "At most this many, newest first (default 50)")
      ->check(CLI::NonNegativeNumber);
}

absl::StatusOr<v1::JobState> ParseState(const std::string& name) {
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  if (name.empty()) return state;
  if (v1::JobState_Parse("JOB_STATE_" + absl::AsciiStrToUpper(name), &state) &&
      state != v1::JOB_STATE_UNSPECIFIED) {
    return state;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--state must be queued, running, succeeded, failed or cancelled, got '", name, "'"));
}

int RunList(Session& s, const ListFlags& f) {
  auto state = ParseState(f.state);
  if (!state.ok()) return s.UsageError(state.status());
  auto jobs = s.client().List(f.limit, *state);
  if (!jobs.ok()) return s.Fail(jobs.status());
  if (s.json()) {
    v1::ListJobsResponse response;
    for (auto& job : *jobs) *response.add_jobs() = std::move(job);
    PrintJson(response);
  } else {
    PrintJobTable(*jobs);
  }
  return kOk;
}

struct NoFlags {};
void AddNoFlags(CLI::App*, NoFlags&) {}

int RunWorkers(Session& s, const NoFlags&) {
  auto workers = s.client().Workers();
  if (!workers.ok()) return s.Fail(workers.status());
  if (s.json()) {
    v1::ListWorkersResponse response;
    for (auto& w : *workers) *response.add_workers() = std::move(w);
    PrintJson(response);
  } else {
    PrintWorkerTable(*workers);
  }
  return kOk;
}

}  // namespace

std::vector<Command> AddServiceCommands(CLI::App& app) {
  auto c = std::make_shared<ConnectionFlags>();
  return {
      Register(app, c, "submit", "Submit an adaptation job to the CuBridge service",
               AddSubmitFlags, RunSubmit),
      Register(app, c, "status", "Show a job: state, spec hash, archs, errors, events",
               AddJobFlags, RunStatus),
      Register(app, c, "watch", "Follow a job's stages until it ends (exit 1 unless it succeeded)",
               AddJobFlags, RunWatch),
      Register(app, c, "get", "Fetch a verified kernel's files from the service", AddGetFlags,
               RunGet),
      Register(app, c, "list", "List jobs, newest first", AddListFlags, RunList),
      Register(app, c, "cancel", "Cancel a job", AddJobFlags, RunCancel),
      Register(app, c, "workers", "List the registered workers", AddNoFlags, RunWorkers),
      RegisterTranscript(app, c),
  };
}

}  // namespace cubridge::cli
