// Tiling and scheduling: chooses, per kernel and target, the parallel dims, vector width, tiles
// and reduction strategy. Schedules are data in the Program; codegen follows them.
#pragma once

#include <cstdint>
#include <string_view>

#include "ir/program.h"

namespace fuse::passes {

/// What the schedules depend on.
struct TargetInfo {
  ir::TargetKind kind = ir::TargetKind::Cpu;
  // CPU
  int vector_bits = 512;           // 512 with AVX-512, 256 with AVX2
  int cores = 1;
  int64_t l1_bytes = 32 << 10, l2_bytes = 1 << 20, l3_bytes = 16 << 20;
  // CUDA
  int sm = 80;

  /// The machine this process runs on (cpuid and /sys cache sizes).
  static TargetInfo host();
  /// The host with the properties that `description` names replaced: comma-separated `avx512`,
  /// `avx2` or `vector=BITS`, `l1=SIZE`, `l2=SIZE`, `l3=SIZE` (bytes, or with a K, M or G
  /// suffix) and `cores=N`, e.g. "avx2,l1=48K,l2=2M,l3=480M,cores=2". Schedules for another
  /// CPU's caches and vector width; the code still runs here. Throws ir::Error naming the part
  /// it does not understand.
  static TargetInfo cpu(std::string_view description);
  static TargetInfo cuda(int sm = 80);
};

void schedule_program(ir::Program& p, const TargetInfo& target);

}  // namespace fuse::passes
