// libfuse_cuda_sim.so: a simulated CUDA device behind the Driver API entry points fuse resolves
// (runtime/cuda_driver.h), loaded instead of libcuda.so.1 when FUSE_CUDA_SIM=1. Device memory is
// host memory; work runs synchronously, in order, when it is queued (so every stream and event
// is trivially ordered); modules are simulated module images (codegen/cuda_sim.h), never PTX.
// A launch that fails a check returns CUDA_ERROR_LAUNCH_FAILED (or CUDA_ERROR_ILLEGAL_ADDRESS,
// CUDA_ERROR_MISALIGNED_ADDRESS for memcheck), and cuGetErrorString gives the simulator's report.
#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

#include "ir/cuda_sim_abi.h"
#include "runtime/sim/loader.h"
#include "runtime/sim/simulator.h"

namespace {

namespace sim = fuse::runtime::sim;
using CUresult = int;
using CUdeviceptr = unsigned long long;

constexpr CUresult kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kNoDevice = 100, kInvalidDevice = 101,
                   kInvalidImage = 200, kInvalidHandle = 400, kNotFound = 500, kIllegalAddress = 700,
                   kMisalignedAddress = 716, kLaunchFailed = 719;

struct Module {
  std::unique_ptr<sim::LoadedObject> object;
  std::deque<sim::Kernel> kernels;
};

struct Event {
  std::chrono::steady_clock::time_point when;
  bool recorded = false;
};

struct Device {
  std::mutex mutex;  // launches run one at a time (each uses every core)
  sim::Memory memory;
  std::set<void*> handles;  // streams, modules, events
};

Device& device() {
  static Device* d = new Device;  // never destroyed: buffers may be freed by static destructors
  return *d;
}

thread_local std::string t_last_report;

/// FUSE_CUDA_SIM_STATS=1: the simulator's totals on stderr at exit.
struct PrintTotals {
  ~PrintTotals() {
    const char* env = std::getenv("FUSE_CUDA_SIM_STATS");
    if (!env || std::string(env) != "1") return;
    long long threads = 0;
    double seconds = 0;
    sim::totals(threads, seconds);
    std::fprintf(stderr, "fuse CUDA simulator: %lld CUDA threads in %.3f s of launches (%.0f threads/s)\n", threads,
                 seconds, seconds > 0 ? threads / seconds : 0.0);
  }
} g_print_totals;

void* new_handle() {
  static std::atomic<uintptr_t> next{1};
  return reinterpret_cast<void*>(0x5100000000ull + 0x100 * next++);
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned) { return kSuccess; }
CUresult cuDriverGetVersion(int* version) {
  if (!version) return kInvalidValue;
  *version = 12080;
  return kSuccess;
}

CUresult cuGetErrorName(CUresult error, const char** name) {
  static const std::map<CUresult, const char*> names = {
      {kSuccess, "CUDA_SUCCESS"},
      {kInvalidValue, "CUDA_ERROR_INVALID_VALUE"},
      {kOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY"},
      {kNoDevice, "CUDA_ERROR_NO_DEVICE"},
      {kInvalidDevice, "CUDA_ERROR_INVALID_DEVICE"},
      {kInvalidImage, "CUDA_ERROR_INVALID_IMAGE"},
      {kInvalidHandle, "CUDA_ERROR_INVALID_HANDLE"},
      {kNotFound, "CUDA_ERROR_NOT_FOUND"},
      {kIllegalAddress, "CUDA_ERROR_ILLEGAL_ADDRESS"},
      {kMisalignedAddress, "CUDA_ERROR_MISALIGNED_ADDRESS"},
      {kLaunchFailed, "CUDA_ERROR_LAUNCH_FAILED"}};
  auto it = names.find(error);
  if (it == names.end()) return kInvalidValue;
  *name = it->second;
  return kSuccess;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  if (error == kLaunchFailed || error == kIllegalAddress || error == kMisalignedAddress || error == kInvalidImage) {
    *text = t_last_report.c_str();
    return kSuccess;
  }
  const char* name = nullptr;
  if (cuGetErrorName(error, &name) != kSuccess) return kInvalidValue;
  *text = "fuse CUDA simulator";
  return kSuccess;
}

CUresult cuDeviceGetCount(int* count) {
  *count = 1;
  return kSuccess;
}
CUresult cuDeviceGet(int* dev, int ordinal) {
  if (ordinal != 0) return kInvalidDevice;
  *dev = 0;
  return kSuccess;
}
CUresult cuDeviceGetName(char* name, int length, int dev) {
  if (dev != 0) return kInvalidDevice;
  std::strncpy(name, "fuse CUDA simulator", static_cast<size_t>(length));
  if (length > 0) name[length - 1] = '\0';
  return kSuccess;
}
CUresult cuDeviceGetAttribute(int* value, int attribute, int dev) {
  if (dev != 0) return kInvalidDevice;
  if (attribute == 75) *value = 9;        // compute capability 9.0: every PTX target fuse makes
  else if (attribute == 76) *value = 0;
  else return kInvalidValue;
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRetain(void** context, int dev) {
  if (dev != 0) return kInvalidDevice;
  *context = reinterpret_cast<void*>(0x5c0);
  return kSuccess;
}
CUresult cuCtxSetCurrent(void*) { return kSuccess; }

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
  if (!ptr || bytes == 0) return kInvalidValue;
  void* p = device().memory.allocate(bytes);
  if (!p) return kOutOfMemory;
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  return kSuccess;
}
CUresult cuMemFree_v2(CUdeviceptr ptr) {
  return device().memory.free(reinterpret_cast<void*>(ptr)) ? kSuccess : kInvalidValue;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, void*) {
  if (bytes == 0) return kSuccess;
  if (!device().memory.valid(dst, bytes)) return kInvalidValue;
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return kSuccess;
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, void*) {
  if (bytes == 0) return kSuccess;
  if (!device().memory.valid(src, bytes)) return kInvalidValue;
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return kSuccess;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void*) {
  if (bytes == 0) return kSuccess;
  if (!device().memory.valid(dst, bytes) || !device().memory.valid(src, bytes)) return kInvalidValue;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return kSuccess;
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, void*) {
  if (count == 0) return kSuccess;
  if (!device().memory.valid(dst, count)) return kInvalidValue;
  std::memset(reinterpret_cast<void*>(dst), value, count);
  return kSuccess;
}

CUresult cuStreamCreate(void** stream, unsigned) {
  std::lock_guard lock(device().mutex);
  *stream = new_handle();
  device().handles.insert(*stream);
  return kSuccess;
}
CUresult cuStreamDestroy_v2(void* stream) {
  std::lock_guard lock(device().mutex);
  return device().handles.erase(stream) ? kSuccess : kInvalidHandle;
}
CUresult cuStreamSynchronize(void*) { return kSuccess; }

CUresult cuModuleLoadDataEx(void** module, const void* image, unsigned num_options, int* options, void** values) {
  std::string error;
  auto object = sim::LoadedObject::load(static_cast<const char*>(image), error);
  if (!object) {
    t_last_report = "fuse CUDA simulator: " + error;
    for (unsigned i = 0; i < num_options; ++i)
      if (options[i] == 5) {  // CU_JIT_ERROR_LOG_BUFFER
        size_t size = 0;
        for (unsigned k = 0; k < num_options; ++k)
          if (options[k] == 6) size = reinterpret_cast<uintptr_t>(values[k]);
        if (size > 0) {
          std::strncpy(static_cast<char*>(values[i]), error.c_str(), size - 1);
          static_cast<char*>(values[i])[size - 1] = '\0';
        }
      }
    return kInvalidImage;
  }
  auto* m = new Module{std::move(object), {}};
  *module = m;
  return kSuccess;
}

CUresult cuModuleUnload(void* module) {
  delete static_cast<Module*>(module);
  return kSuccess;
}

CUresult cuModuleGetFunction(void** function, void* module, const char* name) {
  auto* m = static_cast<Module*>(module);
  if (!m) return kInvalidHandle;
  std::string error;
  void* entry = m->object->lookup(fuse::ir::cuda_sim::kEntryPrefix + std::string(name), error);
  void* shared = m->object->lookup(fuse::ir::cuda_sim::kSharedSizePrefix + std::string(name), error);
  if (!entry || !shared) return kNotFound;
  sim::Kernel& k = m->kernels.emplace_back();
  k.name = name;
  k.entry = reinterpret_cast<void (*)(void**)>(entry);
  k.static_shared = *static_cast<const uint64_t*>(shared);
  *function = &k;
  return kSuccess;
}

CUresult cuFuncSetAttribute(void*, int, int) { return kSuccess; }

CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared_bytes, void*, void** params, void**) {
  if (!f) return kInvalidHandle;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || gy > 65535 || gz > 65535 ||
      static_cast<uint64_t>(bx) * by * bz > 1024 || bz > 64)
    return kInvalidValue;
  auto* kernel = static_cast<sim::Kernel*>(f);
  sim::LaunchConfig config{{gx, gy, gz}, {bx, by, bz}, shared_bytes};
  // FUSE_CUDA_SIM_MAX_GRID=K runs at most K blocks along each grid axis (a smaller grid, as a GPU's
  // 65,535 limit on y and z gives): kernels must cover their work with grid-stride loops.
  if (const char* cap = std::getenv("FUSE_CUDA_SIM_MAX_GRID"); cap && std::atoi(cap) > 0)
    for (unsigned& g : config.grid) g = std::min(g, static_cast<unsigned>(std::atoi(cap)));
  std::lock_guard lock(device().mutex);
  std::string report;
  try {
    report = sim::run_kernel(*kernel, config, params, device().memory, sim::options_from_environment());
  } catch (const std::exception& e) {
    t_last_report = std::string("fuse CUDA simulator: ") + e.what();
    return kLaunchFailed;
  }
  if (report.empty()) return kSuccess;
  t_last_report = "fuse CUDA simulator: " + report;
  if (report.find("misaligned") != std::string::npos) return kMisalignedAddress;
  if (report.find("memcheck") != std::string::npos) return kIllegalAddress;
  return kLaunchFailed;
}

CUresult cuEventCreate(void** event, unsigned) {
  *event = new Event;
  return kSuccess;
}
CUresult cuEventDestroy_v2(void* event) {
  delete static_cast<Event*>(event);
  return kSuccess;
}
CUresult cuEventRecord(void* event, void*) {
  auto* e = static_cast<Event*>(event);
  e->when = std::chrono::steady_clock::now();
  e->recorded = true;
  return kSuccess;
}
CUresult cuEventSynchronize(void*) { return kSuccess; }
CUresult cuEventElapsedTime(float* ms, void* start, void* end) {
  auto* a = static_cast<Event*>(start);
  auto* b = static_cast<Event*>(end);
  if (!a || !b || !a->recorded || !b->recorded) return kInvalidHandle;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return kSuccess;
}

/// The simulator's counters: CUDA threads run and seconds spent in launches, since the start.
void fuse_cuda_sim_totals(long long* threads, double* seconds) { sim::totals(*threads, *seconds); }

}  // extern "C"
