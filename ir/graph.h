// The graph IR: tensors made by ops, in topological order, with named inputs and outputs.
//
// Each op below states its exact semantics. Shapes and dtypes are inferred when a node is added
// (add_* functions), which throw fuse::ir::Error naming the op, the shapes and the user's
// location on misuse. Elementwise ops broadcast implicitly (NumPy rules) until the broadcasting
// pass (passes/broadcast.h) makes every broadcast an explicit broadcast_to view.
//
// Thread safety: Graph, Node and ScalarFn are plain values: const use (printing, interpreting,
// compiling) from any number of threads at once; adding nodes needs exclusive access. computed_from
// only reads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ir/dtype.h"
#include "ir/error.h"
#include "ir/host_array.h"
#include "ir/scalar.h"
#include "ir/shape.h"

namespace fuse::ir {

using NodeId = int32_t;

enum class OpKind {
  Input,        // a named tensor supplied at run time
  Constant,     // a literal array baked into the graph
  Arange,       // out[i] = i for i in [0, n): i64[n]
  Rand,         // out[i] = uniform [0,1) f32 from Philox-4x32-10(key = seed, counter = flat i)
  Elementwise,  // out[idx] = body(in0[bidx0], in1[bidx1], ...): map (1 input) and zip (n)
  Reduce,       // out[kept idx] = fold of combiner over the reduced axes, from the identity
  Matmul,       // np.matmul: out[..., i, j] = sum_k a[..., i, k] * b[..., k, j]
  BroadcastTo,  // view: out[idx] = in[idx with broadcast dims (size 1 or missing) at 0]
  Reshape,      // view: same elements in row-major order, new shape
  Permute,      // view: out[i0..in] = in[i at perm^-1]; out.shape[k] = in.shape[perm[k]]
  ExpandDims,   // view: inserts a size-1 dim at `axis`
  Squeeze,      // view: removes the size-1 dims at `axes`
  Scan,         // inclusive scan along one axis: out[.., i, ..] = fold of in[.., 0..i, ..] (cumsum, cumprod)
  // ---- np-views: basic indexing, pad, concatenate (index maps that fuse into their readers)
  Slice,        // view: out[i0, i1, ...] = in[start0 + step0*i0, start1 + step1*i1, ...]
  Pad,          // np.pad: in[i - before] inside, else the value (constant) or the edge / mirror index
  Concatenate,  // np.concatenate: the operands one after another along `axis`
  // ---- gather/scatter (issue 16): data-dependent indices, exact semantics at GatherAttrs ----
  Take,           // np.take(x, idx, axis): x's `axis` replaced by idx's dims, indexed by idx
  TakeAlongAxis,  // np.take_along_axis(x, idx, axis): out[.., j, ..] = x[.., idx[.., j, ..], ..]
  IndexAdd,       // copy of x with values added at idx along axis (np.add.at on a copy)
  Bincount,       // np.bincount(x, weights, minlength=K) of length exactly K
  Histogram,      // np.histogram(x, bins=B, range=(lo, hi))[0] as i64[B]
};

std::string_view op_kind_name(OpKind k);
bool is_view(OpKind k);  // BroadcastTo, Reshape, Permute, ExpandDims, Squeeze, Slice
bool is_gather_scatter(OpKind k);  // Take, TakeAlongAxis, IndexAdd, Bincount, Histogram

/// ArgMax/ArgMin (np.argmax/np.argmin): i64, the row-major position within the reduced axes of
/// the first maximum (minimum); a NaN counts as the extreme, so the first NaN's position wins
/// (as in NumPy). Over every axis (kAllAxes) that is the index into the flattened tensor. NumPy
/// allows one axis or none; fuse allows any set of axes (the position in their row-major
/// order). An empty reduced axis is an error (NumPy: "attempt to get argmax of an empty
/// sequence"). Accumulated as a (value, index) pair; partials (CUDA's threads of a row)
/// combine by value, a NaN over any number and the smaller index on a tie, so the first
/// occurrence wins however the row is split. Never a two-stage or split reduction.
enum class ReduceKind { Sum, Prod, Max, Min, Mean, Any, All, Custom, ArgMax, ArgMin };
std::string_view reduce_kind_name(ReduceKind k);

struct NoAttrs {
  bool operator==(const NoAttrs&) const = default;
};
struct InputAttrs {
  std::string name;
  bool operator==(const InputAttrs&) const = default;
};
struct ConstantAttrs {
  HostArray value;
  bool operator==(const ConstantAttrs& o) const {
    return value.dtype == o.value.dtype && value.shape == o.value.shape && value.bytes == o.value.bytes;
  }
};
struct RandAttrs {
  uint64_t seed = 0;
  bool operator==(const RandAttrs&) const = default;
};
/// body has one parameter per input (typed as the input) and one result (the node's dtype).
struct ElementwiseAttrs {
  ScalarFn body;
  bool operator==(const ElementwiseAttrs&) const = default;
};
/// Reduces `axes` (sorted, distinct, non-negative) of the input; keepdims keeps them as size 1.
/// Sum/Prod of bool give i32; Mean gives float_type(input); Any/All give bool; Max/Min keep the
/// type (NaN propagates). Over an empty axis: sum 0, prod 1, max -inf (or the integer minimum),
/// min +inf (or the maximum), mean NaN, any false, all true, custom the identity.
/// Custom: combiner(acc, x) -> acc with both parameters and the result of the node's dtype.
struct ReduceAttrs {
  ReduceKind kind = ReduceKind::Sum;
  std::vector<int> axes;
  bool keepdims = false;
  ScalarFn combiner;      // Custom only
  ScalarValue identity;   // Custom only, in the node's dtype
  bool operator==(const ReduceAttrs&) const = default;
};
struct PermuteAttrs {
  std::vector<int> perm;
  bool operator==(const PermuteAttrs&) const = default;
};
struct ExpandDimsAttrs {
  int axis = 0;
  bool operator==(const ExpandDimsAttrs&) const = default;
};
struct SqueezeAttrs {
  std::vector<int> axes;  // sorted, non-negative
  bool operator==(const SqueezeAttrs&) const = default;
};

/// Scan (np.cumsum / np.cumprod with an axis): out has the input's shape and
/// out[.., i, ..] = in[.., 0, ..] op in[.., 1, ..] op ... op in[.., i, ..] along `axis`
/// (non-negative), folded in order from index 0. kind is Sum or Prod. The result dtype and the
/// accumulation follow ReduceKind::Sum/Prod (reduce_result_dtype): bool gives i32, i32 stays
/// i32 and wraps (NumPy gives i64 for bool and i32 on 64-bit platforms); floats accumulate in
/// f64, in order, and each output is rounded once to the dtype (NumPy accumulates f32 in f32).
/// np.cumsum without an axis is a scan of the flattened tensor: the frontends reshape first.
struct ScanAttrs {
  ReduceKind kind = ReduceKind::Sum;
  int axis = 0;
  bool operator==(const ScanAttrs&) const = default;
};

/// A condition on the symbol sizes that a shape cannot state: evaluate(size) >= at_least. An
/// integer index into an axis of symbolic size N needs N >= index + 1 (or N >= -index). Checked
/// once the inputs have bound the symbols, before anything runs (interpreter, CPU and CUDA
/// executables alike), so a failure leaves the caller's buffers as they were. `what` names the
/// op, index and size; the error appends the actual size.
struct SizeCheck {
  Dim size;
  int64_t at_least = 0;
  std::string what;
  SourceLoc loc;
  bool operator==(const SizeCheck& o) const {
    return size == o.size && at_least == o.at_least && what == o.what && loc.str() == o.loc.str();
  }
};
/// Slice: out.shape[k] elements along axis k from starts[k] by steps[k] (non-zero, negative
/// walks backwards). A Python slice or integer index is normalized (negative indices count from
/// the end, bounds clamp as Python's do) by add_slice before it gets here, so every index read is
/// in range: starts[k] + steps[k] * i lies in [0, in.shape[k]) for i < out.shape[k]. `checks`
/// are the integer indices' run-time range checks (for axes of symbolic size).
struct SliceAttrs {
  std::vector<Dim> starts;
  std::vector<int64_t> steps;
  std::vector<SizeCheck> checks;
  bool operator==(const SliceAttrs&) const = default;
};
enum class PadMode { Constant, Edge, Reflect };
std::string_view pad_mode_name(PadMode m);
/// np.pad(x, [[before, after], ...], mode): out.shape[k] = before[k] + in.shape[k] + after[k];
/// out[i] = in[i - before] where that is inside, and outside, per axis independently:
///   Constant: `value` (in the node's dtype) when any axis is outside;
///   Edge:     the index clamped to [0, n - 1] (the edge element repeats);
///   Reflect:  mirrored about the edges without repeating them, repeatedly when the padding is
///             wider than n - 1 (NumPy's "reflect": [1 2 3] padded by 4 before is 1 2 3 2 | 1 2 3).
///             n == 1 repeats the element (as NumPy).
/// Edge and reflect of an empty axis with non-zero padding is an error (NumPy's too): at compile
/// time for a known size, else by a run-time `check`.
struct PadAttrs {
  std::vector<Dim> before, after;
  PadMode mode = PadMode::Constant;
  ScalarValue value;  // Constant only
  std::vector<SizeCheck> checks;
  bool operator==(const PadAttrs&) const = default;
};
/// np.concatenate(operands, axis): operands of one dtype and rank with equal dims except on
/// `axis` (non-negative), which adds up. Unlike NumPy, mixed dtypes are an error (cast first).
struct ConcatenateAttrs {
  int axis = 0;
  bool operator==(const ConcatenateAttrs&) const = default;
};
// ---- gather/scatter (issue 16) ----
// Indices are i32 or i64 tensors whose values are only known at run time. A negative index i
// means i + size (NumPy); an index outside [-size, size) is a run-time error naming the op, its
// source location, the index and the size (never an out-of-bounds read or write).
/// Take, TakeAlongAxis and IndexAdd: `axis` (non-negative) is the indexed axis of x.
///  - Take(x, idx): np.take(x, idx, axis) (mode='raise'). out.shape = x.shape[:axis] + idx.shape +
///    x.shape[axis+1:]; out[i.., j.., k..] = x[i.., idx[j..], k..]. Any x dtype.
///  - TakeAlongAxis(x, idx): np.take_along_axis. idx has x's rank; its dims other than `axis`
///    broadcast with x's (equal, or one of them 1); out.shape[axis] = idx.shape[axis];
///    out[.., j, ..] = x[.., idx[.., j, ..], ..] (other axes broadcast).
///  - IndexAdd(x, idx, values): idx is 1-D [M], values has x's dtype and shape x.shape with
///    `axis` replaced by M. out = copy of x, then for j = 0..M-1 in order:
///    out[.., idx[j], ..] += values[.., j, ..] (repeated indices accumulate; each add rounds to
///    the dtype, integers wrap): np.add.at on a copy, PyTorch's index_add.
struct GatherAttrs {
  int axis = 0;
  bool operator==(const GatherAttrs&) const = default;
};
/// Bincount(x) or Bincount(x, weights): x is 1-D i32/i64; out has shape [K] (K from the node's
/// shape; fuse shapes do not depend on data, so a value < 0 or >= K is a run-time error, unlike
/// NumPy, which grows the result). Unweighted: out[v] = count of v in x, i64. Weighted: weights
/// has x's shape and a numeric non-bool dtype; out[v] = sum of weights[i] with x[i] == v, in the
/// weights' dtype (NumPy gives f64), floats summed in f64 in index order and rounded once,
/// integers wrapping. No attributes.
/// Histogram(x): np.histogram(x, bins=B, range=(lo, hi))[0] as i64[B] (B = shape[0] >= 1).
/// Bins are equal-width with edges e[i] = T(lo + i * ((hi - lo) / B)), e[B] = T(hi), where T is
/// f32 for f32 x and f64 otherwise (NumPy's linspace of the edges in x's float type). x[i]
/// counts in bin b when e[b] <= x[i] < e[b+1], the last bin also taking x[i] == e[B]; values
/// outside [T(lo), T(hi)] and NaN are ignored (NumPy's float guess then edge correction gives
/// exactly this). lo == hi widens to (lo - 0.5, hi + 0.5) as NumPy does; lo > hi or a
/// non-finite bound is an error at construction. x: any numeric non-bool dtype.
struct HistogramAttrs {
  double lo = 0, hi = 1;
  bool operator==(const HistogramAttrs&) const = default;
};

using NodeAttrs = std::variant<NoAttrs, InputAttrs, ConstantAttrs, RandAttrs, ElementwiseAttrs,
                               ReduceAttrs, PermuteAttrs, ExpandDimsAttrs, SqueezeAttrs,
                               ScanAttrs, SliceAttrs, PadAttrs, ConcatenateAttrs, GatherAttrs, HistogramAttrs>;

struct Node {
  OpKind kind = OpKind::Input;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<NodeId> inputs;  // always ids of earlier nodes
  NodeAttrs attrs;
  SourceLoc loc;

