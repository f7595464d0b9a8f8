#include "runtime/cuda_driver.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace fuse::runtime::cuda {

namespace {

/// One row per entry point: its name and where its address goes.
struct Symbol {
  const char* name;
  void** slot;
};

std::vector<Symbol> symbols_of(DriverApi& a) {
#define FUSE_CUDA_SYMBOL(fn) Symbol{#fn, reinterpret_cast<void**>(&a.fn)}
  return {FUSE_CUDA_SYMBOL(cuInit),
          FUSE_CUDA_SYMBOL(cuDriverGetVersion),
          FUSE_CUDA_SYMBOL(cuGetErrorName),
          FUSE_CUDA_SYMBOL(cuGetErrorString),
          FUSE_CUDA_SYMBOL(cuDeviceGet),
          FUSE_CUDA_SYMBOL(cuDeviceGetCount),
          FUSE_CUDA_SYMBOL(cuDeviceGetName),
          FUSE_CUDA_SYMBOL(cuDeviceGetAttribute),
          FUSE_CUDA_SYMBOL(cuDevicePrimaryCtxRetain),
          FUSE_CUDA_SYMBOL(cuCtxSetCurrent),
          FUSE_CUDA_SYMBOL(cuMemAlloc_v2),
          FUSE_CUDA_SYMBOL(cuMemFree_v2),
          FUSE_CUDA_SYMBOL(cuMemcpyHtoDAsync_v2),
          FUSE_CUDA_SYMBOL(cuMemcpyDtoHAsync_v2),
          FUSE_CUDA_SYMBOL(cuMemcpyDtoDAsync_v2),
          FUSE_CUDA_SYMBOL(cuMemsetD8Async),
          FUSE_CUDA_SYMBOL(cuStreamCreate),
          FUSE_CUDA_SYMBOL(cuStreamDestroy_v2),
          FUSE_CUDA_SYMBOL(cuStreamSynchronize),
          FUSE_CUDA_SYMBOL(cuStreamWaitEvent),
          FUSE_CUDA_SYMBOL(cuModuleLoadDataEx),
          FUSE_CUDA_SYMBOL(cuModuleUnload),
          FUSE_CUDA_SYMBOL(cuModuleGetFunction),
          FUSE_CUDA_SYMBOL(cuFuncSetAttribute),
          FUSE_CUDA_SYMBOL(cuLaunchKernel),
          FUSE_CUDA_SYMBOL(cuEventCreate),
          FUSE_CUDA_SYMBOL(cuEventDestroy_v2),
          FUSE_CUDA_SYMBOL(cuEventRecord),
          FUSE_CUDA_SYMBOL(cuEventSynchronize),
          FUSE_CUDA_SYMBOL(cuEventElapsedTime)};
#undef FUSE_CUDA_SYMBOL
}

/// The outcome of loading the process's driver: the driver, or why there is none.
struct Loaded {
  std::unique_ptr<Driver> driver;
  std::string reason;
};

std::atomic<bool> g_use_simulator{false};
std::atomic<bool> g_driver_opened{false};

const Loaded& loaded() {
  // Never unloaded: device memory and modules may be released by static destructors after main.
  static const Loaded* result = [] {
    g_driver_opened = true;
    auto* l = new Loaded;
    try {
      l->driver = std::make_unique<Driver>(load_driver(driver_library_path()));
    } catch (const Unavailable& e) {
      l->reason = e.message().substr(std::string("CUDA unavailable: ").size());
    }
    return l;
  }();
  return *result;
}

/// A device's primary context, retained on first use.
struct DeviceContext {
  std::once_flag once;
  CUcontext context = nullptr;
  std::string error;  // why retaining it failed, rethrown on every use
};

DeviceContext& device_context(int ordinal) {
  static std::vector<DeviceContext>* contexts = new std::vector<DeviceContext>(driver().device_count);
  if (ordinal < 0 || ordinal >= static_cast<int>(contexts->size()))
    throw ir::Error("no CUDA device cuda:" + std::to_string(ordinal) + " (this machine has " +
                    std::to_string(contexts->size()) + ")");
  return (*contexts)[ordinal];
}

}  // namespace

bool simulator_selected() {
  const char* env = std::getenv("FUSE_CUDA_SIM");
  return g_use_simulator || (env && std::string(env) == "1");
}

