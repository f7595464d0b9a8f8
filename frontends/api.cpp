#include "frontends/api.h"

namespace fuse {

using ir::ScalarOp;

const ir::Node& Tensor::node() const {
  if (!graph_) throw Error("use of an empty Tensor handle");
  return graph_->ir().node(id_);
}

ir::SourceLoc Operand::to_loc(const std::source_location& where) {
  return ir::SourceLoc{where.file_name(), static_cast<int>(where.line()), 0};
}

Operand::Operand(Tensor t, std::source_location where) : value(t), loc(to_loc(where)) {}

Tensor Graph::input(std::string name, DType dtype, Shape shape, std::source_location where) {
  return {this, ir::add_input(graph_, std::move(name), dtype, std::move(shape), Operand::to_loc(where))};
}

Tensor Graph::constant(HostArray value, std::source_location where) {
  return {this, ir::add_constant(graph_, std::move(value), Operand::to_loc(where))};
}

Tensor Graph::arange(Dim n, std::source_location where) {
  return {this, ir::add_arange(graph_, std::move(n), Operand::to_loc(where))};
}

Tensor Graph::rand(Shape shape, uint64_t seed, std::source_location where) {
  return {this, ir::add_rand(graph_, std::move(shape), seed, Operand::to_loc(where))};
}

static Graph& graph_of(const Tensor& t, const std::string& op, const ir::SourceLoc& loc) {
  if (!t.graph()) throw Error(op + ": operand is an empty Tensor handle", loc);
  return *t.graph();
}

void Graph::output(std::string name, TensorArg value) {
  if (value.tensor.graph() != this) throw Error("output: the tensor belongs to another graph", value.loc);
  ir::add_output(graph_, std::move(name), value.tensor.id(), value.loc);
}

// ---------------------------------------------------------------- elementwise

// The graph shared by the tensor operands; throws when there is none or several.
static Graph& common_graph(const std::vector<Operand>& operands, const std::string& op) {
  Graph* graph = nullptr;
  for (const Operand& o : operands) {
    if (const Tensor* t = std::get_if<Tensor>(&o.value)) {
      Graph& g = graph_of(*t, op, o.loc);
      if (graph && graph != &g) throw Error(op + ": operands belong to different graphs", o.loc);
      graph = &g;
    }
  }
  if (!graph) throw Error(op + ": needs at least one tensor operand", operands.front().loc);
  return *graph;
}

namespace detail {

Scalar operand_param(const Operand& operand) {
  ir::ScalarBuilder& b = Scalar::builder();
  return std::visit(
      [&](const auto& v) -> Scalar {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, Tensor>) return Scalar(b.param(v.dtype()));
        else return Scalar(v);
      },
      operand.value);
}

std::vector<Tensor> add_traced(ScalarTrace& trace, const std::vector<ir::ScalarId>& results,
                               const std::vector<Operand>& operands, const std::string& name) {
  Graph& graph = common_graph(operands, name);
  const ir::SourceLoc& loc = operands.front().loc;
  std::vector<ir::NodeId> inputs;
  for (const Operand& o : operands)
    if (const Tensor* t = std::get_if<Tensor>(&o.value)) inputs.push_back(t->id());
  std::vector<Tensor> out;
  for (ir::ScalarId r : results) {
    ir::ScalarBuilder copy = trace.builder();  // finish() consumes the builder
    out.emplace_back(&graph, ir::add_elementwise(graph.ir(), inputs, copy.finish({r}), loc, name));
  }
  return out;
}

Tensor add_custom_reduce(ScalarTrace& trace, Scalar result, const TensorArg& x, double identity,
                         const Axes& axes, bool keepdims) {
  Graph& graph = graph_of(x.tensor, "reduce", x.loc);
  DType t = x.tensor.dtype();
  ir::ScalarId r = trace.builder().cast(result.id(), t);
  ir::ScalarFn combiner = trace.builder().finish({r});
  return {&graph, ir::add_custom_reduce(graph.ir(), x.tensor.id(), std::move(combiner),
                                        ir::ScalarValue::of(identity, t), axes.list, keepdims, x.loc)};
}

}  // namespace detail

