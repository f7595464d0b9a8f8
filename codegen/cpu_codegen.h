// CPU code generation: Program kernels -> MLIR (func, scf, arith, math, vector, llvm) -> LLVM
// -> an object file, loaded into an in-process JIT. Compiled objects are cached in memory and on
// disk. The only part of fuse that sees MLIR or LLVM headers; this interface is plain C++.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/program.h"

namespace fuse::codegen {

/// The ABI of every compiled CPU kernel: `buffers` holds the kernel's buffers (its inputs, then
/// its outputs, then the constants it reads, see CompiledKernel), `symbols` the size of every
/// shape symbol (CpuModule::symbols order), and [begin, end) the range of the kernel's flattened
/// parallel iterations to compute (the runtime's thread pool splits the whole range).
using CpuKernelFn = void (*)(void* const* buffers, const int64_t* symbols, int64_t begin, int64_t end);

struct CpuOptions {
  /// Lets LLVM reassociate and assume no NaN/inf/-0.0 (every float instruction gets LLVM's
  /// `fast` flags), and f32 sin/cos use a polynomial instead of the f64 evaluation. Off: results
  /// follow IEEE and the interpreter.
  bool fast_math = false;
  /// Look compiled code up in (and add it to) the in-memory and on-disk caches.
  bool use_cache = true;
  /// Symbols whose sizes are fixed in the code (sorted by name): the kernels fold them in as
  /// constants, so that loops over them unroll, and ignore what the ABI passes for them. The
  /// runtime's short-row specializations (runtime::CpuCode::specialize) ask for these.
  std::vector<std::pair<std::string, int64_t>> bound_symbols;
};

struct CompiledKernel {
  CpuKernelFn fn = nullptr;              // null: this kernel kind is not compiled (interpreter)
  std::vector<ir::HostArray> constants;  // passed after the kernel's outputs, in this order
  // A split reduction (a reduction to one element): `fn` runs over [0, split_chunks) chunks of
  // the elements and leaves partial results in a scratch buffer of scratch_bytes, passed after
  // the constants; then `finish`, called once, combines them and writes the outputs.
  CpuKernelFn finish = nullptr;
  int64_t split_chunks = 0;
  int64_t scratch_bytes = 0;
  // np-scan: a scan (ScanRows) runs `fn` over its rows, a row per iteration; but at most
  // scan_chunked_rows rows of at least scan_chunked_length elements run chunked, in three calls
  // over [0, rows * split_chunks) (row * split_chunks + chunk), each with the scratch buffer:
  // `scan_totals` (each chunk's fold), `finish` over [0, rows) (the folds become each chunk's
  // carry), `scan_chunks` (each chunk scanned from its carry, the outputs stored).
  CpuKernelFn scan_totals = nullptr;
  CpuKernelFn scan_chunks = nullptr;
  int64_t scan_chunked_rows = 0;
  int64_t scan_chunked_length = 0;
  // A column reduction of few columns (ir::column_reduction_splits() at run time) runs
  // `column_rows` over [0, split_chunks) chunks of its rows, with a scratch buffer of
  // scratch_bytes per column, then `finish` over its columns; else `fn` over its columns.
  CpuKernelFn column_rows = nullptr;
};

/// A JIT-loaded Program. Owns the machine code: function pointers live as long as it does.
/// Immutable once made: its functions may be called from any number of threads at once.
class CpuModule {
 public:
  ~CpuModule();
  CpuModule(const CpuModule&) = delete;
  CpuModule& operator=(const CpuModule&) = delete;

  const std::vector<std::string>& symbols() const { return symbols_; }  // sorted
  const std::vector<CompiledKernel>& kernels() const { return kernels_; }  // as Program::kernels

  struct Engine;  // the JIT (hidden: it is an LLVM type)

 private:
  friend struct ModuleLoader;
  CpuModule() = default;
  std::unique_ptr<Engine> engine_;
  std::vector<std::string> symbols_;
  std::vector<CompiledKernel> kernels_;
};

/// Whether the CPU backend compiles this kernel (the others run in the reference interpreter).
bool cpu_compiles(const ir::Kernel& k);

/// Compiles the kernels the backend handles, following their CPU schedules (vector width), or
/// takes them from the cache: in memory (same process), then on disk (cache_directory()).
/// Equal Programs share one module. Thread-safe: any number of threads may compile at once
/// (the caches are locked; concurrent processes share the disk cache through atomic renames).
std::shared_ptr<const CpuModule> compile_cpu(const ir::Program& p, const CpuOptions& options = {});

/// The MLIR of the compiled kernels, before lowering (`fusec --emit=mlir`).
std::string emit_cpu_mlir(const ir::Program& p, const CpuOptions& options = {});
/// The LLVM IR after lowering to the LLVM dialect, before LLVM's optimizations (`--emit=llvm`).
std::string emit_cpu_llvm(const ir::Program& p, const CpuOptions& options = {});
/// Host assembly after LLVM's optimizations (`--emit=asm`).
std::string emit_cpu_asm(const ir::Program& p, const CpuOptions& options = {});
/// A relocatable ELF object for the host (`--emit=obj`), the bytes the JIT loads.
std::string emit_cpu_object(const ir::Program& p, const CpuOptions& options = {});

/// Where compiled objects are kept: $FUSE_CACHE_DIR, else $XDG_CACHE_HOME/fuse, else
/// ~/.cache/fuse.
std::string cache_directory();

/// What the caches did in this process (tests assert hits with these).
struct CacheStats {
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t compilations = 0;    // MLIR -> object compilations (misses, or use_cache=false)
  int64_t rejected_entries = 0;  // disk entries found corrupt or stale, and rebuilt
  int64_t memory_evictions = 0;  // modules the memory cache let go of (least recently used)
  int64_t disk_evictions = 0;    // entries this process removed from the disk cache
};
CacheStats cache_stats();
/// Forgets the in-memory cache (modules still in use stay alive), as a new process would.
void clear_memory_cache();

/// The in-memory cache keeps modules up to a total size, then lets the least recently used go
/// (an Executable still holding one keeps it alive and valid). A module's size is its object
/// code, constants and key plus the JIT's own fixed cost, an estimate. The limit starts at
/// $FUSE_MEMORY_CACHE_MAX_BYTES (bytes, or with a K, M or G suffix), else 64 MiB; 0 keeps
/// nothing.
int64_t memory_cache_limit();
void set_memory_cache_limit(int64_t bytes);  // evicts at once down to the new limit
struct MemoryCacheUsage {
  int64_t entries = 0;
  int64_t bytes = 0;  // estimated, as counted against the limit
};
MemoryCacheUsage memory_cache_usage();

/// The disk cache's limit: $FUSE_CACHE_MAX_BYTES (bytes, or with a K, M or G suffix), else
/// 1 GiB; 0 stores nothing. After a store takes the directory past it, the least recently
/// used entries (oldest modification time; a hit refreshes it) are removed down to 90% of it.
/// Processes sharing the directory serialize eviction with a lock file in it.
int64_t disk_cache_limit();
struct DiskCacheUsage {
  std::string directory;
  int64_t entries = 0;  // *.fuseobj files
  int64_t bytes = 0;
  int64_t limit = 0;
};
DiskCacheUsage disk_cache_usage();
/// Removes every entry (and abandoned temporary file) of the disk cache; returns how many
/// entries it removed. Nothing else in the directory is touched.
int64_t clear_disk_cache();

}  // namespace fuse::codegen
