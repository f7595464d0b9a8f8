// CPU code generation: Program kernels -> MLIR (func, scf, arith, math, vector, llvm) -> LLVM
// -> machine code in an in-process JIT. The only part of fuse that sees MLIR or LLVM headers;
// this interface is plain C++.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/program.h"

namespace fuse::codegen {

/// The ABI of every compiled CPU kernel: `buffers` holds the kernel's buffers (its inputs, then
/// its outputs, then the constants it reads, see CompiledKernel), `symbols` the size of every
/// shape symbol (CpuModule::symbols order), and [begin, end) the range of the kernel's flattened
/// parallel iterations to compute (the runtime's thread pool splits the whole range).
using CpuKernelFn = void (*)(void* const* buffers, const int64_t* symbols, int64_t begin, int64_t end);

struct CompiledKernel {
  CpuKernelFn fn = nullptr;            // null: this kernel kind is not compiled yet
  std::vector<ir::HostArray> constants;  // passed after the kernel's outputs, in this order
};

/// A JIT-compiled Program. Owns the machine code: function pointers live as long as it does.
class CpuModule {
 public:
  ~CpuModule();
  CpuModule(const CpuModule&) = delete;
  CpuModule& operator=(const CpuModule&) = delete;

  const std::vector<std::string>& symbols() const { return symbols_; }  // sorted
  const std::vector<CompiledKernel>& kernels() const { return kernels_; }  // as Program::kernels

  struct Engine;  // the JIT (hidden: it is an MLIR type)

 private:
  friend std::unique_ptr<CpuModule> compile_cpu(const ir::Program&);
  CpuModule() = default;
  std::unique_ptr<Engine> engine_;
  std::vector<std::string> symbols_;
  std::vector<CompiledKernel> kernels_;
};

/// Whether the CPU backend compiles this kernel (the others run in the reference interpreter).
bool cpu_compiles(const ir::Kernel& k);

/// Compiles the kernels the backend handles, following their CPU schedules (vector width).
std::unique_ptr<CpuModule> compile_cpu(const ir::Program& p);
/// The MLIR of the compiled kernels, before lowering (`fusec --emit=mlir`).
std::string emit_cpu_mlir(const ir::Program& p);
/// The LLVM IR after lowering to the LLVM dialect, before LLVM's optimizations (`fusec --emit=llvm`).
std::string emit_cpu_llvm(const ir::Program& p);

}  // namespace fuse::codegen