Tensor apply(ScalarOp op, const std::vector<Operand>& operands) {
  std::string name(ir::scalar_op_name(op));
  ScalarTrace trace;
  std::vector<ir::ScalarId> args;
  for (const Operand& o : operands) args.push_back(detail::operand_param(o).id());
  ir::ScalarBuilder& b = trace.builder();
  ir::ScalarId r;
  try {
    if (op == ScalarOp::Select) r = b.select(args.at(0), args.at(1), args.at(2));
    else if (ir::scalar_op_arity(op) == 2) r = b.binary(op, args.at(0), args.at(1));
    else r = b.unary(op, args.at(0));
  } catch (const Error& e) {
    throw Error(name + ": " + e.message(), operands.front().loc);
  }
  return detail::add_traced(trace, {r}, operands, name)[0];
}

Tensor operator+(Operand a, Operand b) { return apply(ScalarOp::Add, {a, b}); }
Tensor operator-(Operand a, Operand b) { return apply(ScalarOp::Sub, {a, b}); }
Tensor operator*(Operand a, Operand b) { return apply(ScalarOp::Mul, {a, b}); }
Tensor operator/(Operand a, Operand b) { return apply(ScalarOp::Div, {a, b}); }
Tensor operator%(Operand a, Operand b) { return apply(ScalarOp::Mod, {a, b}); }
Tensor operator<(Operand a, Operand b) { return apply(ScalarOp::Lt, {a, b}); }
Tensor operator<=(Operand a, Operand b) { return apply(ScalarOp::Le, {a, b}); }
Tensor operator>(Operand a, Operand b) { return apply(ScalarOp::Gt, {a, b}); }
Tensor operator>=(Operand a, Operand b) { return apply(ScalarOp::Ge, {a, b}); }
static Operand operand_of(const TensorArg& a) {
  Operand o(a.tensor);
  o.loc = a.loc;
  return o;
}

Tensor operator-(TensorArg a) { return apply(ScalarOp::Neg, {operand_of(a)}); }
Tensor floordiv(Operand a, Operand b) { return apply(ScalarOp::FloorDiv, {a, b}); }
Tensor equal(Operand a, Operand b) { return apply(ScalarOp::Eq, {a, b}); }
Tensor not_equal(Operand a, Operand b) { return apply(ScalarOp::Ne, {a, b}); }
Tensor logical_and(Operand a, Operand b) { return apply(ScalarOp::And, {a, b}); }
Tensor logical_or(Operand a, Operand b) { return apply(ScalarOp::Or, {a, b}); }
Tensor logical_not(Operand a) { return apply(ScalarOp::Not, {a}); }
Tensor where(Operand c, Operand a, Operand b) { return apply(ScalarOp::Select, {c, a, b}); }

Tensor cast(TensorArg x, DType to) {
  Graph& g = graph_of(x.tensor, "cast", x.loc);
  return {&g, ir::add_cast(g.ir(), x.tensor.id(), to, x.loc)};
}

#define FUSE_NAMED_SCALAR_OP(Enum, name, arity, ...) FUSE_TENSOR_FN_##arity(Enum, name)
#define FUSE_TENSOR_FN_1(Enum, name) \
  Tensor name(Operand x) { return apply(ScalarOp::Enum, {x}); }
#define FUSE_TENSOR_FN_2(Enum, name) \
  Tensor name(Operand a, Operand b) { return apply(ScalarOp::Enum, {a, b}); }
#include "ir/scalar_ops.def"
#undef FUSE_TENSOR_FN_1
#undef FUSE_TENSOR_FN_2

// ---------------------------------------------------------------- reductions, matmul, views

static Tensor reduction(ir::ReduceKind kind, const TensorArg& x, const Axes& axes, bool keepdims) {
  Graph& g = graph_of(x.tensor, std::string(ir::reduce_kind_name(kind)), x.loc);
  return {&g, ir::add_reduce(g.ir(), x.tensor.id(), kind, axes.list, keepdims, x.loc)};
}

