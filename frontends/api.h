// The C++ graph-builder API: describe a computation once as a graph of tensor operations.
//
//   fuse::Graph g;
//   auto x = g.input("x", fuse::DType::F32, {fuse::sym("N")});
//   auto m = g.input("mean", fuse::DType::F32);
//   auto s = g.input("sigma", fuse::DType::F32);
//   g.output("y", fuse::exp(-0.5 * ((x - m) / s) * ((x - m) / s)) / (s * 2.5066282746));
//
// Elementwise ops broadcast like NumPy; scalar literals are weakly typed (`x * 2.0` keeps x's
// dtype). User scalar functions are traced from C++ lambdas over `Scalar`, like Numba's
// @vectorize: `auto hypot = fuse::vectorize([](Scalar a, Scalar b) { return sqrt(a*a + b*b); });`.
// Misuse throws fuse::Error whose message names the op, the shapes and the caller's file:line.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <source_location>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "ir/graph.h"
#include "passes/autodiff.h"

namespace fuse {

using ir::Dim;
using ir::DType;
using ir::HostArray;
using ir::Shape;
using Error = ir::Error;

/// A symbolic dim, bound to a size from the actual inputs at run time. Dims are integer
/// expressions (ir/shape.h): `n + 1`, `n - 2`, `2 * n`, `floor_div(n, 2)`, `ceil_div(n, 2)`,
/// `dim_min(n, 5)`, `dim_max(n - 2, 0)` (found by argument-dependent lookup), kept canonical so
/// that equal expressions compare equal. Only plain symbols are bound from the inputs; a dim that
/// is negative at run time is an error.
inline Dim sym(std::string name) { return Dim::symbol(std::move(name)); }

template <class T>
concept Literal = std::is_arithmetic_v<T>;

class Graph;

/// A handle to one node of a Graph. Thread safety: that of its Graph.
class Tensor {
 public:
  Tensor() = default;
  Tensor(Graph* graph, ir::NodeId id) : graph_(graph), id_(id) {}
  Graph* graph() const { return graph_; }
  ir::NodeId id() const { return id_; }
  const ir::Node& node() const;
  DType dtype() const { return node().dtype; }
  const Shape& shape() const { return node().shape; }
  int rank() const { return node().rank(); }

 private:
  Graph* graph_ = nullptr;
  ir::NodeId id_ = -1;
};

/// An operand of an elementwise op: a tensor or a weakly typed literal. Converting to it records
/// the caller's location, which is how operators report the user's line.
struct Operand {
  std::variant<Tensor, double, int64_t, bool> value;
  ir::SourceLoc loc;

  Operand(Tensor t, std::source_location where = std::source_location::current());
  template <Literal L>
  Operand(L v, std::source_location where = std::source_location::current()) : loc(to_loc(where)) {
    if constexpr (std::is_same_v<L, bool>) value = v;
    else if constexpr (std::is_integral_v<L>) value = static_cast<int64_t>(v);
    else value = static_cast<double>(v);
  }
  static ir::SourceLoc to_loc(const std::source_location& where);
};

/// A tensor operand of a non-elementwise op, with the caller's location.
struct TensorArg {
  Tensor tensor;
  ir::SourceLoc loc;
  TensorArg(Tensor t, std::source_location where = std::source_location::current())
      : tensor(t), loc(Operand::to_loc(where)) {}
};

/// Axes of a reduction or squeeze: one axis, a list `{0, -1}`, or none (= every axis).
struct Axes {
  std::vector<int64_t> list;
  Axes() = default;
  Axes(int64_t axis) : list{axis} {}  // NOLINT: `sum(x, 1)` reads naturally
  Axes(std::initializer_list<int64_t> axes) : list(axes) {}
  Axes(std::vector<int64_t> axes) : list(std::move(axes)) {}
};

/// Owns the ir::Graph being built. Tensors point into it, so it neither copies nor moves.
///
/// Thread safety: none of its own. A Graph (and the Tensors pointing into it) is built by one
/// thread at a time; different Graphs may be built on different threads at once. Once built,
/// ir() only reads, so several threads may compile or interpret the same finished Graph.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// A named input; `shape` dims are integers or sym("N"); {} is a scalar (rank 0).
  Tensor input(std::string name, DType dtype, Shape shape = {},
               std::source_location where = std::source_location::current());
  Tensor constant(HostArray value, std::source_location where = std::source_location::current());
  /// i64[n] with values 0..n-1.
  Tensor arange(Dim n, std::source_location where = std::source_location::current());
  /// f32 uniform in [0, 1), counter-based (Philox): the same seed gives the same numbers everywhere.
  Tensor rand(Shape shape, uint64_t seed, std::source_location where = std::source_location::current());
  void output(std::string name, TensorArg value);

