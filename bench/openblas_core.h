// Which OpenBLAS kernels the benchmarks' OpenBLAS peer runs with.
#pragma once

#include <cblas.h>

#include <cctype>
#include <cstdlib>
#include <string>

namespace fuse::bench {

/// The OPENBLAS_CORETYPE to start again with, or null to keep OpenBLAS's own choice.
///
/// Why: OpenBLAS picks its kernels by CPU model, and a release older than the CPU falls back to
/// its SSE3 ones ("Prescott"). Debian 12's 0.3.21 does so on the Intel Xeon of family 6 model 207
/// (AVX-512): cblas_sgemm 1024^3 on two threads took 72.4 ms (29.6 GFLOP/s) there, and 11.4 ms
/// (188 GFLOP/s) with OPENBLAS_CORETYPE=SkylakeX (matmul_bench, 2026-11-28). A peer should be the
/// library at its best on the machine, so a fallback core on a CPU with AVX-512 (AVX2 and FMA)
/// gets the SkylakeX (Haswell) kernels. A core set by the user is kept.
inline const char* openblas_core_override() {
  if (std::getenv("OPENBLAS_CORETYPE")) return nullptr;
  std::string core = openblas_get_corename();
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  bool fallback = core == "prescott" || core == "core2" || core == "penryn" || core == "nehalem" ||
                  core == "dunnington" || core == "atom" || core == "generic";
  if (!fallback) return nullptr;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

}  // namespace fuse::bench
