// The CUDA kernel emitter (internal to codegen/): one kernel of a Program as gpu.func(s) and
// their launches in the plan. It derives from the shared core (codegen/emitter.h) and emits the
// CUDA loop forms the schedule chose (ir::LoopForm): codegen/cuda/emitter.cpp (functions,
// parameters, memory), elementwise.cpp (GridStride, SharedTileTranspose), reduction.cpp
// (BlockPerRow, TwoStage, PerElement), matmul.cpp (SharedTileMatmul); codegen/cuda/lower.cpp
// builds the gpu.module with an #nvvm.target and lowers it through NVVM to PTX (libdevice
// linked).
//
// Kernel ABI (ir/cuda_plan.h): every parameter is 8 bytes, in this order: the kernel's input
// buffers (its body's Input nodes in order), its output buffers, the constants it reads, its
// scratch (two-stage reductions, scatter bins, a scan's chunk totals), the run's error record (kernels with index checks:
// ir/index_check.h, CudaPlan::error_scratch), then the size of every shape symbol of the Program (sorted by
// name, CudaPlan::symbols). Buffers are addressed with llvm.getelementptr/load/store on plain
// pointers; shared memory is an llvm.mlir.global in address space 3; indices are i64.
//
// Every kernel walks its work in grid-stride loops on every grid axis, so it is correct for any
// grid the runtime launches; the plan's grid rule only picks a good one. Loop forms:
// - GridStride (elementwise, copies): one element per thread per step. Where every operand is laid out like the
//   output space (or is one broadcast element), 16-byte vector loads/stores when every pointer
//   is 16-byte aligned (checked at run time), then a scalar tail; otherwise each element
//   delinearizes its index and follows views (broadcast, permute, reshape...) as index maps.
// - SharedTileTranspose: 32x32 tiles through shared memory padded to 33 columns; block 32x8.
// - BlockPerRow (reductions, row-wise): one block per row (of the kept dims): each thread folds a strided part of
//   the row, then warp shuffles (xor butterfly) and one slot per warp in shared memory combine
//   the threads in a fixed order; full-space outputs (softmax) are written over the row after.
//   A reduction to one element (TwoStage) is two launches: per-block partials in scratch, then
//   one block combines them in block order. Deterministic: the order depends only on the sizes.
// - SharedTileMatmul: 128x128 tiles of C per block of 16x16 threads, 8x8 outputs per thread in registers,
//   8-deep tiles of A and B (prologues applied on load) in shared memory, the epilogue applied
//   to each output before its store.
// - PerElement: a kernel whose outputs permute or reshape a reduction's or matmul's result: element by
//   element, each thread folding the reductions (dot products) its elements need.
// - ScanRows (scan.cpp): a thread per short row, a block per long row, or for few long rows
//   three launches: chunk totals, a scan of each row's totals (the carries), each chunk rescanned
//   from its carry and stored.
// Reductions accumulate as the interpreter does: float sums, products and means in f64, integer
// ones in i64, float max/min in their own type (exact), user combiners sequentially in the
// node's dtype. A user combiner that regroups (ir::combiner_regroups: associative, its init an
// identity) is folded in parallel but never reordered: each thread folds a contiguous chunk in
// order and the chunks are combined in order (for floats the grouping, and so the rounding,
// differs from the interpreter's one left-to-right fold); one that does not (acc + v*v) is
// folded in order by one thread.
// Matmuls (SharedTileMatmul) multiply and sum in the matmul's own dtype, with fused
// multiply-adds for floats, as BLAS and the CPU's blocked matmul do; the per-element form
// (PerElement) sums its dot products in f64 or i64.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "codegen/cuda_codegen.h"
#include "codegen/emitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace fuse::codegen {

// Partial results per reduction in a two-stage reduction's scratch (the first launch's grid is
// capped at this many blocks).
constexpr int64_t kMaxPartials = 1024;
constexpr int kWarp = 32;

