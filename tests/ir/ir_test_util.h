// Shared helpers for the ir tests: reading files of the source tree.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace cubridge::cuir::testing {

inline std::string SourcePath(const std::string& relative) {
  return std::string(CUBRIDGE_SOURCE_ROOT) + "/" + relative;
}

inline std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The canonical printed form of a hand-written canonical file: the file minus its comment lines.
inline std::string WithoutCommentLines(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line[first] == '#') continue;
    out += line + "\n";
  }
  return out;
}

// Replaces the one occurrence of `from`; a missing or ambiguous anchor fails the test, so an
// edit can never silently leave the program it edits unchanged.
inline std::string ReplaceOnce(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "anchor not found: " << from;
  if (at == std::string::npos) return text;
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << "anchor not unique: " << from;
  return text.replace(at, from.size(), to);
}

}  // namespace cubridge::cuir::testing