  const ir::Graph& ir() const { return graph_; }
  ir::Graph& ir() { return graph_; }

 private:
  ir::Graph graph_;
};

// ---- Elementwise ops on tensors (NumPy broadcasting; literals fold into the op's body) ----

/// Applies `op` to the operands as one elementwise node. At least one operand must be a tensor.
Tensor apply(ir::ScalarOp op, const std::vector<Operand>& operands);

Tensor operator+(Operand a, Operand b);
Tensor operator-(Operand a, Operand b);
Tensor operator*(Operand a, Operand b);
Tensor operator/(Operand a, Operand b);  // true division: integers give f32
Tensor operator%(Operand a, Operand b);  // Python modulo: the result has the divisor's sign
Tensor operator<(Operand a, Operand b);
Tensor operator<=(Operand a, Operand b);
Tensor operator>(Operand a, Operand b);
Tensor operator>=(Operand a, Operand b);
Tensor operator-(TensorArg a);
Tensor floordiv(Operand a, Operand b);
Tensor equal(Operand a, Operand b);
Tensor not_equal(Operand a, Operand b);
Tensor logical_and(Operand a, Operand b);
Tensor logical_or(Operand a, Operand b);
Tensor logical_not(Operand a);
Tensor where(Operand cond, Operand a, Operand b);
Tensor cast(TensorArg x, DType to);

// The named ops of ir/scalar_ops.def (abs, exp, ..., pow, minimum, maximum): np.<name> elementwise.
#define FUSE_NAMED_SCALAR_OP(Enum, name, arity, ...) FUSE_TENSOR_FN_##arity(name)
#define FUSE_TENSOR_FN_1(name) Tensor name(Operand x);
#define FUSE_TENSOR_FN_2(name) Tensor name(Operand a, Operand b);
#include "ir/scalar_ops.def"
#undef FUSE_TENSOR_FN_1
#undef FUSE_TENSOR_FN_2

// ---- Reductions, matmul, views ----

Tensor sum(TensorArg x, Axes axes = {}, bool keepdims = false);
Tensor prod(TensorArg x, Axes axes = {}, bool keepdims = false);
Tensor max(TensorArg x, Axes axes = {}, bool keepdims = false);
Tensor min(TensorArg x, Axes axes = {}, bool keepdims = false);
Tensor mean(TensorArg x, Axes axes = {}, bool keepdims = false);
Tensor any(TensorArg x, Axes axes = {}, bool keepdims = false);
Tensor all(TensorArg x, Axes axes = {}, bool keepdims = false);
/// np.matmul: 1-D operands are promoted to matrices and the added dim dropped; batch dims broadcast.
Tensor matmul(TensorArg a, TensorArg b);
Tensor broadcast_to(TensorArg x, Shape shape);
/// One dim may be -1 (inferred).
Tensor reshape(TensorArg x, Shape shape);
/// Reverses the axes.
Tensor transpose(TensorArg x);
Tensor permute(TensorArg x, std::vector<int64_t> perm);
Tensor expand_dims(TensorArg x, int64_t axis);
/// Removes the given size-1 axes, or every size-1 axis when none are given.
Tensor squeeze(TensorArg x, Axes axes = {});

// ---- Value-index reductions, scans, clip (ir::ReduceKind::ArgMax, ir::ScanAttrs) ----

