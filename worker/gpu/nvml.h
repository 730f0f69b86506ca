// NVML (the driver's libnvidia-ml.so.1), loaded at run time as the CUDA driver is (driver.h), for
// what a profile records of the GPU it ran on: the SM clock against its maximum (a throttled or
// idle-clocked GPU times slow) and whether other processes were computing on it (two workers, or
// anyone else, sharing a GPU disturb each other's timings). A machine without NVML gets a sample
// that says so, not an error: profiling does not depend on it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace cubridge::gpu {

struct GpuActivity {
  bool available = false;
  std::string unavailable;  // why not, when not available
  int sm_clock_mhz = 0, max_sm_clock_mhz = 0;
  int utilization_percent = -1;  // NVML's last sample period; -1 unknown
  // Processes with a compute context on the GPU besides this one (NVML's count less this
  // process's, which has one while it profiles); -1 unknown.
  int other_processes = -1;
  nlohmann::json ToJson() const;
};

// The GPU of `uuid` ("GPU-...") now.
GpuActivity SampleGpuActivity(const std::string& uuid);

}  // namespace cubridge::gpu
