// libdevice against the host's libm (glibc), measured: the CUDA simulator calls glibc where a
// GPU calls libdevice (codegen/cuda_sim.cpp), and docs/cuda-simulator.md states the difference.
//
// libdevice.10.bc is linked into a host module: its `llvm.nvvm.*` intrinsics are rewritten into
// exact host equivalents (add/mul/div/fma/sqrt/rcp .rn, conversions, fabs/floor/ceil/trunc,
// fmin/fmax, the 32-bit halves of a double, mulhi), `__nvvm_reflect` answers 0 (no flush to
// zero). The approximate ones (rcp.approx, rsqrt.approx, ex2/lg2/sin/cos.approx...) have no
// bit-exact host equivalent: they become the exact operation and every function that reaches
// one is marked "approx" (its host result may differ from a GPU's). Then each libdevice function
// fuse's CUDA kernels call (found by compiling every float op of the .expr language, f64 and
// f32) is swept against glibc over many inputs; the test prints the max ulp difference per
// function and fails beyond the bound the docs state (max_ulp).
//
// libdevice is not a Debian package: without it ($FUSE_LIBDEVICE alone if set, else
// $CUDA_HOME/nvvm/libdevice, /usr/local/cuda*/nvvm/libdevice) the test is skipped with a message.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "frontends/compile.h"
#include "frontends/expr/compile.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ThreadSafeModule.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IRReader/IRReader.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"

using namespace fuse;

