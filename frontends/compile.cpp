#include "frontends/compile.h"

#include "codegen/cpu_codegen.h"

namespace fuse {

runtime::Executable compile(const ir::Graph& g, const CompileOptions& options) {
  return compile_program(passes::run_pipeline(g, options.pipeline).program, options);
}

runtime::Executable compile_program(ir::Program program, const CompileOptions& options) {
  codegen::CpuOptions cpu;
  cpu.fast_math = options.pipeline.simplify.fast_math;
  cpu.use_cache = options.use_cache;
  std::shared_ptr<const codegen::CpuModule> module = codegen::compile_cpu(program, cpu);
  runtime::CpuCode code;
  code.symbols = module->symbols();
  for (const codegen::CompiledKernel& k : module->kernels()) code.kernels.push_back({k.fn, k.constants, k.finish, k.split_chunks, k.scratch_bytes});
  code.owner = module;
  return runtime::Executable(std::move(program), std::move(code));
}

}  // namespace fuse
