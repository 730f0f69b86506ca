#include "worker/gpu/driver.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace cubridge::gpu {
namespace {

// cuda.h maps API names to their current versions (cuMemcpyDtoH -> cuMemcpyDtoH_v2): expanding
// the name before stringifying asks the library for the same version the header declares.
#define CUBRIDGE_STR2(x) #x
#define CUBRIDGE_STR(x) CUBRIDGE_STR2(x)

absl::StatusOr<Driver> Load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA driver on this machine (dlopen libcuda.so.1: ", dlerror(), ")"));
  }
  Driver d{};
  std::string missing;
#define CUBRIDGE_LOAD(field, fn)                                                  \
  d.field = reinterpret_cast<decltype(d.field)>(dlsym(lib, CUBRIDGE_STR(fn)));    \
  if (d.field == nullptr) absl::StrAppend(&missing, " ", CUBRIDGE_STR(fn));
  CUBRIDGE_LOAD(Init, cuInit)
  CUBRIDGE_LOAD(GetErrorString, cuGetErrorString)
  CUBRIDGE_LOAD(DeviceGetCount, cuDeviceGetCount)
  CUBRIDGE_LOAD(DeviceGet, cuDeviceGet)
  CUBRIDGE_LOAD(DeviceGetName, cuDeviceGetName)
  CUBRIDGE_LOAD(DeviceGetUuid, cuDeviceGetUuid)
  CUBRIDGE_LOAD(DeviceGetAttribute, cuDeviceGetAttribute)
  CUBRIDGE_LOAD(DeviceTotalMem, cuDeviceTotalMem)
  CUBRIDGE_LOAD(DriverGetVersion, cuDriverGetVersion)
  CUBRIDGE_LOAD(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)
  CUBRIDGE_LOAD(CtxSetCurrent, cuCtxSetCurrent)
  CUBRIDGE_LOAD(CtxSynchronize, cuCtxSynchronize)
  CUBRIDGE_LOAD(CtxGetDevice, cuCtxGetDevice)
  CUBRIDGE_LOAD(ModuleLoadDataEx, cuModuleLoadDataEx)
  CUBRIDGE_LOAD(ModuleUnload, cuModuleUnload)
  CUBRIDGE_LOAD(ModuleGetFunction, cuModuleGetFunction)
  CUBRIDGE_LOAD(FuncSetAttribute, cuFuncSetAttribute)
  CUBRIDGE_LOAD(FuncGetAttribute, cuFuncGetAttribute)
  CUBRIDGE_LOAD(LaunchKernel, cuLaunchKernel)
  CUBRIDGE_LOAD(EventCreate, cuEventCreate)
  CUBRIDGE_LOAD(EventDestroy, cuEventDestroy)
  CUBRIDGE_LOAD(EventRecord, cuEventRecord)
  CUBRIDGE_LOAD(EventSynchronize, cuEventSynchronize)
  CUBRIDGE_LOAD(EventElapsedTime, cuEventElapsedTime)
  CUBRIDGE_LOAD(MemcpyDtoH, cuMemcpyDtoH)
  CUBRIDGE_LOAD(MemcpyHtoD, cuMemcpyHtoD)
  CUBRIDGE_LOAD(TensorMapEncodeTiled, cuTensorMapEncodeTiled)
  CUBRIDGE_LOAD(StreamIsCapturing, cuStreamIsCapturing)
#undef CUBRIDGE_LOAD
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA driver is too old: libcuda.so.1 lacks", missing));
  }
  if (CUresult rc = d.Init(0); rc != CUDA_SUCCESS) {
    const char* text = nullptr;
    d.GetErrorString(rc, &text);
    return absl::FailedPreconditionError(
        absl::StrCat("cuInit failed: ", text != nullptr ? text : "unknown error", " (code ",
                     static_cast<int>(rc), "); is a GPU visible to this process?"));
  }
  return d;
}

}  // namespace

absl::StatusOr<const Driver*> Driver::Get() {
  static const absl::StatusOr<Driver>* const driver = new absl::StatusOr<Driver>(Load());
  if (!driver->ok()) return driver->status();
  return &**driver;
}

absl::Status Driver::Check(CUresult rc, const char* what) const {
  if (rc == CUDA_SUCCESS) return absl::OkStatus();
  const char* text = nullptr;
  GetErrorString(rc, &text);
  return absl::InternalError(absl::StrCat(what, ": ", text != nullptr ? text : "unknown error",
                                          " (CUDA error ", static_cast<int>(rc), ")"));
}

std::string DeviceInfo::Arch() const { return absl::StrCat("sm_", cc_major, cc_minor); }

std::string FormatGpuUuid(const unsigned char (&bytes)[16]) {
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    absl::StrAppend(&out, absl::Hex(bytes[i], absl::kZeroPad2));
  }
  return out;
}

absl::StatusOr<DeviceInfo> ProbeDevice(int ordinal) {
  auto d = Driver::Get();
  if (!d.ok()) return d.status();
  const Driver& cu = **d;
  int count = 0;
  if (auto s = cu.Check(cu.DeviceGetCount(&count), "cuDeviceGetCount"); !s.ok()) return s;
  if (ordinal >= count) {
    return absl::NotFoundError(absl::StrCat("no GPU ", ordinal, ": the driver sees ", count));
  }
  CUdevice dev;
  if (auto s = cu.Check(cu.DeviceGet(&dev, ordinal), "cuDeviceGet"); !s.ok()) return s;
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  cu.DeviceGetName(name, sizeof(name), dev);
  info.name = name;
  CUuuid uuid{};
  if (cu.DeviceGetUuid(&uuid, dev) == CUDA_SUCCESS) {
    unsigned char bytes[16];
    for (int i = 0; i < 16; ++i) bytes[i] = static_cast<unsigned char>(uuid.bytes[i]);
    info.uuid = FormatGpuUuid(bytes);
  }
  int l2 = 0;
  cu.DeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  cu.DeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  cu.DeviceGetAttribute(&info.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  cu.DeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev);
  cu.DeviceGetAttribute(&info.max_smem_per_block,
                        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
  info.l2_bytes = l2;
  size_t mem = 0;
  cu.DeviceTotalMem(&mem, dev);
  info.memory_bytes = static_cast<int64_t>(mem);
  cu.DriverGetVersion(&info.driver_version);
  return info;
}

absl::StatusOr<std::vector<DeviceInfo>> ProbeDevices() {
  auto d = Driver::Get();
  if (!d.ok()) return d.status();
  int count = 0;
  if (auto s = (*d)->Check((*d)->DeviceGetCount(&count), "cuDeviceGetCount"); !s.ok()) return s;
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    auto info = ProbeDevice(i);
    if (!info.ok()) return info.status();
    out.push_back(*std::move(info));
  }
  return out;
}

absl::Status UsePrimaryContext(int ordinal) {
  auto d = Driver::Get();
  if (!d.ok()) return d.status();
  const Driver& cu = **d;
  CUdevice dev;
  if (auto s = cu.Check(cu.DeviceGet(&dev, ordinal), "cuDeviceGet"); !s.ok()) return s;
  CUcontext ctx;
  if (auto s = cu.Check(cu.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain"); !s.ok()) {
    return s;
  }
  return cu.Check(cu.CtxSetCurrent(ctx), "cuCtxSetCurrent");
}

}  // namespace cubridge::gpu