/// Per-block shared-memory bins of histogram/bincount kernels up to this size (else global
/// atomics only).
constexpr int64_t kSharedBinBytes = 32 * 1024;
/// Scratch bytes a Scatter kernel's bins need: 0 when it adds straight into its output (an
/// 8-byte output of the bin type: counts, i64 or f64 sums, or index_add), else 8 bytes per bin.
int64_t scatter_scratch_bytes(const ir::Kernel& k);

/// np-cuda-scan: a ScanRows kernel's multi-block form (few long rows) cuts a row into chunks of
/// at least kScanChunkLength elements when it has fewer than kScanFewRows rows (rows alone would
/// not fill a GPU's SMs), its chunk totals in kMaxScanChunks 8-byte scratch slots.
constexpr int64_t kScanChunkLength = 4096;
constexpr int64_t kScanFewRows = 256;
constexpr int64_t kMaxScanChunks = 8192;
/// Scratch bytes a ScanRows kernel needs: the chunk totals (kMaxScanChunks slots of 8 bytes).
int64_t scan_scratch_bytes(const ir::Kernel& k);

/// Scratch bytes a TwoStage kernel needs: the first launch's block count, then kMaxPartials
/// 8-byte partials per reduction.
int64_t two_stage_scratch_bytes(const ir::Kernel& k);

class CudaKernelEmitter : public KernelEmitterBase {
 public:
  CudaKernelEmitter(mlir::OpBuilder& b, const ir::Kernel& k, int kernel_index, const std::vector<std::string>& symbols,
                    const CudaOptions& options, ir::CudaPlan& plan);
  /// Adds the kernel's functions at the end of `module` and its launches to the plan.
  void emit(mlir::gpu::GPUModuleOp module);