Tensor sum(TensorArg x, Axes axes, bool keepdims) { return reduction(ir::ReduceKind::Sum, x, axes, keepdims); }
Tensor prod(TensorArg x, Axes axes, bool keepdims) { return reduction(ir::ReduceKind::Prod, x, axes, keepdims); }
Tensor max(TensorArg x, Axes axes, bool keepdims) { return reduction(ir::ReduceKind::Max, x, axes, keepdims); }
Tensor min(TensorArg x, Axes axes, bool keepdims) { return reduction(ir::ReduceKind::Min, x, axes, keepdims); }
Tensor mean(TensorArg x, Axes axes, bool keepdims) { return reduction(ir::ReduceKind::Mean, x, axes, keepdims); }
Tensor any(TensorArg x, Axes axes, bool keepdims) { return reduction(ir::ReduceKind::Any, x, axes, keepdims); }
Tensor all(TensorArg x, Axes axes, bool keepdims) { return reduction(ir::ReduceKind::All, x, axes, keepdims); }

Tensor argmax(TensorArg x, Axes axes, bool keepdims) { return reduction(ir::ReduceKind::ArgMax, x, axes, keepdims); }
Tensor argmin(TensorArg x, Axes axes, bool keepdims) { return reduction(ir::ReduceKind::ArgMin, x, axes, keepdims); }

static Tensor scan(ir::ReduceKind kind, const TensorArg& x, std::optional<int64_t> axis) {
  Graph& g = graph_of(x.tensor, kind == ir::ReduceKind::Prod ? "cumprod" : "cumsum", x.loc);
  ir::NodeId in = x.tensor.id();
  if (!axis) in = ir::add_reshape(g.ir(), in, {ir::num_elements(g.ir().node(in).shape)}, x.loc);
  return {&g, ir::add_scan(g.ir(), in, kind, axis.value_or(0), x.loc)};
}

Tensor cumsum(TensorArg x, std::optional<int64_t> axis) { return scan(ir::ReduceKind::Sum, x, axis); }
Tensor cumprod(TensorArg x, std::optional<int64_t> axis) { return scan(ir::ReduceKind::Prod, x, axis); }
Tensor clip(Operand x, Operand lo, Operand hi) { return minimum(maximum(x, lo), hi); }

Tensor matmul(TensorArg a, TensorArg b) {
  Graph& g = common_graph({operand_of(a), operand_of(b)}, "matmul");
  return {&g, ir::add_matmul(g.ir(), a.tensor.id(), b.tensor.id(), a.loc)};
}

Tensor broadcast_to(TensorArg x, Shape shape) {
  Graph& g = graph_of(x.tensor, "broadcast_to", x.loc);
  return {&g, ir::add_broadcast_to(g.ir(), x.tensor.id(), std::move(shape), x.loc)};
}

Tensor reshape(TensorArg x, Shape shape) {
  Graph& g = graph_of(x.tensor, "reshape", x.loc);
  return {&g, ir::add_reshape(g.ir(), x.tensor.id(), std::move(shape), x.loc)};
}

Tensor transpose(TensorArg x) {
  Graph& g = graph_of(x.tensor, "transpose", x.loc);
  return {&g, ir::add_transpose(g.ir(), x.tensor.id(), x.loc)};
}

Tensor permute(TensorArg x, std::vector<int64_t> perm) {
  Graph& g = graph_of(x.tensor, "permute", x.loc);
  return {&g, ir::add_permute(g.ir(), x.tensor.id(), std::move(perm), x.loc)};
}

Tensor expand_dims(TensorArg x, int64_t axis) {
  Graph& g = graph_of(x.tensor, "expand_dims", x.loc);
  return {&g, ir::add_expand_dims(g.ir(), x.tensor.id(), axis, x.loc)};
}

// ---- np-views

ir::IndexItem slice(Bound start, Bound stop, int64_t step) {
  ir::IndexItem item;
  item.kind = ir::IndexItem::Kind::Slice;
  item.start_int = start.integer;
  item.start = start.dim;
  item.stop_int = stop.integer;
  item.stop = stop.dim;
  item.step = step;
  return item;
}

Tensor index(TensorArg x, const std::vector<Index>& items) {
  Graph& g = graph_of(x.tensor, "index", x.loc);
  std::vector<ir::IndexItem> list;
  for (const Index& i : items) list.push_back(i.item);
  return {&g, ir::add_index(g.ir(), x.tensor.id(), list, x.loc)};
}

