// Loads compiled CPU objects into an in-process JIT and caches them: in memory for the process,
// and on disk across processes. The cache key is the whole text a compilation depends on (the
// Program as printed plus the exact bits of its literals and constants, the host CPU, the
// options, fuse's and LLVM's versions, the code generator's build), and every disk entry carries
// that key and a checksum: an entry that does not match is rebuilt, never loaded.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <unistd.h>

#include "codegen/cpu_codegen.h"
#include "codegen/cpu_object.h"
#include "ir/error.h"
#include "ir/printer.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/xxhash.h"

namespace fuse::codegen {

namespace {
// Set once exit() has begun. LLVM's own static objects may already be gone then, so a JIT
// still alive (an Executable in a static) is left to the operating system, not torn down.
std::atomic<bool> g_exiting{false};
}  // namespace

struct CpuModule::Engine {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  ~Engine() {
    if (g_exiting) (void)jit.release();
  }
};

CpuModule::~CpuModule() = default;

namespace {

std::string fail_text(const std::string& what) { return "internal error in the CPU JIT: " + what; }

struct Counters {
  std::atomic<int64_t> memory_hits{0}, disk_hits{0}, compilations{0}, rejected_entries{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

struct MemoryCache {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const CpuModule>> modules;  // by key
};
// Never destroyed: its modules would outlive LLVM's statics at exit (see g_exiting).
MemoryCache& memory_cache() {
  static MemoryCache* c = new MemoryCache;
  return *c;
}

void initialize_native_target() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

// ---- the key ----

void append_raw(std::string& s, const void* data, size_t size) { s.append(static_cast<const char*>(data), size); }

void append_scalar_fn(std::string& key, const ir::ScalarFn& fn) {
  for (const ir::ScalarNode& n : fn.nodes)
    if (n.op == ir::ScalarOp::Literal) {
      append_raw(key, &n.value.f, sizeof n.value.f);
      append_raw(key, &n.value.i, sizeof n.value.i);
    }
}

// The printed Program rounds float literals and abbreviates large constants: add their bits.
std::string literal_bits(const ir::Program& p) {
  std::string bits;
  for (const ir::Kernel& k : p.kernels)
    for (const ir::Node& n : k.body.nodes) {
      if (const auto* e = std::get_if<ir::ElementwiseAttrs>(&n.attrs)) append_scalar_fn(bits, e->body);
      if (const auto* r = std::get_if<ir::ReduceAttrs>(&n.attrs)) {
        append_scalar_fn(bits, r->combiner);
        append_raw(bits, &r->identity.f, sizeof r->identity.f);
        append_raw(bits, &r->identity.i, sizeof r->identity.i);
      }
      if (const auto* c = std::get_if<ir::ConstantAttrs>(&n.attrs)) {
        uint64_t h = llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(c->value.bytes));
        append_raw(bits, &h, sizeof h);
      }
    }
  return bits;
}

const std::string& host_description() {
  static const std::string description = [] {
    auto host = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!host) throw ir::Error(fail_text("cannot detect the host CPU: " + llvm::toString(host.takeError())));
    return host->getTargetTriple().str() + " " + host->getCPU() + " " + host->getFeatures().getString();
  }();
  return description;
}

std::string cache_key(const ir::Program& p, const CpuOptions& options) {
  std::string key = "fuse " FUSE_VERSION " codegen ";
  key += codegen_build_stamp();
  key += " llvm " LLVM_VERSION_STRING "\n" + host_description() + "\n";
  key += "fast_math=" + std::to_string(options.fast_math) + "\n";
  key += ir::print_program(p);
  key += literal_bits(p);
  return key;
}

std::string hex(const uint8_t* data, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += {digits[data[i] >> 4], digits[data[i] & 15]};
  return s;
}

std::string key_digest(const std::string& key) {
  auto digest = llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t*>(key.data()), key.size()));
  return hex(digest.data(), digest.size());
}

// ---- disk entries: magic, key, the CpuObject, then a checksum of everything before it ----

constexpr char kMagic[8] = {'F', 'U', 'S', 'E', 'O', 'B', 'J', '1'};

void put_u64(std::string& s, uint64_t v) { append_raw(s, &v, sizeof v); }
void put_string(std::string& s, const std::string& v) {
  put_u64(s, v.size());
  s += v;
}

