// The kernel-level Program: what the passes hand to a backend. A Program is a list of kernels
// (each a fused sub-graph with a schedule), the buffers they read and write, and the launch order.
//
// Thread safety: Program and its parts are plain values: const use from any number of threads,
// mutation needs exclusive access. interpret_program keeps its state per call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/interpreter.h"

namespace fuse::ir {

enum class KernelKind {
  Elementwise,  // one iteration space; views are index maps; several outputs of that shape
  Reduction,    // reductions over the same axes of one input space, with prologue and epilogue
  RowWise,      // reductions over trailing axes broadcast back over their rows: one row at a time
  Matmul,       // one matmul with elementwise prologues on its operands and an epilogue
  Transpose,    // a permuted copy (no arithmetic): cache-blocked / shared-memory tiled
  Copy,         // a plain copy or broadcast materialization (no arithmetic)
  Scan,         // one scan over `axes` (its one axis) of the space, with an elementwise prologue
  Scatter,      // one histogram, bincount or index_add over its input's elements, with an
                // elementwise prologue; its result is stored (ir/kernel_forms.h: scatter_node)
};
std::string_view kernel_kind_name(KernelKind k);

using BufferId = int32_t;

enum class BufferRole { Input, Output, Intermediate };
std::string_view buffer_role_name(BufferRole r);

/// A materialized tensor. Inputs and outputs are named after the graph's; intermediates "t<node>".
struct Buffer {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  BufferRole role = BufferRole::Intermediate;
  int slot = -1;  // Intermediate: storage slot assigned by memory planning (reused by liveness)