static std::vector<ir::NodeId> ids_of(const std::vector<Tensor>& xs, const std::string& op, const ir::SourceLoc& loc,
                                      Graph*& graph) {
  if (xs.empty()) throw Error(op + ": needs at least one array", loc);
  std::vector<ir::NodeId> ids;
  for (const Tensor& t : xs) {
    Graph& g = graph_of(t, op, loc);
    if (graph && graph != &g) throw Error(op + ": operands belong to different graphs", loc);
    graph = &g;
    ids.push_back(t.id());
  }
  return ids;
}

Tensor concatenate(const std::vector<Tensor>& xs, int64_t axis, std::source_location where) {
  ir::SourceLoc loc = Operand::to_loc(where);
  Graph* g = nullptr;
  std::vector<ir::NodeId> ids = ids_of(xs, "concatenate", loc, g);
  return {g, ir::add_concatenate(g->ir(), ids, axis, loc)};
}

Tensor stack(const std::vector<Tensor>& xs, int64_t axis, std::source_location where) {
  ir::SourceLoc loc = Operand::to_loc(where);
  Graph* g = nullptr;
  std::vector<ir::NodeId> ids = ids_of(xs, "stack", loc, g);
  return {g, ir::add_stack(g->ir(), ids, axis, loc)};
}

Tensor pad(TensorArg x, const std::vector<std::pair<Dim, Dim>>& widths, ir::PadMode mode, double value) {
  Graph& g = graph_of(x.tensor, "pad", x.loc);
  std::vector<Dim> before, after;
  for (const auto& [b, a] : widths) {
    before.push_back(b);
    after.push_back(a);
  }
  return {&g, ir::add_pad(g.ir(), x.tensor.id(), before, after, mode, value, x.loc)};
}

Tensor squeeze(TensorArg x, Axes axes) {
  Graph& g = graph_of(x.tensor, "squeeze", x.loc);
  return {&g, ir::add_squeeze(g.ir(), x.tensor.id(), axes.list, x.loc)};
}

// ---- gather/scatter (issue 16)

Tensor take(TensorArg x, TensorArg indices, int64_t axis) {
  Graph& g = common_graph({operand_of(x), operand_of(indices)}, "take");
  return {&g, ir::add_take(g.ir(), x.tensor.id(), indices.tensor.id(), axis, x.loc)};
}

Tensor take_along_axis(TensorArg x, TensorArg indices, int64_t axis) {
  Graph& g = common_graph({operand_of(x), operand_of(indices)}, "take_along_axis");
  return {&g, ir::add_take_along_axis(g.ir(), x.tensor.id(), indices.tensor.id(), axis, x.loc)};
}

Tensor index_add(TensorArg x, TensorArg indices, TensorArg values, int64_t axis) {
  Graph& g = common_graph({operand_of(x), operand_of(indices), operand_of(values)}, "index_add");
  return {&g, ir::add_index_add(g.ir(), x.tensor.id(), indices.tensor.id(), values.tensor.id(), axis, x.loc)};
}

Tensor bincount(TensorArg x, Dim length) {
  Graph& g = graph_of(x.tensor, "bincount", x.loc);
  return {&g, ir::add_bincount(g.ir(), x.tensor.id(), std::move(length), -1, x.loc)};
}

Tensor bincount(TensorArg x, Dim length, TensorArg weights) {
  Graph& g = common_graph({operand_of(x), operand_of(weights)}, "bincount");
  return {&g, ir::add_bincount(g.ir(), x.tensor.id(), std::move(length), weights.tensor.id(), x.loc)};
}

Tensor histogram(TensorArg x, int64_t bins, double lo, double hi) {
  Graph& g = graph_of(x.tensor, "histogram", x.loc);
  return {&g, ir::add_histogram(g.ir(), x.tensor.id(), bins, lo, hi, x.loc)};
}

// ---------------------------------------------------------------- scalar tracing

static thread_local ir::ScalarBuilder* current_builder = nullptr;

ScalarTrace::ScalarTrace() : previous_(current_builder) { current_builder = &builder_; }
ScalarTrace::~ScalarTrace() { current_builder = previous_; }

