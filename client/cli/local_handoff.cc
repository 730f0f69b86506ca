#include "client/cli/local_handoff.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "client/cli/adapt_command.h"
#include "client/cli/lift_command.h"

namespace cubridge::cli {
namespace {

struct LocalCommand {
  const char* name;
  const char* summary;
};
constexpr LocalCommand kLocalCommands[] = {{"adapt", kAdaptSummary}, {"lift", kLiftSummary}};

constexpr char kLocalBinary[] = "cubridge-cli-local";

struct Place {
  const char* where;
  std::string path;
};

// Where cubridge-cli-local may be, in the order tried.
std::vector<Place> LocalBinaryPlaces() {
  std::vector<Place> places;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    places.push_back({"beside this executable", (self.parent_path() / kLocalBinary).string()});
  }
  if (places.empty() || places[0].path != CUBRIDGE_CLI_LOCAL_PATH) {
    places.push_back({"where this build put it", CUBRIDGE_CLI_LOCAL_PATH});
  }
  return places;
}

}  // namespace

void ListLocalCommands(CLI::App& app) {
  for (const auto& command : kLocalCommands) app.add_subcommand(command.name, command.summary);
}

bool IsLocalCommand(const char* command) {
  return std::any_of(std::begin(kLocalCommands), std::end(kLocalCommands),
                     [&](const LocalCommand& c) { return std::strcmp(c.name, command) == 0; });
}

int ExecLocal(char** argv) {
  std::string tried;
  for (const Place& place : LocalBinaryPlaces()) {
    execv(place.path.c_str(), argv);  // returns only when it could not run this one
    tried += std::string("\n  ") + place.where + ": " + place.path + " (" + std::strerror(errno) +
             ")";
  }
  std::cerr << "cubridge-cli " << argv[1] << ": " << argv[1] << " runs in " << kLocalBinary
            << " (the part of cubridge-cli that links LibTorch), which could not be run:" << tried
            << "\n  Build it (`cmake --build BUILD --target cubridge-cli` builds both), or install "
               "it beside cubridge-cli (`cmake --install BUILD` installs both).\n";
  return 1;
}

}  // namespace cubridge::cli
