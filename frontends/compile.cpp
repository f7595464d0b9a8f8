#include "frontends/compile.h"

#include <algorithm>

#include "codegen/cpu_codegen.h"
#include "codegen/cuda_codegen.h"
#include "codegen/cuda_sim.h"
#include "runtime/cuda_driver.h"

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

runtime::Executable compile(const Graph& g, const Target& target, const CompileOptions& options) {
  if (target.kind == Target::Kind::Cuda)
    throw ir::Error("fuse::compile makes CPU executables; compile for a GPU with fuse::compile_cuda");
  return compile(g.ir(), options);
}

int cuda_sm_for_device(int device) {
  runtime::cuda::DeviceInfo info = runtime::cuda::device_info(device);
  return std::min(info.major * 10 + info.minor, 90);
}

namespace {

runtime::CudaProgram cuda_program(const ir::Graph& g, int sm, const CompileOptions& options, bool simulated) {
  passes::PipelineOptions pipeline = options.pipeline;
  pipeline.target = passes::TargetInfo::cuda(sm);
  ir::Program program = passes::run_pipeline(g, pipeline).program;
  codegen::CudaOptions cuda;
  cuda.sm = sm;
  cuda.fast_math = pipeline.simplify.fast_math;
  codegen::CudaModule module = simulated ? codegen::compile_cuda_sim(program, cuda) : codegen::compile_cuda(program, cuda);
  return runtime::make_cuda_program(program, std::move(module.plan), std::move(module.ptx));
}

}  // namespace

runtime::CudaProgram compile_cuda_program(const ir::Graph& g, int sm, const CompileOptions& options) {
  return cuda_program(g, sm, options, false);
}

std::unique_ptr<runtime::CudaExecutable> compile_cuda(const ir::Graph& g, const Target& target,
                                                      const CompileOptions& options) {
  if (target.kind != Target::Kind::Cuda) throw ir::Error("fuse::compile_cuda needs a CUDA target (Target::cuda())");
  if (target.simulated) runtime::cuda::use_simulator();
  // The device first: without one, say so before compiling anything.
  int device_sm = cuda_sm_for_device(target.device);
  int sm = target.sm ? target.sm : device_sm;
  bool simulated = runtime::cuda::simulator_selected();
  return std::make_unique<runtime::CudaExecutable>(cuda_program(g, sm, options, simulated), target.device);
}

}  // namespace fuse
