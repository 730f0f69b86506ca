#include "client/cli/common.h"

#include <cstdio>

namespace cubridge::cli {

int ParseAndRun(CLI::App& app, const std::vector<Command>& commands, int argc, char** argv) {
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

void PrintStageLine(const std::string& stage, bool ok, double seconds, const std::string& detail) {
  std::printf("[%-8s] %-4s %7.3fs  %s\n", stage.c_str(), ok ? "ok" : "FAIL", seconds,
              detail.c_str());
  // Lines are live progress: a pipe to `tee` or a log must see each one as it happens.
  std::fflush(stdout);
}

}  // namespace cubridge::cli
