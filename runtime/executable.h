// Runs a compiled Program: buffers by the memory plan, kernels in launch order on the thread pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/index_check.h"
#include "ir/interpreter.h"
#include "ir/program.h"
#include "runtime/buffer.h"

namespace fuse::runtime {

/// The ABI of a compiled CPU kernel (codegen/cpu_codegen.h produces them): the kernel's
/// buffers (inputs, outputs, then its constants), the sizes of the Program's shape symbols, and
/// the [begin, end) slice of its flattened iteration space to compute.
using CpuKernelFn = void (*)(void* const* buffers, const int64_t* symbols, int64_t begin, int64_t end);

struct CpuKernelCode {
  CpuKernelFn fn = nullptr;  // null: the kernel runs in the reference interpreter
  std::vector<ir::HostArray> constants;
  // A split reduction: fn over [0, split_chunks) leaves partials in a scratch buffer of
  // scratch_bytes (passed after the constants); finish combines them.
  CpuKernelFn finish = nullptr;
  int64_t split_chunks = 0;
  int64_t scratch_bytes = 0;
  // np-scan: a scan of at most scan_chunked_rows rows of at least scan_chunked_length elements
  // runs chunked (codegen/cpu_codegen.h, CompiledKernel): scan_totals, finish (the carries) and
  // scan_chunks over [0, rows * split_chunks), sharing the scratch buffer.
  CpuKernelFn scan_totals = nullptr;
  CpuKernelFn scan_chunks = nullptr;
  int64_t scan_chunked_rows = 0;
  int64_t scan_chunked_length = 0;
  // A column reduction of few columns (ir::column_reduction_splits()): column_rows over
  // [0, split_chunks) chunks of its rows (scratch_bytes per column), then finish over its
  // columns (codegen/cpu_codegen.h, CompiledKernel).
  CpuKernelFn column_rows = nullptr;
  // A kernel worth code compiled for a short symbolic length (frontends/compile.cpp): a row
  // kernel's row length, or a column reduction's columns. Where a run's length is at most
  // specialized_up_to, the runtime specializes the kernel to it (CpuCode::specialize).
  std::optional<ir::Dim> specialized_length;
  int64_t specialized_up_to = 0;
};

/// Row kernels with a transcendental's work per element over rows of at most this many elements
/// run code specialized to the row length (from the second run with that length on): with the
/// length a constant, LLVM unrolls each row's loops, which took a fifth of a softmax row of 64
/// f32 in symbolic code. Softmax over 16 MiB, two threads, specialized against generic: rows of
/// 16 0.71 ms against 0.90, of 64 0.45-0.47 against 0.51-0.62, of 128 and 256 the same, of 512
/// 0.38-0.40 against 0.36-0.40 (lost).
inline constexpr int64_t kSpecializedRowElements = 256;
/// Cheaper row kernels, bound by memory on longer rows, over rows of at most this many: the
/// generic code goes row by row, and rows shorter than a vector cost it a loop's control, a lane
/// fold and a scalar tail each, where code for a constant length runs several rows a vector
/// (LLVM's interleaved loads). sqrt(sum(x * x, axis=1)) over 12M f32 on the Intel Xeon (two
/// threads, bench/README.md): rows of 3 15.7 ms generic against 1.5 specialized, of 12 14.0
/// against 1.7, of 16 2.0 against 1.5, of 24 3.1 against 2.8, of 33 and more the same.
inline constexpr int64_t kSpecializedCheapRowElements = 32;

/// Symbol sizes a specialization fixes, sorted by name.
using BoundSymbols = std::vector<std::pair<std::string, int64_t>>;

/// Machine code for a Program's kernels, and whatever keeps it alive (a JIT, a shared object).
struct CpuCode {
  std::shared_ptr<const void> owner;
  std::vector<std::string> symbols;     // the order of the symbol sizes kernels receive
  std::vector<CpuKernelCode> kernels;   // as Program::kernels
  // Compiles the kernels whose specialized_length mentions a bound symbol again, with those sizes fixed
  // (the others come back without code: fn null). Empty: the Executable never specializes.
  std::function<CpuCode(const BoundSymbols&)> specialize;
};

/// A compiled CPU program, ready to run.
///
/// Thread safety: run() may be called from any number of threads at once on the same
/// Executable; each call computes exactly what it would alone. A call takes a workspace (its
/// intermediates and scratch) from the Executable's pool, or makes one when all are in use, and
/// returns it after, so steady-state runs allocate no intermediates and concurrent runs never
/// share one. Different Executables share nothing but the process's thread pool, which serves
/// several callers at once. The `outputs` map passed to run() belongs to its caller: two
/// concurrent calls must not pass the same map. program() and compiled_kernel_count() only read.
class Executable {
 public:
  Executable(ir::Program program, CpuCode code);
  ~Executable();
  Executable(Executable&&) noexcept;
  Executable& operator=(Executable&&) noexcept;

