// Loads compiled CPU objects into an in-process JIT and caches them: in memory for the process,
// and on disk across processes. The cache key is the whole text a compilation depends on (the
// Program as printed plus the exact bits of its literals and constants, the host CPU, the
// options, fuse's and LLVM's versions, the code generator's build), and every disk entry carries
// that key and a checksum: an entry that does not match is rebuilt, never loaded.
// Both caches are bounded and let the least recently used entries go (see cpu_codegen.h).
#include <dlfcn.h>
#include <fcntl.h>
#include <sleef.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <mutex>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "codegen/cpu_codegen.h"
#include "codegen/cpu_object.h"
#include "ir/error.h"
#include "ir/printer.h"
#include "runtime/cpu_scratch.h"
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
  std::atomic<int64_t> memory_evictions{0}, disk_evictions{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

// ---- limits ----

constexpr int64_t kMiB = int64_t{1} << 20;

// `name`'s value as a size: bytes, or a number with a K, M or G suffix (powers of 1024);
// `fallback` when unset or empty.
int64_t size_from_environment(const char* name, int64_t fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  std::string_view s(text);
  int64_t value = 0;
  auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  std::string_view suffix(end, s.data() + s.size() - end);
  int shift = suffix.empty() ? 0 : suffix == "K" || suffix == "k" ? 10 : suffix == "M" || suffix == "m" ? 20
              : suffix == "G" || suffix == "g" ? 30 : -1;
  if (error != std::errc() || value < 0 || shift < 0 || value > (INT64_MAX >> shift))
    throw ir::Error(std::string(name) + "='" + text + "' is not a size: give bytes, or a number with K, M or G (e.g. 64M)");
  return value << shift;
}

// ---- the memory cache: modules by key, least recently used out past the limit ----

// What a loaded module costs beyond its object code: the LLJIT (its execution session, JITDylib,
// linker and memory manager). Measured as the growth of the resident set per distinct small
// graph, less its object size (tests/test_cpu_cache.cpp, "[.memory]").
constexpr int64_t kJitBytes = 128 * 1024;

struct MemoryCache {
  struct Entry {
    std::string key;
    std::shared_ptr<const CpuModule> module;
    int64_t bytes;
  };
  std::mutex mutex;
  int64_t limit = size_from_environment("FUSE_MEMORY_CACHE_MAX_BYTES", 64 * kMiB);
  int64_t bytes = 0;
  std::list<Entry> entries;  // most recently used first
  std::unordered_map<std::string_view, std::list<Entry>::iterator> by_key;  // views of Entry::key

  // Drops the least recently used entries until the total fits in `target`. The modules are
  // handed to the caller to release outside the lock (tearing a JIT down takes a while).
  void evict_to(int64_t target, std::vector<std::shared_ptr<const CpuModule>>& released) {
    while (bytes > target && !entries.empty()) {
      Entry& last = entries.back();
      bytes -= last.bytes;
      released.push_back(std::move(last.module));
      by_key.erase(last.key);
      entries.pop_back();
      ++counters().memory_evictions;
    }
  }
};
// Never destroyed: its modules would outlive LLVM's statics at exit (see g_exiting).
MemoryCache& memory_cache() {
  static MemoryCache* c = new MemoryCache;
  return *c;
}

std::shared_ptr<const CpuModule> memory_lookup(const std::string& key) {
  MemoryCache& cache = memory_cache();
  std::lock_guard lock(cache.mutex);
  auto it = cache.by_key.find(key);
  if (it == cache.by_key.end()) return nullptr;
  cache.entries.splice(cache.entries.begin(), cache.entries, it->second);
  return it->second->module;
}

// Adds `module` (unless another thread added the same key first: then that one is returned,
// so that equal Programs share one module) and evicts past the limit.
std::shared_ptr<const CpuModule> memory_insert(const std::string& key, std::shared_ptr<const CpuModule> module,
                                               int64_t bytes) {
  MemoryCache& cache = memory_cache();
  std::vector<std::shared_ptr<const CpuModule>> released;
  std::lock_guard lock(cache.mutex);
  if (auto it = cache.by_key.find(key); it != cache.by_key.end()) return it->second->module;
  if (bytes > cache.limit) return module;  // would evict everything, itself included
  cache.evict_to(cache.limit - bytes, released);
  cache.entries.push_front({key, module, bytes});
  cache.by_key.emplace(cache.entries.front().key, cache.entries.begin());
  cache.bytes += bytes;
  return module;
}

// What a module made from `object` is counted as against the memory cache's limit.
int64_t module_bytes(const std::string& key, const CpuObject& object) {
  int64_t bytes = static_cast<int64_t>(key.size() + sizeof(CpuModule));
  for (const std::string& part : object.parts) bytes += static_cast<int64_t>(part.size());
  for (const std::vector<ir::HostArray>& constants : object.constants)
    for (const ir::HostArray& a : constants) bytes += static_cast<int64_t>(a.bytes.size());
  if (std::find(object.compiled.begin(), object.compiled.end(), true) != object.compiled.end()) bytes += kJitBytes;
  return bytes;
}

// The host's target, for its data layout. Loading objects needs no asm printer (compiling does:
// codegen/cpu/lower.cpp registers it), and a disk-cache hit should not pay for it.
void initialize_native_target() {
  static std::once_flag once;
  std::call_once(once, [] { llvm::InitializeNativeTarget(); });
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

// The host as the JIT sees it, detected once per process (each detection reads /proc/cpuinfo
// and asks every feature).
struct Host {
  llvm::orc::JITTargetMachineBuilder machine;
  llvm::DataLayout data_layout;
  std::string description;  // triple, CPU and features: part of every cache key
};

const Host& host() {
  static const Host detected = [] {
    initialize_native_target();
    auto machine = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!machine) throw ir::Error(fail_text("cannot detect the host CPU: " + llvm::toString(machine.takeError())));
    auto layout = machine->getDefaultDataLayoutForTarget();  // (builds a TargetMachine once)
    if (!layout) throw ir::Error(fail_text("no data layout for the host: " + llvm::toString(layout.takeError())));
    std::string description = machine->getTargetTriple().str() + " " + machine->getCPU() + " " + machine->getFeatures().getString();
    return Host{std::move(*machine), std::move(*layout), std::move(description)};
  }();
  return detected;
}

const std::string& host_description() { return host().description; }

// The JIT only links objects compiled beforehand, so it gets no IR compiler: LLJIT's default one
// builds a TargetMachine for every JIT, about a fifth of a disk-cache hit.
class ObjectsOnly : public llvm::orc::IRCompileLayer::IRCompiler {
 public:
  ObjectsOnly() : IRCompiler(llvm::orc::IRSymbolMapper::ManglingOptions()) {}
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> operator()(llvm::Module&) override {
    return llvm::make_error<llvm::StringError>("fuse's JIT links objects only", llvm::inconvertibleErrorCode());
  }
};

std::string cache_key(const ir::Program& p, const CpuOptions& options) {
  std::string key = "fuse " FUSE_VERSION " codegen ";
  key += codegen_build_stamp();
  key += " llvm " LLVM_VERSION_STRING "\n" + host_description() + "\n";
  key += "fast_math=" + std::to_string(options.fast_math) + "\n";
  for (const auto& [name, size] : options.bound_symbols) key += "bound " + name + "=" + std::to_string(size) + "\n";
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

constexpr char kMagic[8] = {'F', 'U', 'S', 'E', 'O', 'B', 'J', '2'};  // 2: objects in parts

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
  put_u64(s, object.parts.size());
  for (const std::string& part : object.parts) put_string(s, part);
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
  if (!r.count(n, 1 << 10)) return false;
  object.parts.resize(n);
  for (std::string& part : object.parts)
    if (!r.string(part)) return false;
  return r.pos() == body.size();
}

// ---- the disk cache: one <sha256 of the key>.fuseobj per entry ----

namespace fs = std::filesystem;

constexpr std::string_view kEntryExtension = ".fuseobj";
constexpr std::string_view kTemporaryInfix = ".fuseobj.tmp.";  // <digest>.fuseobj.tmp.<pid>.<n>
// A temporary file this old was left by a writer that died: eviction and clear remove it.
constexpr int64_t kAbandonedAfterNs = int64_t{3600} * 1000000000;
// A store lists the directory again (one stat per file) only when this process's running total
// passes the limit, or after this many stores: other processes' stores are seen then.
constexpr int kStoresBetweenListings = 64;

fs::path entry_path(const std::string& key) { return fs::path(cache_directory()) / (key_digest(key) + ".fuseobj"); }

bool is_entry(const fs::path& p) { return p.extension() == kEntryExtension; }
bool is_temporary(const fs::path& p) { return p.filename().string().find(kTemporaryInfix) != std::string::npos; }

// An advisory lock on <dir>/.lock, held while entries are removed, so that processes sharing the
// directory do not evict on each other's stale listings. Without a lock file (a read-only
// directory) removal goes ahead unlocked: it can only fail there too.
class DirectoryLock {
 public:
  explicit DirectoryLock(const fs::path& dir) : fd_(::open((dir / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0)
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
  }
  ~DirectoryLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_;
};

struct DiskEntry {
  fs::path path;
  int64_t used_ns;  // the modification time: written or last hit
  int64_t bytes;
};

struct DiskListing {
  std::vector<DiskEntry> entries;
  std::vector<fs::path> abandoned;  // temporary files of writers that died
  int64_t bytes = 0;
};

// Files vanish under the listing when another process evicts: they are skipped.
DiskListing list_directory(const fs::path& dir) {
  DiskListing listing;
  std::error_code error;
  fs::directory_iterator it(dir, error);
  if (error) return listing;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  auto nanoseconds = [](const timespec& t) { return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; };
  for (const fs::directory_entry& file : it) {
    const fs::path& path = file.path();
    bool entry = is_entry(path);
    struct stat info;
    if ((!entry && !is_temporary(path)) || ::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) continue;
    int64_t used_ns = nanoseconds(info.st_mtim);
    if (!entry) {
      if (nanoseconds(now) - used_ns > kAbandonedAfterNs) listing.abandoned.push_back(path);
      continue;
    }
    listing.entries.push_back({path, used_ns, static_cast<int64_t>(info.st_size)});
    listing.bytes += static_cast<int64_t>(info.st_size);
  }
  return listing;
}

// Past the limit, removes the least recently used entries down to 90% of it (not just under it,
// so that the next stores do not each evict again). Returns the directory's total after.
int64_t evict_disk_entries(const fs::path& dir, int64_t limit) {
  DirectoryLock lock(dir);
  DiskListing listing = list_directory(dir);
  std::error_code error;
  for (const fs::path& path : listing.abandoned) fs::remove(path, error);
  if (listing.bytes <= limit) return listing.bytes;
  std::sort(listing.entries.begin(), listing.entries.end(),
            [](const DiskEntry& a, const DiskEntry& b) { return a.used_ns < b.used_ns; });
  int64_t target = limit - limit / 10;
  for (const DiskEntry& e : listing.entries) {
    if (listing.bytes <= target) break;
    if (fs::remove(e.path, error)) ++counters().disk_evictions;
    listing.bytes -= e.bytes;  // removed, by this process or (already gone) another
  }
  return listing.bytes;
}

// This process's running total of the directory's size: its last listing plus its own stores
// since (an overestimate when a store replaced an entry, or another process evicted).
struct DiskTotal {
  std::mutex mutex;
  fs::path dir;
  int64_t bytes = 0;
  int stores_since_listing = kStoresBetweenListings;  // none yet: list at the first store
};

// After a store of `bytes` to `dir`. Listing and evicting under the mutex keeps the total from
// missing a store that another thread makes meanwhile (it adds itself after).
void account_store(const fs::path& dir, int64_t bytes, int64_t limit) {
  static DiskTotal* total = new DiskTotal;  // never destroyed: stores may run during exit
  std::lock_guard lock(total->mutex);
  if (total->dir == dir && ++total->stores_since_listing < kStoresBetweenListings) {
    total->bytes += bytes;
    if (total->bytes <= limit) return;
  }
  total->dir = dir;
  total->bytes = evict_disk_entries(dir, limit);
  total->stores_since_listing = 0;
}

bool read_entry(const std::string& key, CpuObject& object) {
  fs::path path = entry_path(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream data;
  data << in.rdbuf();
  if (!deserialize(data.str(), key, object)) {
    ++counters().rejected_entries;
    return false;
  }
  // Recently used: eviction goes by modification time. Best effort (a read-only cache).
  std::error_code error;
  fs::last_write_time(path, fs::file_time_type::clock::now(), error);
  return true;
}

bool write_all(int fd, const std::string& data) {
  for (size_t done = 0; done < data.size();) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Best effort: a cache that cannot be written (read-only home, full disk) only costs time.
// Written to a temporary name of its own (per process and per store: threads and processes may
// store the same key at once), then renamed: readers never see half an entry.
void write_entry(const std::string& key, const CpuObject& object) {
  int64_t limit = disk_cache_limit();
  if (limit == 0) return;
  std::error_code error;
  fs::path path = entry_path(key);
  fs::create_directories(path.parent_path(), error);
  if (error) return;
  static std::atomic<uint64_t> stores{0};
  fs::path temporary = path;
  temporary += ".tmp." + std::to_string(getpid()) + "." + std::to_string(stores++);  // see kTemporaryInfix
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;
  std::string data = serialize(key, object);
  bool written = write_all(fd, data);
  written = ::close(fd) == 0 && written;
  if (written) fs::rename(temporary, path, error);
  if (!written || error) {
    fs::remove(temporary, error);
    return;
  }
  account_store(path.parent_path(), static_cast<int64_t>(data.size()), limit);
}

}  // namespace

namespace {

// The file of SLEEF's library as loaded into this process ("" if unknown): kernels call its vector
// math (codegen/scalar_lowering.cpp). Taking a SLEEF function's address also keeps libsleef a
// dependency of every program that links fuse (the linker's --as-needed drops unused ones).
const std::string& sleef_library_file() {
  static const std::string file = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&Sleef_expf_u10), &info) == 0 || !info.dli_fname) return std::string();
    return std::string(info.dli_fname);
  }();
  return file;
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

    // No platform (kernels have no static initializers or thread-locals: the generic platform
    // costs a module of its own per JIT) and the host detected once.
    auto jit = llvm::orc::LLJITBuilder()
                   .setJITTargetMachineBuilder(host().machine)
                   .setDataLayout(host().data_layout)
                   .setCompileFunctionCreator([](llvm::orc::JITTargetMachineBuilder)
                                                  -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                     return std::make_unique<ObjectsOnly>();
                   })
                   .setPlatformSetUp(llvm::orc::setUpInactivePlatform)
                   .create();
    if (!jit) throw ir::Error(fail_text("cannot create the JIT: " + llvm::toString(jit.takeError())));
    // Kernels may call libm and SLEEF (codegen/scalar_lowering.cpp): resolve them in this process.
    auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess((*jit)->getDataLayout().getGlobalPrefix());
    if (!process) throw ir::Error(fail_text("cannot search the process's symbols: " + llvm::toString(process.takeError())));
    (*jit)->getMainJITDylib().addGenerator(std::move(*process));
    // SLEEF's symbols from its own library too: the process search misses them when fuse was
    // loaded with RTLD_LOCAL (a plugin or a Python extension).
    if (!sleef_library_file().empty()) {
      auto sleef = llvm::orc::DynamicLibrarySearchGenerator::Load(sleef_library_file().c_str(),
                                                                  (*jit)->getDataLayout().getGlobalPrefix());
      if (!sleef) throw ir::Error(fail_text("cannot load " + sleef_library_file() + ": " + llvm::toString(sleef.takeError())));
      (*jit)->getMainJITDylib().addGenerator(std::move(*sleef));
    }
    // The kernels' scratch buffers, kept per thread across runs, and the shared packing's claim
    // flags (runtime/cpu_scratch.h).
    llvm::orc::MangleAndInterner mangle((*jit)->getExecutionSession(), (*jit)->getDataLayout());
    auto exported = llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable;
    llvm::orc::SymbolMap scratch{
        {mangle("fuse_cpu_scratch_acquire"), {llvm::orc::ExecutorAddr::fromPtr(&fuse_cpu_scratch_acquire), exported}},
        {mangle("fuse_cpu_scratch_release"), {llvm::orc::ExecutorAddr::fromPtr(&fuse_cpu_scratch_release), exported}},
        {mangle("fuse_cpu_claim_panels"), {llvm::orc::ExecutorAddr::fromPtr(&fuse_cpu_claim_panels), exported}},
        {mangle("fuse_cpu_publish_panels"), {llvm::orc::ExecutorAddr::fromPtr(&fuse_cpu_publish_panels), exported}},
        {mangle("fuse_cpu_wait_for_panels"), {llvm::orc::ExecutorAddr::fromPtr(&fuse_cpu_wait_for_panels), exported}}};
    if (llvm::Error e = (*jit)->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(scratch))))
      throw ir::Error(fail_text("cannot define the scratch functions: " + llvm::toString(std::move(e))));
    for (const std::string& part : object.parts)
      if (llvm::Error e = (*jit)->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(part, "fuse-kernels")))
        throw ir::Error(fail_text("the JIT rejected the object: " + llvm::toString(std::move(e))));
    for (size_t k = 0; k < p.kernels.size(); ++k) {
      if (k >= object.compiled.size() || !object.compiled[k]) continue;
      auto address = (*jit)->lookup(p.kernels[k].name);
      if (!address) throw ir::Error(fail_text("kernel " + p.kernels[k].name + " not found: " + llvm::toString(address.takeError())));
      module->kernels_[k].fn = address->toPtr<CpuKernelFn>();
      if (object.split_chunks[k] == 0) continue;
      auto lookup = [&](const std::string& suffix) {
        auto f = (*jit)->lookup(p.kernels[k].name + suffix);
        if (!f) throw ir::Error(fail_text("kernel " + p.kernels[k].name + suffix + " not found: " + llvm::toString(f.takeError())));
        return f->toPtr<CpuKernelFn>();
      };
      module->kernels_[k].finish = lookup("_finish");
      if (p.kernels[k].schedule.form == ir::LoopForm::ColumnReduction) module->kernels_[k].column_rows = lookup("_rows");
      if (p.kernels[k].schedule.form == ir::LoopForm::ScanRows) {  // np-scan: the chunked form
        module->kernels_[k].scan_totals = lookup("_totals");
        module->kernels_[k].scan_chunks = lookup("_chunks");
        module->kernels_[k].scan_chunked_rows = kScanChunkedRows;
        module->kernels_[k].scan_chunked_length = kScanChunkedLength;
      }
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
  return {c.memory_hits.load(),      c.disk_hits.load(),        c.compilations.load(),
          c.rejected_entries.load(), c.memory_evictions.load(), c.disk_evictions.load()};
}

