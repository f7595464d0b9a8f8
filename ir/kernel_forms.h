// Target-neutral facts about a kernel's body: what passes/schedule.cpp reads to choose each
// kernel's loop form (LoopForm), and what both code generators ask while emitting it. Plain IR,
// no MLIR; the recursive queries over the body are memoized (bodies are DAGs, often diamonds).
#pragma once

#include <map>
#include <tuple>
#include <vector>

#include "ir/program.h"

namespace fuse::ir {

/// Whether element i of every value of `k` is element i of its operands: every node on the
/// outputs' paths is an input, constant or elementwise op shaped like the kernel's space, or a
/// broadcast of a single element. Then a flat loop needs neither views nor index arithmetic
/// (lane j of a vector is element base + j).
bool elementwise_contiguous(const Kernel& k);

/// The first axis of a periodic broadcast (x[M, C] * b[C]): a BroadcastTo shaped like the space
/// whose operand varies along a trailing run of the space's axes [a, rank) and is broadcast
/// along every axis before a. Its value at flat position i of the space depends only on i mod
/// P, P the product of the space's dims from a on. -1 for any other node.
int periodic_broadcast_axis(const Kernel& k, NodeId id);
/// The first axis of a per-row broadcast (x[M, C] * r[M, 1]): a BroadcastTo shaped like the
/// space of an input (or its views in row-major order, row_ordered_input) that keeps the space's dims on [0, a) and has dims of 1 on [a, rank). Its
/// value at flat position i of the space is the input's element i / Q, Q the product of the
/// space's dims from a on. -1 for any other node.
int per_row_broadcast_axis(const Kernel& k, NodeId id);
/// The input that node `id` is, or views in row-major order (expand_dims, squeeze, reshape) of
/// (r[M] as r[M, 1]): element i of `id` is the input's element i. -1: none.
NodeId row_ordered_input(const Graph& body, NodeId id);
/// Whether node `id` is a take_along_axis that picks one element from each row of an input laid
/// out along the space (cross-entropy's logits[n, label[n]]): shaped like the space, which ends
/// in a dim of 1, along the input's last axis, the input x[..., C] agreeing with the space on
/// every other dim, its indices a row_ordered_input as many as the space's elements. Element i
/// of the space is then x's element i * C + j, j the i-th index (negative ones counted from C).
bool picks_along_rows(const Kernel& k, NodeId id);
/// A kernel that is elementwise_contiguous but for periodic and per-row broadcasts (at least
/// one): every node on the outputs' paths is an input, constant or elementwise op shaped like the
/// space, a broadcast of a single element, a periodic broadcast or a per-row one, the per-row
/// ones all of one axis. The CPU's Rows and TiledRows forms run such kernels as one flat loop
/// over the space where rows are short or end in a partial vector (codegen/cpu/elementwise.cpp,
/// emit_flat): each periodic operand read from a table of its values tiled over one period and a
/// vector more, each per-row one gathered from its rows.
struct FlatBroadcasts {
  int periodic_axis = -1;  // the smallest periodic broadcast axis (the product of the space's
                           // dims from it on is a multiple of every one's period), or -1
  int per_row_axis = -1;   // the per-row broadcasts' axis, or -1
  bool applies() const { return periodic_axis >= 0 || per_row_axis >= 0; }
};
FlatBroadcasts flat_broadcasts(const Kernel& k);

/// Whether every output element sits at the position of the row (or element) of the reductions'
/// or matmul's result it depends on: between a reduction or matmul and an output only
/// elementwise ops, broadcasts, expand_dims and squeeze (a permute or reshape there would move
/// elements across rows). The row forms need it; other such kernels run element by element
/// (CUDA) or in the interpreter (CPU).
bool results_in_row_order(const Kernel& k);

/// A reduction kernel to single elements (sum(x), max(x * y)): one row, every output one
/// element, built-in (associative) reductions independent of each other. Such a kernel has one
/// parallel iteration, so it is split over chunks of its elements and combined in a second step
/// (CPU: SplitReduction; CUDA: TwoStage). With `user_combiners`, reductions with a user
/// combiner count too (CUDA's TwoStage folds them in order, assuming them associative).
bool reduces_to_one_element(const Kernel& k, bool user_combiners = false);

/// Whether a user combiner may be regrouped: folding a chunk from the reduction's `init` and
/// combining that partial into an accumulator gives what folding the chunk into the accumulator
/// gives (fn(a, fold(init, xs)) == fold(a, xs)). Checked on sample values for chunks of one and
/// two elements: it holds for associative combiners whose init is an identity (max, a product,
/// maximum(acc, abs(v))) and fails for folds such as acc + v*v. The CUDA target folds a user
/// combiner in parallel chunks only when it holds, else in order on one thread.
bool combiner_regroups(const ReduceAttrs& r, DType t);

/// The tiled transpose applies to a kernel whose first output, through views and unary
/// elementwise ops, reads one input along another axis than its own innermost: the result is the
/// output axis that carries that input's innermost axis (the tile's other axis is the output's
/// innermost). -1: not this form.
int transpose_inner_axis(const Kernel& k);

std::vector<NodeId> reduce_nodes(const Kernel& k);
/// Whether a reduction of the kernel is an argmax or argmin: a (value, index) accumulator, which
/// the CPU folds in order per row (ReductionRows, never split) and CUDA per block of a row
/// (BlockPerRow, never two-stage; partials combined by value, then smaller index).
bool has_arg_reduction(const Kernel& k);
/// The space split into the kept dims (the rows, iterated in parallel) and the reduced ones.
Shape kept_dims(const Kernel& k);
Shape reduced_dims(const Kernel& k);
/// Whether the reduced axes are the space's last ones (a row is contiguous in the space).
bool trailing_axes(const Kernel& k);
/// Whether the float max or min reduction `reduce` of `k` may skip NaNs (the CPU's SIMD max keeps
/// no record of them then): wherever its row holds a NaN, each output that depends on it is NaN
/// anyway. That holds when the NaN also reaches a sum, mean or product of the same row (its
/// input computed from the max's input by ops that return NaN for a NaN, element by element:
/// exp(x - m) in softmax) and every output that reads the max reads that NaN sum the same way
/// (e / s, m + log(s)). An output that is the max itself, or that a NaN can skip (a comparison, a
/// select, maximum), keeps the record.
bool nan_reaches_outputs_anyway(const Kernel& k, NodeId reduce);
/// Whether the scalar function returns NaN whenever parameter `param` is NaN, whatever the others
/// (add, sub, mul, div, exp, log, sqrt, sin, ... of it; not comparisons, select, pow, maximum).
bool returns_nan_for_nan(const ScalarFn& f, int param);
/// The kernel's matmul node; -1 when it has none.
NodeId matmul_node(const Kernel& k);
/// The scalar work of one element of the kernel: the sum of its elementwise nodes' costs
/// (ScalarFn::cost). The CPU backend weighs loop bodies and compile times by it.
int64_t elementwise_cost(const Kernel& k);

// ---- blocked matmuls on the CPU (codegen/cpu/matmul.cpp) ----
/// A BlockedMatmul's blocking, from its schedule.
struct MatmulTiling {
  int64_t mr, nr, kc, mc, nc;  // nr and kc whole vectors; mc whole mr tiles; nc whole groups
  int lanes;
  int64_t group_columns;       // columns of B per group of panels claimed at once (shared packing)
  // nc for a task of at most mc / 2 rows: a block of B as large as A's block, kept in L2. A
  // few rows use each element of B a few times, so packing it is much of the work, and a block
  // of nc columns packed past L2 came back from memory (16 x 4096 x 4096 on the 2-vCPU Intel
  // Xeon: 8.0 ms with the nc of large matrices, 6.7 with this one; bench/README.md).
  int64_t nc_few_rows;
};
MatmulTiling matmul_tiling(const CpuSchedule& s);

/// Whether a BlockedMatmul kernel is a plain 2-D matmul whose tasks the runtime may split by
/// columns of C as well as rows, and may have share one packed copy of B (batched matmuls split
/// by rows and pack each batch's B per task). The runtime says how in a MatmulSplit at the start
/// of the buffer it passes after the kernel's constants (a null pointer: by rows, nothing
/// shared, as a kernel called from `fusec --emit=obj` without the runtime runs).
bool shares_packed_b(const Kernel& k);

/// Whether a BlockedMatmul's micro-kernel reads A where it lies rather than from a packed copy:
/// the schedule asks for it (CpuSchedule::a_in_place) and A is one of the kernel's inputs, of the
/// matmul's dtype, laid out row-major with C's batch dims and rows (no view, broadcast or
/// prologue between). Its tasks then never share packed B (matmul_split).
bool matmul_reads_a_in_place(const Kernel& k);

/// How a 2-D blocked matmul's parallel iterations map to work. With `column_tasks` = C, the
/// runtime runs C x M iterations: iteration i is row i % M of column task i / M, which computes
/// C's columns [g0 * group_columns, g1 * group_columns) (clamped to N), for g0 = t * G / C and
/// g1 = (t + 1) * G / C with G the groups of columns. Few rows (fewer than mc per thread), or A
/// read in place (matmul_reads_a_in_place): a grid of C column tasks by `row_tasks` = R chunks
/// of each one's rows (C x R <= threads), each task packing its own columns of B and its rows of
/// A (if A is packed), C chosen for the least work a task (matmul_split; on 2 threads: by
/// columns where there are more columns than rows, or with A in place, as many or more); else
/// one column task (rows split among tasks). `shared`: the
/// tasks share one packed copy of B (SharedPackedB, after this header): each group of panels
/// of each K block is packed by the first task to claim it, and the others wait for its flag
/// (the claimer packs it at once and waits for nothing meanwhile, so nothing can deadlock).
/// Only for tasks of at least mc rows each and a packed B of at most `max_shared_bytes`; else each
/// task packs into a buffer of one block it reuses, warm in cache.
struct MatmulSplit {
  int64_t column_tasks = 1;
  int64_t row_tasks = 1;  // with column_tasks > 1: chunks of each column task's rows, a task each
  int64_t shared = 0;  // 0 or 1 (an int64 to the kernel)
  // With `shared`: the tasks claim rows in chunks of whole row_units (mr), at most max_row_units
  // of them (mc / mr), shrinking as the rows run out (ThreadPool::parallel_for_guided); 0: one
  // chunk of rows a thread.
  int64_t row_unit = 0, max_row_units = 0;
};
constexpr int64_t kMatmulSplitBytes = 64;  // the header: a whole line, so the flags start on one
MatmulSplit matmul_split(const Kernel& k, int64_t rows, int64_t depth, int64_t columns, int threads,
                         int64_t max_shared_bytes);

/// The buffer of a kernel that shares_packed_b, for a depth K and N columns of B, past the
/// MatmulSplit header: an int32 claim flag per group per K block (0 free, 1 being packed, 2
/// packed; K block b's group g at b * groups + g), then, from flags_bytes on, B packed as the
/// kernel packs it: K block b at element b * kc * round_up(N, nr), its columns [j, ...) at j * kb
/// within it (kb the block's depth), plus one vector of slack.
struct SharedPackedB {
  int64_t k_blocks = 0, groups = 0;
  int64_t flags_bytes = 0;  // whole 64-byte lines: the panels start on one
  int64_t bytes = 0;        // the flags and the panels (the header not counted)
};
SharedPackedB shared_packed_b(const Kernel& k, int64_t depth, int64_t columns);

// ---- scatter kernels (issue 16, np-scatter) ----
/// The kernel's scatter node (IndexAdd, Bincount or Histogram); -1 when it has none.
NodeId scatter_node(const Kernel& k);
/// A Scatter kernel's private bins per chunk on the CPU (histogram/bincount: the result's
/// length B); 0 for index_add, which needs none.
Dim scatter_bins(const Kernel& k);
/// How many chunks a histogram/bincount's elements are split into on the CPU, each counted into
/// private bins that are then added up in chunk order: 64, fewer when the bins are large
/// (64 * B * 8 bytes of scratch at most max(32 MiB, B * 8)). It depends only on B, never on the
/// thread count, so every result (float sums too) is the same with any number of threads.
int64_t scatter_chunks(int64_t bins);

// ---- column reductions split over their rows ----
/// A CPU ColumnReduction of few columns and many rows runs split over its rows instead of over
/// its columns: kColumnSplitChunks chunks each fold a stretch of the rows of every column into
/// partials, which a second function combines in chunk order. The chunks are the same whatever
/// the thread count, so every result (float sums too) is the same with any number of threads.
inline constexpr int64_t kColumnSplitChunks = 16;
/// Whether a run of the ColumnReduction `k` over `rows` x `columns` (reduced x kept elements)
/// takes the split form: its column tasks (the schedule's grain of columns each) would number
/// under kMinColumnTasks, and there are at least kColumnSplitChunks rows and 2^16 elements.
inline constexpr int64_t kMinColumnTasks = 8;
bool column_reduction_splits(const Kernel& k, int64_t rows, int64_t columns);
/// A CPU ColumnReduction of at most this many columns, fewer than a vector's lanes and known when
/// compiling, reads its rows as one flat stretch of whole vectors (codegen/cpu/reduction.cpp,
/// emit_narrow_columns); the runtime compiles it again for a short symbolic column count.
inline constexpr int64_t kMaxNarrowColumns = 8;
/// A CPU ColumnReduction over a count of columns known when compiling, of at most this many
/// vectors and not whole ones, walks its rows once for all of them, the last vector masked
/// (codegen/cpu/reduction.cpp, emit_columns); the runtime compiles it again for such a symbolic
/// count. Walked once per vector and once more for the partial one, each walk read every row's
/// lines: sum(x, axis=0) of 12M f32 in rows of 17 to 50 took 1.7-2.1 ms against 1.0 for 16 or 64.
inline constexpr int64_t kColumnWalkVectors = 4;
/// Whether `k` may take that form at some run (its sizes symbolic or allowing it, and no user
/// combiner: one folds elements into an accumulator, not two chunks' accumulators together).
bool column_reduction_may_split(const Kernel& k);

// ---- rows across lanes (CPU row kernels over short rows) ----
/// How a node of a row kernel reads when `lanes` rows are computed at once, lane l of a vector
/// holding row r + l (codegen/cpu/lane_rows.cpp): Full, one vector per element j of the rows
/// (a value of the space's shape); Row, one vector for all of j (a reduction's result, a per-row
/// input r[M, 1], their views and elementwise ops); Column, element j of an operand broadcast
/// along the rows (a layernorm's gamma[C]), one value for every lane; Uniform, a single element
/// broadcast everywhere.
enum class LaneRead { Full, Row, Column, Uniform, Unsupported };
/// Every node's LaneRead (indexed by NodeId). A node reads Unsupported where an operand does,
/// and as argmax/argmin, gathers, matmuls, permutes and broadcasts of other kinds do.
std::vector<LaneRead> lane_reads(const Kernel& k);
/// Whether the ReductionRows kernel `k` can run rows across lanes: its reductions over the
/// trailing axes, no argmax/argmin, and every output reads Full, Row, Column or Uniform, of a
/// 4- or 8-byte dtype, the reduced-space ones laid out as the rows are (element r is row r).
/// The CPU takes it where the row length is known when compiling (short symbolic rows are
/// specialized to theirs) and short (CpuKernelEmitter::lane_rows_length).
bool rows_across_lanes(const Kernel& k);

/// How a node's value varies along the innermost index of the space (worse is larger).
enum class InnerAccess { Constant, Unit, Strided, Unsupported };

/// The axis of view `n`'s operand that carries index `axis` of the view (-1: none, e.g. a
/// broadcast axis).
int view_operand_axis(const Graph& body, const Node& n, int axis);

/// The memoized queries over one kernel's body. Cheap to make; not thread-safe (one per use).
class KernelAccess {
 public:
  explicit KernelAccess(const Kernel& k) : k_(k) {}

