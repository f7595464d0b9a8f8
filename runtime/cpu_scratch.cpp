#include "runtime/cpu_scratch.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <thread>

#include "runtime/buffer.h"

namespace {

using fuse::runtime::allocate_aligned_host;
using fuse::runtime::kKeptScratchBytes;
using fuse::runtime::kScratchSlots;

struct Slot {
  void* buffer = nullptr;
  int64_t capacity = 0;
};

struct ThreadScratch {
  std::array<Slot, kScratchSlots> slots;
  ~ThreadScratch() {
    for (Slot& s : slots) std::free(s.buffer);
  }
};

thread_local ThreadScratch t_scratch;

}  // namespace

extern "C" void* fuse_cpu_scratch_acquire(int64_t slot, int64_t bytes) {
  if (bytes <= 0) bytes = 64;
  if (slot < 0 || slot >= kScratchSlots || bytes > kKeptScratchBytes)
    return allocate_aligned_host(static_cast<std::size_t>(bytes));  // per task
  Slot& s = t_scratch.slots[slot];
  if (s.capacity < bytes) {
    std::free(s.buffer);
    s.buffer = allocate_aligned_host(static_cast<std::size_t>(bytes));
    s.capacity = s.buffer ? bytes : 0;
  }
  return s.buffer;
}

extern "C" void fuse_cpu_scratch_release(int64_t slot, void* buffer) {
  if (slot >= 0 && slot < kScratchSlots && t_scratch.slots[slot].buffer == buffer && buffer) return;  // kept
  std::free(buffer);
}

extern "C" int32_t fuse_cpu_claim_panels(int32_t* flag) {
  int32_t free = 0;
  return std::atomic_ref<int32_t>(*flag).compare_exchange_strong(free, 1, std::memory_order_relaxed) ? 1 : 0;
}

extern "C" void fuse_cpu_publish_panels(int32_t* flag) { std::atomic_ref<int32_t>(*flag).store(2, std::memory_order_release); }

extern "C" void fuse_cpu_wait_for_panels(int32_t* flag) {
  std::atomic_ref<int32_t> state(*flag);
  // A group takes microseconds to pack; past that the claimer has likely lost its core.
  for (int spins = 0; state.load(std::memory_order_acquire) != 2; ++spins) {
    if (spins < 4096) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}
