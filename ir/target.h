// What code is compiled for: the one Target of fuse. The passes choose schedules from it, the
// driver (frontends/compile.h) picks the backend and the device from it, and the C++ API takes it
// as fuse::Target.
//
// Thread safety: a plain value; Target::host() reads cpuid and sysfs and may run on any thread.
#pragma once

#include <cstdint>
#include <string_view>

// TargetKind (cpu, cuda) is declared beside the Schedule that records it per kernel.
#include "ir/program.h"

namespace fuse::ir {

/// A CPU (its vector width, cores and caches: what the schedules depend on; the code runs on
/// this machine either way) or an NVIDIA GPU (a device ordinal and the compute capability).
struct Target {
  TargetKind kind = TargetKind::Cpu;
  // Cpu
  int vector_bits = 512;  // 512 with AVX-512, 256 with AVX2
  int cores = 1;
  int64_t l1_bytes = 32 << 10, l2_bytes = 1 << 20, l3_bytes = 16 << 20;
  /// Kernels that move more bytes than this write their outputs with non-temporal stores, when a
  /// later kernel of the program reads one of them: the outputs could not stay in the caches for
  /// it anyway. The tests set it low to run the streaming code on small arrays.
  int64_t streaming_bytes = CpuSchedule::kDefaultStreamingBytes;
  /// The same for kernels that write only the program's results (no later kernel reads them):
  /// streaming saves reading each line before it is overwritten, and no consumer misses the
  /// cached copy. Lower by default (8 MiB against 32; measured in bench/README.md, "Results
  /// stream from 8 MiB moved").
  int64_t result_streaming_bytes = CpuSchedule::kDefaultResultStreamingBytes;
  // Cuda
  int device = 0;  // the device ordinal to load onto and run on
  /// The compute capability to compile for (80: sm_80); 0 leaves it to the driver: the device's
  /// own (at most 90), or 80 when there is no GPU to ask.
  int sm = 0;
  /// Cuda: the simulated CUDA device (runtime/sim/, docs/cuda-simulator.md) instead of the
  /// driver's; FUSE_CUDA_SIM=1 selects it for every CUDA target.
  bool simulated = false;

  /// The machine this process runs on (cpuid and /sys cache sizes).
  static Target host();
  /// The host with the properties that `description` names replaced: comma-separated `avx512`,
  /// `avx2` or `vector=BITS`, `l1=SIZE`, `l2=SIZE`, `l3=SIZE`, `stream=SIZE` (bytes, or with a
  /// K, M or G suffix; stream: both streaming thresholds), `stream_results=SIZE`
  /// (result_streaming_bytes alone) and `cores=N`, e.g. "avx2,l1=48K,l2=2M,l3=480M,cores=2"; "" is the host. Schedules
  /// for another CPU's caches and vector width; the code still runs here. Throws ir::Error
  /// naming the part it does not understand.
  static Target cpu(std::string_view description = "");
  /// GPU `device`, compiled for compute capability `sm` (0: see `sm`).
  static Target cuda(int device = 0, int sm = 0);
  /// The simulated CUDA device: `fusec run --target=cuda-sim`.
  static Target cuda_sim();
};

}  // namespace fuse::ir
