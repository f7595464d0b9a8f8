// The test hooks of libfake_cuda.so, a stand-in for libcuda.so.1 that the runtime loads through
// $FUSE_LIBCUDA: device memory is host memory, launches are recorded, and a few entry names are
// executed on the host so that results can be checked end to end without a GPU:
//   vadd_f32(a, b, c, n)        c[i] = a[i] + b[i]      for the threads i < n the grid covers
//   scale_f32(x, s, y, n)       y[i] = x[i] * s[0]
// A PTX image containing FAKE_JIT_ERROR fails to load with CUDA_ERROR_INVALID_PTX and a JIT log.
#pragma once

#include <cstdint>

struct FakeLaunch {
  char entry[64];
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  void* stream;
  int num_params;
  uint64_t params[32];
};

extern "C" {
/// Settings: "devices" (count cuDeviceGetCount reports), "cc" (compute capability, e.g. 80),
/// "alloc_limit" (bytes; allocations beyond it fail with CUDA_ERROR_OUT_OF_MEMORY; 0: none).
void fake_cuda_set(const char* key, long long value);
/// Counters: "allocs", "frees", "live_bytes", "module_loads", "htod", "dtoh", "dtod".
long long fake_cuda_stat(const char* key);
/// Forgets the recorded launches and zeroes the counters (memory stays allocated).
void fake_cuda_reset();
int fake_cuda_launch_count();
const FakeLaunch* fake_cuda_launch(int i);
}
