// Scratch buffers of compiled CPU kernels (the blocked matmul's packed panels of A and B, its
// partial sums and its epilogue tile), kept per thread from one run to the next.
//
// A kernel used to aligned_alloc them per task and free them at its end. Each run then touched
// fresh pages (glibc returns large blocks to the system), and a page fault costs: on the
// 2-vCPU EPYC VM of 2026-11-25, a 2048^3 relu(x @ w + b) took 208 ms in its first two runs
// (5,249 page faults each), 118 in the next two (1,024) and 110 from then on (none), one thread.
// Kept, the buffers fault once per thread.
//
// Compiled kernels call these by name (codegen/cpu/emitter.cpp, allocate_slot); the CPU JIT
// defines the names as these functions (codegen/cpu_jit.cpp), and an object from
// `fusec --emit=obj` needs fuse_runtime to link.
//
// Thread safety: each thread has its own buffers. A slot is one buffer of one kernel task; a
// thread runs one task at a time. The claim flags are atomics, shared by a kernel's tasks.
#pragma once

#include <cstdint>

extern "C" {

/// A 64-byte aligned buffer of at least `bytes` bytes for scratch slot `slot` of the calling
/// thread: the slot's buffer from earlier tasks when it is large enough, else a new one.
/// Buffers of 2 MiB or more are 2 MiB aligned and advised to use transparent huge pages.
/// Returns null when out of memory (the kernel then faults; as aligned_alloc did).
void* fuse_cpu_scratch_acquire(int64_t slot, int64_t bytes);

/// Done with `buffer` (from fuse_cpu_scratch_acquire(slot, ...)) until the next task. A buffer
/// over kKeptScratchBytes is freed instead of kept.
void fuse_cpu_scratch_release(int64_t slot, void* buffer);

/// A blocked matmul's B packed once for all its tasks (ir::SharedPackedB): the claim flag of a
/// group of panels is 0 (free), 1 (being packed) or 2 (packed).
/// Claims a free group for the calling task: 1 when the task is to pack it, 0 when another has.
int32_t fuse_cpu_claim_panels(int32_t* flag);
/// The claimed group is packed: a release, so that a task that waits sees the panels.
void fuse_cpu_publish_panels(int32_t* flag);
/// Returns once the group is packed (an acquire). It spins, then yields: the task that claimed
/// the group is packing it and waits for nothing meanwhile.
void fuse_cpu_wait_for_panels(int32_t* flag);
}

namespace fuse::runtime {

inline constexpr int64_t kScratchSlots = 8;                   // more slots: allocated per task
inline constexpr int64_t kKeptScratchBytes = int64_t{64} << 20;  // per slot and thread

}  // namespace fuse::runtime
