// The CPU kernel emitter: one kernel of a Program as a function over a range of its parallel
// iterations (internal to codegen/). It derives from the shared core (codegen/emitter.h) and emits
// the CPU loop forms the schedule chose (ir::LoopForm), one file per form family:
// codegen/cpu/emitter.cpp (the function, its slots and memory access), elementwise.cpp
// (Contiguous, Rows, TiledRows, General), reduction.cpp (ReductionRows, ColumnReduction,
// SplitReduction), matmul.cpp (BlockedMatmul, MatmulRows), scatter.cpp (Scatter); codegen/cpu/lower.cpp builds the
// module and lowers it to LLVM and machine code.
//
// Each kernel becomes `func @name(%buffers: !llvm.ptr, %symbols: !llvm.ptr, %begin: i64,
// %end: i64)` over the flattened parallel iterations [begin, end). Buffers are addressed with
// llvm.getelementptr/load/store (a plain pointer ABI the runtime calls without MLIR types);
// arithmetic is arith/math on scalars or vector<N x T> values.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpu_codegen.h"
#include "codegen/cpu_object.h"
#include "codegen/emitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace fuse::codegen {

// How many chunks a split reduction's elements are divided into: enough for every core of a
// large machine to take a few, few enough that combining them costs nothing.
constexpr int64_t kSplitChunks = 64;

// The transpose of the square matrix whose rows are `rows` (n vectors of n elements, n a power
// of two), in log2(n) rounds of two-source shuffles (codegen/cpu/emitter.cpp).
std::vector<mlir::Value> transpose_in_registers(mlir::OpBuilder& b, mlir::Location loc, std::vector<mlir::Value> rows);

/// Scratch bytes a SplitReduction kernel needs: one 8-byte accumulator per reduction and chunk.
int64_t split_scratch_bytes(const ir::Kernel& k);

