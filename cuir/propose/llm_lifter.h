// Lift by LLM: a user's CUDA attention kernel (following the launcher ABI, docs/llm.md) in, the
// base CuIR program that describes it out. The model proposes; a proposal is accepted only when
// the interpreter running it and the user's kernel compiled and run on a GPU agree on random
// inputs at ragged shapes. Without a GPU nothing is accepted.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "cuir/ir/config.h"
#include "cuir/ir/program.h"
#include "cuir/propose/conversation.h"

namespace cubridge::propose {

// Runs the user's kernel against the interpretation of a program. On a GPU:
// gpu::UserKernelComparator (worker/gpu/user_kernel.h).
class KernelComparator {
 public:
  virtual ~KernelComparator() = default;
  // Compiles the kernel for the GPU here. An error is the user's to fix (the compiler's log, with
  // the kernel file's line numbers), so it comes before any question to the model.
  virtual absl::Status Prepare() = 0;
  // "NVIDIA H100 80GB HBM3 (sm_90)", after Prepare.
  virtual std::string device() const = 0;
  // The kernel against the interpreter running `program` with fresh random inputs (`seed`): the
  // check's report: "passed", and "failure" / "verification" when it ran, "error" when the
  // kernel could not be run (crash, hang, a launch plan that refuses the shape).
  virtual absl::StatusOr<nlohmann::json> Compare(const cuir::Program& program, uint64_t seed) = 0;
};

struct LiftRequest {
  std::string kernel_path;    // for the prompt and messages
  std::string kernel_source;  // as the user wrote it
  std::string name;           // the `expert` name the program must declare
  cuir::AttentionConfig config;
  uint64_t seed = 1;
  // Null: the CPU checks only (a dry run for prompts and endpoints): a proposal that passes them
  // is still not accepted, and the outcome says so.
  KernelComparator* gpu = nullptr;
  std::function<void(const std::string&)> progress;
};

struct LiftOutcome {
  absl::Status status;
  cuir::Program program;            // the accepted base program (status OK)
  nlohmann::json gpu_check;         // the comparison that accepted it
  std::vector<std::string> checks;  // what the accepted program passed, one line each
  int accepted_round = 0;
  nlohmann::json transcript = nlohmann::json::array();
  nlohmann::json usage;
};

LiftOutcome LiftWithModel(const LlmSettings& settings, const LiftRequest& request);

// The report.json of a lift: kernel, name, device, checks, the GPU comparison, LLM usage.
nlohmann::json LiftReport(const LiftRequest& request, const LiftOutcome& outcome,
                          const std::string& device);

}  // namespace cubridge::propose
