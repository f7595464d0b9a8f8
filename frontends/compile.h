// The driver: the one place that takes a Graph through an ordered list of stages to an artifact
// or to something that runs, for each target. The C++ API (compile, compile_cuda), `fusec
// --emit=KIND` and `fusec run` all walk it:
//
//   cpu:   graph -> program -> mlir -> llvm -> asm | obj -> Executable (the object, JIT-loaded)
//   cuda:  graph -> program -> mlir -> llvm -> ptx + plan -> CudaProgram (a bundle) -> CudaExecutable
//
// graph -> program is the pass pipeline (passes/pipeline.cpp); the rest is codegen/, called from
// frontends/compile.cpp only.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "frontends/api.h"
#include "ir/target.h"
#include "passes/pipeline.h"
#include "runtime/cuda_executable.h"
#include "runtime/executable.h"

namespace fuse {

/// What code is compiled for: Target::host(), Target::cpu("avx2,l1=48K,..."), Target::cuda(device,
/// sm). The same struct the passes schedule for (ir/target.h).
using Target = ir::Target;
using TargetKind = ir::TargetKind;

struct CompileOptions {
  /// Fusion on/off, fast math, and the target the schedules are chosen for (a function that takes
  /// a Target sets pipeline.target to it).
  passes::PipelineOptions pipeline;
  /// Reuse compiled code from the in-memory and disk caches (codegen::compile_cpu); false
  /// compiles afresh and stores nothing (`fusec --no-cache`).
  bool use_cache = true;
};

/// The stages whose output can be printed (`fusec --emit=KIND`).
enum class Stage {
  Graph,    // the graph as written
  Program,  // after the passes: buffers, kernels and their schedules (`--emit=fused`)
  Mlir,     // the kernels in MLIR, before lowering (cuda: the gpu.module)
  Llvm,     // LLVM IR after lowering, before LLVM's optimizations (cuda: the NVVM IR)
  Asm,      // cpu: this machine's assembly
  Object,   // cpu: an ELF object, the bytes the JIT loads (binary)
  Ptx,      // cuda: PTX with libdevice linked; needs no GPU
  Plan,     // what the runtime follows: cpu, the Program as JSON; cuda, the launch plan
};
/// The name `fusec --emit` gives the stage ("graph", "fused", "mlir", ...).
std::string_view stage_name(Stage s);
/// The stages a target has, in the order they are made.
const std::vector<Stage>& stages(TargetKind kind);
bool has_stage(TargetKind kind, Stage s);

/// A graph partway through the driver, after its first stage; every later stage starts here.
struct Compilation {
  ir::Graph graph;                 // as written
  Target target;                   // resolved: a CUDA target's sm is set
  CompileOptions options;          // as given, with pipeline.target = target
  passes::PipelineResult result;   // the graph after the passes, the fusion partition, the Program
};

/// graph -> program: resolves the target (a CUDA sm of 0 becomes the device's, at most 90, or 80
/// when no GPU is there to ask) and runs the passes, scheduling for it.
Compilation run_passes(const ir::Graph& g, const Target& target, const CompileOptions& options = {});

/// The output of `stage`: text, or an ELF object's bytes for Stage::Object. Throws ir::Error when
/// the target has no such stage (see stages()).
std::string emit(const Compilation& c, Stage stage);

/// The last stage on a CPU: every kernel the CPU backend handles (codegen::cpu_compiles: all but
/// reductions/matmuls whose epilogue reorders elements, which run in the reference interpreter
/// until the backend covers them) compiled, or found in the caches, and JIT-loaded. Takes the
/// Program from `c`: move `c` in when it is not needed afterwards.
runtime::Executable load_cpu(Compilation c);
/// The PTX and launch plan with the Program's interface, unloaded: what an AOT bundle holds
/// (runtime::write_bundle). Needs no GPU.
runtime::CudaProgram cuda_program(const Compilation& c);
/// The last stage on a GPU: cuda_program loaded onto `c.target.device`.
std::unique_ptr<runtime::CudaExecutable> load_cuda(const Compilation& c);

// ---- The C++ API: every stage in one call ----

/// Compiles for the CPU `target` describes (the schedules follow its vector width and caches; the
/// code runs here): run_passes, then load_cpu. A CUDA target throws: GPU programs are
/// compile_cuda's (another executable type). Thread-safe: several threads may compile (the same
/// graph or others) at once.
runtime::Executable compile(const ir::Graph& g, const Target& target, const CompileOptions& options = {});
/// The same for `options.pipeline.target` (by default the host).
runtime::Executable compile(const ir::Graph& g, const CompileOptions& options = {});
inline runtime::Executable compile(const Graph& g, const Target& target, const CompileOptions& options = {}) {
  return compile(g.ir(), target, options);
}
inline runtime::Executable compile(const Graph& g, const CompileOptions& options = {}) {
  return compile(g.ir(), options);
}

/// Compiles for a GPU: PTX for `target.sm` (0: the device's compute capability), loaded onto
/// `target.device`. Asks the device first, so it throws runtime::cuda::Unavailable ("CUDA
/// unavailable: ...") on a machine without a driver or GPU before compiling anything;
/// compile_cuda_program (fusec --target=cuda --emit=ptx|bundle) needs neither.
std::unique_ptr<runtime::CudaExecutable> compile_cuda(const ir::Graph& g, const Target& target = Target::cuda(),
                                                      const CompileOptions& options = {});
inline std::unique_ptr<runtime::CudaExecutable> compile_cuda(const Graph& g, const Target& target = Target::cuda(),
                                                             const CompileOptions& options = {}) {
  return compile_cuda(g.ir(), target, options);
}
/// The Program compiled for the CUDA `target`, unloaded: run_passes, then cuda_program.
runtime::CudaProgram compile_cuda_program(const ir::Graph& g, const Target& target,
                                          const CompileOptions& options = {});

/// The compute capability to generate PTX for on GPU `device`: its own, at most 90 (PTX for
/// sm_90 runs on later GPUs through the driver's JIT; LLVM 19 targets none newer). Throws
/// runtime::cuda::Unavailable without a driver or that GPU.
int cuda_sm_for_device(int device = 0);

}  // namespace fuse
