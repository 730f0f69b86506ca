// cubridge-cli is two executables. adapt and lift run the pipeline in this process, so they link
// LibTorch, whose shared libraries take about half a second to load; they live in
// cubridge-cli-local. cubridge-cli, the one users run, links no LibTorch: it has the service
// commands itself, lists adapt and lift in its --help, and hands them over to cubridge-cli-local
// with execv, so their arguments, exit codes, standard streams and signals are the same as if it
// ran them itself.
#pragma once

#include <CLI/CLI.hpp>

namespace cubridge::cli {

// Adds adapt and lift to `app` with their one-line help (kAdaptSummary, kLiftSummary) and no
// flags, so that --help lists them: their flags are cubridge-cli-local's, which prints them for
// `cubridge-cli adapt --help`.
void ListLocalCommands(CLI::App& app);

// Whether `command` (argv[1]) runs in cubridge-cli-local.
bool IsLocalCommand(const char* command);

// Replaces this process with cubridge-cli-local, given `argv` unchanged (argv[1] is the command).
// It is looked for beside this executable (an install puts both in one bin/), then where this
// build tree put it. Returns only when neither runs, after saying where it looked; the result is
// the exit code.
int ExecLocal(char** argv);

}  // namespace cubridge::cli