  /// How node `id`'s value varies along the innermost index when that index sits on `axis` of
  /// its shape (-1: it does not reach this node).
  InnerAccess inner(NodeId id, int axis) const;
  /// The worst access of the outputs along the space's innermost dim; Unsupported when the
  /// rows form does not apply (rank 0, outputs shaped unlike the space).
  InnerAccess kernel_inner() const;
  /// Whether node `id` reads the result of node `source` (directly or through others).
  bool depends_on(NodeId id, NodeId source) const;
  /// Whether the epilogue reads matmul `mm` only along its columns when index `axis` of node
  /// `id` runs along C's columns (a strip of C is one vector), not through a view that makes it
  /// constant along them (expand_dims on the last axis).
  bool strip_safe(NodeId id, int axis, NodeId mm) const;
  /// Whether every output is shaped like the space, reads along its columns at unit stride or
  /// constant, and reads the matmul only along its columns: the epilogue can run on vectors of C.
  bool epilogue_on_column_vectors() const;
  /// A reduction over leading axes whose lanes can be adjacent outputs (sum(x, axis=0)): its
  /// reductions are independent, built-in and read operands contiguous or constant along the
  /// innermost dim, and its outputs are reductions or elementwise functions of reductions only.
  bool column_reduction() const;

 private:
  InnerAccess inner_uncached(NodeId id, int axis) const;
  bool strip_safe_uncached(NodeId id, int axis, NodeId mm) const;

  const Kernel& k_;
  mutable std::map<std::pair<NodeId, int>, InnerAccess> inner_memo_;
  mutable std::map<NodeId, std::vector<bool>> computed_from_memo_;
  mutable std::map<std::tuple<NodeId, int, NodeId>, bool> strip_safe_memo_;
};

}  // namespace fuse::ir
