// cubridge-cli: the command-line front of CuBridge.
//   cubridge-cli adapt SPEC --local [config flags] --arch sm_80|sm_90 --out DIR   (adapt_command)
//   cubridge-cli lift KERNEL.cu --out DIR [config flags] --llm-...                (lift_command)
//   cubridge-cli submit | status | watch | get | list | cancel | workers        (service_commands)
#include <vector>

#include <CLI/CLI.hpp>

#include "client/cli/adapt_command.h"
#include "client/cli/common.h"
#include "client/cli/lift_command.h"
#include "client/cli/service_commands.h"

int main(int argc, char** argv) {
  CLI::App app{"CuBridge: adapt expert attention kernels to your attention variant"};
  app.require_subcommand(1);
  std::vector<cubridge::cli::Command> commands = {cubridge::cli::AddAdaptCommand(app),
                                                  cubridge::cli::AddLiftCommand(app)};
  for (auto& command : cubridge::cli::AddServiceCommands(app)) commands.push_back(command);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a "parse error" that exits 0; every real one is bad usage.
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (const auto& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  return 2;
}