/// np.argmax / np.argmin: i64 positions of the first extreme (the first NaN wins); without axes,
/// the position in the flattened tensor.
Tensor argmax(TensorArg x, Axes axes = {}, bool keepdims = false);
Tensor argmin(TensorArg x, Axes axes = {}, bool keepdims = false);
/// np.cumsum / np.cumprod along `axis` (may be negative); without one, of the flattened tensor.
Tensor cumsum(TensorArg x, std::optional<int64_t> axis = std::nullopt);
Tensor cumprod(TensorArg x, std::optional<int64_t> axis = std::nullopt);
/// np.clip: minimum(maximum(x, lo), hi), broadcasting; a NaN operand gives NaN; lo > hi gives hi.
Tensor clip(Operand x, Operand lo, Operand hi);
// ---- np-views: basic indexing, concatenate, stack, pad (index maps: they fuse into readers) ----

/// A slice bound: an integer (negative counts from the end), a non-negative Dim (`floor_div(n,
/// 2)`), or none (omitted).
struct Bound {
  std::optional<int64_t> integer;
  std::optional<Dim> dim;
  Bound() = default;
  Bound(int v) : integer(v) {}      // NOLINT
  Bound(int64_t v) : integer(v) {}  // NOLINT
  Bound(Dim d) : dim(std::move(d)) {}  // NOLINT
};
/// One item of an index: an integer, slice(a, b, s), new_axis (None) or ellipsis (`...`).
struct Index {
  ir::IndexItem item;
  Index(int v) { item.kind = ir::IndexItem::Kind::Integer; item.index = v; }      // NOLINT
  Index(int64_t v) { item.kind = ir::IndexItem::Kind::Integer; item.index = v; }  // NOLINT
  Index(ir::IndexItem i) : item(std::move(i)) {}                                  // NOLINT
};
/// Python's start:stop:step (step != 0).
ir::IndexItem slice(Bound start = {}, Bound stop = {}, int64_t step = 1);
inline ir::IndexItem index_item(ir::IndexItem::Kind kind) {
  ir::IndexItem item;
  item.kind = kind;
  return item;
}
inline const ir::IndexItem new_axis = index_item(ir::IndexItem::Kind::NewAxis);
inline const ir::IndexItem ellipsis = index_item(ir::IndexItem::Kind::Ellipsis);
/// x[items] with NumPy's basic indexing: index(x, {slice(1, -1)}) is x[1:-1],
/// index(x, {ellipsis, 0}) is x[..., 0], index(x, {new_axis, slice()}) is x[None, :].
Tensor index(TensorArg x, const std::vector<Index>& items);
Tensor concatenate(const std::vector<Tensor>& xs, int64_t axis = 0,
                   std::source_location where = std::source_location::current());
Tensor stack(const std::vector<Tensor>& xs, int64_t axis = 0,
             std::source_location where = std::source_location::current());
/// np.pad with one (before, after) pair per axis; `value` for PadMode::Constant.
Tensor pad(TensorArg x, const std::vector<std::pair<Dim, Dim>>& widths, ir::PadMode mode = ir::PadMode::Constant,
           double value = 0);
// ---- Gather/scatter (issue 16): NumPy semantics at ir::GatherAttrs and ir::HistogramAttrs. An
// index outside [-size, size) (a bincount value outside [0, length)) is a run-time Error naming
// the op, the caller's line, the index and the size. ----

/// np.take(x, indices, axis): indices i32 or i64 of any shape; negative ones count from the end.
Tensor take(TensorArg x, TensorArg indices, int64_t axis = 0);
/// np.take_along_axis(x, indices, axis): indices of x's rank, other axes broadcasting.
Tensor take_along_axis(TensorArg x, TensorArg indices, int64_t axis);
/// A copy of x with values[.., j, ..] added at x[.., indices[j], ..] along axis; repeated indices
/// accumulate (np.add.at on a copy, PyTorch's index_add).
Tensor index_add(TensorArg x, TensorArg indices, TensorArg values, int64_t axis = 0);
/// np.bincount(x, minlength=length) of exactly `length` bins: i64 counts.
Tensor bincount(TensorArg x, Dim length);
/// Weighted: sums of the weights in the weights' dtype (NumPy gives f64).
Tensor bincount(TensorArg x, Dim length, TensorArg weights);
/// np.histogram(x, bins, range=(lo, hi))[0]: i64[bins], the last bin closed, NaN and values
/// outside the range ignored.
Tensor histogram(TensorArg x, int64_t bins, double lo, double hi);

