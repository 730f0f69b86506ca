// Small file utilities with the guarantees the pipeline promises: whole-file writes that never
// leave a half-written file, directory publication that never leaves a half-filled output.
// Free of LibTorch, so the service commands of cubridge-cli use them without loading it.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace cubridge::files {

absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `files` (name -> content) into `dir`, creating it if needed. Each file is written to a
// temporary name in the same directory and renamed into place, so a reader sees either the old
// or the new content; on error, nothing of the new set is left behind.
absl::Status PublishFiles(const std::string& dir, const std::map<std::string, std::string>& files);

// Reads every regular file of `dir` (non-recursive); nullopt if the directory does not exist.
std::optional<std::map<std::string, std::string>> ReadDir(const std::string& dir);

// Deletes a folder and everything in it (errors ignored). Not std::filesystem::remove_all: a
// CUDA LibTorch exports its own copy of that symbol, which crashes when it wins the lookup.
void RemoveTree(const std::string& path);

}  // namespace cubridge::files
