// The CPU backend's driver: a Program's kernels as one MLIR module (codegen/cpu/emitter.h emits
// each), lowered to the LLVM dialect, translated to LLVM IR, optimized and compiled to an object
// file or assembly for the host (cpu_jit.cpp caches and loads it). Transcendental functions call
// SLEEF (codegen/scalar_lowering.cpp); what SLEEF does not fit uses MLIR's polynomial
// approximations (they vectorize), LLVM intrinsics or libm.
#include "codegen/cpu/emitter.h"
#include "codegen/scalar_lowering.h"
#include "codegen/cpu_codegen.h"
#include "codegen/host_machine.h"
#include "ir/index_check.h"
#include "codegen/cpu_object.h"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Operator.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

namespace fuse::codegen {

bool cpu_compiles(const ir::Kernel& k) {
  if (k.kind == ir::KernelKind::Scatter) return k.schedule.form == ir::LoopForm::Scatter;
  // take / take_along_axis are indexed loads (codegen/emitter.cpp).
  for (const ir::Node& n : k.body.nodes)
    if (ir::is_gather_scatter(n.kind) && n.kind != ir::OpKind::Take && n.kind != ir::OpKind::TakeAlongAxis) return false;
  return ir::results_in_row_order(k);
}

int64_t split_scratch_bytes(const ir::Kernel& k) {
  return static_cast<int64_t>(ir::reduce_nodes(k).size()) * kSplitChunks * 8;
}

namespace {

std::string fail_text(const std::string& what) { return "internal error in CPU codegen: " + what; }

std::unique_ptr<mlir::MLIRContext> make_context() {
  auto context = std::make_unique<mlir::MLIRContext>();
  context->loadDialect<mlir::func::FuncDialect, mlir::arith::ArithDialect, mlir::math::MathDialect,
                       mlir::scf::SCFDialect, mlir::vector::VectorDialect, mlir::LLVM::LLVMDialect,
                       mlir::cf::ControlFlowDialect>();
  mlir::registerBuiltinDialectTranslation(*context);
  mlir::registerLLVMDialectTranslation(*context);
  return context;
}

// The kernels of `p` that the backend compiles, as functions named after the kernels.
mlir::OwningOpRef<mlir::ModuleOp> build_module(mlir::MLIRContext& context, const ir::Program& p,
                                               const CpuOptions& options, CpuObject& object) {
  object.symbols = program_symbols(p);
  const std::vector<std::string>& symbol_names = object.symbols;
  std::map<std::string, int> symbols;
  for (size_t i = 0; i < symbol_names.size(); ++i) symbols[symbol_names[i]] = static_cast<int>(i);
  mlir::OpBuilder b(&context);
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(b.getUnknownLoc());
  mlir::Type ptr = mlir::LLVM::LLVMPointerType::get(&context);
  object.compiled.assign(p.kernels.size(), false);
  object.constants.assign(p.kernels.size(), {});
  object.split_chunks.assign(p.kernels.size(), 0);
  object.scratch_bytes.assign(p.kernels.size(), 0);
  for (size_t ki = 0; ki < p.kernels.size(); ++ki) {
    const ir::Kernel& k = p.kernels[ki];
    if (k.schedule.form == ir::LoopForm::Interpreted) continue;
    object.compiled[ki] = true;
    b.setInsertionPointToEnd(module->getBody());
    auto func = b.create<mlir::func::FuncOp>(b.getUnknownLoc(), k.name,
                                             b.getFunctionType({ptr, ptr, b.getI64Type(), b.getI64Type()}, {}));
    CpuKernelEmitter emitter(b, k, symbols, options, object.constants[ki]);
    emitter.set_first_index_check(ir::first_index_check(p, static_cast<int>(ki)));
    emitter.emit(func);
    if (k.schedule.form == ir::LoopForm::SplitReduction) {
      b.setInsertionPointToEnd(module->getBody());
      auto finish = b.create<mlir::func::FuncOp>(b.getUnknownLoc(), k.name + "_finish",
                                                 b.getFunctionType({ptr, ptr, b.getI64Type(), b.getI64Type()}, {}));
      std::vector<ir::HostArray> same_constants;
      CpuKernelEmitter(b, k, symbols, options, same_constants).emit_split_finish(finish);
      object.split_chunks[ki] = kSplitChunks;
      object.scratch_bytes[ki] = split_scratch_bytes(k);
    }
    if (k.schedule.form == ir::LoopForm::ScanRows) {  // np-scan: the chunked form beside the rows
      auto add_function = [&](const std::string& suffix, void (CpuKernelEmitter::*emit)(mlir::func::FuncOp)) {
        b.setInsertionPointToEnd(module->getBody());
        auto f = b.create<mlir::func::FuncOp>(b.getUnknownLoc(), k.name + suffix,
                                              b.getFunctionType({ptr, ptr, b.getI64Type(), b.getI64Type()}, {}));
        std::vector<ir::HostArray> same_constants;
        CpuKernelEmitter chunked(b, k, symbols, options, same_constants);
        chunked.set_first_index_check(ir::first_index_check(p, static_cast<int>(ki)));  // a take in the prologue
        (chunked.*emit)(f);
      };
      add_function("_totals", &CpuKernelEmitter::emit_scan_totals);
      add_function("_finish", &CpuKernelEmitter::emit_scan_carries);
      add_function("_chunks", &CpuKernelEmitter::emit_scan_chunks);
      object.split_chunks[ki] = kScanChunks;
      object.scratch_bytes[ki] = kScanChunkedRows * kScanChunks * 8;
    }
    // histogram/bincount: the chunks' private bins are added up by a second function; the
    // runtime sizes their scratch per run (ir::scatter_chunks of B bins of 8 bytes).
    if (k.schedule.form == ir::LoopForm::Scatter && !(ir::scatter_bins(k) == ir::Dim(0))) {
      b.setInsertionPointToEnd(module->getBody());
      auto finish = b.create<mlir::func::FuncOp>(b.getUnknownLoc(), k.name + "_finish",
                                                 b.getFunctionType({ptr, ptr, b.getI64Type(), b.getI64Type()}, {}));
      std::vector<ir::HostArray> same_constants;
      CpuKernelEmitter(b, k, symbols, options, same_constants).emit_scatter_finish(finish);
      object.split_chunks[ki] = ir::scatter_chunks(0);  // (a marker: the runtime counts them per run)
    }
  }
  return module;
}

void lower_to_llvm(mlir::ModuleOp module) {
  mlir::MLIRContext* context = module.getContext();
  // Polynomial approximations first: they turn math.exp/log/sin/cos/tanh on f32 into
  // arithmetic that vectorizes, instead of scalar libm calls.
  mlir::RewritePatternSet approximations(context);
  mlir::populateMathPolynomialApproximationPatterns(approximations, {});
  if (mlir::failed(mlir::applyPatternsAndFoldGreedily(module, std::move(approximations))))
    throw ir::Error(fail_text("polynomial approximation did not converge"));

  // Keep MLIR's diagnostics for the error message: a failure here is a bug in fuse.
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(context, [&](mlir::Diagnostic& d) {
    diagnostics += "\n  " + d.str();
    return mlir::success();
  });
  mlir::PassManager cleanup(context);
  cleanup.addPass(mlir::createCanonicalizerPass());
  cleanup.addPass(mlir::createCSEPass());
  if (mlir::failed(cleanup.run(module))) throw ir::Error(fail_text("canonicalization failed:" + diagnostics));
  // After CSE, where sin(x) and cos(x) of one x take the same vector value: one SLEEF sincos.
  share_sleef_sincos(module);
  mlir::PassManager pm(context);
  pm.addPass(mlir::createConvertSCFToCFPass());
  // LLVM intrinsics first (fma, sqrt, floor: single instructions); libm only for what has none
  // (tan, f64 tanh), which unrolls vectors into vector ops, lowered next.
  pm.addPass(mlir::createConvertMathToLLVMPass());
  pm.addPass(mlir::createConvertMathToLibmPass());
  pm.addPass(mlir::createConvertVectorToLLVMPass());
  pm.addPass(mlir::createArithToLLVMConversionPass());
  pm.addPass(mlir::createConvertFuncToLLVMPass());
  pm.addPass(mlir::createConvertControlFlowToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
  if (mlir::failed(pm.run(module))) throw ir::Error(fail_text("lowering to the LLVM dialect failed:" + diagnostics));
}

std::string to_text(mlir::Operation* op) {
  std::string text;
  llvm::raw_string_ostream out(text);
  op->print(out);
  return text;
}

}  // namespace

void initialize_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

std::unique_ptr<llvm::TargetMachine> host_target_machine(llvm::CodeGenOptLevel level) {
  initialize_llvm();
  // LLVM vectorizes and schedules for this very CPU only when it knows it.
  auto host = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!host) throw ir::Error(fail_text("cannot detect the host CPU: " + llvm::toString(host.takeError())));
  host->setCodeGenOptLevel(level);
  // Position-independent, small code model: the JIT links one object at a time, its code and
  // constants close together (the default for JITs, the large model, costs a movabs per constant).
  host->setRelocationModel(llvm::Reloc::PIC_);
  host->setCodeModel(llvm::CodeModel::Small);
  auto machine = host->createTargetMachine();
  if (!machine) throw ir::Error(fail_text("cannot create a target machine for the host: " + llvm::toString(machine.takeError())));
  return std::move(*machine);
}

std::string emit_cpu_mlir(const ir::Program& p, const CpuOptions& options) {
  auto context = make_context();
  CpuObject object;
  auto module = build_module(*context, p, options, object);
  return to_text(module.get());
}

namespace {

// The kernels of `p` as LLVM IR (lowered, not yet optimized by LLVM).
std::unique_ptr<llvm::Module> to_llvm_ir(const ir::Program& p, const CpuOptions& options, llvm::LLVMContext& llvm_context,
                                         CpuObject& object) {
  initialize_llvm();
  auto context = make_context();
  auto module = build_module(*context, p, options, object);
  lower_to_llvm(module.get());
  std::unique_ptr<llvm::Module> llvm_module = mlir::translateModuleToLLVMIR(module.get(), llvm_context);
  if (!llvm_module) throw ir::Error(fail_text("translation to LLVM IR failed"));
  if (options.fast_math) {
    // LLVM's fast flags on every float instruction: reassociation (vectorized reductions),
    // reciprocals, no NaN/inf. Function attributes let the backend act on them too.
    for (llvm::Function& f : *llvm_module) {
      f.addFnAttr("unsafe-fp-math", "true");
      f.addFnAttr("no-nans-fp-math", "true");
      f.addFnAttr("no-infs-fp-math", "true");
      f.addFnAttr("no-signed-zeros-fp-math", "true");
      for (llvm::BasicBlock& block : f)
        for (llvm::Instruction& inst : block)
          if (llvm::isa<llvm::FPMathOperator>(inst)) inst.setFast(true);
    }
  }
  return llvm_module;
}


}  // namespace

std::string emit_cpu_llvm(const ir::Program& p, const CpuOptions& options) {
  llvm::LLVMContext llvm_context;
  CpuObject object;
  std::unique_ptr<llvm::Module> llvm_module = to_llvm_ir(p, options, llvm_context, object);
  std::string text;
  llvm::raw_string_ostream out(text);
  llvm_module->print(out, nullptr);
  return text;
}

CpuObject compile_cpu_object(const ir::Program& p, const CpuOptions& options, ObjectKind kind) {
  llvm::LLVMContext llvm_context;
  CpuObject object;
  std::unique_ptr<llvm::Module> llvm_module = to_llvm_ir(p, options, llvm_context, object);
  std::unique_ptr<llvm::TargetMachine> machine = host_target_machine();
  llvm_module->setDataLayout(machine->createDataLayout());
  llvm_module->setTargetTriple(machine->getTargetTriple().str());
  auto optimize = mlir::makeOptimizingTransformer(2, 0, machine.get());
  if (llvm::Error e = optimize(llvm_module.get()))
    throw ir::Error(fail_text("LLVM optimization failed: " + llvm::toString(std::move(e))));
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream out(buffer);
  llvm::legacy::PassManager codegen;
  auto file_type = kind == ObjectKind::Object ? llvm::CodeGenFileType::ObjectFile : llvm::CodeGenFileType::AssemblyFile;
  if (machine->addPassesToEmitFile(codegen, out, nullptr, file_type))
    throw ir::Error(fail_text("the host target cannot emit this file type"));
  codegen.run(*llvm_module);
  object.bytes.assign(buffer.begin(), buffer.end());
  return object;
}

std::string emit_cpu_asm(const ir::Program& p, const CpuOptions& options) {
  return compile_cpu_object(p, options, ObjectKind::Assembly).bytes;
}

std::string emit_cpu_object(const ir::Program& p, const CpuOptions& options) {
  return compile_cpu_object(p, options, ObjectKind::Object).bytes;
}

}  // namespace fuse::codegen
