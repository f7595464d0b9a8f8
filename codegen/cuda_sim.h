// The CUDA simulator's code generator: the kernels at the NVVM level (the very LLVM IR the NVPTX
// backend receives), with every NVVM operation rewritten into a call to the simulated device
// (runtime/sim/), compiled for the host. The contract with the device is ir/cuda_sim_abi.h.
//
// Rewritten: the special registers (tid, ntid, ctaid, nctaid, laneid, warpsize), barrier0,
// shfl.sync (up, down, bfly, idx; with and without the predicate), membar (a no-op: a block runs
// on one host thread); workgroup memory (address-space-3 globals) becomes offsets into the
// block's shared arena; every load and store goes through the device's access check. Any other
// NVVM intrinsic is a compile error naming it.
//
// libdevice is not linked: each `__nv_NAME` call becomes the host libm's NAME (glibc), `__nv_rsqrt`
// 1/sqrt. fuse calls libdevice only for f64 math (f32 transcendentals are computed in f64 and
// rounded once, see codegen/scalar_lowering.h), where both are within 2 ulp of the exact result;
// the f32 results agree with the GPU's except near rounding boundaries. docs/testing.md gives the
// measured differences.
#pragma once

#include <string>
#include <vector>

#include "codegen/cuda_codegen.h"

namespace fuse::codegen {

/// Compiles every kernel of `p` (scheduled for CUDA) for the simulated device: `ptx` holds the
/// simulator's module image (ir/cuda_sim_abi.h), `plan` the same launch plan compile_cuda makes.
CudaModule compile_cuda_sim(const ir::Program& p, const CudaOptions& options = {});

/// The simulator's module image for NVVM-level LLVM IR text (as `fusec --target=cuda --emit=llvm`
/// prints it), with `entries` its kernels: how tests run hand-written, deliberately broken kernels.
std::string compile_cuda_sim_ir(const std::string& nvvm_ir, const std::vector<std::string>& entries);

/// The rewritten host LLVM IR, before optimization (`fusec --target=cuda-sim --emit=llvm`).
std::string emit_cuda_sim_llvm(const ir::Program& p, const CudaOptions& options = {});

}  // namespace fuse::codegen
