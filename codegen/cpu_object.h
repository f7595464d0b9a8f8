// Internal to codegen: the MLIR half (codegen/cpu/lower.cpp) turns a Program into an object file;
// the JIT half (cpu_jit.cpp) caches and loads it. Not included outside codegen/.
//
// Thread safety: CpuObject is plain data; compile_cpu_object keeps its MLIR and LLVM contexts per
// call, so any number may run at once.
#pragma once

#include <string>
#include <vector>

#include "codegen/cpu_codegen.h"

namespace fuse::codegen {

enum class ObjectKind { Object, Assembly };

// np-scan: a scan of few long rows is cut into kScanChunks chunks per row (codegen/cpu/scan.cpp):
// at most kScanChunkedRows rows (more rows keep every thread busy a row each) of at least
// kScanChunkedLength elements (chunks of ~512 and more: shorter ones cost more to start than
// they save).
constexpr int64_t kScanChunks = 64;
constexpr int64_t kScanChunkedRows = 16;
constexpr int64_t kScanChunkedLength = 32768;

struct CpuObject {
  std::string bytes;                      // an ELF object (or assembly text)
  std::vector<std::string> symbols;       // the order of the symbol sizes kernels receive
  std::vector<bool> compiled;             // per Program kernel: present in the object
  std::vector<std::vector<ir::HostArray>> constants;  // per Program kernel
  std::vector<int64_t> split_chunks;      // per kernel: 0, or a split reduction's chunk count
  std::vector<int64_t> scratch_bytes;     // per kernel: a split reduction's scratch buffer
};

/// Program -> MLIR -> LLVM IR -> optimized machine code for the host.
CpuObject compile_cpu_object(const ir::Program& p, const CpuOptions& options, ObjectKind kind);

}  // namespace fuse::codegen

namespace fuse::codegen {
/// Changes whenever the code generator is rebuilt: part of every cache key, so that objects
/// compiled by an older fuse are never loaded.
const char* codegen_build_stamp();
}  // namespace fuse::codegen
