// Bearer tokens: clients and workers hold different ones, so a leaked client token cannot
// complete tasks and a worker token cannot submit jobs. Every call carries
// `authorization: Bearer <token>`; anything else is UNAUTHENTICATED.
#pragma once

#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace cubridge::coordinator {

class TokenSet {
 public:
  TokenSet() = default;
  explicit TokenSet(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}
  // Tokens from a file (one per line, '#' comments) and/or a comma-separated list; a missing or
  // unreadable file is an error naming it.
  static absl::StatusOr<TokenSet> Load(const std::string& file, const std::string& inline_list);
  bool empty() const { return tokens_.empty(); }
  grpc::Status Check(const grpc::ServerContext* context, const std::string& who) const;

 private:
  std::vector<std::string> tokens_;
};

}  // namespace cubridge::coordinator