// ---- Reverse-mode autodiff (passes/autodiff.h: the rules per op, the conventions at kinks) ----

/// The gradients of sum(y * cotangent) with respect to each of `wrt`, added to y's graph (which
/// may still be under construction: the results are ordinary tensors, differentiable again). An
/// empty `cotangent` means ones (for a scalar y, plain dy/dx). Each gradient has the shape and
/// dtype of its variable. Throws Error when y or a variable is not a float, when the tensors
/// belong to different graphs, or when the cotangent does not match y's shape and dtype.
std::vector<Tensor> vjp(TensorArg y, const std::vector<Tensor>& wrt, Tensor cotangent = {});
/// dy/dx for a scalar y; the gradient of sum(y) for another y.
Tensor grad(TensorArg y, Tensor x);

using GradOptions = passes::GradOptions;
/// A new graph: g's outputs plus "grad_<name>" per input in `wrt`, the gradient of output
/// `output` (a VJP with the cotangent input options.cotangent when given, else of sum(output)).
inline ir::Graph grad(const ir::Graph& g, const std::string& output, const std::vector<std::string>& wrt,
                      const GradOptions& options = {}) {
  return passes::grad(g, output, wrt, options);
}
inline ir::Graph grad(const Graph& g, const std::string& output, const std::vector<std::string>& wrt,
                      const GradOptions& options = {}) {
  return passes::grad(g.ir(), output, wrt, options);
}

// ---- User scalar functions, traced from C++ lambdas ----

/// A scalar value inside a traced function. Literals convert implicitly and stay weakly typed.
class Scalar {
 public:
  template <Literal L>
  Scalar(L v) : id_(make_literal(v)) {}  // NOLINT: `x * 2.0` inside a traced function
  explicit Scalar(ir::ScalarId id) : id_(id) {}
  ir::ScalarId id() const { return id_; }
  DType dtype() const;

  /// The builder of the function being traced on this thread (set by ScalarTrace).
  static ir::ScalarBuilder& builder();

 private:
  template <Literal L>
  static ir::ScalarId make_literal(L v) {
    if constexpr (std::is_same_v<L, bool>) return builder().literal_bool(v);
    else if constexpr (std::is_integral_v<L>) return builder().literal_int(static_cast<int64_t>(v));
    else return builder().literal(static_cast<double>(v));
  }
  ir::ScalarId id_;
};

Scalar operator+(Scalar a, Scalar b);
Scalar operator-(Scalar a, Scalar b);
Scalar operator*(Scalar a, Scalar b);
Scalar operator/(Scalar a, Scalar b);
Scalar operator%(Scalar a, Scalar b);
Scalar operator<(Scalar a, Scalar b);
Scalar operator<=(Scalar a, Scalar b);
Scalar operator>(Scalar a, Scalar b);
Scalar operator>=(Scalar a, Scalar b);
Scalar operator-(Scalar a);
Scalar floordiv(Scalar a, Scalar b);
Scalar equal(Scalar a, Scalar b);
Scalar not_equal(Scalar a, Scalar b);
Scalar logical_and(Scalar a, Scalar b);
Scalar logical_or(Scalar a, Scalar b);
Scalar logical_not(Scalar a);
Scalar where(Scalar cond, Scalar a, Scalar b);
Scalar cast(Scalar x, DType to);
// The named ops of ir/scalar_ops.def.
#define FUSE_NAMED_SCALAR_OP(Enum, name, arity, ...) FUSE_SCALAR_FN_##arity(name)
#define FUSE_SCALAR_FN_1(name) Scalar name(Scalar x);
#define FUSE_SCALAR_FN_2(name) Scalar name(Scalar a, Scalar b);
#include "ir/scalar_ops.def"
#undef FUSE_SCALAR_FN_1
#undef FUSE_SCALAR_FN_2

