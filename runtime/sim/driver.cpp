// libfuse_cuda_sim.so: a simulated CUDA device behind the Driver API entry points fuse resolves
// (runtime/cuda_driver.h), loaded instead of libcuda.so.1 when FUSE_CUDA_SIM=1. Device memory is
// host memory; modules are simulated module images (codegen/cuda_sim.h), never PTX. Work runs
// when it is queued, unless FUSE_CUDA_SIM_DEFER=1: then the work of each non-null stream waits
// until something forces it (cuStreamSynchronize, an event it recorded being waited on, or any
// null-stream operation, cuMemFree, cuModuleUnload, which run every stream's pending work, the
// newest stream first): the most unfavourable order CUDA allows, so that a missing
// synchronization between streams shows up as wrong results.
// A launch that fails a check returns CUDA_ERROR_LAUNCH_FAILED (or CUDA_ERROR_ILLEGAL_ADDRESS,
// CUDA_ERROR_MISALIGNED_ADDRESS for memcheck), and cuGetErrorString gives the simulator's report.
#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <vector>
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

struct Stream {
  std::deque<std::function<CUresult()>> pending;
  CUresult error = 0;  // the first failure of deferred work, returned by the next synchronization
};

struct Event {
  std::chrono::steady_clock::time_point when;
  bool recorded = false;
  Stream* stream = nullptr;  // where it was last recorded
};

struct Device {
  std::recursive_mutex mutex;  // work runs one item at a time (a launch uses every core)
  sim::Memory memory;
  std::vector<Stream*> streams;  // live, oldest first
  std::set<Event*> events;
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

bool deferred() {
  const char* env = std::getenv("FUSE_CUDA_SIM_DEFER");
  return env && std::string(env) == "1";
}

CUresult flush(Stream* s) {
  while (!s->pending.empty()) {
    std::function<CUresult()> work = std::move(s->pending.front());
    s->pending.pop_front();
    CUresult r = work();
    if (r != kSuccess && s->error == kSuccess) s->error = r;
  }
  return s->error;
}

/// Every stream's pending work, the newest stream first.
void flush_all() {
  std::vector<Stream*> streams = device().streams;
  for (auto it = streams.rbegin(); it != streams.rend(); ++it) flush(*it);
}

/// Runs `work` now (the null stream, after every other stream's pending work) or queues it on
/// `stream` when deferring.
CUresult submit(void* stream, std::function<CUresult()> work) {
  std::lock_guard lock(device().mutex);
  if (deferred() && stream) {
    static_cast<Stream*>(stream)->pending.push_back(std::move(work));
    return kSuccess;
  }
  if (!stream) flush_all();
  return work();
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
  std::lock_guard lock(device().mutex);
  flush_all();  // as CUDA's, an implicit synchronization
  return device().memory.free(reinterpret_cast<void*>(ptr)) ? kSuccess : kInvalidValue;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return kSuccess;
  if (!device().memory.valid(dst, bytes)) return kInvalidValue;
  return submit(stream, [=] {
    std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
    return kSuccess;
  });
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, void* stream) {
  if (bytes == 0) return kSuccess;
  if (!device().memory.valid(src, bytes)) return kInvalidValue;
  return submit(stream, [=] {
    std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
    return kSuccess;
  });
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void* stream) {
  if (bytes == 0) return kSuccess;
  if (!device().memory.valid(dst, bytes) || !device().memory.valid(src, bytes)) return kInvalidValue;
  return submit(stream, [=] {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    return kSuccess;
  });
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, void* stream) {
  if (count == 0) return kSuccess;
  if (!device().memory.valid(dst, count)) return kInvalidValue;
  return submit(stream, [=] {
    std::memset(reinterpret_cast<void*>(dst), value, count);
    return kSuccess;
  });
}

CUresult cuStreamCreate(void** stream, unsigned) {
  std::lock_guard lock(device().mutex);
  auto* s = new Stream;
  device().streams.push_back(s);
  *stream = s;
  return kSuccess;
}
CUresult cuStreamDestroy_v2(void* stream) {
  std::lock_guard lock(device().mutex);
  auto& all = device().streams;
  auto it = std::find(all.begin(), all.end(), static_cast<Stream*>(stream));
  if (it == all.end()) return kInvalidHandle;
  flush(*it);
  for (Event* e : device().events)
    if (e->stream == *it) e->stream = nullptr;  // what it recorded has run
  delete *it;
  all.erase(it);
  return kSuccess;
}
CUresult cuStreamSynchronize(void* stream) {
  std::lock_guard lock(device().mutex);
  if (!stream) {
    flush_all();
    return kSuccess;
  }
  auto* s = static_cast<Stream*>(stream);
  CUresult r = flush(s);
  s->error = kSuccess;
  return r;
}
CUresult cuStreamWaitEvent(void* stream, void* event, unsigned) {
  auto* e = static_cast<Event*>(event);
  if (!e) return kInvalidHandle;
  // When the waiting work runs, everything queued on the event's stream (as of now) runs first:
  // at least what preceded the record.
  Stream* source = nullptr;
  {
    std::lock_guard lock(device().mutex);
    source = e->stream;
  }
  if (source == static_cast<Stream*>(stream)) return kSuccess;
  return submit(stream, [source] {
    auto& live = device().streams;
    if (source && std::find(live.begin(), live.end(), source) != live.end()) flush(source);
    return kSuccess;
  });
}

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
  std::lock_guard lock(device().mutex);
  flush_all();
  delete static_cast<Module*>(module);
  return kSuccess;
}