ir::ScalarBuilder& Scalar::builder() {
  if (!current_builder) throw Error("a fuse::Scalar is used outside a traced function (vectorize/map/zip/reduce)");
  return *current_builder;
}

DType Scalar::dtype() const { return builder().dtype(id_); }

static Scalar binary(ScalarOp op, Scalar a, Scalar b) { return Scalar(Scalar::builder().binary(op, a.id(), b.id())); }
static Scalar unary(ScalarOp op, Scalar a) { return Scalar(Scalar::builder().unary(op, a.id())); }

Scalar operator+(Scalar a, Scalar b) { return binary(ScalarOp::Add, a, b); }
Scalar operator-(Scalar a, Scalar b) { return binary(ScalarOp::Sub, a, b); }
Scalar operator*(Scalar a, Scalar b) { return binary(ScalarOp::Mul, a, b); }
Scalar operator/(Scalar a, Scalar b) { return binary(ScalarOp::Div, a, b); }
Scalar operator%(Scalar a, Scalar b) { return binary(ScalarOp::Mod, a, b); }
Scalar operator<(Scalar a, Scalar b) { return binary(ScalarOp::Lt, a, b); }
Scalar operator<=(Scalar a, Scalar b) { return binary(ScalarOp::Le, a, b); }
Scalar operator>(Scalar a, Scalar b) { return binary(ScalarOp::Gt, a, b); }
Scalar operator>=(Scalar a, Scalar b) { return binary(ScalarOp::Ge, a, b); }
Scalar operator-(Scalar a) { return unary(ScalarOp::Neg, a); }
Scalar floordiv(Scalar a, Scalar b) { return binary(ScalarOp::FloorDiv, a, b); }
Scalar equal(Scalar a, Scalar b) { return binary(ScalarOp::Eq, a, b); }
Scalar not_equal(Scalar a, Scalar b) { return binary(ScalarOp::Ne, a, b); }
Scalar logical_and(Scalar a, Scalar b) { return binary(ScalarOp::And, a, b); }
Scalar logical_or(Scalar a, Scalar b) { return binary(ScalarOp::Or, a, b); }
Scalar logical_not(Scalar a) { return unary(ScalarOp::Not, a); }
Scalar where(Scalar c, Scalar a, Scalar b) { return Scalar(Scalar::builder().select(c.id(), a.id(), b.id())); }
Scalar cast(Scalar x, DType to) { return Scalar(Scalar::builder().cast(x.id(), to)); }
#define FUSE_NAMED_SCALAR_OP(Enum, name, arity, ...) FUSE_SCALAR_FN_##arity(Enum, name)
#define FUSE_SCALAR_FN_1(Enum, name) \
  Scalar name(Scalar x) { return unary(ScalarOp::Enum, x); }
#define FUSE_SCALAR_FN_2(Enum, name) \
  Scalar name(Scalar a, Scalar b) { return binary(ScalarOp::Enum, a, b); }
#include "ir/scalar_ops.def"
#undef FUSE_SCALAR_FN_1
#undef FUSE_SCALAR_FN_2

std::vector<Tensor> vjp(TensorArg y, const std::vector<Tensor>& wrt, Tensor cotangent) {
  Graph* graph = y.tensor.graph();
  if (!graph) throw Error("vjp: use of an empty Tensor handle", y.loc);
  std::vector<ir::NodeId> vars;
  for (const Tensor& w : wrt) {
    if (w.graph() != graph) throw Error("vjp: a variable belongs to another graph", y.loc);
    vars.push_back(w.id());
  }
  if (cotangent.graph() && cotangent.graph() != graph)
    throw Error("vjp: the cotangent belongs to another graph", y.loc);
  std::vector<ir::NodeId> ids;
  try {
    ids = passes::vjp(graph->ir(), y.tensor.id(), vars, cotangent.graph() ? cotangent.id() : -1);
  } catch (const Error& e) {
    if (!e.loc().file.empty()) throw;
    throw Error(e.message(), y.loc);
  }
  std::vector<Tensor> out;
  for (ir::NodeId id : ids) out.emplace_back(graph, id);
  return out;
}

Tensor grad(TensorArg y, Tensor x) { return vjp(y, {x})[0]; }

}  // namespace fuse