namespace {

// The largest difference docs/cuda-simulator.md states between glibc and libdevice (f64, ulp):
// 2, and 3 for tanh (measured: libdevice 12.x/13.0 against glibc 2.3x on x86-64).
uint64_t max_ulp(const std::string& name) { return name == "__nv_tanh" ? 3 : 2; }

std::string find_libdevice() {
  std::vector<std::filesystem::path> candidates;
  if (const char* p = std::getenv("FUSE_LIBDEVICE"))  // only this one (FUSE_LIBDEVICE=none: skip)
    return std::filesystem::is_regular_file(p) ? std::string(p) : std::string();
  for (const char* name : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(name); v && *v) candidates.push_back(std::filesystem::path(v) / "nvvm/libdevice/libdevice.10.bc");
  candidates.emplace_back("/usr/local/cuda/nvvm/libdevice/libdevice.10.bc");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/local", ec))
    if (entry.path().filename().string().rfind("cuda-", 0) == 0) candidates.push_back(entry.path() / "nvvm/libdevice/libdevice.10.bc");
  for (const auto& c : candidates)
    if (std::filesystem::is_regular_file(c)) return c.string();
  return "";
}

/// The `__nv_*` functions fuse's CUDA kernels call: every named float op, f64 and f32.
std::set<std::string> libdevice_calls() {
  std::ostringstream source;
  source << "input x: f64[N]\ninput y: f64[N]\ninput a: f32[N]\ninput b: f32[N]\n";
  int i = 0;
#define FUSE_NAMED_SCALAR_OP(Enum, identifier, arity, Category, Typing, cost, gpu_f64, ulps_f32, ulps_f64) \
  if (ir::ScalarTyping::Typing == ir::ScalarTyping::Float && (arity == 1 || arity == 2)) {                     \
    source << "output d" << i << " = " #identifier << (arity == 1 ? "(x)" : "(x, y)") << "\n";                 \
    source << "output f" << i++ << " = " #identifier << (arity == 1 ? "(a)" : "(a, b)") << "\n";               \
  }
#define FUSE_SCALAR_OP(...)
#include "ir/scalar_ops.def"
#undef FUSE_NAMED_SCALAR_OP
#undef FUSE_SCALAR_OP
  source << "output p = x ** y\noutput q = a ** b\n";
  expr::CompileResult r = expr::compile_expr(source.str(), "all_float_ops.expr");
  INFO(expr::format_diagnostics(r.errors, source.str()));
  REQUIRE(r.graph);
  std::string llvm = emit(run_passes(*r.graph, Target::cuda(0, 80)), Stage::Llvm);
  std::set<std::string> names;
  std::regex call("@(__nv_[A-Za-z0-9_]+)\\(");
  for (auto it = std::sregex_iterator(llvm.begin(), llvm.end(), call); it != std::sregex_iterator(); ++it) names.insert((*it)[1]);
  return names;
}

/// Rewrites a call of `llvm.nvvm.NAME` into host IR. Returns false for an intrinsic it does not know.
bool rewrite_nvvm_call(llvm::CallInst* call, const std::string& name, bool& approx) {
  llvm::IRBuilder<> b(call);
  llvm::Module& m = *call->getModule();
  auto arg = [&](unsigned i) { return call->getArgOperand(i); };
  auto intrinsic = [&](llvm::Intrinsic::ID id, std::vector<llvm::Value*> args) {
    return b.CreateIntrinsic(id, {args[0]->getType()}, args);
  };
  auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  llvm::Type* ret = call->getType();
  llvm::Value* v = nullptr;
  std::string base = name.substr(std::string("llvm.nvvm.").size());
  auto starts = [&](const char* p) { return base.rfind(p, 0) == 0; };
  if (has(".approx")) approx = true;
  // Directed rounding (.rm, .rp, .rz on arithmetic) has no host equivalent here.
  bool nearest = has(".rn") || !(has(".rm") || has(".rp") || has(".rz"));
  if (starts("add.") && nearest) v = b.CreateFAdd(arg(0), arg(1));
  else if (starts("mul.") && nearest && !starts("mulhi")) v = b.CreateFMul(arg(0), arg(1));
  else if (starts("div.") && (nearest || has(".approx"))) v = b.CreateFDiv(arg(0), arg(1));
  else if (starts("fma.") && nearest) v = intrinsic(llvm::Intrinsic::fma, {arg(0), arg(1), arg(2)});
  else if (starts("sqrt.") && (nearest || has(".approx"))) v = intrinsic(llvm::Intrinsic::sqrt, {arg(0)});
  else if (starts("rcp.") && (nearest || has(".approx"))) v = b.CreateFDiv(llvm::ConstantFP::get(ret, 1.0), arg(0));
  else if (starts("rsqrt.approx")) v = b.CreateFDiv(llvm::ConstantFP::get(ret, 1.0), intrinsic(llvm::Intrinsic::sqrt, {arg(0)}));
  else if (starts("ex2.approx")) v = intrinsic(llvm::Intrinsic::exp2, {arg(0)});
  else if (starts("lg2.approx")) v = intrinsic(llvm::Intrinsic::log2, {arg(0)});
  else if (starts("sin.approx")) v = intrinsic(llvm::Intrinsic::sin, {arg(0)});
  else if (starts("cos.approx")) v = intrinsic(llvm::Intrinsic::cos, {arg(0)});
  else if (starts("fabs.")) v = intrinsic(llvm::Intrinsic::fabs, {arg(0)});
  else if (starts("floor.")) v = intrinsic(llvm::Intrinsic::floor, {arg(0)});
  else if (starts("ceil.")) v = intrinsic(llvm::Intrinsic::ceil, {arg(0)});
  else if (starts("trunc.")) v = intrinsic(llvm::Intrinsic::trunc, {arg(0)});
  else if (starts("round.")) v = intrinsic(llvm::Intrinsic::round, {arg(0)});  // PTX cvt.rni? see the docs
  else if (starts("fmin.")) v = intrinsic(llvm::Intrinsic::minnum, {arg(0), arg(1)});
  else if (starts("fmax.")) v = intrinsic(llvm::Intrinsic::maxnum, {arg(0), arg(1)});
  else if (base == "d2i.lo" || base == "d2i.hi") {
    llvm::Value* bits = b.CreateBitCast(arg(0), b.getInt64Ty());
    if (base == "d2i.hi") bits = b.CreateLShr(bits, 32);
    v = b.CreateTrunc(bits, b.getInt32Ty());
  } else if (base == "lohi.i2d") {
    llvm::Value* lo = b.CreateZExt(arg(0), b.getInt64Ty());
    llvm::Value* hi = b.CreateShl(b.CreateZExt(arg(1), b.getInt64Ty()), 32);
    v = b.CreateBitCast(b.CreateOr(lo, hi), b.getDoubleTy());
  } else if ((starts("i2d.") || starts("ll2d.") || starts("i2f.") || starts("ll2f.")) && nearest) {
    v = b.CreateSIToFP(arg(0), ret);
  } else if ((starts("ui2d.") || starts("ull2d.") || starts("ui2f.") || starts("ull2f.")) && nearest) {
    v = b.CreateUIToFP(arg(0), ret);
  } else if (starts("d2f.rn")) {
    v = b.CreateFPTrunc(arg(0), ret);
  } else if (std::regex_match(base, std::regex("(d|f)2(u?i|u?ll)\\.(rz|rn)(\\.ftz)?"))) {
    llvm::Value* x = arg(0);
    if (has(".rn")) x = intrinsic(llvm::Intrinsic::rint, {x});
    bool is_unsigned = base[2] == 'u';
    v = b.CreateIntrinsic(is_unsigned ? llvm::Intrinsic::fptoui_sat : llvm::Intrinsic::fptosi_sat, {ret, x->getType()}, {x});
  } else if (starts("mulhi.")) {
    unsigned width = ret->getIntegerBitWidth();
    bool is_unsigned = base == "mulhi.ui" || base == "mulhi.ull";
    llvm::Type* wide = b.getIntNTy(2 * width);
    auto ext = [&](llvm::Value* x) { return is_unsigned ? b.CreateZExt(x, wide) : b.CreateSExt(x, wide); };
    v = b.CreateTrunc(b.CreateLShr(b.CreateMul(ext(arg(0)), ext(arg(1))), width), ret);
  } else {
    return false;
  }
  (void)m;
  call->replaceAllUsesWith(v);
  call->eraseFromParent();
  return true;
}

/// Rewrites libdevice's inline PTX: the 64 x 64 -> 128-bit multiply(-add) and the 128-bit
/// additions and subtractions of its trigonometric argument reduction (exact in i128), and
/// rsqrt.approx.ftz.f64 (1 / sqrt: approximate).
/// Returns false for any other asm.
bool rewrite_inline_asm(llvm::CallInst* call, const std::string& text, bool& approx) {
  llvm::IRBuilder<> b(call);
  llvm::Value* v = nullptr;
  bool mul = text.find("mul.lo.u32      r0, alo, blo") != std::string::npos;
  bool mad = text.find("mad.lo.cc.u32   r0, alo, blo, clo") != std::string::npos;
  bool sub = text.find("sub.cc.u32      r0, a0, b0") != std::string::npos;
  bool add = text.find("add.cc.u32      r0, a0, b0") != std::string::npos;
  if ((mul && call->arg_size() == 2) || (mad && call->arg_size() == 3)) {
    llvm::Type* wide = b.getInt128Ty();
    llvm::Value* product = b.CreateMul(b.CreateZExt(call->getArgOperand(0), wide), b.CreateZExt(call->getArgOperand(1), wide));
    if (mad) product = b.CreateAdd(product, b.CreateZExt(call->getArgOperand(2), wide));
    v = llvm::UndefValue::get(call->getType());
    v = b.CreateInsertValue(v, b.CreateTrunc(product, b.getInt64Ty()), 0);
    v = b.CreateInsertValue(v, b.CreateTrunc(b.CreateLShr(product, 64), b.getInt64Ty()), 1);
  } else if ((sub || add) && call->arg_size() == 4) {
    // (a_lo, a_hi) -/+ (b_lo, b_hi) in 128 bits.
    llvm::Type* wide = b.getInt128Ty();
    auto join = [&](llvm::Value* lo, llvm::Value* hi) {
      return b.CreateOr(b.CreateZExt(lo, wide), b.CreateShl(b.CreateZExt(hi, wide), 64));
    };
    llvm::Value* x = join(call->getArgOperand(0), call->getArgOperand(1));
    llvm::Value* y = join(call->getArgOperand(2), call->getArgOperand(3));
    llvm::Value* difference = sub ? b.CreateSub(x, y) : b.CreateAdd(x, y);
    v = llvm::UndefValue::get(call->getType());
    v = b.CreateInsertValue(v, b.CreateTrunc(difference, b.getInt64Ty()), 0);
    v = b.CreateInsertValue(v, b.CreateTrunc(b.CreateLShr(difference, 64), b.getInt64Ty()), 1);
  } else if (text.find("rsqrt.approx.ftz.f64") != std::string::npos && call->arg_size() == 1) {
    approx = true;
    llvm::Value* root = b.CreateIntrinsic(llvm::Intrinsic::sqrt, {b.getDoubleTy()}, {call->getArgOperand(0)});
    v = b.CreateFDiv(llvm::ConstantFP::get(b.getDoubleTy(), 1.0), root);
  } else {
    return false;
  }
  call->replaceAllUsesWith(v);
  call->eraseFromParent();
  return true;
}

struct Linked {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::map<std::string, bool> approx;          // function -> reaches an approximate intrinsic
  std::map<std::string, std::string> unknown;  // function -> an intrinsic it reaches that has no host equivalent
};

/// libdevice for the host, `names` kept (and what they call), everything else dropped.
Linked link_libdevice(const std::string& path, const std::set<std::string>& names) {
  auto context = std::make_unique<llvm::LLVMContext>();
  llvm::SMDiagnostic error;
  std::unique_ptr<llvm::Module> m = llvm::parseIRFile(path, error, *context);
  REQUIRE(m);
  Linked linked;
  // Which intrinsics each function reaches (through its callees).
  std::map<llvm::Function*, std::set<std::string>> direct;
  std::map<llvm::Function*, std::set<llvm::Function*>> callees;
  for (llvm::Function& f : *m)
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& i : bb)
        if (auto* call = llvm::dyn_cast<llvm::CallInst>(&i)) {
          if (auto* as = llvm::dyn_cast<llvm::InlineAsm>(call->getCalledOperand())) {
            std::string text = as->getAsmString();
            bool known = text.find("alo, blo") != std::string::npos || text.find("cc.u32      r0, a0, b0") != std::string::npos;
            direct[&f].insert(text.find("rsqrt.approx") != std::string::npos ? "asm rsqrt.approx.ftz.f64"
                              : known ? "asm mul.wide.u64" : "inline PTX `" + text + "`");
          }
          if (llvm::Function* c = call->getCalledFunction()) {
            if (c->getName().starts_with("llvm.nvvm.")) direct[&f].insert(c->getName().str());
            else callees[&f].insert(c);
          }
        }
  std::map<std::string, std::set<std::string>> reached;
  std::map<std::string, std::set<llvm::Function*>> reached_functions;
  for (const std::string& name : names) {
    llvm::Function* f = m->getFunction(name);
    if (!f) continue;
    std::set<llvm::Function*> seen{f};
    std::vector<llvm::Function*> work{f};
    while (!work.empty()) {
      llvm::Function* g = work.back();
      work.pop_back();
      reached[name].insert(direct[g].begin(), direct[g].end());
      for (llvm::Function* c : callees[g])
        if (seen.insert(c).second) work.push_back(c);
    }
    reached_functions[name] = seen;
  }
  // Rewrite every intrinsic call; note the unknown ones (left as calls: never linked, never run).
  std::set<std::string> unknown;
  std::vector<llvm::CallInst*> calls;
  for (llvm::Function& f : *m)
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& i : bb)
        if (auto* call = llvm::dyn_cast<llvm::CallInst>(&i))
          if (llvm::Function* c = call->getCalledFunction();
              llvm::isa<llvm::InlineAsm>(call->getCalledOperand()) ||
              (c && (c->getName().starts_with("llvm.nvvm.") || c->getName() == "__nvvm_reflect")))
            calls.push_back(call);
  for (llvm::CallInst* call : calls) {
    if (auto* as = llvm::dyn_cast<llvm::InlineAsm>(call->getCalledOperand())) {
      bool approx = false;
      if (!rewrite_inline_asm(call, as->getAsmString(), approx)) unknown.insert("inline PTX `" + as->getAsmString() + "`");
      continue;
    }
    std::string name = call->getCalledFunction()->getName().str();
    if (name == "__nvvm_reflect") {
      call->replaceAllUsesWith(llvm::ConstantInt::get(call->getType(), 0));
      call->eraseFromParent();
      continue;
    }
    bool approx = false;
    if (!rewrite_nvvm_call(call, name, approx)) unknown.insert(name);
  }
  for (const std::string& name : names) {
    for (const std::string& i : reached[name]) {
      if (i.find(".approx") != std::string::npos) linked.approx[name] = true;
      if (unknown.count(i) || i.rfind("inline PTX", 0) == 0) linked.unknown[name] = i;
    }
  }
  // Keep only the functions swept that can run and what they call; the others lose their bodies.
  std::set<llvm::Function*> keep;
  for (const std::string& name : names)
    if (!linked.unknown.count(name)) keep.insert(reached_functions[name].begin(), reached_functions[name].end());
  for (llvm::Function& f : *m)
    if (!f.isDeclaration() && !keep.count(&f)) f.deleteBody();
  m->setTargetTriple(llvm::sys::getProcessTriple());
  m->setDataLayout("");
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto jit = llvm::orc::LLJITBuilder().create();
  REQUIRE(bool(jit));
  m->setDataLayout((*jit)->getDataLayout());
  llvm::cantFail((*jit)->addIRModule(llvm::orc::ThreadSafeModule(std::move(m), std::move(context))));
  linked.jit = std::move(*jit);
  return linked;
}

