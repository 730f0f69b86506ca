// The attention-config flags of `adapt` and `submit`: one definition, so both commands take the
// same spellings, defaults and value checks.
//   --batch --heads-q --heads-kv --head-dim --seqlen --seqlen-q --seqlen-kv --dtype --scale
//   --param NAME=VALUE --buffer NAME=SOURCE
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/status/statusor.h"
#include "cuir/ir/config.h"

namespace cubridge::cli {

struct ConfigFlags {
  cuir::AttentionConfig config;  // the pipeline's defaults until a flag sets a field
  std::string dtype = "bf16";
  int64_t seqlen = 0;  // --seqlen, applied where --seqlen-q / --seqlen-kv are not given
  std::vector<std::string> params;   // NAME=VALUE
  std::vector<std::string> buffers;  // NAME=SOURCE
  CLI::Option* seqlen_flag = nullptr;
  CLI::Option* seqlen_q_flag = nullptr;
  CLI::Option* seqlen_kv_flag = nullptr;
};

void AddConfigFlags(CLI::App* cmd, ConfigFlags& flags);

struct ResolvedConfig {
  cuir::AttentionConfig attention;
  std::vector<std::pair<std::string, std::string>> params;  // in the order given
  std::map<std::string, std::string> buffers;  // NAME -> SOURCE; a repeated NAME takes the last
};

// INVALID_ARGUMENT naming the flag and the accepted form when a value is malformed.
absl::StatusOr<ResolvedConfig> ResolveConfig(const ConfigFlags& flags);

}  // namespace cubridge::cli