  Dim bytes() const { return num_elements(shape) * Dim(static_cast<int64_t>(dtype_size(dtype))); }
};

/// How a kernel's loops are laid out: chosen per target by passes/schedule.cpp from the kernel's
/// body (ir/kernel_forms.h); each code generator dispatches on it.
enum class LoopForm {
  // CPU
  Interpreted,      // rows out of order (results_in_row_order fails): the reference interpreter runs it
  Contiguous,       // a flat SIMD loop: every operand laid out like the space or a single element
  Rows,             // row by row, views as strides of 0 or 1 along the row: SIMD columns
  TiledRows,        // row by row in square tiles: an operand strided along the row (a transpose)
  General,          // element by element, each index taken apart and followed through the views
  ReductionRows,    // one row of kept dims at a time: its reductions, then its outputs
  ColumnReduction,  // reductions over leading axes: lanes are adjacent outputs, each down its column
  SplitReduction,   // a reduction to single elements over chunks, combined by a second function
  BlockedMatmul,    // BLIS-style packing, cache blocks and an mr x nr register tile
  MatmulRows,       // rows of C: strips of columns sharing vectors of B, or one dot product per element
  // CUDA
  GridStride,       // elementwise: a grid-stride loop, 16-byte vectors where aligned
  SharedTileTranspose,  // a tile through shared memory, read and written along rows
  BlockPerRow,      // one block per row: in registers when the row fits on chip, else loops
  TwoStage,         // a reduction to single elements: per-block partials, then one block
  SharedTileMatmul, // shared-memory tiles of A and B, a register tile of C per thread
  PerElement,       // each output element recomputes its reductions or dot product
  // both targets
  ScanRows,         // a scan: each row along the scan axis folded in order, rows in parallel
  Scatter,          // histogram/bincount: CPU private bins per chunk merged in chunk order; index_add:
                    // CPU one thread per output column, its adds in index order (docs/language.md)
};
std::string_view loop_form_name(LoopForm f);

/// CPU schedule: vector width, task size, blocking.
struct CpuSchedule {
  int64_t grain = 1;           // minimum iterations of the parallel range per task
  int vector_width = 16;       // SIMD lanes for the innermost loop (elements of the kernel's dtype)
  int accumulators = 2;        // ReductionRows, SplitReduction: independent vector accumulators per reduction
  int transpose_block = 16;    // TiledRows: square tile edge in elements
  int64_t mc = 0, kc = 0, nc = 0;  // BlockedMatmul: cache blocking (rows of A, depth, cols of B)
  int mr = 0, nr = 0;              // BlockedMatmul: register tile (rows x cols of C kept in registers)
  /// BlockedMatmul: the micro-kernel reads A where it lies, without packing it, when A is one
  /// of the kernel's inputs laid out row-major (else, and without this, A is packed).
  bool a_in_place = false;
  /// Contiguous, Rows, TiledRows, ReductionRows: kernels moving more bytes than this stream
  /// their outputs (non-temporal stores). passes/schedule.cpp takes Target::streaming_bytes
  /// where a later kernel reads an output, Target::result_streaming_bytes where it writes only
  /// the program's results.
  int64_t streaming_bytes = kDefaultStreamingBytes;
  static constexpr int64_t kDefaultStreamingBytes = int64_t{32} << 20;
  static constexpr int64_t kDefaultResultStreamingBytes = int64_t{8} << 20;
};

/// CUDA schedule: block shape, items per thread, tiles.
struct CudaSchedule {
  int block_x = 256, block_y = 1;
  int items_per_thread = 4;          // GridStride and TwoStage: elements per thread per step
  int vector_bytes = 16;             // GridStride: 128-bit loads/stores where aligned
  int tile_rows = 0;                 // SharedTileTranspose: tile edge in elements
  int shared_cols = 0;               // SharedTileTranspose: shared-memory row length (tile + 1 padding)
  int tile_k = 0;                    // SharedTileMatmul: depth of a shared-memory tile
  int thread_rows = 0, thread_cols = 0;  // SharedTileMatmul: outputs per thread (register blocking)
};

enum class TargetKind { Cpu, Cuda };
std::string_view target_kind_name(TargetKind t);

struct Schedule {
  TargetKind target = TargetKind::Cpu;
  LoopForm form = LoopForm::General;
  CpuSchedule cpu;
  CudaSchedule cuda;
};

struct Kernel {
  std::string name;                 // "k0_elementwise"
  KernelKind kind = KernelKind::Elementwise;
  /// The fused sub-graph. Its Input nodes are named after the buffers it reads and its outputs
  /// after the buffers it writes, so it runs as is in the reference interpreter.
  Graph body;
  std::vector<BufferId> inputs;     // in the order of body's Input nodes
  std::vector<BufferId> outputs;    // in the order of body.outputs
  std::vector<NodeId> source_nodes; // nodes of the source graph it computes (for pictures and explanations)
  /// The iteration space: Elementwise/Transpose/Copy the outputs' shape; Reduction/RowWise the
  /// space reduced over; Matmul the result's shape; Scan the scanned tensor's shape (axes: the scan axis);
  /// Scatter the scattered input's shape (x for histogram/bincount, values for index_add; axes:
  /// the axes that do not index the output: every axis for histogram/bincount, index_add's axis).
  Shape space;
  std::vector<int> axes;            // Reduction/RowWise: the reduced axes of `space`
  Schedule schedule;
};

/// The flattened range of independent iterations a kernel's [begin, end) covers: every element
/// of the space for elementwise work, every row (element of the kept dims) for reductions, every
/// batch-and-row of the result for matmuls.
Dim parallel_iterations(const Kernel& k);

struct ProgramIO {
  std::string name;
  BufferId buffer = -1;
};

struct Program {
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;
  std::vector<int> launch_order;     // indices into kernels
  std::vector<ProgramIO> inputs;     // the graph's inputs, in order
  std::vector<ProgramIO> outputs;    // the graph's outputs, in order (several may share a buffer)
  int num_slots = 0;                 // storage slots used by intermediates

  BufferId find_buffer(const std::string& name) const;  // -1 when absent
};

/// Human-readable text: buffers, then each kernel with its schedule and body.
std::string print_program(const Program& p);
/// JSON with `kernels` [{name, kind, ops, inputs, outputs, schedule}], `buffers`
/// [{name, dtype, shape, bytes, role, slot}], `launch_order` (kernel names), `inputs`, `outputs`.
std::string program_to_json(const Program& p);

/// Bytes the plan holds at its peak: every input and output, plus one allocation per
/// intermediate slot (slots are allocated once and reused by buffers whose lifetimes don't overlap).
int64_t planned_peak_bytes(const Program& p, const SymbolBindings& symbols);

/// Checks `inputs` against the Program's inputs (as bind_inputs does for a graph) and binds the
/// shape symbols from them.
SymbolBindings bind_program_inputs(const Program& p, const TensorMap& inputs);

/// Runs the Program kernel by kernel in the reference interpreter, holding only the Program's
/// buffers, intermediates in their planned slots (a read of a buffer whose slot was reused
/// throws): this checks that fusion and memory planning preserve meaning before codegen.
TensorMap interpret_program(const Program& p, const TensorMap& inputs);

}  // namespace fuse::ir
