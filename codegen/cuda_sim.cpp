#include "codegen/cuda_sim.h"

#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "codegen/cuda_nvvm.h"
#include "ir/cuda_sim_abi.h"
#include "ir/error.h"
#include "llvm/Analysis/ValueTracking.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/ReplaceConstant.h"
#include "llvm/IR/Verifier.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "codegen/host_machine.h"
#include "llvm/Target/TargetMachine.h"
#include "mlir/ExecutionEngine/OptUtils.h"

namespace fuse::codegen {

namespace {

namespace sim = ir::cuda_sim;

std::string fail_text(const std::string& what) { return "internal error in the CUDA simulator's code generator: " + what; }


/// The libm functions a `__nv_NAME` call may become (NAME with and without the f suffix).
bool host_libm_function(const std::string& name) {
  static const std::set<std::string> names = [] {
    std::set<std::string> s;
    for (const char* n : {"exp",   "exp2",  "exp10", "expm1", "log",   "log2",  "log10", "log1p", "sin",  "cos",
                          "tan",   "asin",  "acos",  "atan",  "atan2", "sinh",  "cosh",  "tanh",  "asinh", "acosh",
                          "atanh", "pow",   "sqrt",  "cbrt",  "erf",   "erfc",  "fabs",  "floor", "ceil", "trunc",
                          "round", "rint",  "fmod",  "fmin",  "fmax",  "copysign", "hypot", "lgamma", "tgamma",
                          "nearbyint", "remainder", "ldexp", "fdim"}) {
      s.insert(n);
      s.insert(std::string(n) + "f");
    }
    return s;
  }();
  return names.count(name) != 0;
}

/// Rewrites one NVVM-level module into host code for the simulated device.
class Rewriter {
 public:
  Rewriter(llvm::Module& m, const std::vector<std::string>& entries, const llvm::DataLayout& layout)
      : m_(m), ctx_(m.getContext()) {
    m_.setDataLayout(layout);
    for (const std::string& entry : entries) {
      llvm::Function* f = m_.getFunction(entry);
      if (!f || f->isDeclaration()) throw ir::Error(fail_text("the entry '" + entry + "' is not in the module"));
      if (std::find(entries_.begin(), entries_.end(), f) == entries_.end()) entries_.push_back(f);
    }
    auto* i32 = llvm::Type::getInt32Ty(ctx_);
    auto* i64 = llvm::Type::getInt64Ty(ctx_);
    auto* ptr = llvm::PointerType::get(ctx_, 0);
    auto pure = [&](llvm::FunctionCallee c) {
      auto* f = llvm::cast<llvm::Function>(c.getCallee());
      f->setDoesNotAccessMemory();
      f->setDoesNotThrow();
      f->addFnAttr(llvm::Attribute::WillReturn);
      return c;
    };
    sreg_ = pure(m_.getOrInsertFunction("__fuse_sim_sreg", i32, i32));
    shared_base_ = pure(m_.getOrInsertFunction("__fuse_sim_shared_base", ptr));
    barrier_ = m_.getOrInsertFunction("__fuse_sim_barrier", llvm::Type::getVoidTy(ctx_), ptr);
    shfl_ = m_.getOrInsertFunction("__fuse_sim_shfl", i64, i32, i32, i32, i32, i32, ptr);
    access_ = m_.getOrInsertFunction("__fuse_sim_access", ptr, ptr, i64, i32, i64, ptr);
  }

  void run() {
    for (llvm::Function& f : m_) {
      f.removeFnAttr("target-cpu");
      f.removeFnAttr("target-features");
      if (!f.isDeclaration()) f.setCallingConv(llvm::CallingConv::C);
    }
    if (llvm::NamedMDNode* annotations = m_.getNamedMetadata("nvvm.annotations")) m_.eraseNamedMetadata(annotations);
    rewrite_intrinsics();
    map_libdevice();
    place_shared_memory();
    instrument_accesses();
    add_entry_wrappers();
    std::string problems;
    llvm::raw_string_ostream out(problems);
    if (llvm::verifyModule(m_, &out)) throw ir::Error(fail_text("the rewritten module is invalid:\n" + problems));
  }

 private:
  llvm::Constant* site(const std::string& text) {
    auto [it, inserted] = sites_.try_emplace(text, nullptr);
    if (inserted) {
      llvm::Constant* bytes = llvm::ConstantDataArray::getString(ctx_, text);
      auto* g = new llvm::GlobalVariable(m_, bytes->getType(), true, llvm::GlobalValue::PrivateLinkage, bytes,
                                         "__fuse_sim_site");
      g->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
      it->second = g;
    }
    return it->second;
  }