/// Makes the builder of a new scalar function current on this thread for its lifetime. The
/// builder is per thread, so functions may be traced on several threads at once.
class ScalarTrace {
 public:
  ScalarTrace();
  ~ScalarTrace();
  ScalarTrace(const ScalarTrace&) = delete;
  ScalarTrace& operator=(const ScalarTrace&) = delete;
  ir::ScalarBuilder& builder() { return builder_; }

 private:
  ir::ScalarBuilder builder_;
  ir::ScalarBuilder* previous_;
};

namespace detail {
// Creates one elementwise node per traced result (a multi-value function gives several nodes
// over the same body; fusion computes them in one kernel).
std::vector<Tensor> add_traced(ScalarTrace& trace, const std::vector<ir::ScalarId>& results,
                               const std::vector<Operand>& operands, const std::string& name);
Scalar operand_param(const Operand& operand);

template <class R>
std::vector<ir::ScalarId> result_ids(const R& r) {
  if constexpr (std::is_same_v<R, Scalar>) {
    return {r.id()};
  } else {
    std::vector<ir::ScalarId> ids;
    std::apply([&](const auto&... s) { (ids.push_back(Scalar(s).id()), ...); }, r);
    return ids;
  }
}
}  // namespace detail

/// A traced user scalar function applied elementwise with broadcasting, like Numba's @vectorize.
/// Returns a Tensor for a function returning Scalar, or std::array<Tensor, N> for one returning a
/// tuple/pair/array of N Scalars.
template <class F>
class Vectorized {
 public:
  explicit Vectorized(F fn, std::string name = "vectorize") : fn_(std::move(fn)), name_(std::move(name)) {}

  template <class... Rest>
  auto operator()(Operand first, Rest&&... rest) const {
    std::vector<Operand> operands{std::move(first), Operand(std::forward<Rest>(rest))...};
    ScalarTrace trace;
    return call(trace, operands, std::make_index_sequence<1 + sizeof...(Rest)>{});
  }

 private:
  template <size_t... I>
  auto call(ScalarTrace& trace, const std::vector<Operand>& operands, std::index_sequence<I...>) const {
    std::array<Scalar, sizeof...(I)> params{detail::operand_param(operands[I])...};
    auto result = fn_(params[I]...);
    using R = decltype(result);
    std::vector<Tensor> tensors = detail::add_traced(trace, detail::result_ids(result), operands, name_);
    if constexpr (std::is_same_v<R, Scalar>) {
      return tensors[0];
    } else {
      constexpr size_t n = std::tuple_size_v<R>;
      std::array<Tensor, n> out;
      for (size_t i = 0; i < n; ++i) out[i] = tensors[i];
      return out;
    }
  }

  F fn_;
  std::string name_;
};

template <class F>
Vectorized<F> vectorize(F fn, std::string name = "vectorize") {
  return Vectorized<F>(std::move(fn), std::move(name));
}

/// map(fn, x): a traced unary function applied to every element.
template <class F>
auto map(F fn, Operand x) {
  return vectorize(std::move(fn), "map")(std::move(x));
}

/// zip(fn, a, b, ...): a traced n-ary function applied elementwise with broadcasting.
template <class F, class... Rest>
auto zip(F fn, Operand a, Operand b, Rest&&... rest) {
  return vectorize(std::move(fn), "zip")(std::move(a), std::move(b), std::forward<Rest>(rest)...);
}

/// A reduction with a user combiner `fn(acc, x)` (traced) starting from `identity`.
template <class F>
Tensor reduce(F fn, TensorArg x, double identity, Axes axes = {}, bool keepdims = false);

namespace detail {
Tensor add_custom_reduce(ScalarTrace& trace, Scalar result, const TensorArg& x, double identity,
                         const Axes& axes, bool keepdims);
}

template <class F>
Tensor reduce(F fn, TensorArg x, double identity, Axes axes, bool keepdims) {
  ScalarTrace trace;
  Scalar acc(trace.builder().param(x.tensor.dtype()));
  Scalar value(trace.builder().param(x.tensor.dtype()));
  Scalar result = fn(acc, value);
  return detail::add_custom_reduce(trace, result, x, identity, axes, keepdims);
}

}  // namespace fuse
