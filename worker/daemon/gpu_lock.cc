#include "worker/daemon/gpu_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cubridge::workerd {

absl::StatusOr<GpuLock> GpuLock::Acquire(const std::string& dir, const std::string& gpu_uuid) {
  if (gpu_uuid.empty()) return absl::InvalidArgumentError("a GPU lock needs the GPU's UUID");
  const std::string path = absl::StrCat(dir, "/cubridge-gpu-", gpu_uuid, ".lock");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open the GPU lock ", path, ": ", std::strerror(errno),
        " (--gpu-lock-dir names a writable folder shared by the workers of this machine)"));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
    }
    const std::string pid(absl::StripAsciiWhitespace(std::string(holder, n > 0 ? n : 0)));
    return absl::FailedPreconditionError(absl::StrCat(
        "GPU ", gpu_uuid, " is driven by another cubridge-worker on this machine",
        pid.empty() ? "" : absl::StrCat(" (pid ", pid, ")"), ", which holds ", path,
        ": give each worker its own GPU (--gpu N), or pass --share-gpu to let them share it "
        "(their profiles may then disturb each other)"));
  }
  // The pid is for a refused worker's message only: the lock holds without it.
  const std::string me = absl::StrCat(::getpid(), "\n");
  const bool written = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, me.data(), me.size(), 0) > 0;
  (void)written;
  return GpuLock(fd, path);
}

GpuLock::GpuLock(GpuLock&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

GpuLock& GpuLock::operator=(GpuLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

GpuLock::~GpuLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace cubridge::workerd