  std::string kernel_of(llvm::Instruction* inst) { return inst->getFunction()->getName().str(); }

  void rewrite_intrinsics() {
    std::vector<llvm::Function*> nvvm;
    for (llvm::Function& f : m_)
      if (f.getName().starts_with("llvm.nvvm.")) nvvm.push_back(&f);
    for (llvm::Function* f : nvvm) {
      std::string name = f->getName().str();
      std::vector<llvm::CallInst*> calls;
      for (llvm::User* u : f->users()) {
        auto* call = llvm::dyn_cast<llvm::CallInst>(u);
        if (!call) throw ir::Error(fail_text("the NVVM intrinsic " + name + " is used other than by a call"));
        calls.push_back(call);
      }
      for (llvm::CallInst* call : calls) rewrite_call(name, call);
      f->eraseFromParent();
    }
  }

  void rewrite_call(const std::string& name, llvm::CallInst* call) {
    llvm::IRBuilder<> b(call);
    static const std::map<std::string, sim::SpecialRegister> registers = {
        {"tid.x", sim::kTidX},     {"tid.y", sim::kTidY},     {"tid.z", sim::kTidZ},
        {"ntid.x", sim::kNtidX},   {"ntid.y", sim::kNtidY},   {"ntid.z", sim::kNtidZ},
        {"ctaid.x", sim::kCtaidX}, {"ctaid.y", sim::kCtaidY}, {"ctaid.z", sim::kCtaidZ},
        {"nctaid.x", sim::kNctaidX}, {"nctaid.y", sim::kNctaidY}, {"nctaid.z", sim::kNctaidZ},
        {"laneid", sim::kLaneId},  {"warpsize", sim::kWarpSize}};
    const std::string sreg = "llvm.nvvm.read.ptx.sreg.";
    const std::string shfl = "llvm.nvvm.shfl.sync.";
    llvm::Value* replacement = nullptr;
    if (name.rfind(sreg, 0) == 0 && registers.count(name.substr(sreg.size()))) {
      replacement = b.CreateCall(sreg_, {b.getInt32(registers.at(name.substr(sreg.size())))});
    } else if (name == "llvm.nvvm.barrier0") {
      int n = barriers_[call->getFunction()]++;
      b.CreateCall(barrier_, {site(kernel_of(call) + ": barrier #" + std::to_string(n))});
    } else if (name == "llvm.nvvm.sqrt.rn.f" || name == "llvm.nvvm.sqrt.rn.d") {
      // Correctly rounded on both sides: bit-exact.
      replacement = b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, call->getArgOperand(0));
    } else if (name == "llvm.nvvm.div.rn.f" || name == "llvm.nvvm.div.rn.d") {
      replacement = b.CreateFDiv(call->getArgOperand(0), call->getArgOperand(1));
    } else if (name == "llvm.nvvm.rcp.rn.f" || name == "llvm.nvvm.rcp.rn.d") {
      replacement = b.CreateFDiv(llvm::ConstantFP::get(call->getType(), 1.0), call->getArgOperand(0));
    } else if (name == "llvm.nvvm.fma.rn.f" || name == "llvm.nvvm.fma.rn.d") {
      replacement = b.CreateIntrinsic(llvm::Intrinsic::fma, {call->getType()},
                                      {call->getArgOperand(0), call->getArgOperand(1), call->getArgOperand(2)});
    } else if (name.rfind("llvm.nvvm.membar.", 0) == 0) {
      // A block runs on one host thread and blocks do not communicate within a launch.
    } else if (name.rfind(shfl, 0) == 0) {
      std::string rest = name.substr(shfl.size());  // bfly.f32, idx.i32p, ...
      size_t dot = rest.find('.');
      std::string mode = rest.substr(0, dot), type = dot == std::string::npos ? "" : rest.substr(dot + 1);
      static const std::map<std::string, sim::ShuffleMode> modes = {
          {"up", sim::kShflUp}, {"down", sim::kShflDown}, {"bfly", sim::kShflBfly}, {"idx", sim::kShflIdx}};
      bool with_predicate = !type.empty() && type.back() == 'p';
      if (with_predicate) type.pop_back();
      if (!modes.count(mode) || (type != "i32" && type != "f32"))
        throw ir::Error("the CUDA simulator does not implement the NVVM operation " + name + " (kernel " +
                        kernel_of(call) + ")");
      int n = shuffles_[call->getFunction()]++;
      llvm::Value* value = call->getArgOperand(1);
      if (type == "f32") value = b.CreateBitCast(value, b.getInt32Ty());
      llvm::Value* packed = b.CreateCall(
          shfl_, {b.getInt32(modes.at(mode)), call->getArgOperand(0), value, call->getArgOperand(2),
                  call->getArgOperand(3), site(kernel_of(call) + ": shfl.sync." + mode + " #" + std::to_string(n))});
      llvm::Value* result = b.CreateTrunc(packed, b.getInt32Ty());
      if (type == "f32") result = b.CreateBitCast(result, b.getFloatTy());
      if (with_predicate) {
        llvm::Value* predicate = b.CreateTrunc(b.CreateLShr(packed, 32), b.getInt1Ty());
        llvm::Value* pair = llvm::PoisonValue::get(call->getType());
        pair = b.CreateInsertValue(pair, result, {0});
        replacement = b.CreateInsertValue(pair, predicate, {1});
      } else {
        replacement = result;
      }
    } else {
      throw ir::Error("the CUDA simulator does not implement the NVVM operation " + name + " (kernel " +
                      kernel_of(call) + ")");
    }
    if (replacement) call->replaceAllUsesWith(replacement);
    call->eraseFromParent();
  }

