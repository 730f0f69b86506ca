// cubridge-cli: the command-line front of CuBridge, the executable users run.
//   cubridge-cli adapt SPEC --local [config flags] --arch sm_80|sm_90 --out DIR
//   cubridge-cli lift KERNEL.cu --out DIR [config flags] --llm-...
//       (both in cubridge-cli-local: adapt_command, lift_command)
//   cubridge-cli submit | status | watch | get | list | cancel | workers | transcript
//       (service_commands)
// It links no LibTorch, so the service commands and --help start at once; adapt and lift, which
// need it, run in cubridge-cli-local (local_handoff.h).
#include <CLI/CLI.hpp>

#include "client/cli/common.h"
#include "client/cli/local_handoff.h"
#include "client/cli/service_commands.h"

int main(int argc, char** argv) {
  // The top level takes no flag but --help, so a command is argv[1]. adapt and lift go over
  // before any parsing: cubridge-cli-local sees their arguments, --help included, as typed.
  if (argc > 1 && cubridge::cli::IsLocalCommand(argv[1])) return cubridge::cli::ExecLocal(argv);
  CLI::App app{"CuBridge: adapt expert attention kernels to your attention variant"};
  app.require_subcommand(1);
  cubridge::cli::ListLocalCommands(app);
  return cubridge::cli::ParseAndRun(app, cubridge::cli::AddServiceCommands(app), argc, argv);
}
