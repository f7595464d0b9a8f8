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
#include "ir/scalar.h"
#include "codegen/cpu_object.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>
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
  // No thread pool of MLIR's own: compile_cpu_object runs its parts on threads already.
  auto context = std::make_unique<mlir::MLIRContext>(mlir::MLIRContext::Threading::DISABLED);
  context->loadDialect<mlir::func::FuncDialect, mlir::arith::ArithDialect, mlir::math::MathDialect,
                       mlir::scf::SCFDialect, mlir::vector::VectorDialect, mlir::LLVM::LLVMDialect,
                       mlir::cf::ControlFlowDialect>();
  mlir::registerBuiltinDialectTranslation(*context);
  mlir::registerLLVMDialectTranslation(*context);
  return context;
}

// The kernels of `p` that the backend compiles, as functions named after the kernels.
// `include` (empty: every kernel) picks the kernels of one part of compile_cpu_object.
mlir::OwningOpRef<mlir::ModuleOp> build_module(mlir::MLIRContext& context, const ir::Program& p,
                                               const CpuOptions& options, CpuObject& object,
                                               const std::vector<bool>& include = {}) {
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
    if (k.schedule.form == ir::LoopForm::Interpreted || (!include.empty() && !include[ki])) continue;
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
    // A further function of the kernel, `name` + suffix, with the kernel's ABI (and its index
    // checks: a take in the prologue).
    auto add_function = [&](const std::string& suffix, void (CpuKernelEmitter::*emit)(mlir::func::FuncOp)) {
      b.setInsertionPointToEnd(module->getBody());
      auto f = b.create<mlir::func::FuncOp>(b.getUnknownLoc(), k.name + suffix,
                                            b.getFunctionType({ptr, ptr, b.getI64Type(), b.getI64Type()}, {}));
      std::vector<ir::HostArray> same_constants;
      CpuKernelEmitter emitter(b, k, symbols, options, same_constants);
      emitter.set_first_index_check(ir::first_index_check(p, static_cast<int>(ki)));
      (emitter.*emit)(f);
    };
    if (ir::column_reduction_may_split(k)) {  // the form split over rows, beside the columns'
      add_function("_rows", &CpuKernelEmitter::emit_column_split_chunks);
      add_function("_finish", &CpuKernelEmitter::emit_column_split_finish);
      object.split_chunks[ki] = ir::kColumnSplitChunks;
      // (per column: each reduction's chunks of 8-byte accumulators)
      object.scratch_bytes[ki] = static_cast<int64_t>(ir::reduce_nodes(k).size()) * ir::kColumnSplitChunks * 8;
    }
    if (k.schedule.form == ir::LoopForm::ScanRows) {  // np-scan: the chunked form beside the rows
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
                                         CpuObject& object, const std::vector<bool>& include = {}) {
  initialize_llvm();
  auto context = make_context();
  auto module = build_module(*context, p, options, object, include);
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

namespace {

// One part of compile_cpu_object: the kernels in `include` (empty: all) as one object.
CpuObject compile_part(const ir::Program& p, const CpuOptions& options, ObjectKind kind, const std::vector<bool>& include) {
  llvm::LLVMContext llvm_context;
  CpuObject object;
  std::unique_ptr<llvm::Module> llvm_module = to_llvm_ir(p, options, llvm_context, object, include);
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
  object.parts.emplace_back(buffer.begin(), buffer.end());
  return object;
}

// A kernel's compile time, roughly, in milliseconds on the Zen 4 VM: LLVM's O2 and instruction
// selection dominate and grow with the code the form emits. Measured one kernel per part on the
// transformer block: a blocked matmul about 110 ms (packing, micro-kernel, edge paths), 170 ms
// with its GELU epilogue (emitted once per vector of a tile row, in the whole- and edge-tile
// paths), row-wise kernels about 50 ms.
int64_t compile_cost(const ir::Kernel& k) {
  int64_t scalar_cost = ir::elementwise_cost(k);
  if (k.kind == ir::KernelKind::Matmul) return 100 + 4 * scalar_cost;
  int64_t cost = 30 + 2 * scalar_cost + static_cast<int64_t>(k.body.nodes.size());
  if (k.schedule.form == ir::LoopForm::SplitReduction || k.schedule.form == ir::LoopForm::ScanRows) cost += 30;
  return cost;
}

// The compiled kernels in at most `max_parts` parts of about equal cost: the costliest first,
// each to the part with the least so far (longest processing time first).
std::vector<std::vector<bool>> partition_kernels(const ir::Program& p, int max_parts) {
  std::vector<size_t> compiled;
  for (size_t k = 0; k < p.kernels.size(); ++k)
    if (p.kernels[k].schedule.form != ir::LoopForm::Interpreted) compiled.push_back(k);
  size_t parts = std::clamp<size_t>(compiled.size(), 1, static_cast<size_t>(std::max(max_parts, 1)));
  std::vector<int64_t> cost(p.kernels.size(), 0);
  for (size_t k : compiled) cost[k] = compile_cost(p.kernels[k]);
  std::stable_sort(compiled.begin(), compiled.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<std::vector<bool>> include(parts, std::vector<bool>(p.kernels.size(), false));
  std::vector<int64_t> load(parts, 0);
  for (size_t k : compiled) {
    size_t least = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    include[least][k] = true;
    load[least] += cost[k];
  }
  return include;
}

}  // namespace

int compile_parts() {
  // FUSE_NUM_THREADS, as the runtime's pool reads it (which rejects a bad value), else the
  // machine's hardware threads; at most 16.
  static const int parts = [] {
    long threads = std::thread::hardware_concurrency();
    if (const char* env = std::getenv("FUSE_NUM_THREADS")) {
      char* end = nullptr;
      long value = std::strtol(env, &end, 10);
      if (end != env && *end == '\0' && value > 0) threads = value;
    }
    return static_cast<int>(std::clamp(threads, 1L, 16L));
  }();
  return parts;
}

CpuObject compile_cpu_object(const ir::Program& p, const CpuOptions& options, ObjectKind kind, int max_parts) {
  if (max_parts <= 1) return compile_part(p, options, kind, {});
  std::vector<std::vector<bool>> include = partition_kernels(p, max_parts);
  std::vector<CpuObject> objects(include.size());
  std::vector<std::exception_ptr> errors(include.size());
  auto run = [&](size_t i) {
    try {
      objects[i] = compile_part(p, options, kind, include[i]);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < include.size(); ++i) threads.emplace_back(run, i);
  run(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  // Every part knows the symbols; each kernel's tables come from the part that compiled it.
  CpuObject object = std::move(objects[0]);
  for (size_t i = 1; i < objects.size(); ++i) {
    for (size_t k = 0; k < p.kernels.size(); ++k) {
      if (!include[i][k]) continue;
      object.compiled[k] = objects[i].compiled[k];
      object.constants[k] = std::move(objects[i].constants[k]);
      object.split_chunks[k] = objects[i].split_chunks[k];
      object.scratch_bytes[k] = objects[i].scratch_bytes[k];
    }
    object.parts.push_back(std::move(objects[i].parts[0]));
  }
  return object;
}

std::string emit_cpu_asm(const ir::Program& p, const CpuOptions& options) {
  return compile_cpu_object(p, options, ObjectKind::Assembly).parts.at(0);
}

std::string emit_cpu_object(const ir::Program& p, const CpuOptions& options) {
  return compile_cpu_object(p, options, ObjectKind::Object).parts.at(0);
}

}  // namespace fuse::codegen
