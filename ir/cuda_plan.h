// The launch plan of a Program compiled for CUDA: everything the runtime needs, besides the PTX
// and the Program's buffers, to run it without the compiler. codegen/ produces it
// (codegen::compile_cuda), runtime/ executes it, and an AOT bundle stores it next to the PTX.
//
// Thread safety: plain data; const use from any number of threads, mutation needs exclusive access.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/host_array.h"
#include "ir/shape.h"

namespace fuse::ir {

/// One kernel parameter. Every parameter is 8 bytes: a device pointer or an int64 value.
struct CudaArg {
  enum class Kind {
    Buffer,    // device pointer to Program buffer `index` (a BufferId)
    Constant,  // device pointer to CudaPlan::constants[index], uploaded once per executable
    Scratch,   // device pointer to a scratch allocation of CudaPlan::scratch_bytes[index] bytes
    Symbol,    // int64: the size bound to CudaPlan::symbols[index] in this run
  };
  Kind kind = Kind::Buffer;
  int index = -1;
  bool operator==(const CudaArg&) const = default;
};

/// One cuLaunchKernel. For each i in x, y, z:
///   grid[i] = clamp(ceil(evaluate(work[i]) / work_per_block[i]), 1, max_grid[i])
/// (work is symbolic when the Program's shapes are; it is evaluated per run).
struct CudaLaunch {
  std::string entry;  // the PTX .entry name
  int kernel = -1;    // the Program kernel it computes (a two-stage reduction has two launches)
  std::array<int, 3> block{256, 1, 1};
  std::array<Dim, 3> work{Dim(1), Dim(1), Dim(1)};
  std::array<int64_t, 3> work_per_block{1, 1, 1};
  std::array<int64_t, 3> max_grid{2147483647, 65535, 65535};
  int shared_bytes = 0;  // dynamic shared memory per block
  std::vector<CudaArg> args;
};

struct CudaPlan {
  std::string sm = "sm_80";                 // the PTX target
  std::vector<std::string> symbols;         // shape symbols, in the order Symbol args index
  std::vector<HostArray> constants;         // tensors kernels read (Constant args)
  std::vector<int64_t> scratch_bytes;       // scratch allocations (Scratch args)
  std::vector<CudaLaunch> launches;         // in launch order
  /// issue 16: the Scratch allocation holding the run's error record (ir/index_check.h), which
  /// every kernel with index checks takes as its last pointer; the runtime zeroes it before each
  /// run and reads it back after. -1: no kernel checks indices.
  int error_scratch = -1;
};

/// Readable text, one launch per line with its grid rule and arguments (`fusec --emit=plan`).
std::string print_cuda_plan(const CudaPlan& plan);

}  // namespace fuse::ir
