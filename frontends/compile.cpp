#include "frontends/compile.h"

#include "codegen/cpu_codegen.h"

namespace fuse {

runtime::Executable compile(const ir::Graph& g, const CompileOptions& options) {
  return compile_program(passes::run_pipeline(g, options.pipeline).program);
}

runtime::Executable compile_program(ir::Program program) {
  std::shared_ptr<codegen::CpuModule> module = codegen::compile_cpu(program);
  runtime::CpuCode code;
  code.symbols = module->symbols();
  for (const codegen::CompiledKernel& k : module->kernels()) code.kernels.push_back({k.fn, k.constants});
  code.owner = module;
  return runtime::Executable(std::move(program), std::move(code));
}

}  // namespace fuse
