// The simulated CUDA device's parts (internal to libfuse_cuda_sim.so, see driver.cpp): device
// memory with an allocation table, kernel execution with one fiber per CUDA thread, and the
// sync, race and memory checks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace fuse::runtime::sim {

/// What the simulator checks, and how it runs; from the environment at each launch:
///   FUSE_CUDA_SIM_CHECKS   all (default), none, or a comma list of sync, race, memcheck
///   FUSE_CUDA_SIM_SEED     the seed of the block order (default 0)
///   FUSE_CUDA_SIM_THREADS  host threads that run blocks (default: the machine's cores, at most 8)
struct Options {
  bool sync = true, race = true, memcheck = true;
  uint64_t seed = 0;
  int workers = 1;
};
/// Throws std::runtime_error on a malformed FUSE_CUDA_SIM_CHECKS.
Options options_from_environment();

/// Device memory: host memory with a table of allocations. Freed blocks stay in a bounded
/// quarantine so that a use after free is recognized (and not mistaken for a new allocation).
class Memory {
 public:
  struct Allocation {
    uintptr_t base = 0;
    uint64_t size = 0;
    bool live = true;
  };
  void* allocate(uint64_t bytes);
  /// False when `p` is not the start of a live allocation.
  bool free(void* p);
  /// The allocations (live and quarantined), sorted by base: what a launch checks against.
  std::vector<Allocation> snapshot();
  /// Whether [p, p + bytes) lies in one live allocation (for copies and memsets).
  bool valid(uintptr_t p, uint64_t bytes);

 private:
  std::mutex mutex_;
  std::map<uintptr_t, Allocation> table_;
  std::vector<uintptr_t> quarantine_;  // oldest first
  uint64_t quarantined_bytes_ = 0;
};

/// A compiled kernel: the wrapper that takes cuLaunchKernel's parameter array, and its static
/// shared memory.
struct Kernel {
  std::string name;
  void (*entry)(void** params) = nullptr;
  uint64_t static_shared = 0;
  uint64_t param_count = 0;
};

struct LaunchConfig {
  unsigned grid[3];
  unsigned block[3];
  unsigned dynamic_shared;
};

/// Runs a launch to completion. Returns an empty string, or the report of the first problem the
/// checks found (with how many more there were).
std::string run_kernel(const Kernel& kernel, const LaunchConfig& config, void** params, Memory& memory,
                       const Options& options);

/// Simulated CUDA threads run since the process started, and the seconds the launches took.
void totals(long long& threads, double& seconds);

}  // namespace fuse::runtime::sim
