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
};

std::string_view op_kind_name(OpKind k);
bool is_view(OpKind k);  // BroadcastTo, Reshape, Permute, ExpandDims, Squeeze, Slice

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

using NodeAttrs = std::variant<NoAttrs, InputAttrs, ConstantAttrs, RandAttrs, ElementwiseAttrs,
                               ReduceAttrs, PermuteAttrs, ExpandDimsAttrs, SqueezeAttrs,
                               ScanAttrs, SliceAttrs, PadAttrs, ConcatenateAttrs>;

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
