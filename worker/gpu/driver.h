// The CUDA driver API, loaded at run time (dlopen of libcuda.so.1): a CPU-only machine runs every
// binary and simply finds no GPU, and nothing links against the toolkit's libcuda stub (which
// would shadow the real driver on a GPU machine).
#pragma once

#include <cuda.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cubridge::gpu {

struct Driver {
  decltype(&::cuInit) Init;
  decltype(&::cuGetErrorString) GetErrorString;
  decltype(&::cuDeviceGetCount) DeviceGetCount;
  decltype(&::cuDeviceGet) DeviceGet;
  decltype(&::cuDeviceGetName) DeviceGetName;
  decltype(&::cuDeviceGetUuid) DeviceGetUuid;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute;
  decltype(&::cuDeviceTotalMem) DeviceTotalMem;
  decltype(&::cuDriverGetVersion) DriverGetVersion;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent;
  decltype(&::cuCtxSynchronize) CtxSynchronize;
  decltype(&::cuCtxGetDevice) CtxGetDevice;
  decltype(&::cuModuleLoadDataEx) ModuleLoadDataEx;
  decltype(&::cuModuleUnload) ModuleUnload;
  decltype(&::cuModuleGetFunction) ModuleGetFunction;
  decltype(&::cuFuncSetAttribute) FuncSetAttribute;
  decltype(&::cuFuncGetAttribute) FuncGetAttribute;
  decltype(&::cuLaunchKernel) LaunchKernel;
  decltype(&::cuEventCreate) EventCreate;
  decltype(&::cuEventDestroy) EventDestroy;
  decltype(&::cuEventRecord) EventRecord;
  decltype(&::cuEventSynchronize) EventSynchronize;
  decltype(&::cuEventElapsedTime) EventElapsedTime;
  decltype(&::cuMemcpyDtoH) MemcpyDtoH;
  decltype(&::cuMemcpyHtoD) MemcpyHtoD;
  // TMA tensor maps a plan-version-2 kernel asks for (module.h, EncodeTmaMaps).
  decltype(&::cuTensorMapEncodeTiled) TensorMapEncodeTiled;
  // The PyTorch op refuses to run a launch plan inside a CUDA graph capture (client/torch).
  decltype(&::cuStreamIsCapturing) StreamIsCapturing;

  // The loaded driver after cuInit(0), or FAILED_PRECONDITION ("no CUDA driver: ...").
  static absl::StatusOr<const Driver*> Get();
  // "cuLaunchKernel: an illegal memory access was encountered (CUDA_ERROR_ILLEGAL_ADDRESS)".
  absl::Status Check(CUresult rc, const char* what) const;
};

struct DeviceInfo {
  int ordinal = 0;     // among the devices this process sees (CUDA_VISIBLE_DEVICES narrows them)
  std::string name;
  std::string uuid;    // "GPU-8f3a...", as nvidia-smi and CUDA_VISIBLE_DEVICES spell it
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
  int max_smem_per_block = 0;  // opt-in dynamic shared memory
  int driver_version = 0;
  std::string Arch() const;    // "sm_90"
};

// NOT_FOUND when the driver loads but the machine has no such GPU.
absl::StatusOr<DeviceInfo> ProbeDevice(int ordinal = 0);
// Every GPU this process sees, by ordinal (none: an empty list).
absl::StatusOr<std::vector<DeviceInfo>> ProbeDevices();
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" of a device's 16 UUID bytes.
std::string FormatGpuUuid(const unsigned char (&bytes)[16]);

// Makes the device's primary context (the one LibTorch uses too) current on this thread.
absl::Status UsePrimaryContext(int ordinal = 0);

}  // namespace cubridge::gpu
