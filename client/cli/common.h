// What the subcommands of cubridge-cli share: how a command plugs into main(), how a stage line
// looks (the same for `adapt --local` and for a job followed on the service).
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace cubridge::cli {

// A registered subcommand and what runs it once the command line parsed into its flags; run
// returns the process exit code.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// "[transfer] ok       0.012s  detail"
void PrintStageLine(const std::string& stage, bool ok, double seconds, const std::string& detail);

}  // namespace cubridge::cli