/// Distance in ulp between two doubles (or floats widened exactly), NaN to NaN 0.
uint64_t ulp_distance(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  if (std::isnan(a) || std::isnan(b)) return UINT64_MAX;
  auto ordered = [](double x) {
    int64_t i = std::bit_cast<int64_t>(x);
    return i < 0 ? INT64_MIN - i : i;  // monotonic in x, -0.0 == +0.0
  };
  int64_t d = ordered(a) - ordered(b);
  return static_cast<uint64_t>(d < 0 ? -d : d);
}

uint64_t ulp_distance_f32(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  if (std::isnan(a) || std::isnan(b)) return UINT64_MAX;
  auto ordered = [](float x) {
    int32_t i = std::bit_cast<int32_t>(x);
    return static_cast<int64_t>(i < 0 ? INT32_MIN - i : i);
  };
  int64_t d = ordered(a) - ordered(b);
  return static_cast<uint64_t>(d < 0 ? -d : d);
}

/// The glibc function a `__nv_NAME` stands for (as codegen/cuda_sim.cpp maps it).
void* host_function(const std::string& nv_name) {
  static const std::map<std::string, void*> table = {
      {"exp", (void*)(double (*)(double))std::exp},       {"exp2", (void*)(double (*)(double))std::exp2},
      {"exp10", (void*)(double (*)(double))::exp10},      {"expm1", (void*)(double (*)(double))std::expm1},
      {"log", (void*)(double (*)(double))std::log},       {"log2", (void*)(double (*)(double))std::log2},
      {"log10", (void*)(double (*)(double))std::log10},   {"log1p", (void*)(double (*)(double))std::log1p},
      {"sin", (void*)(double (*)(double))std::sin},       {"cos", (void*)(double (*)(double))std::cos},
      {"tan", (void*)(double (*)(double))std::tan},       {"asin", (void*)(double (*)(double))std::asin},
      {"acos", (void*)(double (*)(double))std::acos},     {"atan", (void*)(double (*)(double))std::atan},
      {"sinh", (void*)(double (*)(double))std::sinh},     {"cosh", (void*)(double (*)(double))std::cosh},
      {"tanh", (void*)(double (*)(double))std::tanh},     {"asinh", (void*)(double (*)(double))std::asinh},
      {"acosh", (void*)(double (*)(double))std::acosh},   {"atanh", (void*)(double (*)(double))std::atanh},
      {"cbrt", (void*)(double (*)(double))std::cbrt},     {"erf", (void*)(double (*)(double))std::erf},
      {"erfc", (void*)(double (*)(double))std::erfc},     {"sqrt", (void*)(double (*)(double))std::sqrt},
      {"atan2", (void*)(double (*)(double, double))std::atan2}, {"pow", (void*)(double (*)(double, double))std::pow},
      {"hypot", (void*)(double (*)(double, double))std::hypot}, {"fmod", (void*)(double (*)(double, double))std::fmod},
      {"expf", (void*)(float (*)(float))::expf},          {"logf", (void*)(float (*)(float))::logf},
      {"powf", (void*)(float (*)(float, float))::powf},   {"tanhf", (void*)(float (*)(float))::tanhf},
  };
  std::string n = nv_name.substr(5);
  auto it = table.find(n);
  return it == table.end() ? nullptr : it->second;
}

