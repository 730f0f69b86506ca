#include "client/cli/common.h"

#include <cstdio>

namespace cubridge::cli {

void PrintStageLine(const std::string& stage, bool ok, double seconds, const std::string& detail) {
  std::printf("[%-8s] %-4s %7.3fs  %s\n", stage.c_str(), ok ? "ok" : "FAIL", seconds,
              detail.c_str());
  // Lines are live progress: a pipe to `tee` or a log must see each one as it happens.
  std::fflush(stdout);
}

}  // namespace cubridge::cli
