#include "server/coordinator/auth.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace cubridge::coordinator {
namespace {

// Compares without an early exit, so timing does not tell how much of a guess was right.
bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::StatusOr<TokenSet> TokenSet::Load(const std::string& file, const std::string& inline_list) {
  std::vector<std::string> tokens;
  for (absl::string_view t : absl::StrSplit(inline_list, ',', absl::SkipWhitespace())) {
    tokens.emplace_back(absl::StripAsciiWhitespace(t));
  }
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read the token file ", file));
    std::string line;
    while (std::getline(in, line)) {
      absl::string_view t = absl::StripAsciiWhitespace(line);
      if (!t.empty() && t[0] != '#') tokens.emplace_back(t);
    }
  }
  return TokenSet(std::move(tokens));
}

grpc::Status TokenSet::Check(const grpc::ServerContext* context, const std::string& who) const {
  const auto& md = context->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("missing `authorization: Bearer <token>` metadata: this call "
                                     "needs a ", who, " token"));
  }
  const std::string header(it->second.data(), it->second.size());
  absl::string_view value = header;
  if (!absl::ConsumePrefix(&value, "Bearer ")) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the authorization metadata must be `Bearer <token>`");
  }
  for (const std::string& t : tokens_) {
    if (SameToken(t, std::string(value))) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      absl::StrCat("the token is not a valid ", who, " token"));
}

}  // namespace cubridge::coordinator
