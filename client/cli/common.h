// What the subcommands of cubridge-cli share: how a command plugs into main(), how a stage line
// looks (the same for `adapt --local` and for a job followed on the service).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace cubridge::cli {

// A registered subcommand and what runs it once the command line parsed into its flags; run
// returns the process exit code.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// Parses the command line into `app` and runs the one of `commands` it names; returns the exit
// code: the command's, 0 for --help, 2 for bad usage.
int ParseAndRun(CLI::App& app, const std::vector<Command>& commands, int argc, char** argv);

// "[transfer] ok       0.012s  detail"
void PrintStageLine(const std::string& stage, bool ok, double seconds, const std::string& detail);

}  // namespace cubridge::cli