  template <class A> const A& as() const { return std::get<A>(attrs); }
  int rank() const { return static_cast<int>(shape.size()); }
};

struct GraphOutput {
  std::string name;
  NodeId node = -1;
};

struct Graph {
  std::vector<Node> nodes;
  std::vector<GraphOutput> outputs;

  const Node& node(NodeId id) const { return nodes[id]; }
  NodeId add(Node n);  // appends, returns the id (no checks: use the add_* functions)
  std::vector<NodeId> input_nodes() const;  // in order of appearance
  const Node* find_input(const std::string& name) const;
};

// ---- Construction with shape and dtype inference. Each throws Error at `loc` on misuse. ----

NodeId add_input(Graph& g, std::string name, DType dtype, Shape shape, SourceLoc loc = {});
NodeId add_constant(Graph& g, HostArray value, SourceLoc loc = {});
NodeId add_arange(Graph& g, Dim n, SourceLoc loc = {});
NodeId add_rand(Graph& g, Shape shape, uint64_t seed, SourceLoc loc = {});
/// body.params must match the inputs' dtypes; `op_name` names the op in error messages.
NodeId add_elementwise(Graph& g, std::vector<NodeId> inputs, ScalarFn body, SourceLoc loc = {},
                       const std::string& op_name = "elementwise");
/// Applies the single-op body `op` to the inputs with the typing rules of ScalarBuilder.
NodeId add_scalar_op(Graph& g, ScalarOp op, std::vector<NodeId> inputs, SourceLoc loc = {});
NodeId add_cast(Graph& g, NodeId x, DType to, SourceLoc loc = {});
/// axes may be negative; an empty `axes` (kAllAxes) reduces every axis.
NodeId add_reduce(Graph& g, NodeId x, ReduceKind kind, std::vector<int64_t> axes, bool keepdims,
                  SourceLoc loc = {});
NodeId add_custom_reduce(Graph& g, NodeId x, ScalarFn combiner, ScalarValue identity,
                         std::vector<int64_t> axes, bool keepdims, SourceLoc loc = {});
NodeId add_matmul(Graph& g, NodeId a, NodeId b, SourceLoc loc = {});
NodeId add_broadcast_to(Graph& g, NodeId x, Shape shape, SourceLoc loc = {});
/// One dim of `shape` may be -1: inferred from the element count.
NodeId add_reshape(Graph& g, NodeId x, Shape shape, SourceLoc loc = {});
NodeId add_permute(Graph& g, NodeId x, std::vector<int64_t> perm, SourceLoc loc = {});
NodeId add_transpose(Graph& g, NodeId x, SourceLoc loc = {});  // reverses the axes
NodeId add_expand_dims(Graph& g, NodeId x, int64_t axis, SourceLoc loc = {});
NodeId add_squeeze(Graph& g, NodeId x, std::vector<int64_t> axes, SourceLoc loc = {});
void add_output(Graph& g, std::string name, NodeId node, SourceLoc loc = {});
/// Inclusive scan (ScanAttrs) of x along `axis` (may be negative); kind Sum (cumsum) or Prod (cumprod).
NodeId add_scan(Graph& g, NodeId x, ReduceKind kind, int64_t axis, SourceLoc loc = {});

// ---- np-views: basic indexing, pad, concatenate, stack ----

/// One axis of a NumPy basic index. A bound is an integer (negative counts from the end) or a
/// non-negative dim expression (`N // 2`); nullopt is omitted.
struct IndexItem {
  enum class Kind { Integer, Slice, NewAxis, Ellipsis };
  Kind kind = Kind::Slice;
  std::optional<int64_t> index;            // Integer (or the integer form of a bound below)
  std::optional<Dim> start, stop;          // Slice: dim bounds (non-negative expressions)
  std::optional<int64_t> start_int, stop_int;  // Slice: integer bounds (may be negative)
  int64_t step = 1;                        // Slice: non-zero
};
/// x[items] with NumPy's basic indexing rules: integers drop the axis (a compile error when out
/// of range for a known size, else a run-time SizeCheck), slices clamp like Python's, None
/// inserts a size-1 axis, one `...` stands for the axes not named. A Slice view, then
/// expand_dims / squeeze. `text` (the index as written) names the op in messages.
NodeId add_index(Graph& g, NodeId x, const std::vector<IndexItem>& items, SourceLoc loc = {},
                 const std::string& text = "");
/// The Slice view itself (already normalized: see SliceAttrs).
NodeId add_slice(Graph& g, NodeId x, std::vector<Dim> starts, std::vector<int64_t> steps, Shape shape,
                 std::vector<SizeCheck> checks = {}, SourceLoc loc = {});
NodeId add_pad(Graph& g, NodeId x, std::vector<Dim> before, std::vector<Dim> after, PadMode mode,
               double value = 0, SourceLoc loc = {});
/// axis may be negative.
NodeId add_concatenate(Graph& g, std::vector<NodeId> xs, int64_t axis, SourceLoc loc = {});
/// np.stack: concatenate of expand_dims(x, axis) of each (shapes must be equal).
NodeId add_stack(Graph& g, std::vector<NodeId> xs, int64_t axis, SourceLoc loc = {});
/// Every SizeCheck of the graph's nodes, in node order.
std::vector<SizeCheck> size_checks(const Graph& g);
/// Throws Error at the check's location for the first check that fails under `symbols`.
void check_sizes(const std::vector<SizeCheck>& checks, const SymbolBindings& symbols);

// ---- gather/scatter (issue 16); semantics at GatherAttrs and HistogramAttrs. `axis` may be
// negative. Errors name the op and the shapes involved. ----
NodeId add_take(Graph& g, NodeId x, NodeId idx, int64_t axis = 0, SourceLoc loc = {});
NodeId add_take_along_axis(Graph& g, NodeId x, NodeId idx, int64_t axis, SourceLoc loc = {});
NodeId add_index_add(Graph& g, NodeId x, NodeId idx, NodeId values, int64_t axis = 0, SourceLoc loc = {});
/// weights = -1: unweighted counts (i64).
NodeId add_bincount(Graph& g, NodeId x, Dim length, NodeId weights = -1, SourceLoc loc = {});
NodeId add_histogram(Graph& g, NodeId x, int64_t bins, double lo, double hi, SourceLoc loc = {});
/// The shape of take(x, idx, axis) with a normalized axis: x.shape[:axis] + idx + x.shape[axis+1:].
Shape take_shape(const Shape& x, const Shape& idx, int axis);
/// The shape of take_along_axis(x, idx, axis); throws Error naming both shapes when the dims
/// other than `axis` do not broadcast or the ranks differ.
Shape take_along_axis_shape(const Shape& x, const Shape& idx, int axis, const SourceLoc& loc = {});

/// Sentinel for "every axis" in add_reduce.
inline const std::vector<int64_t> kAllAxes = {};

// ---- Shape rules, shared by construction, the verifier and the passes. ----

/// NumPy broadcasting of several shapes: align from the right; equal dims stay, a 1 gives way to
/// the other dim; anything else (N with M, N with 4, 3 with 4) is an error naming `op` and both.
Shape broadcast_shapes(const std::vector<Shape>& shapes, const std::string& op, const SourceLoc& loc);
/// np.matmul's result shape (1-D operands promoted then dropped; batch dims broadcast).
Shape matmul_shape(const Shape& a, const Shape& b, const SourceLoc& loc);
/// Shape after reducing `axes` (normalized).
Shape reduced_shape(const Shape& in, const std::vector<int>& axes, bool keepdims);

/// For each node of `g`, whether its value is computed from node `source`: `source` itself and
/// every node that reads it, directly or through others. One pass in node order (operands
/// precede their users), so queries on diamond-shaped graphs stay linear.
std::vector<bool> computed_from(const Graph& g, NodeId source);
/// Result dtype of a built-in reduction of `in`.
DType reduce_result_dtype(ReduceKind kind, DType in);

}  // namespace fuse::ir
