// What CuBridge says to a language model, and how it reads the answer. Kept apart from the loop
// (llm_proposer.cc) so the wording can be reviewed and tested on its own.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cuir/ir/config.h"
#include "cuir/ir/program.h"
#include "cuir/spec/spec.h"

namespace cubridge::propose {

// The CuIR language reference (docs/cuir.md) the model is given; read once per process.
absl::StatusOr<std::string> CuirReference();

// The system message: the model's job, the reply format, and the CuIR reference.
std::string SystemPrompt(const std::string& cuir_reference);
// Same, with the reference replaced by a one-line mention: what transcripts store.
std::string SystemPromptForTranscript(const std::string& cuir_reference);

// Lift: the model's job is to describe a user's CUDA kernel as a base program.
std::string LiftSystemPrompt(const std::string& cuir_reference);
std::string LiftSystemPromptForTranscript(const std::string& cuir_reference);

// The first user message of a lift: the kernel's source, the expert name the program must
// declare, an expert's base program as an example of the form, and the shapes it is checked at.
std::string LiftPrompt(const std::string& kernel_path, const std::string& kernel_source,
                       const std::string& name, const cuir::Program& example,
                       const cuir::AttentionConfig& config);

// The first user message of a transfer: the base program, the spec as the user wrote it with this
// job's parameter values, the job's configuration, and why the rules did not do it ("" when the
// rules were not asked).
std::string TransferPrompt(const cuir::Program& base, const spec::Spec& spec,
                           const cuir::AttentionConfig& config, const std::string& rules_said);

// The message after a rejected proposal: the exact error and what to send back.
std::string Feedback(int round, int max_rounds, const std::string& stage, const std::string& error);

// The program text of a reply: the last ```cuir fenced block, else the last fenced block that
// starts with `cuir 1`, else the whole reply when it starts with `cuir 1`. Nothing else is taken:
// NOT_FOUND says what was expected.
absl::StatusOr<std::string> ExtractProgram(const std::string& reply);

}  // namespace cubridge::propose