/// Inputs for a sweep: each decade of magnitude from 2^-30 to 2^30 and both signs, the
/// neighbourhoods of 0, 1, pi/2 and the function's likely domain edges, and random bit patterns.
std::vector<double> sweep_inputs(uint64_t seed, int count) {
  std::vector<double> xs;
  uint64_t s = seed;
  auto next = [&] {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int i = 0; i < count; ++i) {
    double u = static_cast<double>(next() >> 11) * 0x1.0p-53;
    switch (i % 4) {
      case 0: xs.push_back((u * 2 - 1) * 4); break;                                   // [-4, 4]
      case 1: xs.push_back((next() & 1 ? -1 : 1) * std::ldexp(1 + u, static_cast<int>(next() % 61) - 30)); break;
      case 2: xs.push_back((u * 2 - 1) * 710); break;                                 // exp's range
      default: xs.push_back(u); break;                                                // [0, 1)
    }
  }
  for (double x : {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1.5707963267948966, 3.141592653589793, 1e-300, 1e300, 709.7, -745.0})
    xs.push_back(x);
  return xs;
}

}  // namespace

TEST_CASE("libdevice's functions that fuse calls differ from glibc by at most 2 or 3 ulp", "[cuda][libdevice]") {
  std::string path = find_libdevice();
  if (path.empty()) {
    WARN("libdevice.10.bc not found (FUSE_LIBDEVICE, $CUDA_HOME/nvvm/libdevice, /usr/local/cuda*): skipped");
    return;
  }
  std::set<std::string> names = libdevice_calls();
  REQUIRE(names.count("__nv_exp"));
  Linked linked = link_libdevice(path, names);
  std::ostringstream table;
  table << "libdevice " << path << " vs glibc, max ulp difference (count of differing results of N):\n";
  for (const std::string& name : names) {
    void* host = host_function(name);
    if (linked.unknown.count(name) || !host) {
      table << "  " << name << ": not evaluated (" << (host ? "reaches " + linked.unknown[name] : "no glibc function mapped here")
            << ")\n";
      continue;
    }
    auto symbol = linked.jit->lookup(name);
    REQUIRE(bool(symbol));
    void* device = symbol->toPtr<void*>();
    bool is_f32 = name == "__nv_expf" || name == "__nv_logf" || name == "__nv_powf" || name == "__nv_tanhf";
    bool binary = name == "__nv_pow" || name == "__nv_atan2" || name == "__nv_hypot" || name == "__nv_fmod" || name == "__nv_powf";
    std::vector<double> xs = sweep_inputs(1, 200000), ys = sweep_inputs(2, 200000);
    uint64_t worst = 0;
    int64_t differing = 0;
    double worst_x = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      uint64_t d;
      if (is_f32) {
        float x = static_cast<float>(xs[i]), y = static_cast<float>(ys[i]);
        float g = binary ? reinterpret_cast<float (*)(float, float)>(device)(x, y) : reinterpret_cast<float (*)(float)>(device)(x);
        float h = binary ? reinterpret_cast<float (*)(float, float)>(host)(x, y) : reinterpret_cast<float (*)(float)>(host)(x);
        d = ulp_distance_f32(g, h);
      } else {
        double x = xs[i], y = ys[i];
        double g = binary ? reinterpret_cast<double (*)(double, double)>(device)(x, y) : reinterpret_cast<double (*)(double)>(device)(x);
        double h = binary ? reinterpret_cast<double (*)(double, double)>(host)(x, y) : reinterpret_cast<double (*)(double)>(host)(x);
        d = ulp_distance(g, h);
      }
      differing += d != 0;
      if (d > worst) worst = d, worst_x = xs[i];
    }
    table << "  " << name << ": " << (worst == UINT64_MAX ? std::string("NaN vs number") : std::to_string(worst)) << " ulp ("
          << differing << " of " << xs.size() << (worst ? ", worst at x = " + std::to_string(worst_x) : std::string()) << ")"
          << (linked.approx.count(name) ? " [reaches an .approx intrinsic: host-exact stand-in]" : "") << "\n";
    INFO(name);
    CHECK(worst <= max_ulp(name));
  }
  WARN(table.str());
}
