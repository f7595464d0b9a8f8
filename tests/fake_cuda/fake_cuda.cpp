// A fake CUDA driver for the runtime's tests (see fake_cuda.h). Only the entry points fuse
// resolves exist; they follow the Driver API's signatures and error codes.
#include "tests/fake_cuda/fake_cuda.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;

constexpr CUresult kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kNotInitialized = 3, kNoDevice = 100,
                   kInvalidDevice = 101, kInvalidPtx = 218, kInvalidHandle = 400, kNotFound = 500;

struct Module {
  std::string text;
  std::deque<FakeLaunch> functions;  // what cuModuleGetFunction handed out: name and parameter count
};

struct State {
  std::mutex mutex;
  bool initialized = false;
  long long devices = 1, cc = 80, alloc_limit = 0;
  std::map<CUdeviceptr, size_t> allocations;
  std::map<std::string, long long> stats;
  std::vector<FakeLaunch> launches;
  std::map<void*, long long> event_launches;  // event -> launches recorded when it was recorded
  int next_handle = 1;
};

State& state() {
  static State s;
  return s;
}

void* new_handle() { return reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 * state().next_handle++)); }

/// Whether [p, p + bytes) lies inside one live allocation.
bool valid(CUdeviceptr p, size_t bytes) {
  auto& a = state().allocations;
  auto it = a.upper_bound(p);
  if (it == a.begin()) return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second;
}

/// Number of .param declarations of `.entry name(...)`, or -1 when there is no such entry.
int entry_params(const std::string& text, const std::string& name) {
  size_t pos = 0;
  while ((pos = text.find(".entry " + name, pos)) != std::string::npos) {
    size_t after = pos + 7 + name.size();
    if (after < text.size() && (text[after] == '(' || text[after] == ' ' || text[after] == '\n')) {
      size_t open = text.find('(', after), close = text.find(')', after);
      int n = 0;
      for (size_t p = text.find(".param", open); p != std::string::npos && p < close; p = text.find(".param", p + 1)) ++n;
      return n;
    }
    pos = after;
  }
  return -1;
}

void execute(const FakeLaunch& l) {
  uint64_t threads = uint64_t{l.grid[0]} * l.block[0];
  std::string entry = l.entry;
  if (entry == "vadd_f32" && l.num_params == 4) {
    auto* a = reinterpret_cast<const float*>(l.params[0]);
    auto* b = reinterpret_cast<const float*>(l.params[1]);
    auto* c = reinterpret_cast<float*>(l.params[2]);
    int64_t n = static_cast<int64_t>(l.params[3]);
    for (int64_t i = 0; i < n && static_cast<uint64_t>(i) < threads; ++i) c[i] = a[i] + b[i];
  } else if (entry == "scale_f32" && l.num_params == 4) {
    auto* x = reinterpret_cast<const float*>(l.params[0]);
    auto* s = reinterpret_cast<const float*>(l.params[1]);
    auto* y = reinterpret_cast<float*>(l.params[2]);
    int64_t n = static_cast<int64_t>(l.params[3]);
    for (int64_t i = 0; i < n && static_cast<uint64_t>(i) < threads; ++i) y[i] = x[i] * s[0];
  }
}

}  // namespace

extern "C" {

// ---- test hooks ----

void fake_cuda_set(const char* key, long long value) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::string k = key;
  if (k == "devices") s.devices = value;
  else if (k == "cc") s.cc = value;
  else if (k == "alloc_limit") s.alloc_limit = value;
  else std::abort();  // a test asked for a setting that does not exist
}

long long fake_cuda_stat(const char* key) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (std::string(key) == "live_bytes") {
    long long n = 0;
    for (auto& [p, bytes] : s.allocations) n += static_cast<long long>(bytes);
    return n;
  }
  return s.stats[key];
}

void fake_cuda_reset() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.launches.clear();
  s.stats.clear();
}

int fake_cuda_launch_count() {
  std::lock_guard lock(state().mutex);
  return static_cast<int>(state().launches.size());
}

