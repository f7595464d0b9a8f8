// The CUDA Driver API, opened at run time: libcuda.so.1 is dlopen'ed on first use, so fuse builds
// and runs on machines without the CUDA toolkit or an NVIDIA driver (CUDA is then unavailable,
// and says why). Nothing here links against libcuda.
//
// Thread safety: the driver is loaded once (a function-local static) and each device's context
// created once (std::call_once), so every function here may be called from any thread; the
// Driver API itself is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ir/error.h"

namespace fuse::runtime::cuda {

// The few driver types fuse uses, as cuda.h declares them (the ABI is stable).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUjit_option = int;

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
inline constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
inline constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER = 5;
inline constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
inline constexpr unsigned CU_STREAM_DEFAULT = 0;  // blocking: ordered with the legacy null stream
inline constexpr unsigned CU_EVENT_DEFAULT = 0;

/// The driver entry points fuse calls, resolved with dlsym (the _v2 names are the ones cuda.h's
/// macros select).
struct DriverApi {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuGetErrorName)(CUresult error, const char** name);
  CUresult (*cuGetErrorString)(CUresult error, const char** text);
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGetName)(char* name, int length, CUdevice device);
  CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* context, CUdevice device);
  CUresult (*cuCtxSetCurrent)(CUcontext context);
  CUresult (*cuMemAlloc_v2)(CUdeviceptr* ptr, size_t bytes);
  CUresult (*cuMemFree_v2)(CUdeviceptr ptr);
  CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream);
  CUresult (*cuMemcpyDtoHAsync_v2)(void* dst, CUdeviceptr src, size_t bytes, CUstream stream);
  CUresult (*cuMemcpyDtoDAsync_v2)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream);
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned flags);
  CUresult (*cuStreamDestroy_v2)(CUstream stream);
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned flags);
  CUresult (*cuModuleLoadDataEx)(CUmodule* module, const void* image, unsigned num_options, CUjit_option* options,
                                 void** values);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuModuleGetFunction)(CUfunction* function, CUmodule module, const char* name);
  CUresult (*cuFuncSetAttribute)(CUfunction function, int attribute, int value);
  CUresult (*cuLaunchKernel)(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                             unsigned block_y, unsigned block_z, unsigned shared_bytes, CUstream stream,
                             void** params, void** extra);
  CUresult (*cuEventCreate)(CUevent* event, unsigned flags);
  CUresult (*cuEventDestroy_v2)(CUevent event);
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventSynchronize)(CUevent event);
  CUresult (*cuEventElapsedTime)(float* ms, CUevent start, CUevent end);
};

/// Thrown when CUDA cannot be used at all: no libcuda, a driver without an entry point fuse needs,
/// or no device. what() starts with "CUDA unavailable: ".
class Unavailable : public ir::Error {
 public:
  explicit Unavailable(const std::string& reason) : ir::Error("CUDA unavailable: " + reason) {}
};

/// A loaded driver: the library handle and its entry points, initialized (cuInit) and with at
/// least one device.
struct Driver {
  void* library = nullptr;
  std::string path;  // what was dlopen'ed
  DriverApi api{};
  int device_count = 0;
  int version = 0;  // cuDriverGetVersion: 1000 * major + 10 * minor
};

/// The library fuse opens: the CUDA simulator when it is selected (below), else $FUSE_LIBCUDA
/// when set (tests point it at a fake driver), else "libcuda.so.1".
std::string driver_library_path();

/// The simulated CUDA device (runtime/sim/): selected by FUSE_CUDA_SIM=1 or use_simulator();
/// $FUSE_CUDA_SIM_LIBRARY overrides where libfuse_cuda_sim.so is (default: the build's).
bool simulator_selected();
std::string simulator_library_path();
/// Selects the simulator for this process. Throws ir::Error when the process has already opened
/// another driver (the driver is opened once per process).
void use_simulator();

/// Opens `path`, resolves every entry point, calls cuInit and counts devices. Throws Unavailable
/// with the reason on any failure. Each call opens the library anew (tests use it directly);
/// everything else shares driver().
Driver load_driver(const std::string& path);

/// The process's driver, loaded once from driver_library_path(). Throws Unavailable (the same
/// reason every time) when CUDA cannot be used.
const Driver& driver();
bool cuda_available();
/// Empty when CUDA is available, else why not, e.g. "libcuda.so.1 not found (no NVIDIA driver
/// on this machine)".
std::string cuda_unavailable_reason();

/// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a driver error code.
std::string error_text(const DriverApi& api, CUresult result);
/// Throws ir::Error "CALL failed: CUDA_ERROR_... (description)" when `result` is not success.
void check(CUresult result, const char* call);

/// The driver and the current context of device `ordinal` (its primary context, retained once
/// and kept for the process's lifetime), e.g. `check(cuda::api(0).cuMemAlloc_v2(...), ...)`.
const DriverApi& api(int ordinal);

/// Facts about one device.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  std::string sm() const { return "sm_" + std::to_string(major * 10 + minor); }
};
DeviceInfo device_info(int ordinal);

}  // namespace fuse::runtime::cuda
