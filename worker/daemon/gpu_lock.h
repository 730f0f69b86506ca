// One worker per GPU: a worker holds an exclusive lock on a file named for its GPU's UUID for as
// long as it runs, so a second worker started on the same GPU of this machine (by hand, or two
// `local-cluster` workers without --gpu) refuses to start instead of profiling beside the first,
// whose timings the autotuner would then trust. flock(2): the kernel drops the lock with the
// process, however it ends, so a crashed worker leaves nothing to clean up.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace cubridge::workerd {

class GpuLock {
 public:
  // Takes DIR/cubridge-gpu-UUID.lock, writing this process's pid into it. FAILED_PRECONDITION
  // naming the file and the holder's pid when another process holds it; the file's error when
  // it cannot be opened (a missing or unwritable DIR).
  static absl::StatusOr<GpuLock> Acquire(const std::string& dir, const std::string& gpu_uuid);

  GpuLock(GpuLock&& other) noexcept;
  GpuLock& operator=(GpuLock&& other) noexcept;
  GpuLock(const GpuLock&) = delete;
  GpuLock& operator=(const GpuLock&) = delete;
  ~GpuLock();

  const std::string& path() const { return path_; }

 private:
  GpuLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace cubridge::workerd
