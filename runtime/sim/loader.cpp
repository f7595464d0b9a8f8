// Loads a simulated module image (ir/cuda_sim_abi.h: a host ELF object) with LLVM's ORC JIT, as
// a real driver JIT-compiles PTX. The one file of the simulated device that uses LLVM; fuse's
// runtime library itself never does.
#include "runtime/sim/loader.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "ir/cuda_sim_abi.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"

extern "C" {
int32_t __fuse_sim_sreg(int32_t which);
void* __fuse_sim_shared_base();
void __fuse_sim_barrier(const char* site);
uint64_t __fuse_sim_shfl(int32_t mode, uint32_t mask, uint32_t value, uint32_t b, uint32_t c, const char* site);
void* __fuse_sim_access(void* p, uint64_t bytes, uint32_t flags, uint64_t align, const char* site);
double __fuse_sim_nv_rsqrt(double x);
float __fuse_sim_nv_rsqrtf(float x);
}

namespace fuse::runtime::sim {

struct LoadedObject::Impl {
  std::unique_ptr<llvm::orc::LLJIT> jit;
};

LoadedObject::LoadedObject() = default;
LoadedObject::~LoadedObject() = default;

std::unique_ptr<LoadedObject> LoadedObject::load(const char* image, std::string& error) {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  const std::string magic = ir::cuda_sim::kImageMagic;
  if (std::string(image, strnlen(image, magic.size())) != magic) {
    error = "not a simulated module image (is this PTX for a real GPU? compile with --target=cuda-sim)";
    return nullptr;
  }
  const char* digits = image + magic.size();
  char* end = nullptr;
  unsigned long long size = std::strtoull(digits, &end, 10);
  if (end == digits || *end != '\n') {
    error = "malformed simulated module image header";
    return nullptr;
  }
  const char* bytes = end + 1;
  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit) {
    error = "cannot create the JIT: " + llvm::toString(jit.takeError());
    return nullptr;
  }
  llvm::orc::SymbolMap symbols;
  auto add = [&](const char* name, void* address) {
    symbols[(*jit)->mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(address),
                                             llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
  };
  add("__fuse_sim_sreg", reinterpret_cast<void*>(&__fuse_sim_sreg));
  add("__fuse_sim_shared_base", reinterpret_cast<void*>(&__fuse_sim_shared_base));
  add("__fuse_sim_barrier", reinterpret_cast<void*>(&__fuse_sim_barrier));
  add("__fuse_sim_shfl", reinterpret_cast<void*>(&__fuse_sim_shfl));
  add("__fuse_sim_access", reinterpret_cast<void*>(&__fuse_sim_access));
  add("__fuse_sim_nv_rsqrt", reinterpret_cast<void*>(&__fuse_sim_nv_rsqrt));
  add("__fuse_sim_nv_rsqrtf", reinterpret_cast<void*>(&__fuse_sim_nv_rsqrtf));
  if (llvm::Error e = (*jit)->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(symbols)))) {
    error = llvm::toString(std::move(e));
    return nullptr;
  }
  // libm (the host versions of libdevice's functions).
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess((*jit)->getDataLayout().getGlobalPrefix());
  if (!process) {
    error = llvm::toString(process.takeError());
    return nullptr;
  }
  (*jit)->getMainJITDylib().addGenerator(std::move(*process));
  if (llvm::Error e = (*jit)->addObjectFile(
          llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(bytes, size), "fuse-sim-kernels"))) {
    error = "the object was rejected: " + llvm::toString(std::move(e));
    return nullptr;
  }
  auto loaded = std::unique_ptr<LoadedObject>(new LoadedObject());
  loaded->impl_ = std::make_unique<Impl>();
  loaded->impl_->jit = std::move(*jit);
  return loaded;
}

void* LoadedObject::lookup(const std::string& name, std::string& error) {
  auto address = impl_->jit->lookup(name);
  if (!address) {
    error = llvm::toString(address.takeError());
    return nullptr;
  }
  return address->toPtr<void*>();
}

}  // namespace fuse::runtime::sim