  void map_libdevice() {
    std::vector<llvm::Function*> calls;
    for (llvm::Function& f : m_)
      if (f.getName().starts_with("__nv_")) calls.push_back(&f);
    for (llvm::Function* f : calls) {
      std::string name = f->getName().str().substr(5);
      if (name.rfind("fast_", 0) == 0) name = name.substr(5);
      std::string host;
      if (host_libm_function(name)) host = name;
      else if (name == "rsqrt" || name == "rsqrtf") host = "__fuse_sim_nv_" + name;
      else throw ir::Error("the CUDA simulator has no host function for the libdevice call " + f->getName().str());
      llvm::FunctionCallee callee = m_.getOrInsertFunction(host, f->getFunctionType());
      f->replaceAllUsesWith(callee.getCallee());
      f->eraseFromParent();
    }
  }

  void place_shared_memory() {
    std::vector<llvm::GlobalVariable*> shared;
    for (llvm::GlobalVariable& g : m_.globals())
      if (g.getAddressSpace() == 3) shared.push_back(&g);
    if (shared.empty()) {
      for (llvm::Function* f : entries_) shared_size(f, 0);
      return;
    }
    std::vector<llvm::Constant*> constants(shared.begin(), shared.end());
    llvm::convertUsersOfConstantsToInstructions(constants);
    const llvm::DataLayout& layout = m_.getDataLayout();
    std::map<llvm::Function*, std::vector<std::pair<llvm::GlobalVariable*, std::vector<llvm::Instruction*>>>> uses;
    for (llvm::GlobalVariable* g : shared) {
      std::map<llvm::Function*, std::vector<llvm::Instruction*>> by_function;
      for (llvm::User* u : g->users()) {
        auto* inst = llvm::dyn_cast<llvm::Instruction>(u);
        if (!inst) throw ir::Error(fail_text("shared variable " + g->getName().str() + " is used by a constant"));
        by_function[inst->getFunction()].push_back(inst);
      }
      for (auto& [f, insts] : by_function) uses[f].push_back({g, insts});
    }
    for (llvm::Function* f : entries_) {
      uint64_t offset = 0;
      std::vector<std::pair<llvm::GlobalVariable*, uint64_t>> placed, dynamic;
      for (auto& [g, insts] : uses[f]) {
        uint64_t size = g->isDeclaration() ? 0 : layout.getTypeAllocSize(g->getValueType());
        if (size == 0) {
          dynamic.push_back({g, 0});
          continue;
        }
        uint64_t align = std::max<uint64_t>(g->getAlign() ? g->getAlign()->value() : 16, 16);
        offset = (offset + align - 1) / align * align;
        placed.push_back({g, offset});
        offset += size;
      }
      offset = (offset + 15) / 16 * 16;
      for (auto& d : dynamic) placed.push_back({d.first, offset});
      shared_size(f, offset);
      if (placed.empty()) continue;
      llvm::IRBuilder<> b(&*f->getEntryBlock().getFirstInsertionPt());
      llvm::Value* base = b.CreateCall(shared_base_, {}, "shared");
      for (auto& [g, at] : placed) {
        llvm::Value* address = b.CreateAddrSpaceCast(b.CreateConstGEP1_64(b.getInt8Ty(), base, at), g->getType());
        for (auto& [global, insts] : uses[f])
          if (global == g)
            for (llvm::Instruction* inst : insts) inst->replaceUsesOfWith(g, address);
      }
      uses.erase(f);
    }
    for (auto& [f, list] : uses)
      if (!list.empty())
        throw ir::Error(fail_text("function " + f->getName().str() + " uses shared memory but is not a kernel entry"));
    for (llvm::GlobalVariable* g : shared) {
      if (!g->use_empty()) throw ir::Error(fail_text("shared variable " + g->getName().str() + " still has uses"));
      g->eraseFromParent();
    }
  }

