#include "cuir/files/files.h"

#include <ftw.h>
#include <cstdio>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_format.h"

namespace cubridge::files {
namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return absl::NotFoundError(absl::StrFormat("%s: no such file", path));
  }
  if (fs::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: is a directory, expected a file", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: cannot be read (check its permissions)", path));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status PublishFiles(const std::string& dir, const std::map<std::string, std::string>& files) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: cannot create the output directory: %s", dir, ec.message()));
  }
  const std::string suffix = absl::StrFormat(".tmp-%d", getpid());
  std::vector<fs::path> staged;
  auto cleanup = [&] {
    for (const auto& p : staged) std::remove(p.c_str());
  };
  for (const auto& [name, content] : files) {
    fs::path tmp = fs::path(dir) / (name + suffix);
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
    out.close();
    staged.push_back(tmp);
    if (!out) {
      cleanup();
      return absl::InternalError(absl::StrFormat("%s: write failed", tmp.string()));
    }
  }
  for (const auto& [name, content] : files) {
    fs::rename(fs::path(dir) / (name + suffix), fs::path(dir) / name, ec);
    if (ec) {
      cleanup();
      return absl::InternalError(absl::StrFormat("%s/%s: rename failed: %s", dir, name,
                                                 ec.message()));
    }
  }
  return absl::OkStatus();
}

std::optional<std::map<std::string, std::string>> ReadDir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp-") != std::string::npos) continue;
    auto content = ReadFile(entry.path().string());
    if (!content.ok()) return std::nullopt;
    files[name] = *content;
  }
  return files;
}

void RemoveTree(const std::string& path) {
  nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p), 0; }, 16,
      FTW_DEPTH | FTW_PHYS);
}

}  // namespace cubridge::files