const FakeLaunch* fake_cuda_launch(int i) {
  std::lock_guard lock(state().mutex);
  return &state().launches.at(i);
}

// ---- the driver ----

CUresult cuInit(unsigned flags) {
  if (flags != 0) return kInvalidValue;
  state().initialized = true;
  return kSuccess;
}

CUresult cuDriverGetVersion(int* version) {
  *version = 12080;
  return kSuccess;
}

CUresult cuGetErrorName(CUresult error, const char** name) {
  static const std::map<CUresult, const char*> names = {
      {kSuccess, "CUDA_SUCCESS"},          {kInvalidValue, "CUDA_ERROR_INVALID_VALUE"},
      {kOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY"}, {kNotInitialized, "CUDA_ERROR_NOT_INITIALIZED"},
      {kNoDevice, "CUDA_ERROR_NO_DEVICE"},  {kInvalidDevice, "CUDA_ERROR_INVALID_DEVICE"},
      {kInvalidPtx, "CUDA_ERROR_INVALID_PTX"}, {kInvalidHandle, "CUDA_ERROR_INVALID_HANDLE"},
      {kNotFound, "CUDA_ERROR_NOT_FOUND"}};
  auto it = names.find(error);
  if (it == names.end()) return kInvalidValue;
  *name = it->second;
  return kSuccess;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  static const std::map<CUresult, const char*> texts = {
      {kSuccess, "no error"},       {kInvalidValue, "invalid argument"},
      {kOutOfMemory, "out of memory"}, {kNotInitialized, "initialization error"},
      {kNoDevice, "no CUDA-capable device is detected"}, {kInvalidDevice, "invalid device ordinal"},
      {kInvalidPtx, "a PTX JIT compilation failed"},    {kInvalidHandle, "invalid resource handle"},
      {kNotFound, "named symbol not found"}};
  auto it = texts.find(error);
  if (it == texts.end()) return kInvalidValue;
  *text = it->second;
  return kSuccess;
}

CUresult cuDeviceGetCount(int* count) {
  if (!state().initialized) return kNotInitialized;
  *count = static_cast<int>(state().devices);
  return kSuccess;
}

CUresult cuDeviceGet(int* device, int ordinal) {
  if (ordinal < 0 || ordinal >= state().devices) return kInvalidDevice;
  *device = ordinal;
  return kSuccess;
}

CUresult cuDeviceGetName(char* name, int length, int device) {
  std::snprintf(name, static_cast<size_t>(length), "Fake GPU %d", device);
  return kSuccess;
}

CUresult cuDeviceGetAttribute(int* value, int attribute, int device) {
  if (attribute == 75) *value = static_cast<int>(state().cc / 10);
  else if (attribute == 76) *value = static_cast<int>(state().cc % 10);
  else return kInvalidValue;
  return kSuccess;
}

CUresult cuDevicePrimaryCtxRetain(void** context, int device) {
  *context = new_handle();
  return kSuccess;
}

CUresult cuCtxSetCurrent(void* context) { return kSuccess; }

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (bytes == 0) return kInvalidValue;
  size_t live = 0;
  for (auto& [p, n] : s.allocations) live += n;
  if (s.alloc_limit && live + bytes > static_cast<size_t>(s.alloc_limit)) return kOutOfMemory;
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!p) return kOutOfMemory;
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  s.allocations[*ptr] = bytes;
  ++s.stats["allocs"];
  return kSuccess;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.allocations.find(ptr);
  if (it == s.allocations.end()) return kInvalidValue;
  std::free(reinterpret_cast<void*>(ptr));
  s.allocations.erase(it);
  ++s.stats["frees"];
  return kSuccess;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, void* stream) {
  std::lock_guard lock(state().mutex);
  if (!valid(dst, bytes)) return kInvalidValue;
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  ++state().stats["htod"];
  return kSuccess;
}

CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, void* stream) {
  std::lock_guard lock(state().mutex);
  if (!valid(src, bytes)) return kInvalidValue;
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  ++state().stats["dtoh"];
  return kSuccess;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void* stream) {
  std::lock_guard lock(state().mutex);
  if (!valid(dst, bytes) || !valid(src, bytes)) return kInvalidValue;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  ++state().stats["dtod"];
  return kSuccess;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, void* stream) {
  std::lock_guard lock(state().mutex);
  if (!valid(dst, count)) return kInvalidValue;
  std::memset(reinterpret_cast<void*>(dst), value, count);
  return kSuccess;
}

CUresult cuStreamCreate(void** stream, unsigned flags) {
  *stream = new_handle();
  return kSuccess;
}
CUresult cuStreamDestroy_v2(void* stream) { return stream ? kSuccess : kInvalidHandle; }
CUresult cuStreamSynchronize(void* stream) { return kSuccess; }
CUresult cuStreamWaitEvent(void* stream, void* event, unsigned flags) { return event ? kSuccess : kInvalidHandle; }

CUresult cuModuleLoadDataEx(void** module, const void* image, unsigned num_options, int* options, void** values) {
  std::string text = static_cast<const char*>(image);  // PTX must be NUL-terminated
  if (text.find("FAKE_JIT_ERROR") != std::string::npos) {
    char* log = nullptr;
    size_t size = 0;
    for (unsigned i = 0; i < num_options; ++i) {
      if (options[i] == 5) log = static_cast<char*>(values[i]);
      if (options[i] == 6) size = reinterpret_cast<uintptr_t>(values[i]);
    }
    if (log && size) std::snprintf(log, size, "ptxas application ptx input, line 3; error   : Unknown symbol 'FAKE_JIT_ERROR'\n");
    return kInvalidPtx;
  }
  if (text.find(".version") == std::string::npos) return kInvalidPtx;
  auto* m = new Module;
  m->text = text;
  *module = m;
  ++state().stats["module_loads"];
  return kSuccess;
}

CUresult cuModuleUnload(void* module) {
  delete static_cast<Module*>(module);
  return kSuccess;
}

CUresult cuModuleGetFunction(void** function, void* module, const char* name) {
  auto* m = static_cast<Module*>(module);
  int n = entry_params(m->text, name);
  if (n < 0) return kNotFound;
  FakeLaunch& f = m->functions.emplace_back();
  std::snprintf(f.entry, sizeof f.entry, "%s", name);
  f.num_params = n;
  *function = &f;
  return kSuccess;
}

CUresult cuFuncSetAttribute(void* function, int attribute, int value) { return kSuccess; }

CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* stream, void** params, void** extra) {
  FakeLaunch l = *static_cast<FakeLaunch*>(f);
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || bx * by * bz > 1024) return kInvalidValue;
  l.grid[0] = gx, l.grid[1] = gy, l.grid[2] = gz;
  l.block[0] = bx, l.block[1] = by, l.block[2] = bz;
  l.shared_bytes = shared;
  l.stream = stream;
  for (int i = 0; i < l.num_params && i < 32; ++i) std::memcpy(&l.params[i], params[i], 8);
  execute(l);
  std::lock_guard lock(state().mutex);
  state().launches.push_back(l);
  return kSuccess;
}

CUresult cuEventCreate(void** event, unsigned flags) {
  *event = new_handle();
  return kSuccess;
}
CUresult cuEventDestroy_v2(void* event) { return kSuccess; }
CUresult cuEventRecord(void* event, void* stream) {
  std::lock_guard lock(state().mutex);
  state().event_launches[event] = static_cast<long long>(state().launches.size());
  return kSuccess;
}
CUresult cuEventSynchronize(void* event) { return kSuccess; }
/// A quarter of a millisecond per launch between the two events.
CUresult cuEventElapsedTime(float* ms, void* start, void* end) {
  std::lock_guard lock(state().mutex);
  auto& e = state().event_launches;
  if (!e.count(start) || !e.count(end)) return kInvalidHandle;
  *ms = 0.25f * static_cast<float>(e[end] - e[start]);
  return kSuccess;
}

}  // extern "C"
