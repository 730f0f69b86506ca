#include "server/store/tensors.h"

#include "absl/strings/str_cat.h"

namespace cubridge::store {
namespace {

std::string TensorKey(const std::string& sha256) { return "cubridge:tensor:" + sha256; }

}  // namespace

absl::Status TensorStore::Put(const std::string& sha256, const std::string& bytes) {
  // A value many jobs send (a shared mask, a retried submit) is written once: when the key is
  // there, only its expiry moves.
  auto kept = redis_->Command({"PEXPIRE", TensorKey(sha256), absl::StrCat(retention_.count())});
  if (!kept.ok()) return kept.status();
  if (kept->integer == 1) return absl::OkStatus();
  auto set = redis_->Command({"SET", TensorKey(sha256), bytes, "PX", absl::StrCat(retention_.count())});
  return set.ok() ? absl::OkStatus() : set.status();
}

absl::Status TensorStore::Keep(const std::vector<std::string>& digests) {
  for (const std::string& d : digests) {
    auto r = redis_->Command({"PEXPIRE", TensorKey(d), absl::StrCat(retention_.count())});
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> TensorStore::Get(const std::string& sha256) {
  auto r = redis_->Command({"GET", TensorKey(sha256)});
  if (!r.ok()) return r.status();
  if (r->is_nil()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(r->str));
}

}  // namespace cubridge::store