CUresult cuModuleGetFunction(void** function, void* module, const char* name) {
  auto* m = static_cast<Module*>(module);
  if (!m) return kInvalidHandle;
  std::string error;
  void* entry = m->object->lookup(fuse::ir::cuda_sim::kEntryPrefix + std::string(name), error);
  void* shared = m->object->lookup(fuse::ir::cuda_sim::kSharedSizePrefix + std::string(name), error);
  void* count = m->object->lookup(fuse::ir::cuda_sim::kParamCountPrefix + std::string(name), error);
  if (!entry || !shared || !count) return kNotFound;
  sim::Kernel& k = m->kernels.emplace_back();
  k.name = name;
  k.entry = reinterpret_cast<void (*)(void**)>(entry);
  k.static_shared = *static_cast<const uint64_t*>(shared);
  k.param_count = *static_cast<const uint64_t*>(count);
  *function = &k;
  return kSuccess;
}

CUresult cuFuncSetAttribute(void*, int, int) { return kSuccess; }

CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared_bytes, void* stream, void** params, void**) {
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
  // The parameters are read when the launch is queued, as cuLaunchKernel does.
  std::vector<uint64_t> values(kernel->param_count);
  for (size_t i = 0; i < values.size(); ++i) std::memcpy(&values[i], params[i], sizeof(uint64_t));
  return submit(stream, [kernel, config, values]() mutable {
    std::vector<void*> pointers;
    for (uint64_t& v : values) pointers.push_back(&v);
    std::string report;
    try {
      report = sim::run_kernel(*kernel, config, pointers.data(), device().memory, sim::options_from_environment());
    } catch (const std::exception& e) {
      t_last_report = std::string("fuse CUDA simulator: ") + e.what();
      return kLaunchFailed;
    }
    if (report.empty()) return kSuccess;
    t_last_report = "fuse CUDA simulator: " + report;
    if (report.find("misaligned") != std::string::npos) return kMisalignedAddress;
    if (report.find("memcheck") != std::string::npos) return kIllegalAddress;
    return kLaunchFailed;
  });
}

CUresult cuEventCreate(void** event, unsigned) {
  std::lock_guard lock(device().mutex);
  auto* e = new Event;
  device().events.insert(e);
  *event = e;
  return kSuccess;
}
CUresult cuEventDestroy_v2(void* event) {
  std::lock_guard lock(device().mutex);
  auto* e = static_cast<Event*>(event);
  if (!device().events.erase(e)) return kInvalidHandle;
  delete e;
  return kSuccess;
}
CUresult cuEventRecord(void* event, void* stream) {
  auto* e = static_cast<Event*>(event);
  if (!e) return kInvalidHandle;
  {
    std::lock_guard lock(device().mutex);
    e->stream = static_cast<Stream*>(stream);
  }
  return submit(stream, [e] {
    e->when = std::chrono::steady_clock::now();
    e->recorded = true;
    return kSuccess;
  });
}
CUresult cuEventSynchronize(void* event) {
  auto* e = static_cast<Event*>(event);
  std::lock_guard lock(device().mutex);
  if (e->stream) flush(e->stream);
  return kSuccess;
}
CUresult cuEventElapsedTime(float* ms, void* start, void* end) {
  auto* a = static_cast<Event*>(start);
  auto* b = static_cast<Event*>(end);
  {
    std::lock_guard lock(device().mutex);
    if (a && a->stream) flush(a->stream);
    if (b && b->stream) flush(b->stream);
  }
  if (!a || !b || !a->recorded || !b->recorded) return kInvalidHandle;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return kSuccess;
}

/// The simulator's counters: CUDA threads run and seconds spent in launches, since the start.
void fuse_cuda_sim_totals(long long* threads, double* seconds) { sim::totals(*threads, *seconds); }

}  // extern "C"