  void shared_size(llvm::Function* f, uint64_t bytes) {
    auto* i64 = llvm::Type::getInt64Ty(ctx_);
    new llvm::GlobalVariable(m_, i64, true, llvm::GlobalValue::ExternalLinkage, llvm::ConstantInt::get(i64, bytes),
                             sim::kSharedSizePrefix + f->getName().str());
  }

  void instrument_accesses() {
    for (llvm::Function* f : entries_) {
      std::vector<llvm::Instruction*> accesses;
      for (llvm::BasicBlock& block : *f)
        for (llvm::Instruction& inst : block)
          if (llvm::isa<llvm::LoadInst, llvm::StoreInst, llvm::AtomicRMWInst, llvm::AtomicCmpXchgInst>(inst))
            accesses.push_back(&inst);
      int n = 0;
      const llvm::DataLayout& layout = m_.getDataLayout();
      for (llvm::Instruction* inst : accesses) {
        unsigned operand = 0;
        llvm::Type* type = nullptr;
        uint32_t flags = 0;
        uint64_t align = 1;
        const char* what = "";
        if (auto* load = llvm::dyn_cast<llvm::LoadInst>(inst)) {
          operand = load->getPointerOperandIndex(), type = load->getType(), flags = sim::kRead;
          align = load->getAlign().value(), what = "load";
        } else if (auto* store = llvm::dyn_cast<llvm::StoreInst>(inst)) {
          operand = store->getPointerOperandIndex(), type = store->getValueOperand()->getType(), flags = sim::kWrite;
          align = store->getAlign().value(), what = "store";
        } else if (auto* rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(inst)) {
          operand = rmw->getPointerOperandIndex(), type = rmw->getType();
          flags = sim::kRead | sim::kWrite | sim::kAtomic, align = rmw->getAlign().value(), what = "atomicrmw";
        } else {
          auto* cas = llvm::cast<llvm::AtomicCmpXchgInst>(inst);
          operand = cas->getPointerOperandIndex(), type = cas->getCompareOperand()->getType();
          flags = sim::kRead | sim::kWrite | sim::kAtomic, align = cas->getAlign().value(), what = "cmpxchg";
        }
        llvm::Value* pointer = inst->getOperand(operand);
        if (llvm::isa<llvm::AllocaInst>(llvm::getUnderlyingObject(pointer, 0))) continue;  // the thread's own stack
        uint64_t bytes = layout.getTypeStoreSize(type);
        uint64_t element = layout.getTypeStoreSize(type->getScalarType());
        std::string type_text;
        llvm::raw_string_ostream type_out(type_text);
        type->print(type_out);
        unsigned space = pointer->getType()->getPointerAddressSpace();
        std::string text = kernel_of(inst) + ": " + what + " #" + std::to_string(n++) + " (" + type_text +
                           (space == 3 ? ", shared" : "") + ", align " + std::to_string(align) + ")";
        llvm::IRBuilder<> b(inst);
        llvm::Value* generic = space == 0 ? pointer : b.CreateAddrSpaceCast(pointer, b.getPtrTy());
        llvm::Value* checked = b.CreateCall(access_, {generic, b.getInt64(bytes), b.getInt32(flags),
                                                      b.getInt64(std::max(align, element)), site(text)});
        if (space != 0) checked = b.CreateAddrSpaceCast(checked, pointer->getType());
        inst->setOperand(operand, checked);
      }
    }
  }

