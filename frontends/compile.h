// fuse::compile: a graph through the passes and a backend into something that runs.
#pragma once

#include "frontends/api.h"
#include "passes/pipeline.h"
#include "runtime/executable.h"

namespace fuse {

struct CompileOptions {
  passes::PipelineOptions pipeline;  // fusion on/off, fast math, the target's schedules
  /// Reuse compiled code from the in-memory and disk caches (codegen::compile_cpu); false
  /// compiles afresh and stores nothing (`fusec --no-cache`).
  bool use_cache = true;
};

/// Where compiled code runs: this machine's CPU. (The CUDA backend is its own issue; it will
/// add Target::cuda(device).)
struct Target {
  enum class Kind { Cpu };
  Kind kind = Kind::Cpu;
  static Target cpu() { return {}; }
};

/// Compiles for the CPU: the passes, then MLIR -> LLVM -> machine code for every kernel the CPU
/// backend handles (codegen::cpu_compiles: all but reductions/matmuls whose epilogue reorders
/// elements, which run in the reference interpreter until the backend covers them).
runtime::Executable compile(const ir::Graph& g, const CompileOptions& options = {});
/// The CPU backend alone, for a Program the passes made (`options.pipeline.simplify.fast_math`
/// turns on fast math in the code generator too).
runtime::Executable compile_program(ir::Program program, const CompileOptions& options = {});
inline runtime::Executable compile(const Graph& g, const CompileOptions& options = {}) {
  return compile(g.ir(), options);
}
/// The same, naming the target: `fuse::compile(graph, Target::cpu(), options)`.
inline runtime::Executable compile(const Graph& g, const Target& target, const CompileOptions& options = {}) {
  (void)target;  // only the CPU so far
  return compile(g.ir(), options);
}

}  // namespace fuse
