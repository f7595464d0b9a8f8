// fuse::compile: a graph through the passes and a backend into something that runs.
#pragma once

#include <memory>

#include "frontends/api.h"
#include "passes/pipeline.h"
#include "runtime/cuda_executable.h"
#include "runtime/executable.h"

namespace fuse {

struct CompileOptions {
  passes::PipelineOptions pipeline;  // fusion on/off, fast math, the target's schedules
  /// Reuse compiled code from the in-memory and disk caches (codegen::compile_cpu); false
  /// compiles afresh and stores nothing (`fusec --no-cache`).
  bool use_cache = true;
};

/// Where compiled code runs: this machine's CPU, or an NVIDIA GPU (compile_cuda).
struct Target {
  enum class Kind { Cpu, Cuda };
  Kind kind = Kind::Cpu;
  int device = 0;  // Cuda: the device ordinal
  /// Cuda: the compute capability to compile for (80: sm_80); 0: the device's own.
  int sm = 0;
  static Target cpu() { return {}; }
  static Target cuda(int device = 0, int sm = 0) { return {Kind::Cuda, device, sm}; }
  /// Cuda: the simulated CUDA device (runtime/sim/) instead of the driver; FUSE_CUDA_SIM=1
  /// selects it for every CUDA target.
  bool simulated = false;
  static Target cuda_sim() { return {Kind::Cuda, 0, 0, true}; }
};

/// Compiles for the CPU: the passes, then MLIR -> LLVM -> machine code for every kernel the CPU
/// backend handles (codegen::cpu_compiles: all but reductions/matmuls whose epilogue reorders
/// elements, which run in the reference interpreter until the backend covers them).
/// Thread-safe: several threads may compile (the same graph or others) at once.
runtime::Executable compile(const ir::Graph& g, const CompileOptions& options = {});
/// The CPU backend alone, for a Program the passes made (`options.pipeline.simplify.fast_math`
/// turns on fast math in the code generator too).
runtime::Executable compile_program(ir::Program program, const CompileOptions& options = {});
inline runtime::Executable compile(const Graph& g, const CompileOptions& options = {}) {
  return compile(g.ir(), options);
}
/// The same, naming the target: `fuse::compile(graph, Target::cpu(), options)`. A CUDA target
/// throws: GPU programs are compile_cuda's (another executable type).
runtime::Executable compile(const Graph& g, const Target& target, const CompileOptions& options = {});

/// Compiles for a GPU: the passes with CUDA schedules, PTX for `target.sm` (0: the device's
/// compute capability, or sm_80 when no device is there to ask), loaded onto `target.device`.
/// Throws runtime::cuda::Unavailable ("CUDA unavailable: ...") on a machine without a driver or
/// GPU; codegen::compile_cuda alone (fusec --target=cuda --emit=ptx|bundle) needs neither.
std::unique_ptr<runtime::CudaExecutable> compile_cuda(const ir::Graph& g, const Target& target = Target::cuda(),
                                                      const CompileOptions& options = {});
inline std::unique_ptr<runtime::CudaExecutable> compile_cuda(const Graph& g, const Target& target = Target::cuda(),
                                                             const CompileOptions& options = {}) {
  return compile_cuda(g.ir(), target, options);
}
/// The compute capability to generate PTX for on GPU `device`: its own, at most 90 (PTX for
/// sm_90 runs on later GPUs through the driver's JIT; LLVM 19 targets none newer). Throws
/// runtime::cuda::Unavailable without a driver or that GPU.
int cuda_sm_for_device(int device = 0);
/// The Program compiled for CUDA, unloaded: what an AOT bundle holds (runtime::write_bundle).
runtime::CudaProgram compile_cuda_program(const ir::Graph& g, int sm = 80, const CompileOptions& options = {});

}  // namespace fuse