void clear_memory_cache() {
  MemoryCache& cache = memory_cache();
  std::vector<std::shared_ptr<const CpuModule>> released;
  std::lock_guard lock(cache.mutex);
  for (MemoryCache::Entry& e : cache.entries) released.push_back(std::move(e.module));
  cache.by_key.clear();
  cache.entries.clear();
  cache.bytes = 0;
}

int64_t memory_cache_limit() {
  MemoryCache& cache = memory_cache();
  std::lock_guard lock(cache.mutex);
  return cache.limit;
}

void set_memory_cache_limit(int64_t bytes) {
  if (bytes < 0) throw ir::Error("the memory cache's limit must not be negative (" + std::to_string(bytes) + ")");
  MemoryCache& cache = memory_cache();
  std::vector<std::shared_ptr<const CpuModule>> released;
  std::lock_guard lock(cache.mutex);
  cache.limit = bytes;
  cache.evict_to(bytes, released);
}

MemoryCacheUsage memory_cache_usage() {
  MemoryCache& cache = memory_cache();
  std::lock_guard lock(cache.mutex);
  return {static_cast<int64_t>(cache.entries.size()), cache.bytes};
}

int64_t disk_cache_limit() { return size_from_environment("FUSE_CACHE_MAX_BYTES", 1024 * kMiB); }