  void add_entry_wrappers() {
    auto* ptr = llvm::PointerType::get(ctx_, 0);
    for (llvm::Function* f : entries_) {
      auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), {ptr}, false);
      auto* wrapper = llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage,
                                             sim::kEntryPrefix + f->getName().str(), m_);
      llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx_, "entry", wrapper));
      std::vector<llvm::Value*> args;
      for (llvm::Argument& a : f->args()) {
        llvm::Value* slot = b.CreateLoad(ptr, b.CreateConstGEP1_64(ptr, wrapper->getArg(0), a.getArgNo()));
        args.push_back(b.CreateLoad(a.getType(), slot));
      }
      b.CreateCall(f, args);
      b.CreateRetVoid();
      auto* i64 = llvm::Type::getInt64Ty(ctx_);
      new llvm::GlobalVariable(m_, i64, true, llvm::GlobalValue::ExternalLinkage,
                               llvm::ConstantInt::get(i64, f->arg_size()), sim::kParamCountPrefix + f->getName().str());
    }
  }

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  std::vector<llvm::Function*> entries_;
  llvm::FunctionCallee sreg_, shared_base_, barrier_, shfl_, access_;
  std::map<std::string, llvm::GlobalVariable*> sites_;
  std::map<llvm::Function*, int> barriers_, shuffles_;
};

struct Rewritten {
  std::unique_ptr<llvm::Module> module;
  ir::CudaPlan plan;
};

void rewrite_module(llvm::Module& m, const std::vector<std::string>& entries, llvm::TargetMachine& machine) {
  m.setTargetTriple(machine.getTargetTriple().str());
  Rewriter(m, entries, machine.createDataLayout()).run();
}

std::vector<std::string> plan_entries(const ir::CudaPlan& plan) {
  std::vector<std::string> entries;
  for (const ir::CudaLaunch& l : plan.launches) entries.push_back(l.entry);
  return entries;
}

Rewritten rewrite(const ir::Program& p, const CudaOptions& options, llvm::LLVMContext& context,
                  llvm::TargetMachine& machine) {
  Rewritten r;
  r.module = lower_cuda_to_nvvm(p, options, context, r.plan);
  rewrite_module(*r.module, plan_entries(r.plan), machine);
  return r;
}

/// The optimized module as a simulated module image.
std::string image_of(llvm::Module& m, llvm::TargetMachine& machine) {
  auto optimize = mlir::makeOptimizingTransformer(2, 0, &machine);
  if (llvm::Error e = optimize(&m))
    throw ir::Error(fail_text("LLVM optimization failed: " + llvm::toString(std::move(e))));
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream out(buffer);
  llvm::legacy::PassManager codegen;
  if (machine.addPassesToEmitFile(codegen, out, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw ir::Error(fail_text("the host target cannot emit an object file"));
  codegen.run(m);
  std::string image = std::string(sim::kImageMagic) + std::to_string(buffer.size()) + "\n";
  image.append(buffer.begin(), buffer.end());
  return image;
}

}  // namespace

std::string compile_cuda_sim_ir(const std::string& nvvm_ir, const std::vector<std::string>& entries) {
  llvm::LLVMContext context;
  llvm::SMDiagnostic diagnostic;
  std::unique_ptr<llvm::Module> m = llvm::parseAssemblyString(nvvm_ir, diagnostic, context);
  if (!m) {
    std::string text;
    llvm::raw_string_ostream out(text);
    diagnostic.print("nvvm", out);
    throw ir::Error("CUDA simulator: the NVVM IR does not parse: " + text);
  }
  std::unique_ptr<llvm::TargetMachine> machine = host_target_machine(llvm::CodeGenOptLevel::Default);
  rewrite_module(*m, entries, *machine);
  return image_of(*m, *machine);
}

CudaModule compile_cuda_sim(const ir::Program& p, const CudaOptions& options) {
  llvm::LLVMContext context;
  std::unique_ptr<llvm::TargetMachine> machine = host_target_machine(llvm::CodeGenOptLevel::Default);
  Rewritten r = rewrite(p, options, context, *machine);
  CudaModule result;
  result.ptx = image_of(*r.module, *machine);
  result.plan = std::move(r.plan);
  return result;
}

std::string emit_cuda_sim_llvm(const ir::Program& p, const CudaOptions& options) {
  llvm::LLVMContext context;
  std::unique_ptr<llvm::TargetMachine> machine = host_target_machine(llvm::CodeGenOptLevel::Default);
  Rewritten r = rewrite(p, options, context, *machine);
  std::string text;
  llvm::raw_string_ostream out(text);
  r.module->print(out, nullptr);
  return text;
}

}  // namespace fuse::codegen
