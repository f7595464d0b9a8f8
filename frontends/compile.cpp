#include "frontends/compile.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>

#include "codegen/cpu_codegen.h"
#include "codegen/cuda_codegen.h"
#include "codegen/cuda_sim.h"
#include "ir/cuda_plan.h"
#include "ir/kernel_forms.h"
#include "ir/printer.h"
#include "runtime/cuda_driver.h"

namespace fuse {
namespace {

// What each backend needs to know, from the target and the options: made here only.
codegen::CpuOptions cpu_options(const Compilation& c) {
  codegen::CpuOptions cpu;
  cpu.fast_math = c.options.pipeline.simplify.fast_math;
  cpu.use_cache = c.options.use_cache;
  return cpu;
}

codegen::CudaOptions cuda_options(const Compilation& c) {
  codegen::CudaOptions cuda;
  cuda.sm = c.target.sm;
  cuda.fast_math = c.options.pipeline.simplify.fast_math;
  return cuda;
}

const ir::Program& program(const Compilation& c) { return c.result.program; }

/// Every stage, in the order they are made, with its output on each target (null: the target
/// has no such stage).
using StageOutput = std::string (*)(const Compilation& c);
struct StageRow {
  Stage stage;
  std::string_view name;
  StageOutput cpu, cuda;
};
std::string print_source(const Compilation& c) { return ir::print_graph(c.graph); }
std::string print_program(const Compilation& c) { return ir::print_program(program(c)); }
const StageRow kStages[] = {
    {Stage::Graph, "graph", print_source, print_source},
    {Stage::Program, "fused", print_program, print_program},
    {Stage::Mlir, "mlir", [](const Compilation& c) { return codegen::emit_cpu_mlir(program(c), cpu_options(c)); },
     [](const Compilation& c) { return codegen::emit_cuda_mlir(program(c), cuda_options(c)); }},
    {Stage::Llvm, "llvm", [](const Compilation& c) { return codegen::emit_cpu_llvm(program(c), cpu_options(c)); },
     [](const Compilation& c) { return codegen::emit_cuda_llvm(program(c), cuda_options(c)); }},
    {Stage::Asm, "asm", [](const Compilation& c) { return codegen::emit_cpu_asm(program(c), cpu_options(c)); },
     nullptr},
    {Stage::Object, "obj", [](const Compilation& c) { return codegen::emit_cpu_object(program(c), cpu_options(c)); },
     nullptr},
    {Stage::Ptx, "ptx", nullptr,
     [](const Compilation& c) { return codegen::compile_cuda(program(c), cuda_options(c)).ptx; }},
    {Stage::Plan, "plan", [](const Compilation& c) { return ir::program_to_json(program(c)); },
     [](const Compilation& c) { return ir::print_cuda_plan(codegen::compile_cuda(program(c), cuda_options(c)).plan); }},
};

const StageRow& row(Stage s) {
  for (const StageRow& r : kStages)
    if (r.stage == s) return r;
  throw std::logic_error("a Stage without a row in kStages");
}

StageOutput stage_output(TargetKind kind, Stage s) { return kind == TargetKind::Cpu ? row(s).cpu : row(s).cuda; }

std::vector<Stage> stages_of(TargetKind kind) {
  std::vector<Stage> list;
  for (const StageRow& r : kStages)
    if (stage_output(kind, r.stage)) list.push_back(r.stage);
  return list;
}

// The target with what it leaves to the driver decided.
Target resolved(Target target) {
  if (target.simulated) runtime::cuda::use_simulator();
  if (target.kind == TargetKind::Cuda && target.sm == 0)
    target.sm = runtime::cuda::cuda_available() ? cuda_sm_for_device(target.device) : 80;
  return target;
}

void require_kind(const Compilation& c, TargetKind kind, std::string_view what) {
  if (c.target.kind != kind)
    throw ir::Error(std::string(what) + " needs a " + std::string(ir::target_kind_name(kind)) + " target, not " +
                    std::string(ir::target_kind_name(c.target.kind)));
}

}  // namespace

std::string_view stage_name(Stage s) { return row(s).name; }

const std::vector<Stage>& stages(TargetKind kind) {
  static const std::vector<Stage> cpu = stages_of(TargetKind::Cpu), cuda = stages_of(TargetKind::Cuda);
  return kind == TargetKind::Cpu ? cpu : cuda;
}

bool has_stage(TargetKind kind, Stage s) { return stage_output(kind, s) != nullptr; }

Compilation run_passes(const ir::Graph& g, const Target& target, const CompileOptions& options) {
  Compilation c{g, resolved(target), options, {}};
  c.options.pipeline.target = c.target;
  c.result = passes::run_pipeline(g, c.options.pipeline);
  return c;
}

std::string emit(const Compilation& c, Stage stage) {
  auto output = stage_output(c.target.kind, stage);
  if (!output)
    throw ir::Error("a " + std::string(ir::target_kind_name(c.target.kind)) + " target has no " +
                    std::string(stage_name(stage)) + " stage");
  return output(c);
}

namespace {

runtime::CpuCode cpu_code(std::shared_ptr<const codegen::CpuModule> module) {
  runtime::CpuCode code;
  code.symbols = module->symbols();
  for (const codegen::CompiledKernel& k : module->kernels())
    code.kernels.push_back({k.fn, k.constants, k.finish, k.split_chunks, k.scratch_bytes, k.scan_totals, k.scan_chunks,
                            k.scan_chunked_rows, k.scan_chunked_length, k.column_rows, {}, 0});
  code.owner = std::move(module);
  return code;
}

// The symbolic length a kernel is worth specializing to, and up to what size
// (runtime::CpuKernelCode::specialized_length):
// - a row kernel's rows with a transcendental's work per element or more (softmax's exp), bound
//   by that work even from memory, up to runtime::kSpecializedRowElements. Softmax over 65536 x
//   64 f32 (two threads, from memory): 0.82 ms specialized against 0.89-0.90; in cache 20%
//   faster. Cheaper rows are bound by memory there (layernorm over 65536 x 64: 0.71 ms
//   specialized against 0.69), but not when shorter than a vector or two: up to
//   runtime::kSpecializedCheapRowElements;
// - a column reduction's columns (one kept dim), up to ir::kMaxNarrowColumns and fewer than a
//   vector's lanes: compiled for a constant count they are read as one flat stretch of whole
//   vectors. sum(x, axis=0) of x[4M, 3] f32 on the Intel Xeon: 4.7 ms generic against 1.1. And
//   up to ir::kColumnWalkVectors vectors: their rows are walked once, the partial vector masked.
struct SpecializedLength {
  ir::Dim length;
  int64_t up_to = 0;
};
std::optional<SpecializedLength> specialized_length(const ir::Kernel& k) {
  if (k.schedule.form == ir::LoopForm::ReductionRows) {
    ir::Dim row = ir::num_elements(ir::reduced_dims(k));
    if (row.is_constant()) return std::nullopt;
    bool costly = ir::elementwise_cost(k) >= ir::kTranscendentalCost;
    return SpecializedLength{row, costly ? runtime::kSpecializedRowElements : runtime::kSpecializedCheapRowElements};
  }
  if (k.schedule.form == ir::LoopForm::ColumnReduction) {
    ir::Shape kept = ir::kept_dims(k);
    if (kept.size() != 1 || kept[0].is_constant()) return std::nullopt;
    int64_t lanes = k.schedule.cpu.vector_width;
    if (lanes < 2) return std::nullopt;
    int64_t up_to = std::max<int64_t>(std::min<int64_t>(ir::kMaxNarrowColumns, lanes - 1), ir::kColumnWalkVectors * lanes);
    return SpecializedLength{kept[0], up_to};
  }
  return std::nullopt;
}

}  // namespace

runtime::Executable load_cpu(Compilation c) {
  require_kind(c, TargetKind::Cpu, "load_cpu");
  runtime::CpuCode code = cpu_code(codegen::compile_cpu(program(c), cpu_options(c)));
  bool specializes = false;
  for (size_t ki = 0; ki < code.kernels.size(); ++ki) {
    if (std::optional<SpecializedLength> s = specialized_length(program(c).kernels[ki])) {
      code.kernels[ki].specialized_length = s->length;
      code.kernels[ki].specialized_up_to = s->up_to;
      specializes = true;
    }
  }
  if (specializes) {
    // The kernels whose specialized lengths mention a bound symbol, compiled again with it fixed; the
    // others are left to the generic code (marked interpreted here, so not compiled).
    code.specialize = [generic = std::make_shared<const ir::Program>(program(c)),
                       options = cpu_options(c)](const runtime::BoundSymbols& bound) {
      ir::Program special = *generic;
      for (ir::Kernel& k : special.kernels) {
        bool involved = false;
        if (std::optional<SpecializedLength> s = specialized_length(k))
          for (const std::string& name : s->length.symbol_names())
            for (const auto& b : bound) involved = involved || b.first == name;
        if (!involved) k.schedule.form = ir::LoopForm::Interpreted;
      }
      codegen::CpuOptions fixed = options;
      fixed.bound_symbols = bound;
      return cpu_code(codegen::compile_cpu(special, fixed));
    };
  }
  return runtime::Executable(std::move(c.result.program), std::move(code));
}

runtime::CudaProgram cuda_program(const Compilation& c) {
  require_kind(c, TargetKind::Cuda, "cuda_program");
  // The simulated device runs host code compiled from the same kernels (codegen/cuda_sim.h).
  codegen::CudaModule module = c.target.simulated || runtime::cuda::simulator_selected()
                                   ? codegen::compile_cuda_sim(program(c), cuda_options(c))
                                   : codegen::compile_cuda(program(c), cuda_options(c));
  return runtime::make_cuda_program(program(c), std::move(module.plan), std::move(module.ptx));
}

std::unique_ptr<runtime::CudaExecutable> load_cuda(const Compilation& c) {
  return std::make_unique<runtime::CudaExecutable>(cuda_program(c), c.target.device);
}

runtime::Executable compile(const ir::Graph& g, const Target& target, const CompileOptions& options) {
  if (target.kind == TargetKind::Cuda)
    throw ir::Error("fuse::compile makes CPU executables; compile for a GPU with fuse::compile_cuda");
  return load_cpu(run_passes(g, target, options));
}

runtime::Executable compile(const ir::Graph& g, const CompileOptions& options) {
  return compile(g, options.pipeline.target, options);
}

std::unique_ptr<runtime::CudaExecutable> compile_cuda(const ir::Graph& g, const Target& target,
                                                      const CompileOptions& options) {
  if (target.kind != TargetKind::Cuda) throw ir::Error("fuse::compile_cuda needs a CUDA target (Target::cuda())");
  if (target.simulated) runtime::cuda::use_simulator();
  // The device first: without one, say so before compiling anything.
  Target on_device = target;
  int device_sm = cuda_sm_for_device(target.device);
  if (!on_device.sm) on_device.sm = device_sm;
  return load_cuda(run_passes(g, on_device, options));
}

runtime::CudaProgram compile_cuda_program(const ir::Graph& g, const Target& target, const CompileOptions& options) {
  if (target.kind != TargetKind::Cuda)
    throw ir::Error("fuse::compile_cuda_program needs a CUDA target (Target::cuda())");
  return cuda_program(run_passes(g, target, options));
}

int cuda_sm_for_device(int device) {
  runtime::cuda::DeviceInfo info = runtime::cuda::device_info(device);
  return std::min(info.major * 10 + info.minor, 90);
}

}  // namespace fuse