std::string serialize(const std::string& key, const CpuObject& object) {
  std::string s(kMagic, sizeof kMagic);
  put_string(s, key);
  put_u64(s, object.symbols.size());
  for (const std::string& name : object.symbols) put_string(s, name);
  put_u64(s, object.compiled.size());
  for (size_t k = 0; k < object.compiled.size(); ++k) {
    put_u64(s, object.compiled[k]);
    put_u64(s, static_cast<uint64_t>(object.split_chunks[k]));
    put_u64(s, static_cast<uint64_t>(object.scratch_bytes[k]));
    put_u64(s, object.constants[k].size());
    for (const ir::HostArray& a : object.constants[k]) {
      put_u64(s, static_cast<uint64_t>(a.dtype));
      put_u64(s, a.shape.size());
      for (int64_t d : a.shape) put_u64(s, static_cast<uint64_t>(d));
      put_string(s, std::string(a.bytes.begin(), a.bytes.end()));
    }
  }
  put_string(s, object.bytes);
  put_u64(s, llvm::xxh3_64bits(llvm::StringRef(s)));
  return s;
}

// Reads what serialize wrote; false for anything else (truncated, corrupt, another key).
class Reader {
 public:
  explicit Reader(const std::string& data) : data_(data) {}
  bool u64(uint64_t& v) {
    if (data_.size() - pos_ < sizeof v) return false;
    std::memcpy(&v, data_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return true;
  }
  bool string(std::string& v) {
    uint64_t n;
    if (!u64(n) || data_.size() - pos_ < n) return false;
    v.assign(data_, pos_, n);
    pos_ += n;
    return true;
  }
  bool count(uint64_t& n, uint64_t limit) { return u64(n) && n <= limit; }
  size_t pos() const { return pos_; }

 private:
  const std::string& data_;
  size_t pos_ = 0;
};

bool deserialize(const std::string& data, const std::string& key, CpuObject& object) {
  if (data.size() < sizeof kMagic + 8 || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0) return false;
  uint64_t stored_sum;
  std::memcpy(&stored_sum, data.data() + data.size() - 8, 8);
  if (stored_sum != llvm::xxh3_64bits(llvm::StringRef(data.data(), data.size() - 8))) return false;
  std::string body = data.substr(sizeof kMagic, data.size() - sizeof kMagic - 8);
  Reader r(body);
  std::string stored_key;
  if (!r.string(stored_key) || stored_key != key) return false;
  uint64_t n;
  if (!r.count(n, 1 << 20)) return false;
  object.symbols.resize(n);
  for (std::string& name : object.symbols)
    if (!r.string(name)) return false;
  if (!r.count(n, 1 << 20)) return false;
  object.compiled.assign(n, false);
  object.constants.assign(n, {});
  object.split_chunks.assign(n, 0);
  object.scratch_bytes.assign(n, 0);
  for (size_t k = 0; k < n; ++k) {
    uint64_t compiled, chunks, scratch, constants;
    if (!r.u64(compiled) || !r.count(chunks, 1 << 20) || !r.count(scratch, 1 << 30) || !r.count(constants, 1 << 20))
      return false;
    object.compiled[k] = compiled != 0;
    object.split_chunks[k] = static_cast<int64_t>(chunks);
    object.scratch_bytes[k] = static_cast<int64_t>(scratch);
    for (uint64_t c = 0; c < constants; ++c) {
      uint64_t dtype, rank;
      if (!r.count(dtype, static_cast<uint64_t>(ir::DType::F64)) || !r.count(rank, 64)) return false;
      ir::HostArray a;
      a.dtype = static_cast<ir::DType>(dtype);
      a.shape.resize(rank);
      for (int64_t& d : a.shape) {
        uint64_t v;
        if (!r.u64(v)) return false;
        d = static_cast<int64_t>(v);
      }
      std::string bytes;
      if (!r.string(bytes)) return false;
      a.bytes.assign(bytes.begin(), bytes.end());
      object.constants[k].push_back(std::move(a));
    }
  }
  return r.string(object.bytes) && r.pos() == body.size();
}

std::filesystem::path entry_path(const std::string& key) {
  return std::filesystem::path(cache_directory()) / (key_digest(key) + ".fuseobj");
}

bool read_entry(const std::string& key, CpuObject& object) {
  std::ifstream in(entry_path(key), std::ios::binary);
  if (!in) return false;
  std::stringstream data;
  data << in.rdbuf();
  if (deserialize(data.str(), key, object)) return true;
  ++counters().rejected_entries;
  return false;
}

// Best effort: a cache that cannot be written (read-only home, full disk) only costs time.
// Written to a temporary name, then renamed: readers never see half an entry.
void write_entry(const std::string& key, const CpuObject& object) {
  std::error_code error;
  std::filesystem::path path = entry_path(key);
  std::filesystem::create_directories(path.parent_path(), error);
  if (error) return;
  std::filesystem::path temporary = path;
  temporary += ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    std::string data = serialize(key, object);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
      std::filesystem::remove(temporary, error);
      return;
    }
  }
  std::filesystem::rename(temporary, path, error);
  if (error) std::filesystem::remove(temporary, error);
}

}  // namespace

