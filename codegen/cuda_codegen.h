// CUDA code generation: Program kernels -> MLIR (gpu.module with an #nvvm.target; gpu, scf,
// arith, math, memref, vector, nvvm) -> NVVM -> PTX, plus the launch plan the runtime follows.
// Works on any machine: producing PTX needs no GPU and no driver.
//
// Thread safety: compile_cuda and the emit functions keep their MLIR and LLVM contexts per call:
// any number may run at once. CudaModule is plain data.
#pragma once

#include <string>

#include "ir/cuda_plan.h"
#include "ir/program.h"

namespace fuse::codegen {

struct CudaOptions {
  int sm = 80;                  // compute capability: sm_80 unless the device says otherwise
  /// The CUDA toolkit whose libdevice is linked; empty: $CUDA_HOME, $CUDA_PATH, then /usr/local/cuda.
  std::string toolkit_path;
  bool fast_math = false;
};

struct CudaModule {
  std::string ptx;      // PTX text (no trailing NUL)
  ir::CudaPlan plan;
};

/// Compiles every kernel of `p` (scheduled for TargetKind::Cuda) to one PTX module.
/// Throws fuse::ir::Error with a clear message on failure.
CudaModule compile_cuda(const ir::Program& p, const CudaOptions& options = {});

/// The MLIR before lowering (`fusec --target=cuda --emit=mlir`).
std::string emit_cuda_mlir(const ir::Program& p, const CudaOptions& options = {});
/// The LLVM IR (NVVM) handed to the NVPTX backend (`--target=cuda --emit=llvm`).
std::string emit_cuda_llvm(const ir::Program& p, const CudaOptions& options = {});

}  // namespace fuse::codegen
