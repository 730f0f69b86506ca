#include "service/contract/ids.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cubridge::contract {
namespace {

bool LowerHex(absl::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'); });
}

// Shown instead of the id itself when that is too long or not printable: a message is no place
// to echo arbitrary bytes back.
std::string Shown(absl::string_view id) {
  const bool printable = std::all_of(id.begin(), id.end(), [](char c) { return absl::ascii_isgraph(c); });
  if (printable && id.size() <= 80) return absl::StrCat("\"", id, "\"");
  return absl::StrCat("(", id.size(), " bytes)");
}

absl::Status Bad(absl::string_view what, absl::string_view id, absl::string_view form) {
  return absl::InvalidArgumentError(absl::StrCat(Shown(id), " is not ", what, ": ", form));
}

}  // namespace

const std::vector<std::string>& WorkerArchs() {
  static const std::vector<std::string> archs = {"cpu", "sm_80", "sm_90"};
  return archs;
}

absl::Status CheckJobId(absl::string_view id) {
  if (id.size() == 18 && absl::StartsWith(id, "j-") && LowerHex(id.substr(2))) return absl::OkStatus();
  return Bad("a job id", id, "job ids are j- and 16 hex digits, as submit printed (e.g. j-0123456789abcdef)");
}

absl::Status CheckSpecHash(absl::string_view hash) {
  if (hash.size() == 64 && LowerHex(hash)) return absl::OkStatus();
  return Bad("a spec hash", hash, "spec hashes are 64 lower-case hex digits (a job's spec_hash)");
}

absl::Status CheckWorkerId(absl::string_view id) {
  for (const std::string& arch : WorkerArchs()) {
    const std::string prefix = absl::StrCat("w-", arch, "-");
    if (id.size() == prefix.size() + 10 && absl::StartsWith(id, prefix) &&
        LowerHex(id.substr(prefix.size()))) {
      return absl::OkStatus();
    }
  }
  return Bad("a worker id", id, "worker ids are w-<arch>-<10 hex digits>, as Register returned");
}

absl::Status CheckTaskId(absl::string_view id) {
  const bool chars = std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.';
  });
  const bool known = absl::StartsWith(id, "lift-") || absl::StartsWith(id, "transfer-") ||
                     absl::StartsWith(id, "cand-") || absl::StartsWith(id, "liftllm-") ||
                     absl::StartsWith(id, "bwd-");
  if (chars && known && id.size() <= 256) return absl::OkStatus();
  return Bad("a task id", id,
             "task ids are lift-, transfer-, cand-, liftllm- or bwd- ids as a lease handed them out");
}

absl::Status CheckIdempotencyKey(absl::string_view key) {
  const bool chars = std::all_of(key.begin(), key.end(), [](char c) {
    return absl::ascii_isalnum(c) || absl::StrContains("._:@/+=-", c);
  });
  if (!key.empty() && key.size() <= 256 && chars) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "idempotency key ", Shown(key), " is not usable: keys are 1 to 256 characters of letters, "
      "digits and . _ : @ / + = -"));
}

std::optional<size_t> FirstInvalidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xe0) == 0xc0) {
      n = 1, cp = b & 0x1f, min = 0x80;
    } else if ((b & 0xf0) == 0xe0) {
      n = 2, cp = b & 0x0f, min = 0x800;
    } else if ((b & 0xf8) == 0xf0) {
      n = 3, cp = b & 0x07, min = 0x10000;
    } else {
      return i;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return i;
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += n + 1;
  }
  return std::nullopt;
}

absl::Status CheckUtf8(absl::string_view text, const std::string& file, const std::string& what) {
  const std::optional<size_t> bad = FirstInvalidUtf8(text);
  if (!bad) return absl::OkStatus();
  int line = 1, col = 1;
  for (size_t i = 0; i < *bad; ++i) {
    if (text[i] == '\n') {
      ++line, col = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xc0) != 0x80) {
      ++col;  // columns count characters, not the bytes that continue one
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s:%d:%d: byte 0x%02x is not UTF-8; the %s must be UTF-8 text (save the file as UTF-8, "
      "or remove the binary content)",
      file, line, col, static_cast<unsigned char>(text[*bad]), what));
}

const std::vector<std::string>& WorkerClasses() {
  static const std::vector<std::string> classes = [] {
    std::vector<std::string> out = WorkerArchs();
    out.emplace_back(kLlmClass);
    for (const std::string& arch : WorkerArchs()) {
      if (arch != "cpu") out.push_back(LlmGpuClass(arch));
    }
    return out;
  }();
  return classes;
}

}  // namespace cubridge::contract
