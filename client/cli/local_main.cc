// cubridge-cli-local: the commands of cubridge-cli that run the pipeline in this process and so
// link LibTorch (local_handoff.h says why they are an executable of their own). cubridge-cli runs
// it for them with the user's arguments unchanged; run by hand, it works the same.
//   cubridge-cli adapt SPEC --local [config flags] --arch sm_80|sm_90 --out DIR   (adapt_command)
//   cubridge-cli lift KERNEL.cu --out DIR [config flags] --llm-...                (lift_command)
#include <CLI/CLI.hpp>

#include "client/cli/adapt_command.h"
#include "client/cli/common.h"
#include "client/cli/lift_command.h"

int main(int argc, char** argv) {
  CLI::App app{"CuBridge: the commands of cubridge-cli that run the pipeline in this process"};
  app.require_subcommand(1);
  return cubridge::cli::ParseAndRun(
      app, {cubridge::cli::AddAdaptCommand(app), cubridge::cli::AddLiftCommand(app)}, argc, argv);
}