class CpuKernelEmitter : public KernelEmitterBase {
 public:
  CpuKernelEmitter(mlir::OpBuilder& b, const ir::Kernel& k, const std::map<std::string, int>& symbols, const CpuOptions& options,
                   std::vector<ir::HostArray>& constants);
  void emit(mlir::func::FuncOp func);
  // The second function of a split reduction: combines the chunks' accumulators, in chunk order,
  // and writes the outputs (a single element each).
  void emit_split_finish(mlir::func::FuncOp func);
  // np-scan: the chunked form of a ScanRows kernel (codegen/cpu/scan.cpp), three functions
  // over (row, chunk) pairs, row * kScanChunks + chunk: each chunk's fold into the scratch
  // buffer; per row, the chunks' folds turned in place into their carries (the fold of the
  // chunks before them, in order); each chunk scanned again from its carry, storing the outputs.
  void emit_scan_totals(mlir::func::FuncOp func);
  void emit_scan_carries(mlir::func::FuncOp func);
  void emit_scan_chunks(mlir::func::FuncOp func);
  // The second function of a histogram/bincount (codegen/cpu/scatter.cpp): for each bin, the
  // chunks' bins added in chunk order and stored in the result's dtype.
  void emit_scatter_finish(mlir::func::FuncOp func);
  // A column reduction split over its rows, for few columns (ir::column_reduction_splits()):
  // chunk s of ir::kColumnSplitChunks (`_rows`, over chunks) folds rows [s R / S, (s + 1) R / S)
  // of every column into its accumulators in the scratch buffer; `_finish` (over columns)
  // combines them in chunk order and writes the outputs, as the unsplit kernel would.
  void emit_column_split_chunks(mlir::func::FuncOp func);
  void emit_column_split_finish(mlir::func::FuncOp func);
 private:
  // Starts the body of `func` (buffers, symbols, begin, end) and loads the slots' addresses.
  void enter(mlir::func::FuncOp func);
  mlir::Value partial_address(int q, mlir::Value chunk);
  void store_partial(NodeId id, int q, mlir::Value chunk, mlir::Value acc);
  mlir::Value load_partial(NodeId id, int q, mlir::Value chunk);
  void emit_split_chunk(mlir::Value chunk);
  // np-scan: every output of a scan step stored at its position.
  ScanStore scan_store();
  // The row of (row, chunk) pair `pair` and the chunk's [from, to) along the scan axis.
  std::array<mlir::Value, 3> scan_chunk(mlir::Value pair);
  // Address of pair `pair`'s 8-byte fold or carry in the scratch buffer.
  mlir::Value scan_scratch_address(mlir::Value pair);
  bool scan_scratch_ = false;  // the chunked functions take the scratch buffer after the constants
  void load_bases();
  // Values cached while emitting one loop body are defined inside it: never reuse them outside.
  void clear_caches() override;
  mlir::Value symbol_value(const std::string& name) override;
  // d's size where it is known when compiling (constant, or of symbols the options bind).
  std::optional<int64_t> known_size(const ir::Dim& d) const;
  mlir::Value load_element(NodeId id, mlir::Value offset) override { return load(input_slot_.at(id), k_.body.node(id).dtype, offset, 1); }
  template <class Body>
  void loop(mlir::Value from, mlir::Value to, int64_t step, Body body) {
    loop(from, to, i64(step), body);
  }
  template <class Body>
  void loop(mlir::Value from, mlir::Value to, mlir::Value step, Body body) {
    auto for_op = b_.create<mlir::scf::ForOp>(loc_, from, to, step);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(for_op.getBody());
    clear_caches();
    body(for_op.getInductionVar());
    clear_caches();
  }
  // loop() whose body stores with non-temporal stores where `streaming` is true at run time
  // (null: never): emitted twice behind one test, `body(j, true)` and `body(j, false)`, rather
  // than testing the flag at every store (two instructions a vector that LLVM's O2 leaves in
  // the loop: it does not unswitch on a loop-invariant flag).
  template <class Body>
  void loop_streaming_or_not(mlir::Value streaming, mlir::Value from, mlir::Value to, int64_t step, Body body) {
    if (!streaming) {
      loop(from, to, step, [&](mlir::Value j) { body(j, false); });
      return;
    }
    auto branch = b_.create<mlir::scf::IfOp>(loc_, streaming, /*withElseRegion=*/true);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&branch.getThenRegion().front());
    loop(from, to, step, [&](mlir::Value j) { body(j, true); });
    b_.setInsertionPointToStart(&branch.getElseRegion().front());
    loop(from, to, step, [&](mlir::Value j) { body(j, false); });
  }
  // Byte address of element `offset` of the buffer in `slot`.
  mlir::Value element_address(int slot, DType t, mlir::Value offset);
  mlir::Value load(int slot, DType t, mlir::Value offset, int lanes);
  // Lane j of `lanes` elements of t at `first` + offsets[j] (an integer vector), under `mask`,
  // else mask_ where set (masked-off lanes read nothing and hold ones).
  mlir::Value gather(mlir::Value first, DType t, mlir::Value offsets, int lanes, mlir::Value mask = {});
  mlir::Value constant_i8(int64_t value, int lanes);
  mlir::Value zero_i8(int lanes);
  // `streaming`: a non-temporal store (the address must be 64-byte aligned), which writes
  // around the caches instead of first reading the line it overwrites.
  void store(int slot, DType t, mlir::Value offset, mlir::Value v, int lanes, bool streaming = false);
  // store(), non-temporal where `streaming` is true at run time (null: never): a test per store;
  // loops whose every store may stream take loop_streaming_or_not() instead.
  void store_or_stream(mlir::Value streaming, int slot, DType t, mlir::Value offset, mlir::Value v, int lanes);
  // Bytes a kernel moves per element of its space: an output of `out` and the inputs laid out
  // like the space.
  int64_t bytes_moved_per_element(DType out) const;
  // How many of the kernel's outputs are shaped like its space.
  int full_space_outputs() const;
  // Whether the output in `slot` can be written row by row with non-temporal stores: the kernel
  // moves more than streaming_bytes() (`bytes_per_element` per element of the space), the output
  // starts on a 64-byte line and its rows of `row_length` elements are whole lines.
  mlir::Value streams_rows(int slot, DType out, int64_t bytes_per_element, mlir::Value row_length);
  // ---- Contiguous, Rows, TiledRows, General (codegen/cpu/elementwise.cpp) ----
  void emit_contiguous(mlir::Value base, int lanes);
  // Kernels moving more than this many bytes write their output with non-temporal stores:
  // streaming saves reading every line before it is overwritten (a third of an add's traffic).
  // The schedule's: 8 MiB by default for kernels writing only results, 32 MiB where a later
  // kernel reads an output (it would find it in the caches otherwise; passes/schedule.cpp).
  int64_t streaming_bytes() const { return k_.schedule.cpu.streaming_bytes; }
  // Whether the kernel moves more than streaming_bytes(), at `bytes_per_element` per element of
  // its space (an i1 at run time: the space's size may be symbolic).
  mlir::Value moves_more_than_streaming_bytes(int64_t bytes_per_element);
  // Vectors that non-temporal stores write whole lines with: one 64-byte vector (AVX-512), or two
  // 32-byte ones (AVX2) stored one after the other from a line boundary, which the core's
  // write-combining buffer joins into one line. Without streaming, AVX2 outputs were written with
  // ordinary stores, each line read before it was overwritten.
  static bool streams_whole_lines(int64_t vector_bytes) { return vector_bytes == 64 || vector_bytes == 32; }
  // The contiguous loop over [begin, end) as one loop of whole vectors: the first and last
  // iterations load and store under a lane mask (masked-off lanes touch no memory), so the body
  // is emitted once, with no scalar copy for the tails (compile time). A large kernel with one
  // output starts at the 64-byte boundary below `begin` and writes its whole vectors with
  // non-temporal stores.
  void emit_contiguous_loops(mlir::Value begin, mlir::Value end, int lanes);
  // How many whole vectors the contiguous loop runs before it checks for deferred f32 fix-ups
  // (and, when one was wanted, runs those vectors again with them).
  static constexpr int64_t kPatchBlockVectors = 64;
  // Whole vectors [from, to) of the contiguous form, stored with streaming stores when
  // `streaming`. With `deferred`, the body's f32 fix-ups are left out: the result is whether any
  // lane wanted one (null when the body has none).
  mlir::Value emit_contiguous_vectors(mlir::Value from, mlir::Value to, int lanes, mlir::Value streaming, bool deferred);
  mlir::Value contiguous_value(NodeId id, mlir::Value base, int lanes);
  // Computes, before the contiguous loops, the nodes of `id`'s expression that are the same for
  // every element (broadcast scalars and elementwise ops of them) into invariant_; whether `id`
  // is one.
  bool hoist_invariants(NodeId id, int lanes);
  std::map<NodeId, mlir::Value> invariant_;  // while emitting the contiguous loops
  std::set<NodeId> varying_;                  // visited by hoist_invariants and not invariant
  // Outputs may differ in shape from the space (same element count, e.g. x.T and its reshape):
  // each is evaluated at its own index of the same row-major position.
  void emit_general(mlir::Value linear);
  // Value of `id` at columns [c, c + lanes) of the row whose index (with the innermost index 0
  // on `axis`) is `idx0`. Only for nodes whose inner_access is Constant or Unit.
  mlir::Value lane_value(NodeId id, const std::vector<mlir::Value>& idx0, int axis, mlir::Value c, int lanes);
  // Stores every output at columns [c, c + lanes) of the row `row` (its index `outer`), with
  // non-temporal stores where `streaming` (set, and true at run time).
  void emit_lanes(const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value c, int lanes,
                  mlir::Value streaming = {});
  // One element at column c of a row, through general_value (any strides).
  void emit_element(const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value c);
  // Flattened positions [begin, end) of rows of `width` (of shape outer_shape x width), row by
  // row: body(outer index, row start, first column, end column). A thread's range may start or
  // end in the middle of a row.
  template <class Body>
  void for_each_row_piece(mlir::Value begin, mlir::Value end, const ir::Dim& row_width, const ir::Shape& outer_shape,
                          Body body) {
    mlir::Value width = max_i64(dim(row_width), i64(1));  // (an empty row has no elements)
    mlir::Value first = div(begin, width);
    mlir::Value last = div(add(end, sub(width, i64(1))), width);
    loop(first, last, 1, [&](mlir::Value row) {
      std::vector<mlir::Value> outer = delinearize(row, outer_shape);
      mlir::Value row_start = mul(row, width);
      body(outer, row_start, max_i64(sub(begin, row_start), i64(0)), min_i64(sub(end, row_start), width));
    });
  }
  // Elements [begin, end) row by row: SIMD columns and a scalar tail in each row; or, for a
  // kernel of periodic or per-row broadcasts whose rows end in a partial vector, emit_flat.
  void emit_rows(mlir::Value begin, mlir::Value end, int lanes);
  void emit_rows_by_row(mlir::Value begin, mlir::Value end, int lanes);
  // ---- periodic and per-row broadcasts (ir::flat_broadcasts; codegen/cpu/elementwise.cpp) ----
  // [begin, end) as the contiguous form's flat loop, for a kernel whose operands are laid out
  // like the space, single elements, periodic broadcasts (b[C] over x[M, C], period P = C) or
  // per-row ones (r[M, 1] over x[M, C], rows of Q = C):
  // - each periodic broadcast is read from a table of its values at flat positions [0, L +
  //   lanes), L the smallest multiple of P of at least one vector, built at the task's start; the
  //   vector at flat position i reads its table at i mod L (carried from vector to vector), which
  //   holds lanes values in a row whatever the phase;
  // - each per-row broadcast is gathered, lane j of the vector at i from the operand's element
  //   (i + j) / Q: the vector's first row i / Q and its remainder i mod Q are carried, and lane j's
  //   rows past the first come from a table of Q x lanes offsets, (r + j) / Q in row r.
  // Rows of 3 f32 ran element by element in the rows form: x * b[3] + 1 4.4x the time of
  // x * 2 + 1, x * r[M, 1] 7x (bench/README.md).
  void emit_flat(mlir::Value begin, mlir::Value end, int lanes, const ir::FlatBroadcasts& flat);
  // emit_flat where the kernel has such broadcasts, its rows are at most kMaxGatheredRowLength
  // (per-row ones), its tables small beside the task (at most 1 / kFlatTaskShare of its elements:
  // they are built one element at a time) and, unless `whole_vector_rows_too`, a period or a row
  // ends in a partial vector (rows of whole vectors run as well row by row); `otherwise` where not.
  void emit_flat_or(mlir::Value begin, mlir::Value end, int lanes, bool whole_vector_rows_too,
                    llvm::function_ref<void()> otherwise);
  static constexpr int64_t kFlatTaskShare = 128;
  static constexpr int64_t kMaxGatheredRowLength = 64;
  // The carried state (period_offset_; flat_row_, flat_row_rem_) at flat position i >= -lanes,
  // set from carried values, and the next vector's.
  std::vector<mlir::Value> flat_state_at(mlir::Value i);
  void set_flat_state(const std::vector<mlir::Value>& state);
  std::vector<mlir::Value> next_flat_state();
  mlir::Value gathered_row_value(NodeId id, int lanes);
  std::map<NodeId, int> periodic_slot_;  // in emit_flat: each periodic broadcast's table
  mlir::Value period_length_;            // L
  mlir::Value period_offset_;            // the vector's offset into the tables
  std::set<NodeId> per_row_;             // in emit_flat: the per-row broadcasts
  int row_index_table_ = -1;             // their Q x lanes i32 offsets
  mlir::Value row_length_, row_step_, row_step_rem_;  // Q, lanes / Q, lanes % Q
  mlir::Value flat_row_, flat_row_rem_;  // the vector's first row and its remainder
  void emit_tiled(mlir::Value begin, mlir::Value end);
  void emit_tiled_rows(mlir::Value begin, mlir::Value end);
  // ---- TiledRows in registers (issue 15, codegen/cpu/elementwise.cpp) ----
  // Whole lanes x lanes tiles of the rows [full_first, full_last) (each within one matrix of
  // the space's last two axes): a node read down the output's columns (strided along the row,
  // unit stride along the second-to-last axis: a transpose) is loaded as `lanes` vectors along
  // its own rows and transposed with shuffles; one read along the rows (or constant) is loaded
  // as rows; elementwise ops whose operands mix the two run on the tile's row vectors; each
  // output row of the tile is one full-width store (non-temporal when the kernel is large).
  // The rows and columns past the last whole tile go element by element (emit_element).
  enum class TileRead { Rows, Columns, Elementwise, Unsupported };
  TileRead tile_read(NodeId id);
  // Whether every output (4 or 8 bytes per element) and every node it reads through
  // elementwise ops is Rows or Columns: emit_tiled then uses register tiles.
  bool register_tiles_apply();
  // Whether `accept` holds for every node tile_row reads: the outputs, and the operands of
  // Elementwise reads, each once (stops at the first false).
  bool every_tile_read(llvm::function_ref<bool(NodeId, TileRead)> accept);
  bool tiles_read_no_rows();
  struct RegisterTile;  // one tile's indices and row vectors (elementwise.cpp)
  mlir::Value tile_row(NodeId id, RegisterTile& tile, int row);
  void emit_register_tiles_across(std::vector<RegisterTile>& tiles, mlir::Value streaming);
  void emit_register_tiles(mlir::Value full_first, mlir::Value full_last, mlir::Value width);
  // A row: every reduction in order (a later one may use an earlier one's result, as softmax's
  // sum uses its max), then the outputs: reduced-space ones once, full-space ones over the row.
  struct RowPlan;  // (below: the reductions a row computes, worked out once per kernel)
  struct RowRide;  // (below: a row's output pass carried by the next row's stash pass)
  // With `ride`, the output pass from the stash of the row before runs inside this row's stash
  // pass, and this row's waits for the next row (emit_riding_rows()). Returns the reductions
  // the output reads (ride.carried's order), for the next row.
  std::vector<mlir::Value> emit_reduction_row(mlir::Value row, const RowPlan& plan, RowRide* ride = nullptr);
  // ---- SIMD over a row, for reductions over trailing axes ----
  // Element j of a row is element row*L + j of every value laid out like the space; a value
  // broadcast from the row's own shape (a reduction's result, a per-row input) is one scalar for
  // the whole row; an input broadcast along the rows (a layernorm's gamma) is element j of it.
  enum class RowAccess { Contiguous, PerRow, RowLocal, Invalid };
  RowAccess row_access(NodeId id);
  bool row_vectorizable(NodeId reduce_id);
  // Where the row of `kept` starts in the operand of a RowLocal broadcast that varies along kept
  // dims (w[M, N] in rows of x[B, M, N] over N); null where it does not (gamma[N]).
  mlir::Value row_local_base(NodeId id, const std::vector<mlir::Value>& kept);
  // A split reduction, or a row kernel whose outputs are all reduced ones, whose inputs include
  // one broadcast along leading reduced dims only (a bias b[N] in sum((x[M, N] + b)**2), all
  // axes or [M, N] of x[B, M, N]): such an input repeats with a period of the space's trailing
  // dims from its period_axis() on, and the chunk or row is walked one period of the shortest
  // at a time (accumulate_walked()), within which each such input is RowLocal: element
  // j - segment_base_ + segment_shift_[its broadcast] of its operand. period_walk_axis(): that
  // period's first dim; -1 where there is no such input, or where every one repeats within
  // kMinSplitPeriod elements (the flat walk, each element through its index, stays).
  int period_walk_axis();
  int period_axis(NodeId broadcast) const;
  std::vector<mlir::Value> accumulate_walked(const std::vector<NodeId>& ids, const std::vector<mlir::Value>& kept,
                                             mlir::Value row_base, mlir::Value from, mlir::Value to, int lanes,
                                             const std::function<std::vector<mlir::Value>()>& flat);
  std::optional<int> period_walk_axis_;
  mlir::Value segment_base_;
  std::map<NodeId, mlir::Value> segment_shift_;
  static constexpr int64_t kMinSplitPeriod = 16;
  // A split reduction's periodic inputs whose longest period P is at most kMaxTiledPeriod:
  // each is read from a table of its values tiled over L = P ceil(kTiledSegment / P) elements,
  // built once per task, and each chunk is walked L elements at a time, the tables read at
  // j - segment_base_ (emit_split_with_tables()). Walked flat, each element through its index,
  // sum(x * b[3]) over 12M f32 took 14 ms against 1.0 for sum(x * 2) (bench/README.md); walked
  // one period at a time, a period of 16 elements folded every vector.
  void emit_split_with_tables(mlir::Value begin, mlir::Value end);
  int split_table_axis();  // the smallest period_axis() of the periodic inputs, or -1
  // Whether every user combiner regroups (ir::combiner_regroups): a walk by segments folds each
  // from the reduction's init and combines it into the running value.
  bool combiners_regroup();
  // An ordered_max_min() vector's lanes folded ignoring NaN (a tree of vmaxps/vminps).
  mlir::Value fold_ordered_lanes(NodeId id, mlir::Value lanes);
  static constexpr int64_t kMaxTiledPeriod = 256, kTiledSegment = 1024;
  std::map<NodeId, int> walk_table_;  // each periodic input's table (slot), while set
  mlir::Value walk_table_length_;     // L
  // The value of `id` at elements [j, j + lanes) of the row starting at `row_base`.
  mlir::Value row_value(NodeId id, const std::vector<mlir::Value>& kept, mlir::Value row_base, mlir::Value j, int lanes);
  // A take_along_axis that picks one element of each row (ir::picks_along_rows()) at elements
  // [at, at + lanes) of the space: gathered, indices checked.
  mlir::Value picked_along_rows(NodeId id, mlir::Value at, int lanes);
  // The horizontal (across lanes) form of a reduction's combine.
  mlir::vector::CombiningKind lane_combining_kind(NodeId id);
  // A SIMD accumulator's lanes folded into one value (float sums and products as a tree).
  mlir::Value fold_lanes(NodeId id, mlir::Value lanes);
  // Float max/min, folded in the SIMD loop as `x > acc ? x : acc` (or <) with NaN kept apart.
  bool ordered_max_min(NodeId id);
  // Whether an ordered_max_min() keeps a NaN tracker (not when ir::nan_reaches_outputs_anyway).
  bool tracks_nan(NodeId id);
  std::map<NodeId, bool> tracks_nan_memo_;
  // Where each tracked reduction's first tracker sits among a SIMD loop's iteration arguments
  // (after `chains` accumulators of every reduction; 0 for the untracked).
  std::vector<size_t> nan_tracker_positions(const std::vector<NodeId>& vectorized, int chains);
  mlir::Value ordered_pick(NodeId id, mlir::Value acc, mlir::Value x);
  // Whether an ordered_max_min() chain has met a NaN: the identity, one step with `x`, two
  // chains merged, and the verdict (an i1) once the lanes are folded.
  mlir::Value nan_tracker_identity(NodeId id, int lanes);
  mlir::Value nan_tracker_step(NodeId id, mlir::Value tracker, mlir::Value x, int lanes);
  mlir::Value nan_tracker_merge(NodeId id, mlir::Value a, mlir::Value b, int lanes);
  mlir::Value nan_tracker_seen(NodeId id, mlir::Value tracker, int lanes);
  // Elements [from, to) of the row folded into one accumulator per reduction in `ids` (none may
  // depend on another), all in the same loops so that they share their loads: SIMD with the
  // schedule's number of independent vector accumulators each (dependency chains in flight) for
  // those row_vectorizable(), then one scalar loop for the rest and the SIMD loop's tail.
  // A `stash` (row_stash()) is stored into its output's row by the SIMD loop, over [from, end).
  struct RowStash {
    NodeId node = -1;
    int output = -1;
    mlir::Value end;
    int slot = -1;  // the slot whose element j is the stash's element j of this row
  };
  // The next row's first element relative to this row's, or kPrefetchAheadBytes of f32 for short
  // rows (null: this pass prefetches nothing).
  // A row kernel that passes over its row more than once prefetches the next row's inputs in
  // its last pass over them, so that reading them from memory overlaps this row's computation
  // instead of stalling the next row's first pass (the passes between run from cache).
  mlir::Value prefetch_next_row_;
  // With prefetch_next_row_ (which is then 0 for such rows): the next row's offset for rows of
  // kPrefetchToL2Bytes to kPrefetchToL2MaxBytes (of f32), prefetched into L2; else 0.
  mlir::Value next_row_in_l2_;
  static constexpr int64_t kPrefetchToL2Bytes = 8192, kPrefetchToL2MaxBytes = 65536;
  // A split reduction's chunk streams from memory on one core; a prefetch kPrefetchAheadBytes
  // ahead of each line it reads keeps enough lines in flight where the loop's other work (a
  // widening to f64, a NaN tracker) would hold the core's own loads back: on the 2-vCPU Intel
  // Xeon (AVX-512) sum over 100M f32 read 14.4-17.4 GB/s without, 19.5-25 with.
  bool prefetch_ahead_ = false;
  static constexpr int64_t kPrefetchAheadBytes = 4096;
  // Set while the contiguous elementwise loop of a body costing kPrefetchingBodyCost or more is
  // emitted: whether the kernel moves more than streaming_bytes() (its arrays come from memory),
  // when each vector prefetches its inputs kPrefetchAheadBytes ahead. A loop with much work per
  // element (exps, divisions, sincos, a sqrt) keeps fewer lines in flight than it reads. Two
  // threads on the Intel Xeon, 10M f32, kernel objects alternated in one process, two runs:
  // hidden_layer 11-16% faster, polar_distance 7%, gaussian_pdf 2-3%, hypot 1.5%. Cheaper bodies
  // keep a loop without the test (add_vectors in L1: 22% slower with it, and no faster from
  // memory).
  mlir::Value prefetch_from_memory_;
  static constexpr int kPrefetchingBodyCost = 4;
  // A split reduction's chunk whose values are cheap is read as kSplitStreams streams at once,
  // one accumulator chain each (split_stream_count()), not as chains of adjacent vectors: a
  // core keeps more lines in flight from several streams than from one and its prefetches. On
  // the 2-vCPU Intel Xeon, sum over 100M f32 took 17.8-20.9 ms from one stream, 11.8-13.9 from
  // eight (AVX2 code on the same machine: 21.2-21.9 -> 12.8-15.1; bench/README.md).
  bool split_streams_ = false;
  static constexpr int kSplitStreams = 8;
  // While a loop reads streams: the distance from chain c's elements to chain c + 1's.
  mlir::Value chain_stride_;
  int split_stream_count(const std::vector<NodeId>& vectorized);
  // The prefetches for the vector of `lanes` elements at j, the `chain`-th of its step.
  void prefetch_inputs(mlir::Value row_base, mlir::Value j, int chain = 0, int lanes = 1);
  std::vector<mlir::Value> accumulate(const std::vector<NodeId>& ids, const std::vector<mlir::Value>& kept,
                                      mlir::Value row_base, mlir::Value from, mlir::Value to, int lanes,
                                      RowStash* stash = nullptr, const RowRide* ride = nullptr);
  // The SIMD loop of accumulate(): the loop's results, each reduction's `chains` accumulators
  // (then NaN trackers, see ordered_max_min). With `deferred`, f32 fix-ups in the body are deferred
  // (ScalarLowering::defer_patches): *needs_patch becomes whether any lane wanted one. With
  // `folds_blocked_sums`, each sums_in_f32_blocks() reduction comes out folded to its scalar, in
  // every one of its chain slots (a row of one block folds in f32).
  // `seen` ORed with the deferred fix-up masks of a loop body (defer_patches): a mask of another
  // width counts as all of `seen`'s lanes when any of its lanes is set. `seen` holds i32 lanes,
  // all ones where a mask was set (no_patch_mask() to start, any_patch() at the end): that is how
  // an f32 compare leaves its result in a vector register, so ORing one in is one instruction
  // (a vector of i1 is packed to i16 lanes for every OR on AVX2).
  mlir::Value or_patch_masks(mlir::Value seen, const std::vector<mlir::Value>& masks);
  mlir::Value no_patch_mask(int lanes) { return constant(ir::DType::I32, 0, 0, lanes); }
  mlir::Value any_patch(mlir::Value seen);  // an i1: whether any lane of `seen` is set
  std::vector<mlir::Value> accumulate_vectors(const std::vector<NodeId>& vectorized, const std::vector<mlir::Value>& kept,
                                              mlir::Value row_base, mlir::Value from, mlir::Value vector_end, int lanes,
                                              int chains, RowStash* stash, bool deferred, mlir::Value* needs_patch,
                                              const RowRide* ride = nullptr, bool folds_blocked_sums = false);
  bool sums_in_f32_blocks(NodeId id);
  void computed_here(const std::vector<mlir::Value>& values);  // LLVM may not sink their computation past here
  int input_cost(NodeId id);
  int vector_chains(const std::vector<NodeId>& vectorized, bool stashes);
  static constexpr int64_t kF32BlockSteps = 8;
  // A row's mean and the mean (or sum) of its squared deviations from that mean, as layernorm
  // writes them (`mean((x - mean(x))**2)`), found in the body so that both come from one pass.
  struct RowMoments {
    NodeId mean = -1;      // reduce.mean(x)
    NodeId variance = -1;  // reduce.mean or reduce.sum of (x - mean)**2
  };
  std::vector<RowMoments> row_moments(const std::vector<NodeId>& reductions);
  void emit_row_moments(const RowMoments& m, const std::vector<mlir::Value>& kept, mlir::Value row_base, ir::Dim row_length,
                        int lanes, const RowRide* ride = nullptr);
  bool reads_elementwise(NodeId id, NodeId source);
  RowStash row_stash(const std::vector<NodeId>& last_group, int lanes);
  std::vector<std::vector<NodeId>> row_groups(const std::set<NodeId>& in_moments, std::vector<std::vector<NodeId>>& arg_groups);
  // What each row of a ReductionRows kernel computes, worked out once per kernel: the moments'
  // pass, the groups of reductions after it (argmax/argmin apart) and the last group's stash
  // (its slot not yet set).
  struct RowPlan {
    std::vector<RowMoments> moments;
    std::vector<std::vector<NodeId>> groups, arg_groups;
    RowStash stash;
  };
  RowPlan row_plan();
  // A task's scratch rows for the plan's stash (slot, -1: none): see row_stash(). Two rows
  // when the rows ride (row_rides()), taking turns.
  int row_stash_scratch(const RowPlan& plan);
  int row_scratch_ = -1;
  static constexpr int64_t kRowStashBytes = int64_t{256} << 10;
  // ---- the output pass riding on the next row's stash pass (issue 15) ----
  // Where the stash goes to scratch rows and the output streams (row_stash_scratch(): AVX2 and AVX-512),
  // row r's output pass from its stash runs inside row r + 1's stash pass, one vector of row r
  // per vector of row r + 1: its non-temporal stores go out while the exp polynomial computes,
  // instead of in a pass of their own that only writes (softmax's division pass). Two scratch
  // rows take turns; the reductions the output reads go to the next row as loop-carried values;
  // the task's last row's output pass runs after the rows. The first row's pass rides on
  // nothing: it stores into the other scratch row, whose contents are not used.
  // Layernorm's output pass (no stash: it reads the row's inputs again) rides the same way on
  // the next row's moments pass (moments_ride_output), at any row length, where the output
  // streams (emit() branches once per task to the plain rows elsewhere); the moments pass then
  // prefetches the next rows. On the Intel Xeon (two threads, `fusec run --bench
  // --versus-cpu`, both streaming) rows of 64 f32 took 15-19% less time, of 256 6-14%, of 1024
  // 20-35%, of 4096 11-20%, 4096 x 4096 19-23%; on its AVX2 vectors rows of 64 14-30%, of 256
  // 18-36%; without streaming (rows of 100, of 7, 512 x 256) the same time as before.
  struct RowRide {
    NodeId stash_node = -1;      // the plan's stash (-1: the moments ride)
    int output = -1;             // and the output that reads it
    mlir::Value first_row;       // the task's
    mlir::Value stash_streams;   // i1 at run time: the stash is in the scratch rows, the output streams
    mlir::Value streams;         // and the rows are long enough to ride (ride_row_bytes)
    mlir::Value stash_elements;  // elements between the two scratch rows (whole 64-byte lines)
    std::vector<NodeId> carried;  // the reductions the output reads
    // Set by emit_reduction_row() for the row before the one it emits:
    int stash_slot = -1, output_slot = -1;  // its stash row, and where its output row starts
    std::vector<mlir::Value> kept;
    mlir::Value row_base;
    std::map<NodeId, mlir::Value> reduced;  // its reductions (carried)
    // The first group's results for the row emitted, computed in the iteration before
    // (first_group_ahead()); empty when that group runs in its row as usual.
    std::map<NodeId, mlir::Value> ahead;
  };
  // Whether a riding row kernel computes its first group of reductions one row ahead (softmax's
  // max of row r + 1 during row r's exp pass): an i1 (run-time where the row length is
  // symbolic), null where never. first_group_of_row(): the group's results for `row`.
  static constexpr int64_t kAheadRowBytes = 2048;
  mlir::Value first_group_ahead(const RowPlan& plan);
  std::vector<mlir::Value> first_group_of_row(const RowPlan& plan, mlir::Value row);
  // The full-space output whose stash may go to a scratch row (AVX2 and AVX-512 vectors), or -1.
  int scratch_stash_output(const RowPlan& plan);
  // The kernel's one full-space output, if its vectors are whole lines (AVX2's and AVX-512's),
  // or -1 (none, several, or narrower vectors).
  int sole_full_space_output_of_lines();
  // The full-space output of a kernel whose only row reductions are one pair of moments
  // (layernorm), a float read along the row, which rides on the next row's moments pass (AVX2
  // and AVX-512 vectors: whole lines streamed), or -1.
  int moments_ride_output(const RowPlan& plan);
  // The output whose row the scratch rows hold (the stash's, or the moments ride's), or -1.
  int scratch_row_output(const RowPlan& plan);
  mlir::Value stash_row_elements(const RowPlan& plan);
  // Whether the stash goes to the scratch row and `output` streams (an i1 at run time): the
  // output is large, its rows whole lines, and a row fits kRowStashBytes.
  mlir::Value stash_in_scratch(int output);
  bool row_rides(const RowPlan& plan);
  // Rows shorter than this do not ride: their output pass is too short to hide anything, and
  // the ride's bookkeeping cost more than it saved. Softmax on the Zen 3 VM (AVX2, two threads,
  // 64 MiB in, old and new kernels alternated in one process): rows of 64 elements 2-4% slower
  // riding, of 256 1-2% faster, of 512 4-6%, of 4096 2-7% (and 6-8% more with exp_constant()).
  // AVX-512 rows ride whatever their length: on the Intel Xeon (two threads, 32 MiB moved,
  // symbolic shapes, `fusec run --bench --versus-cpu` with and without riding, both streaming)
  // softmax rows of 16 f32 took 2% less time riding, of 32 9%, of 64 15%, of 128 and 256 21-22%
  // (of 4096, which rode before, 22%). Rows ride only when the output streams: riding with
  // ordinary stores was 7-9% faster with the data in the caches, but from memory (the caches
  // evicted before each run) 4% slower at 8 MiB moved and 31% at 32 MiB, where riding with
  // streaming stores was 12% and 15% faster than neither.
  static constexpr int64_t kRideRowBytes = 1024;
  // (for rows of `t` in the schedule's vectors: 64-byte ones ride from 0 bytes)
  int64_t ride_row_bytes(ir::DType t) const {
    return k_.schedule.cpu.vector_width * static_cast<int64_t>(ir::dtype_size(t)) >= 64 ? 0 : kRideRowBytes;
  }
  void emit_riding_rows(mlir::Value begin, mlir::Value end, const RowPlan& plan);
  // The ridden row's output at elements [j, j + lanes): from its stash, non-temporal.
  void ride_step(const RowRide& ride, mlir::Value j, int lanes);
  // The scratch row of `row` when the rows ride (slot of a new base).
  int stash_scratch_row(const RowRide& ride, mlir::Value row);
  // [from, to) as vectors under a lane mask, each folded into the running value `init`. Row
  // tails of at least kMinMaskedTail elements take it: one element cost less than the masked
  // vector's exp and folds (softmax over rows of 17 f32: 9.4 ms one element at a time, 13.4
  // masked; rows of 24 39-41 against 8.3, of 10 56 against 22; bench/README.md).
  static constexpr int64_t kMinMaskedTail = 2;
  // kMinMaskedTail, but none (the largest int64) where the row's length is known when compiling,
  // shorter than a vector, and its work cheap (less than a transcendental's an element): each
  // row's few elements one at a time are then a loop over rows that LLVM vectorizes across rows
  // (interleaved loads), which a masked vector per row is not. Without the rows across lanes
  // (rows_across_lanes), on the Intel Xeon, two threads, rows of 3 over 12M f32: sqrt(sum(x * x,
  // axis=1)) 11-16 ms masked against 1.24 one at a time, any(x > 0.5, axis=1) 2.2-2.4 against 1.0.
  int64_t min_masked_tail();
  std::vector<mlir::Value> accumulate_masked(const std::vector<NodeId>& ids, const std::vector<mlir::Value>& init,
                                             const std::vector<mlir::Value>& kept, mlir::Value row_base, mlir::Value from,
                                             mlir::Value to, int lanes);
  // One element at a time, each element's index taken apart into the reduced dims.
  std::vector<mlir::Value> accumulate_scalar(const std::vector<NodeId>& ids, const std::vector<mlir::Value>& init,
                                             const std::vector<mlir::Value>& kept, mlir::Value from, mlir::Value to);
  static constexpr int kColumnVectors = 4;
  static constexpr int64_t kMinMaskedColumns = 4;  // emit_columns(): the tail as a masked vector
  void emit_columns(mlir::Value begin, mlir::Value end, int lanes);
  // Fewer columns than a vector's lanes (points[M, 3]; at most ir::kMaxNarrowColumns, known at
  // compile time, the reductions' inputs laid out like the space): the rows are one flat
  // stretch of memory, read as whole vectors, lane l of vector v of a period of
  // lcm(columns, lanes) elements holding column (v lanes + l) % columns (emit_narrow_columns).
  // narrow_columns(): that column count, or 0.
  int64_t narrow_columns(int lanes);
  void emit_narrow_columns(int64_t columns, int lanes);
  // The operands broadcast along the rows of a narrow-columns kernel (w[C] over x[M, C]), each
  // as the period's vectors (lane l of vector v: column (v lanes + l) mod columns), then each
  // column's value alone.
  std::map<NodeId, std::vector<mlir::Value>> narrow_column_vectors(int64_t columns, int lanes);
  // ---- rows across lanes (codegen/cpu/lane_rows.cpp) ----
  // A row kernel whose rows are short, of a length known when compiling (short symbolic rows
  // are specialized to theirs), runs `lanes` rows at a time, lane l of every
  // vector holding row r + l (ir::rows_across_lanes): element j of the rows is one vector,
  // shuffled out of the rows' whole vectors; a reduction is an elementwise fold over j, in the
  // interpreter's order and accumulator type; the row's epilogue (softmax's division,
  // logsumexp's log, layernorm's rsqrt) runs on a vector of rows; a full-space output is
  // shuffled back into whole vectors and a reduced-space one stored a vector of rows at a time.
  // Row by row, a row of C elements paid a whole masked vector's work (an exp of 16 lanes for
  // 3 elements), the folds across its lanes and a scalar epilogue (a call to log): see
  // bench/README.md. lane_rows_length(): the rows' length where the form applies, else 0: rows
  // up to 1.75 vectors. Softmax, 12M f32, rows of 17 to 28 on the Intel Xeon: 5.1-8.4 ms row by
  // row (a masked tail), 4.3-4.6 across lanes; of 31 4.6-4.7 either way. Rows of exactly one
  // vector (read as a square of vectors transposed in registers, not gathered) go across lanes
  // on 16 lanes, or where every output is reduced (row by row, each row's epilogue was scalar):
  // 12M f32, rows of 16: softmax 3.8 -> 3.3 ms, layernorm 4.2-4.3 -> 3.1, logsumexp 17-20 ->
  // 2.6; f64 logsumexp over rows of 8 40-44 -> 9.8; but f64 softmax over rows of 8 9.1-9.5 ->
  // 10.2-10.9 and AVX2's f32 softmax over rows of 8 5.3-5.4 either way (kept row by row).
  int64_t lane_rows_length(int lanes);
  // Rows of at least this many elements gather element j of theirs (one vgatherdps), shorter ones
  // shuffle it out of their vectors (length - 1 shuffles). Softmax, 12M f32, two threads on the
  // Intel Xeon: rows of 3 3.3-3.5 ms shuffled against 3.5-3.8 gathered; of 4 4.0 against 3.5-3.6,
  // of 10 4.9 against 4.2, of 15 5.5 against 4.6-4.7. (Outputs are shuffled back: scattered, or
  // gathered from a staging buffer, they took longer but at 15.)
  static constexpr int64_t kMinGatheredLaneRow = 4;
  // Rows [from, to), a multiple of `lanes` of them from a multiple of `lanes` on, each of
  // `length` elements; a large kernel's one full-space output is written with non-temporal
  // stores (a third less memory traffic: softmax's rows of 3 and 10 f32, one thread, 20% faster).
  void emit_lane_rows(mlir::Value from, mlir::Value to, int64_t length, int lanes);
  // Whether a full-space output's vectors are shuffled out of the rows transposed in registers
  // (a block of `lanes` columns at a time, lanes log2(lanes) shuffles, then two or three rows a
  // vector) rather than out of the columns (length - 1 shuffles a vector): where the shuffles
  // counted are fewer, rows of 11 or more for 16 lanes. Softmax, 12M f32, Intel Xeon: rows of 7
  // 3.4 ms from the columns against 3.8-4.0 transposed, of 10 3.4-3.6 against 3.2-3.3, of 15 4.2
  // against 3.1-3.2, of 24 4.5 against 3.7.
  static bool transposes_lane_rows(int64_t length, int lanes);
  // Rows [first_row, first_row + lanes); `streaming[o]` (null: never) whether output o streams.
  void emit_lane_row_group(mlir::Value first_row, int64_t length, int lanes, const std::vector<mlir::Value>& streaming);
  // Node `id`'s vector of the rows at element j (j is ignored for values of the whole row).
  mlir::Value lane_rows_value(NodeId id, int64_t j);
  // A vector whose lane l is lane picks[l].second of sources[picks[l].first]: a chain of
  // two-source shuffles, one per source after the first.
  mlir::Value pick_lanes(const std::vector<mlir::Value>& sources, const std::vector<std::pair<int, int>>& picks);
  std::vector<ir::LaneRead> lane_reads_;
  std::map<std::pair<NodeId, int64_t>, mlir::Value> lane_values_;  // the group's, by (node, j or -1)
  std::set<const void*> lane_divisors_;  // the group's values of whole rows (share_divisors)
  std::map<const void*, mlir::Value> lane_reciprocals_;
  mlir::Value lane_first_row_;
  int64_t lane_length_ = 0;
  int lane_count_ = 0;
  // The column walk's rows (null: all) and, where it leaves accumulators rather than outputs
  // (emit_column_split_chunks()), the chunk whose partials it stores.
  mlir::Value column_rows_from_, column_rows_to_, column_partials_chunk_;
  std::pair<mlir::Value, mlir::Value> column_rows();  // [from, to): the chunk's, or all
  bool column_split_ = false;  // a function of the split form: takes the scratch buffer
  // Reduction q's partial of `chunk` for kept position `column`, in units of its accumulator
  // type: the scratch holds, per reduction, kColumnSplitChunks rows of every column, each row
  // starting on 8 bytes.
  mlir::Value column_partial_offset(size_t q, mlir::Value chunk, mlir::Value column);
  // Outputs at kept positions [row_start + c, + lanes * vectors): every reduction down its
  // columns, `vectors` adjacent vectors at a time (a row then supplies whole cache lines).
  // With `last_mask`, the last vector's loads and stores are masked by it (the row's partial
  // last vector, in the same walk as its whole ones).
  void emit_column_lanes(const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value c, int lanes,
                         int vectors = 1, mlir::Value last_mask = {});
  // The outputs at kept positions [row_start + column, + lanes) from the reductions' values
  // there (`accs`, reduce_nodes()' order): a mean's division, the epilogue, the stores.
  void store_column_outputs(mlir::Value row_start, mlir::Value column, int lanes, const std::vector<mlir::Value>& accs);
  // Whole vectors of columns [from, to) (more than kColumnVectors of them) row by row: each
  // row's stretch read in order into accumulators kept in `acc_slot` (kColumnChunkVectors
  // vectors of each reduction at a time), then the outputs. Down the columns a few vectors at a
  // time, every row read a stretch of 256 bytes and jumped the rest of the row: about half the
  // read rate of the rows' form (sum(x, 0) over 4096 x 4096 f32, 6.8 ms against 3.4 for sum(x, 1)).
  void emit_columns_by_rows(const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value from, mlir::Value to,
                            int lanes, int acc_slot);
  static constexpr int kColumnChunkVectors = 64;
  // The largest accumulator element of the kernel's reductions, in bytes: each reduction's array
  // of emit_columns_by_rows() takes kColumnChunkVectors vectors of it.
  int64_t widest_accumulator();
  // ---- matmul: one parallel iteration per row of C (batch dims and M) ----
  // Rows [begin, end) of C. Where B's rows can be read as vectors along N (B, its prologue and
  // the epilogue are contiguous or constant along N: inner_access), kMatmulRows rows of C at a
  // time share each vector of B: for every `lanes`-wide strip of columns, accumulators for
  // those rows (f64 or i64 lanes, like the interpreter) take A[i,k] * B[k, strip] over k, and
  // the epilogue runs on the strip. The columns past the last whole strip, and kernels whose B
  // is strided (A @ B.T), take one dot product per element.
  static constexpr int64_t kMatmulRows = 4;
  void emit_matmul(mlir::Value begin, mlir::Value end);
  // ---- blocked matmul (BLIS-style): packing, cache blocking, a register-tiled micro-kernel ----
  //
  // A task's rows [begin, end) of C (flattened batch x M) are computed batch by batch:
  //   for jc (nc columns): for pc (kc of K): pack B[pc:, jc:] into nr-wide panels
  //     for ic (mc rows): pack A[ic:, pc:]; for each mr x nr tile: the micro-kernel
  // (A is not packed where the schedule reads it in place, ir::CpuSchedule::a_in_place: an
  // input laid out row-major, whose rows the micro-kernel reads where they lie.)
  // The micro-kernel keeps the tile in mr x (nr / lanes) vector accumulators and adds one
  // outer product per k (vector.fma of a broadcast element of A and vectors of B). Partial
  // sums over K blocks live in C's buffer (or a task-local one when no output can hold them);
  // after the last K block the epilogue runs on the tile in registers and the outputs are
  // stored. Packing reads operands through their index maps, so transposes, broadcasts and
  // elementwise prologues cost nothing in the loops that matter, and panels are padded to
  // whole tiles (padding lanes are computed and never stored).
  using MatmulTiling = ir::MatmulTiling;
  // The micro-kernel's K loop prefetches packed B this many bytes ahead of the row of the panel
  // it reads (the panel, kc x nr, is larger than L1 and comes from L2 or beyond; the hardware's
  // prefetchers kept the loop waiting at its loads of B). 12 steps of K on AVX-512's 6 x 64 f32
  // tile (24 on the 12 x 32 tile it had until the twenty-fifth session), 48 on AVX2's. On the Intel Xeon of bench/README.md,
  // fuse's matmul gained 3-6% at 1024^3 and 2048^3 with it (16 steps was as good, 8 less).
  static constexpr int64_t kPackedBPrefetchBytes = 3072;
  // Steps of K per iteration of a whole tile's K loop. LLVM keeps a loop this large rolled: one
  // step per iteration spent three of its 41 instructions on the loop. Unrolled four times,
  // fuse's matmul gained 3-8% on two threads of the Xeon at 1024^3 and 2048^3 (in one process,
  // `matmul_bench --targets`), eight times no more. K blocks of another depth (the last, at
  // most) take the edge tiles' loop of one step. The four copies of the step made the
  // transformer block's compile 14% longer (1.59 -> 1.81 s, `fusec --emit=obj`).
  static constexpr int64_t kKLoopUnroll = 4;
  MatmulTiling matmul_tiling() const { return ir::matmul_tiling(k_.schedule.cpu); }
  // An llvm.call to a C library function (declared in the module on first use).
  mlir::Value call_c(const std::string& name, mlir::Type result, mlir::ValueRange args);
  // A 64-byte aligned scratch buffer of at least `bytes`, registered as a new slot: the
  // calling thread's buffer for this scratch index, kept from earlier tasks and runs
  // (runtime/cpu_scratch.h). release_scratch() hands them all back.
  int allocate_slot(mlir::Value bytes);
  void release_scratch();
  // Releases the slots allocated since scratch_slot_ held `first`, and forgets them (slots
  // acquired inside a branch, whose pointers live there only).
  void release_scratch_from(size_t first);
  // A scratch slot holding node `id`'s values at flat positions [0, elements) of the space, for
  // a node that repeats every P elements, P the product of the space's dims from `axis` on
  // (a periodic broadcast): built one element at a time.
  int period_table(NodeId id, int axis, mlir::Value elements);
  mlir::Value lanes_below(mlir::Value count, int lanes);
  // The i64 vector 0, 1, ..., lanes - 1; an i64 value in every lane.
  mlir::Value lane_numbers(int lanes);
  mlir::Value splat_i64(mlir::Value v, int lanes);
  // An scf.if yielding what `branch(0)` (then) and `branch(1)` (else) return, types known only
  // once they are emitted: drafted without results, then moved into one with them. Both must
  // yield the same types (else an internal error naming `what`).
  template <class Branch>
  std::vector<mlir::Value> if_yielding(mlir::Value condition, Branch branch, const std::string& what) {
    auto draft = b_.create<mlir::scf::IfOp>(loc_, condition, /*withElseRegion=*/true);
    std::vector<mlir::Type> types[2];
    for (int k = 0; k < 2; ++k) {
      mlir::OpBuilder::InsertionGuard guard(b_);
      mlir::Block& block = k == 0 ? draft.getThenRegion().front() : draft.getElseRegion().front();
      block.getTerminator()->erase();
      b_.setInsertionPointToEnd(&block);
      clear_caches();
      std::vector<mlir::Value> yielded = branch(k);
      b_.create<mlir::scf::YieldOp>(loc_, yielded);
      clear_caches();
      for (mlir::Value v : yielded) types[k].push_back(v.getType());
    }
    if (types[0] != types[1]) throw ir::Error(fail_text("kernel " + k_.name + ": " + what));
    auto result = b_.create<mlir::scf::IfOp>(loc_, types[0], condition, /*withElseRegion=*/true);
    result.getThenRegion().takeBody(draft.getThenRegion());
    result.getElseRegion().takeBody(draft.getElseRegion());
    draft.erase();
    return {result.getResults().begin(), result.getResults().end()};
  }
  // Runs `body` with vector loads and stores masked to the lanes below `count` (when count <
  // lanes; the mask is a no-op otherwise).
  template <class Body>
  void masked(mlir::Value count, int lanes, Body body) {
    mlir::Value saved = mask_;
    mask_ = lanes_below(count, lanes);
    body();
    mask_ = saved;
  }
  struct MatmulPlan {
    NodeId mm;
    DType t;
    MatmulTiling tiling;
    mlir::Value m, n, k;         // C is (batch x) m x n, the depth k
    int pack_a = -1, pack_b = -1, acc = -1;
    // A costly epilogue (a transcendental: GELU's tanh) runs in a loop over the tile's rows from
    // this mr x nr buffer, not once per accumulator (-1: per accumulator, in registers).
    int tile = -1;
    mlir::Value acc_origin;      // the global row whose partial sums sit at the start of `acc`
    bool a_by_columns = false;   // packed A holds tiles of mr rows, K-major (A is unit-stride along M)
    int a_in_place = -1;         // A's slot when the micro-kernel reads A where it lies (no pack_a)
    std::vector<mlir::Value> batch;  // this batch's index
  };
  void emit_matmul_blocked(mlir::Value begin, mlir::Value end);
  // A 2-D matmul's packed B (ir::SharedPackedB): `flags` null for a kernel that never shares.
  struct SharedB {
    mlir::Value flags;           // the claim flags, past the runtime's ir::MatmulSplit header
    mlir::Value present;         // whether the tasks share (the header says so)
    mlir::Value panels;          // past the flags
    mlir::Value groups;          // groups of panels per K block
    mlir::Value padded_columns;  // N rounded up to whole panels
    int own = -1;                // the task's own buffer of one block (slot)
  };
  void pack_b_in_groups(MatmulPlan& p, mlir::Value pc, mlir::Value kb, mlir::Value jc, mlir::Value nb, const SharedB& shared);
  // Rounds x up to a multiple of `to`.
  mlir::Value round_up(mlir::Value x, int64_t to);
  // B[pc : pc + kb, jc : jc + nb] into panels of nr columns: panel q holds, for each k, the
  // columns [q*nr, q*nr + nr) contiguously. The last panel's columns past nb are padding: they
  // are written too (masked-off lanes or a copy of the last column), because the micro-kernel
  // computes whole tiles, and a lane read from never-written memory is undefined in LLVM: once
  // such a lane reached a branch (the f32 patch test of sigmoid), LLVM proved the tile loop
  // unreachable and compiled it to a jump to itself.
  void pack_b(const MatmulPlan& p, mlir::Value pc, mlir::Value kb, mlir::Value jc, mlir::Value nb);
  // A[ic : ic + mb, pc : pc + kb] (rows of this batch) into packed A: row r at r * kc (A unit
  // along K, or any other layout, element by element), or tiles of mr rows, K-major (A unit along M).
  // Rows up to the next whole mr tile are written too (copies of the last row, or masked-off
  // lanes): the micro-kernel reads whole tiles, and never-written lanes are undefined (pack_b).
  void pack_a(const MatmulPlan& p, mlir::Value ic, mlir::Value mb, mlir::Value pc, mlir::Value kb);
  mlir::Value fma(mlir::Value a, mlir::Value b, mlir::Value acc);
  // The register tile a micro-kernel computes: the tiling's mr rows, or fewer for an edge tile
  // (packed A keeps its tiles of mr rows; A in place repeats its last row), stepping K `unroll`
  // steps an iteration (the K block's depth a multiple of it).
  struct TileForm {
    int64_t mr, unroll;
  };
  // One form.mr x nr tile of C at global row `row` (flattened batch x M) and column `col`, from
  // packed A rows [ir, ir + form.mr) (or A's rows [row, row + form.mr) in place, from step pc of
  // K) and packed B columns [jr, jr + nr) over kb. `rows`/`cols` null: a whole tile; else an edge
  // tile (rows and columns past them are not stored).
  void micro_kernel(const MatmulPlan& p, mlir::Value row, mlir::Value col, mlir::Value ir, mlir::Value jr, mlir::Value pc,
                    mlir::Value kb, mlir::Value first, mlir::Value last, mlir::Value rows, mlir::Value cols, TileForm form);
  void emit_matmul_strips(mlir::Value first_row, int64_t rows, int lanes);
  // Columns [first_column, N) of one row of C: a dot product per element, operands and
  // prologues read through index maps, the epilogue applied to each element. Any shape, dtype
  // and view.
  void emit_matmul_columns(mlir::Value row, mlir::Value first_column);
  // ---- Scatter (codegen/cpu/scatter.cpp) ----
  // histogram/bincount: chunks [begin, end) of the input's elements (ir::scatter_chunks of them
  // in all), each counted into its own bins in the scratch slot; index_add: output columns
  // [begin, end) (every index but the axis), each copied from x and then added to in index order.
  void emit_scatter(mlir::Value begin, mlir::Value end);
  void emit_scatter_chunk(mlir::Value chunk, mlir::Value chunks, mlir::Value bins);
  void emit_index_add_column(mlir::Value column);
  // (histogram_bin is KernelEmitterBase's: the CUDA scatter kernels use it too.)
  // Whether the kernel takes a scratch slot after its own (split reductions, histogram/bincount,
  // a 2-D blocked matmul's shared packed B: ir::SharedPackedB).
  bool takes_scratch() const;
  // ir::scatter_chunks of the run's B.
  mlir::Value scatter_chunk_count(mlir::Value bins);
  const std::map<std::string, int>& symbols_;
  const CpuOptions& options_;
  std::vector<int> scratch_slot_;  // allocate_slot()'s slots; the runtime's scratch index is the position
  std::vector<ir::HostArray>& constants_;
  mlir::Value buffers_, symbols_arg_;
  int slot_count_ = 0;
  std::map<NodeId, RowAccess> row_access_memo_;
  std::map<NodeId, mlir::Value> row_cache_;
  std::map<NodeId, mlir::Value> contiguous_cache_;
  std::map<std::vector<const void*>, mlir::Value> lane_cache_;
  mlir::Value matmul_strip_;  // while emitting a matmul strip's epilogue: the strip of C
  mlir::Value mask_;          // while set, vector loads and stores are masked by it
};

}  // namespace fuse::codegen
