#include "worker/gpu/nvml.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace cubridge::gpu {
namespace {

// The few NVML entry points used, with NVML's own C types spelled out (no nvml.h in the
// toolkit here): nvmlReturn_t is an int (0 success, 7 insufficient size), nvmlDevice_t a handle.
using NvmlDevice = void*;
constexpr int kNvmlSuccess = 0, kNvmlInsufficientSize = 7;
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM
struct NvmlUtilization {
  unsigned int gpu, memory;
};

struct Nvml {
  int (*Init)();
  int (*DeviceGetHandleByUUID)(const char*, NvmlDevice*);
  int (*DeviceGetClockInfo)(NvmlDevice, int, unsigned int*);
  int (*DeviceGetMaxClockInfo)(NvmlDevice, int, unsigned int*);
  int (*DeviceGetUtilizationRates)(NvmlDevice, NvmlUtilization*);
  // With a null buffer and *count 0: success when none, else "insufficient size" and the count.
  int (*DeviceGetComputeRunningProcesses)(NvmlDevice, unsigned int*, void*);
  std::string error;  // why it cannot be used
};

const Nvml& Load() {
  static const Nvml* const nvml = [] {
    auto* n = new Nvml{};
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      n->error = absl::StrCat("no NVML (dlopen libnvidia-ml.so.1: ", dlerror(), ")");
      return n;
    }
    auto sym = [&](const char* name) { return dlsym(lib, name); };
    n->Init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
    n->DeviceGetHandleByUUID =
        reinterpret_cast<int (*)(const char*, NvmlDevice*)>(sym("nvmlDeviceGetHandleByUUID"));
    n->DeviceGetClockInfo =
        reinterpret_cast<int (*)(NvmlDevice, int, unsigned int*)>(sym("nvmlDeviceGetClockInfo"));
    n->DeviceGetMaxClockInfo =
        reinterpret_cast<int (*)(NvmlDevice, int, unsigned int*)>(sym("nvmlDeviceGetMaxClockInfo"));
    n->DeviceGetUtilizationRates = reinterpret_cast<int (*)(NvmlDevice, NvmlUtilization*)>(
        sym("nvmlDeviceGetUtilizationRates"));
    n->DeviceGetComputeRunningProcesses = reinterpret_cast<int (*)(NvmlDevice, unsigned int*, void*)>(
        sym("nvmlDeviceGetComputeRunningProcesses_v3"));
    if (n->Init == nullptr || n->DeviceGetHandleByUUID == nullptr ||
        n->DeviceGetClockInfo == nullptr || n->DeviceGetMaxClockInfo == nullptr ||
        n->DeviceGetUtilizationRates == nullptr || n->DeviceGetComputeRunningProcesses == nullptr) {
      n->error = "NVML lacks an entry point it needs (an older driver)";
    } else if (int rc = n->Init(); rc != kNvmlSuccess) {
      n->error = absl::StrCat("nvmlInit failed (NVML error ", rc, ")");
    }
    return n;
  }();
  return *nvml;
}

}  // namespace

nlohmann::json GpuActivity::ToJson() const {
  if (!available) return {{"available", false}, {"unavailable", unavailable}};
  return {{"available", true},
          {"sm_clock_mhz", sm_clock_mhz},
          {"max_sm_clock_mhz", max_sm_clock_mhz},
          {"utilization_percent", utilization_percent},
          {"other_processes", other_processes}};
}

GpuActivity SampleGpuActivity(const std::string& uuid) {
  GpuActivity a;
  const Nvml& n = Load();
  if (!n.error.empty()) {
    a.unavailable = n.error;
    return a;
  }
  NvmlDevice dev = nullptr;
  if (int rc = n.DeviceGetHandleByUUID(uuid.c_str(), &dev); rc != kNvmlSuccess) {
    a.unavailable = absl::StrCat("NVML does not know GPU ", uuid, " (NVML error ", rc, ")");
    return a;
  }
  a.available = true;
  unsigned int clock = 0, max_clock = 0;
  if (n.DeviceGetClockInfo(dev, kNvmlClockSm, &clock) == kNvmlSuccess) a.sm_clock_mhz = clock;
  if (n.DeviceGetMaxClockInfo(dev, kNvmlClockSm, &max_clock) == kNvmlSuccess) {
    a.max_sm_clock_mhz = max_clock;
  }
  NvmlUtilization u{};
  if (n.DeviceGetUtilizationRates(dev, &u) == kNvmlSuccess) a.utilization_percent = u.gpu;
  unsigned int count = 0;
  const int rc = n.DeviceGetComputeRunningProcesses(dev, &count, nullptr);
  if (rc == kNvmlSuccess || rc == kNvmlInsufficientSize) {
    // This process holds a context while it profiles; NVML may not list it (a container's pid
    // namespace), so fewer than one is none.
    a.other_processes = count > 0 ? static_cast<int>(count) - 1 : 0;
  }
  return a;
}

}  // namespace cubridge::gpu