// Turns an object file into a loaded module (a friend of CpuModule).
struct ModuleLoader {
  static std::shared_ptr<const CpuModule> load(const ir::Program& p, CpuObject object) {
    initialize_native_target();
    std::shared_ptr<CpuModule> module(new CpuModule());
    module->symbols_ = std::move(object.symbols);
    module->kernels_.resize(p.kernels.size());
    if (object.compiled.size() != p.kernels.size()) throw ir::Error(fail_text("the object does not match the program"));
    for (size_t k = 0; k < p.kernels.size(); ++k) {
      module->kernels_[k].constants = std::move(object.constants[k]);
      module->kernels_[k].split_chunks = object.split_chunks[k];
      module->kernels_[k].scratch_bytes = object.scratch_bytes[k];
    }
    bool any = false;
    for (bool compiled : object.compiled) any = any || compiled;
    if (!any) return module;  // nothing to load (every kernel runs in the interpreter)

    auto jit = llvm::orc::LLJITBuilder().create();
    if (!jit) throw ir::Error(fail_text("cannot create the JIT: " + llvm::toString(jit.takeError())));
    // Kernels may call libm (tan, f64 tanh): resolve them in this process.
    auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess((*jit)->getDataLayout().getGlobalPrefix());
    if (!process) throw ir::Error(fail_text("cannot search the process's symbols: " + llvm::toString(process.takeError())));
    (*jit)->getMainJITDylib().addGenerator(std::move(*process));
    if (llvm::Error e = (*jit)->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(object.bytes, "fuse-kernels")))
      throw ir::Error(fail_text("the JIT rejected the object: " + llvm::toString(std::move(e))));
    for (size_t k = 0; k < p.kernels.size(); ++k) {
      if (k >= object.compiled.size() || !object.compiled[k]) continue;
      auto address = (*jit)->lookup(p.kernels[k].name);
      if (!address) throw ir::Error(fail_text("kernel " + p.kernels[k].name + " not found: " + llvm::toString(address.takeError())));
      module->kernels_[k].fn = address->toPtr<CpuKernelFn>();
      if (object.split_chunks[k] == 0) continue;
      auto finish = (*jit)->lookup(p.kernels[k].name + "_finish");
      if (!finish) throw ir::Error(fail_text("kernel " + p.kernels[k].name + "_finish not found: " + llvm::toString(finish.takeError())));
      module->kernels_[k].finish = finish->toPtr<CpuKernelFn>();
    }
    module->engine_ = std::make_unique<CpuModule::Engine>();
    module->engine_->jit = std::move(*jit);
    // Registered after the first JIT exists, so it runs before the destructors of the static
    // objects that LLVM created up to then (exit runs them in reverse order).
    static std::once_flag exit_hook;
    std::call_once(exit_hook, [] { std::atexit([] { g_exiting = true; }); });
    return module;
  }
};

std::string cache_directory() {
  if (const char* dir = std::getenv("FUSE_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/fuse";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/fuse";
  return (std::filesystem::temp_directory_path() / "fuse-cache").string();
}

CacheStats cache_stats() {
  Counters& c = counters();
  return {c.memory_hits.load(), c.disk_hits.load(), c.compilations.load(), c.rejected_entries.load()};
}

void clear_memory_cache() {
  MemoryCache& cache = memory_cache();
  std::lock_guard lock(cache.mutex);
  cache.modules.clear();
}

std::shared_ptr<const CpuModule> compile_cpu(const ir::Program& p, const CpuOptions& options) {
  if (!options.use_cache) {
    ++counters().compilations;
    return ModuleLoader::load(p, compile_cpu_object(p, options, ObjectKind::Object));
  }
  std::string key = cache_key(p, options);
  MemoryCache& cache = memory_cache();
  {
    std::lock_guard lock(cache.mutex);
    auto it = cache.modules.find(key);
    if (it != cache.modules.end()) {
      ++counters().memory_hits;
      return it->second;
    }
  }
  CpuObject object;
  std::shared_ptr<const CpuModule> module;
  if (read_entry(key, object)) {
    ++counters().disk_hits;
    module = ModuleLoader::load(p, std::move(object));
  } else {
    ++counters().compilations;
    object = compile_cpu_object(p, options, ObjectKind::Object);
    write_entry(key, object);
    module = ModuleLoader::load(p, std::move(object));
  }
  std::lock_guard lock(cache.mutex);
  return cache.modules.emplace(key, module).first->second;
}

}  // namespace fuse::codegen