 private:
  // The kernel's parameters (see the file comment) and its launch arguments.
  void assign_args();
  mlir::Value symbol_value(const std::string& name) override;
  mlir::Value load_element(NodeId id, mlir::Value offset) override { return load(input_slot_.at(id), k_.body.node(id).dtype, offset); }
  mlir::Value result_at(NodeId id, const std::vector<mlir::Value>& idx) override;
  // Starts gpu.func `name` (a kernel) with the kernel's parameters, launched in blocks of
  // `block` threads (known to the function: ptxas then budgets registers for that block, not for
  // 1024 threads); the builder is left in its body. `finish_function` ends it.
  void begin_function(const std::string& name, std::array<int, 3> block);
  void finish_function();
  // The launch of the function begun last.
  ir::CudaLaunch& add_launch(const std::string& entry);
  mlir::Value i32(int64_t v);
  mlir::Value lt(mlir::Value a, mlir::Value c);
  mlir::Value eq(mlir::Value a, mlir::Value c);
  mlir::Value and_(mlir::Value a, mlir::Value c);
  mlir::Value ceil_div(mlir::Value a, int64_t d);
  mlir::Value index_to_i64(mlir::Value v);
  mlir::Value thread_id(mlir::gpu::Dimension d);
  mlir::Value block_id(mlir::gpu::Dimension d);
  mlir::Value block_dim(mlir::gpu::Dimension d);
  mlir::Value grid_dim(mlir::gpu::Dimension d);
  void barrier();
  mlir::Value zero_of(DType t);
  template <class Body>
  void loop(mlir::Value from, mlir::Value to, mlir::Value step, Body body) {
    auto for_op = b_.create<mlir::scf::ForOp>(loc_, from, to, step);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(for_op.getBody());
    CacheScope scope(*this);
    body(for_op.getInductionVar());
  }
  template <class Body>
  void if_then(mlir::Value condition, Body body) {
    auto branch = b_.create<mlir::scf::IfOp>(loc_, condition, /*withElseRegion=*/false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&branch.getThenRegion().front());
    CacheScope scope(*this);
    body();
  }
  // `then_body()` where `condition` holds, else `else_body()` (no results).
  template <class Then, class Else>
  void if_else(mlir::Value condition, Then then_body, Else else_body) {
    auto branch = b_.create<mlir::scf::IfOp>(loc_, condition, /*withElseRegion=*/true);
    mlir::OpBuilder::InsertionGuard guard(b_);
    {
      b_.setInsertionPointToStart(&branch.getThenRegion().front());
      CacheScope scope(*this);
      then_body();
    }
    {
      b_.setInsertionPointToStart(&branch.getElseRegion().front());
      CacheScope scope(*this);
      else_body();
    }
  }
  // `then_value()` where `condition` holds, else `otherwise` (computed before the branch).
  template <class Then>
  mlir::Value if_value(mlir::Value condition, Then then_value, mlir::Value otherwise) {
    auto branch = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange{otherwise.getType()}, condition, /*withElseRegion=*/true);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&branch.getThenRegion().front());
    {
      CacheScope scope(*this);
      b_.create<mlir::scf::YieldOp>(loc_, then_value());
    }
    b_.setInsertionPointToStart(&branch.getElseRegion().front());
    b_.create<mlir::scf::YieldOp>(loc_, otherwise);
    return branch.getResult(0);
  }
  // ---- global memory ----
  mlir::Value element_address(mlir::Value base, mlir::Type element, mlir::Value offset);
  mlir::Value load(int param, DType t, mlir::Value offset);
  void store(int param, DType t, mlir::Value offset, mlir::Value v);
  // `lanes` elements from `offset` (a multiple of lanes, the pointer 16-byte aligned) as
  // scalars of the register type.
  std::vector<mlir::Value> load_lanes(int param, DType t, mlir::Value offset, int lanes);
  void store_lanes(int param, DType t, mlir::Value offset, const std::vector<mlir::Value>& lanes_values);
  // ---- shared memory: one llvm.mlir.global in address space 3 per array ----
  mlir::Value shared_array(const std::string& suffix, mlir::Type element, int64_t count);
  mlir::Value shared_load(mlir::Value array, mlir::Type element, mlir::Value index);
  void shared_store(mlir::Value array, mlir::Type element, mlir::Value index, mlir::Value v);
  // The index in the space of element j of row `row` (its kept index `kept`). With trailing
  // reduced axes that is position row * L + j of the space, so that operands laid out like the
  // space are read there without index arithmetic (see linearize).
  std::vector<mlir::Value> element_index(const std::vector<mlir::Value>& kept, mlir::Value row, mlir::Value j);
  // Node `id` at elements [base, base + lanes) of a contiguous kernel, one value per lane.
  std::vector<mlir::Value> contiguous_lanes(NodeId id, mlir::Value base, int lanes, std::map<NodeId, std::vector<mlir::Value>>& cache);
  void emit_contiguous(mlir::Value base, int lanes);
  // Outputs may differ in shape from the space (same element count): each is evaluated at its
  // own index of the same row-major position.
  void emit_general(mlir::Value linear);
  // Lanes of a 16-byte vector of the widest element the kernel moves.
  int vector_lanes() const;
  void emit_elementwise();
  // ---- transposes: 32x32 tiles through shared memory ----
  // Tile (a, b): `a` the output's innermost axis (coalesced stores), `b` the output axis that
  // carries the input's innermost axis (coalesced loads). Threads (tx, ty) of a 32x8 block load
  // out[b = b0 + tx, a = a0 + ty + 8r] into tile[ty + 8r][tx], then store tile[tx][ty + 8r] to
  // out[a = a0 + tx, b = b0 + ty + 8r]. The 33-column rows put a tile column in 32 banks.
  void emit_transpose();
  // Whether node `id` is node `of` reshaped (the same elements in the same row-major order).
  bool reshape_of(NodeId id, NodeId of) const;
  // An accumulator as 8 bytes (shared memory and scratch slots) and back.
  mlir::Value to_slot(DType t, mlir::Value v);
  mlir::Value from_slot(DType t, mlir::Value v);
  // Lane `lane ^ mask`'s value of `v` (any accumulator type; 64-bit values as two halves).
  mlir::Value shuffle_xor(mlir::Value v, int mask);
  // np-scan: the same for any shuffle mode (UP: lane `lane - offset`'s, a lane's own below it).
  mlir::Value shuffle(mlir::Value v, int offset, mlir::gpu::ShuffleMode mode);
  // Every thread's `acc` combined over the block; every thread gets the result. Within a warp
  // an xor butterfly (every lane ends with the same value: each step combines the same two
  // partial results, in either order, and the combiners are commutative); then one slot per
  // warp in shared memory, read by every thread in warp order. Ends with a barrier, so the
  // slots can be reused at once.
  mlir::Value block_reduce(NodeId id, mlir::Value acc, int threads);
  // The same for argmax/argmin `id`'s (value, index) partials (arg_pick combines them): the
  // block's index.
  mlir::Value block_arg_reduce(NodeId id, std::pair<mlir::Value, mlir::Value> acc, int threads);
  mlir::Value linear_thread_id();
  // ---- ordered reductions (user combiners: never reordered; chunked only when they regroup) ----
  // [from, to) cut into `parts` contiguous chunks of ceil(n / parts) (at least 1) elements:
  // chunk `part`, clamped to `to` (the nonempty chunks are the first ones), and how many are
  // used (at least 1: chunk 0 always counts, as it may carry the identity of an empty range).
  struct Chunk {
    mlir::Value begin, end;
  };
  Chunk chunk_of(mlir::Value from, mlir::Value to, mlir::Value part, mlir::Value parts);
  mlir::Value chunks_used(mlir::Value from, mlir::Value to, mlir::Value parts);
  // Folds elements [c.begin, c.end) in order, `element(j)` each (already an accumulator), into
  // one accumulator per reduction of `ids`, each starting from its identity. With the
  // combiner associative and the identity its identity (NumPy's assumptions for reduce), the
  // chunks' results combined in order are the interpreter's one left-to-right fold.
  std::vector<mlir::Value> ordered_fold(const std::vector<NodeId>& ids, Chunk c,
                                        const std::function<std::vector<mlir::Value>(mlir::Value)>& element);
  // The same fold over begin, begin + step, ... < end (a grid-stride loop when step is the grid's
  // thread count).
  std::vector<mlir::Value> strided_fold(const std::vector<NodeId>& ids, mlir::Value begin, mlir::Value end, mlir::Value step,
                                        const std::function<std::vector<mlir::Value>(mlir::Value)>& element);
  // The block's threads' accumulators combined in thread order, threads [0, used) counting
  // (combine(left, right): the right operand an accumulator in the element's place): a
  // tree in shared memory (step s: thread t, a multiple of 2s, combines t + s into t). Every
  // thread gets the result; ends with a barrier.
  mlir::Value ordered_block_reduce(NodeId id, mlir::Value acc, mlir::Value used, int threads);
  // Row `row`'s reduction `id` with a user combiner: thread t folds the t-th contiguous chunk of
  // [0, length) in order, then ordered_block_reduce. Every thread gets it.
  mlir::Value ordered_row_reduce(NodeId id, const std::vector<mlir::Value>& kept, mlir::Value row, const ir::Dim& length, int threads);
  // Whether the user combiners of `ids` may be folded in chunks and regrouped
  // (ir::combiner_regroups); when not (acc + v*v), one chunk: thread 0 (block 0) folds it all.
  bool regroups(const std::vector<NodeId>& ids) const;
  // Elements per thread held in registers by a row-wise kernel's on-chip path (rows of up to
  // threads * R elements). 16 for kernels whose values are at most 4 bytes (4096-element rows in
  // 256-thread blocks: softmax and layernorm rows are mostly 1024 to 4096 wide), 8 where a value
  // is 8 bytes (f64, i64: two registers each, so the same register footprint, rows up to 2048).
  // The cost is registers, allocated for the whole kernel (short rows pay it too): ptxas gives
  // examples/softmax.expr (f32) 128 registers per thread at R = 16 (64 at R = 8, 32 without the
  // on-chip path), layernorm 168 (92 at R = 8), no spills: 2 (1) resident 256-thread blocks per
  // SM, each thread with 16 independent loads in flight. R = 16 reads the common 4096-wide f32
  // rows once; a GPU profile may favour 8 (rows up to 2048, twice the occupancy).
  int elements_per_thread() const;
  // One block per row of the kept dims (grid-stride over rows): each reduction in order (a
  // later one may read an earlier one's result, as softmax's sum reads its max), then the outputs.
  // A row of 1 to threads * R elements is held on chip (row_on_chip); longer rows, empty rows and
  // kernels with a user combiner re-read the row from global memory in each pass (row_by_loops).
  void emit_block_per_row();
  // One row, each pass a loop over the row that reads it from global memory.
  void row_by_loops(const std::vector<mlir::Value>& kept, mlir::Value row, int threads);
  // One row of 1 to threads * R elements (every reduction a built-in kind), held in registers:
  // thread t owns elements j_r = t + r * threads, r < R (the order row_by_loops folds them in, so
  // the results are bit-identical to it), each read at min(j_r, length - 1) so that every load
  // is in bounds. Each element's index is built once and the same index Values are used in every
  // pass, so general_value's cache hands every pass the values the first one loaded: the row is
  // read from global memory once. Nothing on this straight-line path clears the cache
  // (block_reduce's if_then restores it, see CacheScope). Element j_r counts in a fold, and is
  // stored, only where j_r < length.
  void row_on_chip(const std::vector<mlir::Value>& kept, mlir::Value row, int threads, int per_thread);
  // A reduction to single elements in two launches. `NAME_partials`: block b folds elements
  // b*T + t, stepping by the whole grid, combines its threads and writes one partial per
  // reduction (block 0 also writes the block count). `NAME`: one block folds the partials in
  // block order, finishes (mean's division, the cast) and writes the outputs. With a user
  // combiner (ordered): block b takes the b-th contiguous chunk of the elements, each thread
  // a contiguous chunk of that (ordered_fold, ordered_block_reduce), and the second launch
  // combines the partials the same way.
  void emit_two_stage();
  // ---- kernels whose outputs reorder their rows: element by element ----
  // Each thread computes output elements (grid-stride), each reduction or matmul element the
  // element needs folded right there by the thread, in the interpreter's order (a reduction
  // read by another one is folded again for each of its elements). Slow, but it takes any
  // view after a reduction or matmul; the kernels the passes make rarely need it.
  void emit_per_element();
  // ---- ScanRows (codegen/cuda/scan.cpp, np-scan; the carry pass across blocks: np-cuda-scan) ----
  // Three launches; each kernel picks the form at run time from the row count R and the row
  // length L (uniform over the grid, so every launch agrees; sizes may be symbolic), and the
  // plan's grid rules mirror that choice (scan_launch_rules):
  // - rows shorter than a block (kBlockScanLength): NAME, a thread per row, folding in order
  //   (grid-stride over the rows);
  // - R >= kScanFewRows or L <= kScanChunkLength: NAME, a block per row (grid-stride over the
  //   rows): block_scan_row;
  // - few long rows (R < kScanFewRows, L > kScanChunkLength): each row cut into C chunks
  //   (scan_chunks), a block per (row, chunk) pair: NAME scans each chunk (the prologue) and
  //   writes its total to scratch; NAME_carries, a block per row, scans the row's C totals in
  //   place (inclusive); NAME_finish rescans each chunk from its carry (the totals before it)
  //   and stores every step (the epilogue sees the final prefixes).
  // NAME_carries and NAME_finish do nothing (one block each) in the first two forms.
  void emit_scan_rows();
  // The chunks per row of the multi-block form at run time: 1 (a single-launch form) unless
  // R < kScanFewRows and L > kScanChunkLength; then min(ceil(L / kScanChunkLength),
  // kMaxScanChunks / R), so that the totals of all R * C chunks fit the scratch.
  mlir::Value scan_chunks(mlir::Value rows, mlir::Value length);
  // What a block scan reads and writes at position j: idx = index(j); element(idx) (an
  // accumulator; called only for j in range); store(idx, prefix) after the scan (none: only the
  // total is wanted).
  struct BlockScanSteps {
    std::function<std::vector<mlir::Value>(mlir::Value)> index;
    std::function<mlir::Value(const std::vector<mlir::Value>&)> element;
    std::function<void(const std::vector<mlir::Value>&, mlir::Value)> store;
  };
  // Positions [from, to) in tiles of `threads`, from `carry` (an accumulator), a carry from tile
  // to tile: thread t takes position tile + t; an inclusive warp scan with shfl.up, one slot per
  // warp in shared memory, each thread adding the warps before its own and the carry. Returns
  // the carry after `to` (every thread has it). Integers are exact; float sums and products are
  // regrouped (f64, within the rounding model's scan bound, which holds for any grouping). Every
  // thread of the block must call it (barriers); each tile ends with one, so the shared slots
  // are free again when it returns.
  mlir::Value block_scan(mlir::Value from, mlir::Value to, mlir::Value carry, int threads, const BlockScanSteps& steps);
  // The scan's steps over elements of row `row` (the prologue, and the outputs through `store`
  // when given).
  BlockScanSteps scan_row_steps(mlir::Value row, const ScanStore* store);
  // Row `row` as one block scan from the identity, every step stored.
  void block_scan_row(mlir::Value row, int threads, const ScanStore& store);
  // ---- Scatter (codegen/cuda/scatter.cpp, issue 16) ----
  // histogram/bincount: NAME_zero zeroes the bins (the output, or scratch_bins_bytes' scratch
  // when the output is not the 8-byte bin type), NAME adds into per-block shared-memory bins
  // (B static and B * 8 <= kSharedBinBytes) with atomics, then adds each block's nonzero bins to
  // global memory with atomics (else global atomics directly); NAME_finish casts scratch bins to
  // the output's dtype. index_add: NAME_copy copies x to the output, NAME adds each value at its
  // checked index with a global atomic.
  void emit_scatter();
  void emit_scatter_bins(NodeId id);
  void emit_index_add(NodeId id);
  // `v` added to the element of type `t` at `address` (global or shared) by one atomicrmw.
  void atomic_add(DType t, mlir::Value address, mlir::Value v);
  // Reduce node `id` at index `idx` of its shape, folded by this thread.
  mlir::Value reduce_here(NodeId id, const std::vector<mlir::Value>& idx);
  // Matmul node `id` at index `idx` of its shape, one dot product in k order, in f64 or i64.
  mlir::Value matmul_here(NodeId id, const std::vector<mlir::Value>& idx);
  // A matmul operand's index for batch index `batch` (broadcast from the right) and its matrix index.
  std::vector<mlir::Value> operand_index_of(const ir::Shape& shape, const std::vector<mlir::Value>& batch,
                                            const std::vector<mlir::Value>& matrix);
  // ---- matmul ----
  // C[batch, m, n] = sum_k A[batch, m, k] * B[batch, k, n], A and B cast to the matmul's dtype
  // and multiplied and summed in it (fused multiply-adds for floats). A
  // block of TX x TY threads computes a tile of (TY*R) x (TX*C) outputs, R x C per thread
  // (rows ty*R + i, columns tx*C + j); per step of `depth`, the threads load the A tile
  // (k-major: As[k][row]) and the B tile (Bs[k][col]) with the prologues applied, out-of-range
  // elements as 0, then each thread accumulates its R x C products.
  void emit_matmul();
  int kernel_index_;
  const std::vector<std::string>& symbols_;
  ir::CudaPlan& plan_;
  mlir::gpu::GPUModuleOp module_;
  std::vector<ir::CudaArg> args_;
  int scratch_param_ = -1;
  int error_param_ = -1;                // issue 16: the error record's parameter (-1: no checks)
  int pointer_params_ = 0;              // parameters before the symbols
  std::array<int, 3> block_{1, 1, 1};  // the block of the function begun last
  bool per_element_ = false;           // Reduce/Matmul values are folded where they are read
  // Reduce/Matmul values are folded where they are read
};

}  // namespace fuse::codegen
