// The contract between the CUDA simulator's code generator (codegen/cuda_sim.cpp) and the
// simulated device (runtime/sim/): the module image format and the functions rewritten kernels
// call. ir/ is the one place both may include.
//
// A simulated module image (what cuModuleLoadDataEx receives in place of PTX) is
//   "FUSESIM1 <decimal byte count>\n" followed by an ELF object for the host.
// The object defines, for each kernel entry E:
//   void __fuse_sim_entry_E(void** params)   calls E with the launch's parameters
//   uint64_t __fuse_sim_shared_E             E's static shared memory in bytes (the dynamic
//                                            shared memory follows it, 16-byte aligned)
//   uint64_t __fuse_sim_params_E             E's parameter count (each 8 bytes)
// and calls the simulator functions below, which the device resolves when it loads the object.
#pragma once

#include <cstdint>

namespace fuse::ir::cuda_sim {

inline constexpr const char* kImageMagic = "FUSESIM1 ";
inline constexpr const char* kEntryPrefix = "__fuse_sim_entry_";
inline constexpr const char* kSharedSizePrefix = "__fuse_sim_shared_";
inline constexpr const char* kParamCountPrefix = "__fuse_sim_params_";

/// The special registers: `int32_t __fuse_sim_sreg(int32_t which)`.
enum SpecialRegister : int32_t {
  kTidX, kTidY, kTidZ, kNtidX, kNtidY, kNtidZ, kCtaidX, kCtaidY, kCtaidZ, kNctaidX, kNctaidY, kNctaidZ,
  kLaneId, kWarpSize, kNumSpecialRegisters
};

/// shfl.sync modes: `uint64_t __fuse_sim_shfl(int32_t mode, uint32_t mask, uint32_t value,
/// uint32_t b, uint32_t c, const char* site)` returns the value in the low 32 bits and the
/// predicate in bit 32.
enum ShuffleMode : int32_t { kShflUp, kShflDown, kShflBfly, kShflIdx };

/// Memory accesses: `void* __fuse_sim_access(void* p, uint64_t bytes, uint32_t flags,
/// uint64_t align, const char* site)` checks an access and returns the pointer to use (a harmless
/// scratch location when the access is invalid, so that a reported kernel never crashes the host).
enum AccessFlags : uint32_t { kRead = 1, kWrite = 2, kAtomic = 4 };

// Also: void __fuse_sim_barrier(const char* site); void* __fuse_sim_shared_base().
// Sites are NUL-terminated strings "kernel: what" that reports quote.

}  // namespace fuse::ir::cuda_sim
