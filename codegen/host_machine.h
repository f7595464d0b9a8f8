// The LLVM target machine for this very CPU (internal to codegen/): what the CPU backend and the
// CUDA simulator compile their host code for. Defined in codegen/cpu/lower.cpp.
#pragma once

#include <memory>

#include "llvm/Support/CodeGen.h"
#include "llvm/Target/TargetMachine.h"

namespace fuse::codegen {

/// LLVM's native target, initialized once (thread-safe).
void initialize_llvm();

/// A target machine for the host CPU (its name and features, so AVX-512 is used where present):
/// position-independent, small code model, at optimization level `level`. Throws ir::Error.
std::unique_ptr<llvm::TargetMachine> host_target_machine(llvm::CodeGenOptLevel level = llvm::CodeGenOptLevel::Aggressive);

}  // namespace fuse::codegen
