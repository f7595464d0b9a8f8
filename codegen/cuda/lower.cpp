// The CUDA backend's driver: a Program's kernels as one gpu.module with an #nvvm.target
// (codegen/cuda/emitter.h emits each kernel and its launches), lowered through the GPU, NVVM and
// LLVM dialects to LLVM IR and by LLVM's NVPTX backend to PTX, with libdevice linked where the
// kernels call it.
#include "codegen/cuda_codegen.h"
#include "codegen/cuda_nvvm.h"
#include "ir/index_check.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "codegen/cuda/emitter.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/ConvertToLLVM/ToLLVMPass.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

namespace fuse::codegen {

namespace {

std::string fail_text(const std::string& what) { return "internal error in CUDA codegen: " + what; }

std::unique_ptr<mlir::MLIRContext> make_context() {
  mlir::DialectRegistry registry;
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  mlir::registerNVVMDialectTranslation(registry);
  mlir::registerGPUDialectTranslation(registry);
  mlir::NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  mlir::arith::registerConvertArithToLLVMInterface(registry);  // for convert-to-llvm (lower())
  mlir::cf::registerConvertControlFlowToLLVMInterface(registry);
  auto context = std::make_unique<mlir::MLIRContext>(registry);
  context->loadDialect<mlir::gpu::GPUDialect, mlir::arith::ArithDialect, mlir::math::MathDialect, mlir::scf::SCFDialect,
                       mlir::LLVM::LLVMDialect, mlir::NVVM::NVVMDialect, mlir::cf::ControlFlowDialect>();
  return context;
}

struct Built {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::gpu::GPUModuleOp gpu_module;
  ir::CudaPlan plan;
};

// The compute capabilities LLVM 19's NVPTX backend generates code for (newer GPUs JIT-compile
// sm_90 PTX) that CUDA 13's ptxas still accepts.
void check_sm(int sm) {
  static const int known[] = {75, 80, 86, 87, 89, 90};
  if (std::find(std::begin(known), std::end(known), sm) == std::end(known))
    throw ir::Error("CUDA codegen: sm_" + std::to_string(sm) +
                    " is not a target of LLVM 19's NVPTX backend (sm_75, sm_80, sm_86, sm_87, sm_89, sm_90); newer GPUs "
                    "run sm_90 PTX (the driver compiles it for them)");
}

Built build_module(mlir::MLIRContext& context, const ir::Program& p, const CudaOptions& options) {
  check_sm(options.sm);
  Built built;
  built.plan.sm = "sm_" + std::to_string(options.sm);
  built.plan.symbols = program_symbols(p);
  mlir::OpBuilder b(&context);
  built.module = mlir::ModuleOp::create(b.getUnknownLoc());
  (*built.module)->setAttr(mlir::gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  b.setInsertionPointToEnd(built.module->getBody());
  auto target = mlir::NVVM::NVVMTargetAttr::get(&context, /*optLevel=*/3, "nvptx64-nvidia-cuda", built.plan.sm, "+ptx80");
  built.gpu_module = b.create<mlir::gpu::GPUModuleOp>(b.getUnknownLoc(), "fuse_kernels", mlir::ArrayRef<mlir::Attribute>{target});
  for (int ki : p.launch_order) {
    const ir::Kernel& k = p.kernels.at(static_cast<size_t>(ki));
    if (k.schedule.target != ir::TargetKind::Cuda)
      throw ir::Error("kernel " + k.name + " is not scheduled for CUDA (run the pipeline with a CUDA target)");
    CudaKernelEmitter emitter(b, k, ki, built.plan.symbols, options, built.plan);
    emitter.set_first_index_check(ir::first_index_check(p, ki));
    emitter.emit(built.gpu_module);
  }
  return built;
}

std::string to_text(mlir::Operation* op) {
  std::string text;
  llvm::raw_string_ostream out(text);
  op->print(out);
  return text;
}

// Lowers the gpu.module to the LLVM and NVVM dialects. The order matters: math -> llvm runs
// after gpu -> nvvm, which sends math.exp etc. to libdevice (NVPTX cannot select llvm.exp.f32).
void lower(Built& built) {
  mlir::MLIRContext* context = built.module->getContext();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(context, [&](mlir::Diagnostic& d) {
    diagnostics += "\n  " + d.str();
    return mlir::success();
  });
  mlir::PassManager pm(context);
  mlir::OpPassManager& device = pm.nest<mlir::gpu::GPUModuleOp>();
  // Fold first. convert-gpu-to-nvvm begins with a greedy rewrite (gpu.all_reduce etc., with
  // folding) and fails the pass with no diagnostic if that does not converge in 10 iterations.
  // Random graph 1371 (`x mod 1` folds to 0, and with it a whole 16-way unrolled on-chip row)
  // failed that way; folded beforehand by the canonicalizer, which does not fail on
  // non-convergence, the pass has next to nothing left to fold. (mlir-opt-19 on the printed IR
  // converges, so the exact trigger depends on the in-memory op order.)
  //
  // SCF becomes branches only after convert-gpu-to-nvvm, and no canonicalizer merges blocks:
  // MLIR 19's mergeIdenticalBlocks (on in the canonicalizer and in that pass's greedy rewrite)
  // miscompiles blocks that already have arguments when an op uses one value twice (fixed
  // upstream in llvm-project#102038, MLIR 20). Seed 170285 of test_np_random: a row
  // reduction's epilogue `r * r + take(x, i)`, emitted alike in the on-chip and the by-loops
  // branch, became `take * r + take` (tests/test_gather.cpp). LLVM's own CFG simplification
  // merges blocks later, correctly. cf and arith -> llvm then come from convert-to-llvm.
  mlir::GreedyRewriteConfig no_block_merging;
  no_block_merging.enableRegionSimplification = mlir::GreedySimplifyRegionLevel::Normal;
  device.addPass(mlir::createCanonicalizerPass(no_block_merging));
  mlir::ConvertGpuOpsToNVVMOpsOptions nvvm;
  nvvm.indexBitwidth = 64;
  device.addPass(mlir::createConvertGpuOpsToNVVMOps(nvvm));
  device.addPass(mlir::createConvertSCFToCFPass());
  device.addPass(mlir::createConvertToLLVMPass());
  device.addPass(mlir::createConvertMathToLLVMPass());
  device.addPass(mlir::createCanonicalizerPass(no_block_merging));
  device.addPass(mlir::createCSEPass());
  device.addPass(mlir::createReconcileUnrealizedCastsPass());
  if (mlir::failed(pm.run(*built.module))) {
    if (diagnostics.empty()) diagnostics = " a pass failed without a diagnostic (see codegen/cuda/lower.cpp)";
    throw ir::Error(fail_text("lowering to NVVM failed:" + diagnostics));
  }
}

// The toolkit whose libdevice is linked: the option, else $CUDA_HOME, $CUDA_PATH, /usr/local/cuda.
std::string toolkit_path(const CudaOptions& options) {
  if (!options.toolkit_path.empty()) return options.toolkit_path;
  for (const char* name : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(name); v && *v) return v;
  return "/usr/local/cuda";
}

bool calls_libdevice(mlir::gpu::GPUModuleOp module) {
  bool found = false;
  module.walk([&](mlir::LLVM::LLVMFuncOp f) { found = found || f.getName().starts_with("__nv_"); });
  return found;
}

}  // namespace

std::string emit_cuda_mlir(const ir::Program& p, const CudaOptions& options) {
  auto context = make_context();
  Built built = build_module(*context, p, options);
  return to_text(built.module.get());
}

std::string emit_cuda_llvm(const ir::Program& p, const CudaOptions& options) {
  auto context = make_context();
  Built built = build_module(*context, p, options);
  lower(built);
  llvm::LLVMContext llvm_context;
  std::unique_ptr<llvm::Module> llvm_module = mlir::translateModuleToLLVMIR(built.gpu_module.getOperation(), llvm_context, "fuse_kernels");
  if (!llvm_module) throw ir::Error(fail_text("translation to LLVM IR failed"));
  std::string text;
  llvm::raw_string_ostream out(text);
  llvm_module->print(out, nullptr);
  return text;
}

// ---- the CUDA simulator's entry point (codegen/cuda_sim.cpp): the same lowering, no NVPTX ----
std::unique_ptr<llvm::Module> lower_cuda_to_nvvm(const ir::Program& p, const CudaOptions& options,
                                                 llvm::LLVMContext& llvm_context, ir::CudaPlan& plan) {
  auto context = make_context();
  Built built = build_module(*context, p, options);
  lower(built);
  std::unique_ptr<llvm::Module> m = mlir::translateModuleToLLVMIR(built.gpu_module.getOperation(), llvm_context, "fuse_kernels");
  if (!m) throw ir::Error(fail_text("translation to LLVM IR failed"));
  plan = std::move(built.plan);
  return m;
}

CudaModule compile_cuda(const ir::Program& p, const CudaOptions& options) {
  auto context = make_context();
  Built built = build_module(*context, p, options);
  lower(built);
  std::string toolkit;
  if (calls_libdevice(built.gpu_module)) {
    toolkit = toolkit_path(options);
    std::string libdevice = toolkit + "/nvvm/libdevice/libdevice.10.bc";
    if (!std::filesystem::is_regular_file(libdevice))
      throw ir::Error("CUDA codegen: the kernels call libdevice (exp, log, sin, pow...) but " + libdevice +
                      " does not exist; set CUDA_HOME to the CUDA toolkit");
  }
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(context.get(), [&](mlir::Diagnostic& d) {
    diagnostics += "\n  " + d.str();
    return mlir::success();
  });
  auto target = mlir::cast<mlir::gpu::TargetAttrInterface>(built.gpu_module.getTargetsAttr()[0]);
  std::optional<llvm::SmallVector<char, 0>> ptx =
      target.serializeToObject(built.gpu_module.getOperation(), mlir::gpu::TargetOptions(toolkit, {}, "", mlir::gpu::CompilationTarget::Assembly));
  if (!ptx) throw ir::Error(fail_text("PTX generation failed:" + diagnostics));
  CudaModule result;
  result.ptx.assign(ptx->begin(), ptx->end());
  while (!result.ptx.empty() && result.ptx.back() == '\0') result.ptx.pop_back();  // cuModuleLoadData's NUL
  result.plan = std::move(built.plan);
  return result;
}

}  // namespace fuse::codegen
