// Internal to codegen: the NVVM-level LLVM module of a CUDA Program, exactly what the NVPTX
// backend receives (before libdevice is linked), for the CUDA simulator (cuda_sim.cpp). Not
// included outside codegen/.
#pragma once

#include <memory>

#include "codegen/cuda_codegen.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace fuse::codegen {

/// The gpu.module of `p` after the lowering that feeds NVPTX, translated to LLVM IR in
/// `llvm_context`; `plan` receives the launch plan.
std::unique_ptr<llvm::Module> lower_cuda_to_nvvm(const ir::Program& p, const CudaOptions& options,
                                                 llvm::LLVMContext& llvm_context, ir::CudaPlan& plan);

}  // namespace fuse::codegen