  /// Runs the Program on host inputs and returns its outputs by name. Intermediates live in a
  /// workspace (by memory-plan slot) reused by later runs.
  ir::TensorMap run(const ir::TensorMap& inputs);
  /// The same, writing into `outputs`: arrays already there with the right dtype and shape are
  /// reused (like Numba's out=), so repeated runs allocate nothing. Except with gather/scatter
  /// ops (take, bincount, ...): their run-time index errors (fuse::ir::Error naming the op, its
  /// source line, the index and the size) must leave `outputs` as it was, so such a program
  /// computes into fresh arrays and moves them into `outputs` only once every kernel succeeded.
  void run(const ir::TensorMap& inputs, ir::TensorMap& outputs);

  /// One input of run_views: memory the caller owns, dense row-major and aligned to the dtype.
  struct InputView {
    ir::DType dtype;
    const int64_t* shape;
    int rank;
    const void* data;
  };
  /// run() without copying or naming: inputs read in place, in program().inputs order; outputs
  /// in program().outputs order, reused when their dtype and shape fit and their bytes overlap
  /// no input (one that does gets a new array: kernels read their inputs as they were, some
  /// more than once, while they write their outputs). Checks the inputs as
  /// run() does (dtype, rank, dims against the symbols). What a caller that already holds its
  /// arrays (the Python package) calls on every dispatch.
  void run_views(const std::vector<InputView>& inputs, std::vector<ir::HostArray>& outputs);

  const ir::Program& program() const { return program_; }
  /// How many kernels run as machine code (the rest run in the reference interpreter).
  int compiled_kernel_count() const;
  /// Workspaces made so far: the most runs that were ever in flight at once.
  int workspace_count() const;
  /// Specializations made so far (CpuKernelCode::specialized_length): one per distinct set of
  /// short lengths that ran twice, at most kMaxSpecializations. FUSE_SPECIALIZE=0 turns them off.
  int specialization_count() const;
  static constexpr int kMaxSpecializations = 8;

 private:
  struct Workspace;
  struct WorkspacePool;
  struct Specializations;
  // The code for a run with `symbols`: a specialization's (made here on the second run that
  // asks for it), else null (the generic code_).
  const CpuCode* specialized_code(const ir::SymbolBindings& symbols);

  // The launches of one run, inputs and outputs by their index in program().inputs/outputs.
  void run_bound(const ir::SymbolBindings& symbols, const std::vector<const void*>& inputs,
                 const std::vector<ir::HostArray*>& outputs);
  void* storage(ir::BufferId b, const ir::SymbolBindings& symbols, const std::vector<ir::HostArray*>& outputs,
                const std::vector<const void*>& inputs, Workspace& workspace);
  void launch(const ir::Kernel& k, const CpuKernelCode& code, std::vector<void*>& pointers,
              const ir::SymbolBindings& symbols, const std::vector<int64_t>& symbol_sizes, Workspace& workspace,
              size_t kernel_index);

  ir::Program program_;
  CpuCode code_;
  std::unique_ptr<WorkspacePool> workspaces_;
  std::unique_ptr<Specializations> specializations_;  // null: nothing to specialize
  // Per buffer: its index in program().inputs (inputs) or the first of program().outputs naming
  // it (outputs); -1 for intermediates.
  std::vector<int> io_index_;
  // The index range checks of every kernel (checked before anything runs), and whether a kernel
  // can fail after others ran (a gather/scatter op's data-dependent index).
  std::vector<ir::SizeCheck> size_checks_;
  bool may_raise_ = false;
  // issue 16: the data-dependent index checks of compiled kernels (ir/index_check.h), and per
  // kernel whether it takes the run's error record.
  std::vector<ir::IndexCheck> index_checks_;
  std::vector<bool> reports_errors_;
};

}  // namespace fuse::runtime