std::string simulator_library_path() {
  const char* env = std::getenv("FUSE_CUDA_SIM_LIBRARY");
  return env && *env ? env : FUSE_CUDA_SIM_LIBRARY;
}

void use_simulator() {
  if (simulator_selected()) return;
  if (g_driver_opened)
    throw ir::Error("cannot switch to the CUDA simulator: this process already opened " + driver_library_path() +
                    " (set FUSE_CUDA_SIM=1 before the first CUDA call)");
  g_use_simulator = true;
}

std::string driver_library_path() {
  if (simulator_selected()) return simulator_library_path();
  const char* env = std::getenv("FUSE_LIBCUDA");
  return env && *env ? env : "libcuda.so.1";
}

Driver load_driver(const std::string& path) {
  Driver d;
  d.path = path;
  d.library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!d.library) {
    const char* why = dlerror();
    std::string detail = why ? why : "";
    // dlerror says "cannot open shared object file" for a library that is not there at all.
    if (detail.find("No such file") != std::string::npos || detail.find("cannot open shared object") != std::string::npos)
      throw Unavailable(path + " not found (no NVIDIA driver on this machine)");
    throw Unavailable("could not load " + path + ": " + detail);
  }
  for (const Symbol& s : symbols_of(d.api)) {
    *s.slot = dlsym(d.library, s.name);
    if (!*s.slot) {
      dlclose(d.library);
      throw Unavailable(path + " has no " + s.name + " (not a CUDA driver, or one too old for fuse)");
    }
  }
  if (CUresult r = d.api.cuInit(0); r != CUDA_SUCCESS)
    throw Unavailable("cuInit failed: " + error_text(d.api, r));
  if (CUresult r = d.api.cuDeviceGetCount(&d.device_count); r != CUDA_SUCCESS)
    throw Unavailable("cuDeviceGetCount failed: " + error_text(d.api, r));
  if (d.device_count == 0) throw Unavailable("the NVIDIA driver sees no GPU");
  d.api.cuDriverGetVersion(&d.version);
  return d;
}

const Driver& driver() {
  const Loaded& l = loaded();
  if (!l.driver) throw Unavailable(l.reason);
  return *l.driver;
}

bool cuda_available() { return loaded().driver != nullptr; }

std::string cuda_unavailable_reason() { return loaded().reason; }

std::string error_text(const DriverApi& api, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName) api.cuGetErrorName(result, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(result, &text);
  std::string s = name ? name : "CUDA error " + std::to_string(result);
  if (text) s += std::string(" (") + text + ")";
  return s;
}

void check(CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) throw ir::Error(std::string(call) + " failed: " + error_text(driver().api, result));
}

const DriverApi& api(int ordinal) {
  const DriverApi& a = driver().api;
  DeviceContext& dc = device_context(ordinal);
  std::call_once(dc.once, [&] {
    try {
      CUdevice device = 0;
      check(a.cuDeviceGet(&device, ordinal), "cuDeviceGet");
      check(a.cuDevicePrimaryCtxRetain(&dc.context, device), "cuDevicePrimaryCtxRetain");
    } catch (const ir::Error& e) {
      dc.error = e.message();
    }
  });
  if (!dc.error.empty()) throw ir::Error(dc.error);
  // The current context is per thread: set it when this thread last used another (or none).
  thread_local CUcontext current = nullptr;
  if (current != dc.context) {
    check(a.cuCtxSetCurrent(dc.context), "cuCtxSetCurrent");
    current = dc.context;
  }
  return a;
}

DeviceInfo device_info(int ordinal) {
  const DriverApi& a = api(ordinal);
  DeviceInfo info;
  info.ordinal = ordinal;
  CUdevice device = 0;
  check(a.cuDeviceGet(&device, ordinal), "cuDeviceGet");
  char name[256] = {};
  check(a.cuDeviceGetName(name, sizeof name, device), "cuDeviceGetName");
  info.name = name;
  check(a.cuDeviceGetAttribute(&info.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
        "cuDeviceGetAttribute");
  check(a.cuDeviceGetAttribute(&info.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
        "cuDeviceGetAttribute");
  return info;
}

}  // namespace fuse::runtime::cuda
