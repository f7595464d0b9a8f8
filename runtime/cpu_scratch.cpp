#include "runtime/cpu_scratch.h"

#include <sys/mman.h>

#include <array>
#include <cstdlib>

#include "runtime/buffer.h"

namespace {

using fuse::runtime::Buffer;
using fuse::runtime::kKeptScratchBytes;
using fuse::runtime::kScratchSlots;

void* allocate(int64_t bytes) {
  bool huge = bytes >= static_cast<int64_t>(Buffer::kHugePageBytes);
  int64_t align = huge ? static_cast<int64_t>(Buffer::kHugePageBytes) : 64;
  int64_t rounded = (bytes + align - 1) / align * align;  // aligned_alloc wants a multiple
  void* p = std::aligned_alloc(static_cast<std::size_t>(align), static_cast<std::size_t>(rounded));
  if (p && huge) madvise(p, static_cast<std::size_t>(rounded), MADV_HUGEPAGE);  // only a hint
  return p;
}

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
  if (slot < 0 || slot >= kScratchSlots || bytes > kKeptScratchBytes) return allocate(bytes);
  Slot& s = t_scratch.slots[slot];
  if (s.capacity < bytes) {
    std::free(s.buffer);
    s.buffer = allocate(bytes);
    s.capacity = s.buffer ? bytes : 0;
  }
  return s.buffer;
}

extern "C" void fuse_cpu_scratch_release(int64_t slot, void* buffer) {
  if (slot >= 0 && slot < kScratchSlots && t_scratch.slots[slot].buffer == buffer && buffer) return;  // kept
  std::free(buffer);
}