DiskCacheUsage disk_cache_usage() {
  DiskCacheUsage usage;
  usage.directory = cache_directory();
  usage.limit = disk_cache_limit();
  DiskListing listing = list_directory(usage.directory);
  usage.entries = static_cast<int64_t>(listing.entries.size());
  usage.bytes = listing.bytes;
  return usage;
}

int64_t clear_disk_cache() {
  fs::path dir = cache_directory();
  std::error_code error;
  if (!fs::is_directory(dir, error)) return 0;
  DirectoryLock lock(dir);
  DiskListing listing = list_directory(dir);
  for (const fs::path& path : listing.abandoned) fs::remove(path, error);
  int64_t removed = 0;
  for (const DiskEntry& e : listing.entries) removed += fs::remove(e.path, error);
  return removed;
}

std::shared_ptr<const CpuModule> compile_cpu(const ir::Program& p, const CpuOptions& options) {
  if (!options.use_cache) {
    ++counters().compilations;
    return ModuleLoader::load(p, compile_cpu_object(p, options, ObjectKind::Object, compile_parts()));
  }
  std::string key = cache_key(p, options);
  if (std::shared_ptr<const CpuModule> module = memory_lookup(key)) {
    ++counters().memory_hits;
    return module;
  }
  CpuObject object;
  if (read_entry(key, object)) {
    ++counters().disk_hits;
  } else {
    ++counters().compilations;
    object = compile_cpu_object(p, options, ObjectKind::Object, compile_parts());
    write_entry(key, object);
  }
  int64_t bytes = module_bytes(key, object);
  return memory_insert(key, ModuleLoader::load(p, std::move(object)), bytes);
}

}  // namespace fuse::codegen
