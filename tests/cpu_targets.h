// CPU target descriptions the tests compile for besides the host: the schedules (vector width,
// mc/kc/nc from cache sizes) of other machines, so that CI on one machine also runs the code
// other machines get. The code runs here either way (LLVM legalizes 512-bit vectors on AVX2).
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "frontends/compile.h"

namespace fuse::testing {

struct CpuTargetDescription {
  std::string name;
  std::string description;  // Target::cpu's syntax; "" is the host as detected
};

inline const std::vector<CpuTargetDescription>& cpu_target_descriptions() {
  static const std::vector<CpuTargetDescription> targets = {
      {"host", ""},
      {"zen4", "avx512,l1=32K,l2=1M,l3=32M,cores=2"},
      {"xeon", "avx512,l1=48K,l2=2M,l3=480M,cores=2"},
      {"avx2", "avx2,l1=32K,l2=1M,l3=32M,cores=2"},
      {"xeon-avx2", "avx2,l1=48K,l2=2M,l3=480M,cores=2"},
      // Caches so small that a few rows and columns cross every matmul block boundary, and
      // outputs streamed from 1 KiB moved.
      {"tiny-caches", "l1=4K,l2=4K,l3=8K,stream=1K,cores=1"},
  };
  return targets;
}

inline CompileOptions compile_options_for(const CpuTargetDescription& target) {
  CompileOptions options;
  options.pipeline.target = Target::cpu(target.description);
  return options;
}

/// `t` writing outputs with non-temporal stores once a kernel moves 64 KiB instead of 8 or 32 MiB
/// (both thresholds: Target::result_streaming_bytes and streaming_bytes): the streaming code runs
/// on arrays small enough for the interpreter to check quickly.
inline Target streams_from_64k(Target t = Target::host()) {
  t.streaming_bytes = t.result_streaming_bytes = 64 << 10;
  return t;
}

/// `base` with 256-bit vectors (the host runs AVX2 code too), and with 512-bit ones where the
/// host has them.
inline std::vector<CompileOptions> vector_widths_this_host_runs(CompileOptions base = {}) {
  base.pipeline.target.vector_bits = 256;
  std::vector<CompileOptions> widths{base};
  if (Target::host().vector_bits >= 512) {
    widths.push_back(base);
    widths.back().pipeline.target.vector_bits = 512;
  }
  return widths;
}

/// The descriptions FUSE_CPU_TARGET names: one name, or "all"; unset: none (the caller rotates).
inline std::vector<CpuTargetDescription> cpu_targets_from_environment() {
  const char* env = std::getenv("FUSE_CPU_TARGET");
  if (!env || !*env) return {};
  std::vector<CpuTargetDescription> chosen;
  for (const CpuTargetDescription& t : cpu_target_descriptions())
    if (std::string(env) == "all" || t.name == env) chosen.push_back(t);
  return chosen;
}

}  // namespace fuse::testing
