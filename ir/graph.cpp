#include "ir/graph.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace fuse::ir {

std::string_view op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Input: return "input";
    case OpKind::Constant: return "constant";
    case OpKind::Arange: return "arange";
    case OpKind::Rand: return "rand";
    case OpKind::Elementwise: return "elementwise";
    case OpKind::Reduce: return "reduce";
    case OpKind::Matmul: return "matmul";
    case OpKind::BroadcastTo: return "broadcast_to";
    case OpKind::Reshape: return "reshape";
    case OpKind::Permute: return "permute";
    case OpKind::ExpandDims: return "expand_dims";
    case OpKind::Squeeze: return "squeeze";
    case OpKind::Scan: return "scan";
    case OpKind::Slice: return "slice";
    case OpKind::Pad: return "pad";
    case OpKind::Concatenate: return "concatenate";
    // gather/scatter (issue 16)
    case OpKind::Take: return "take";
    case OpKind::TakeAlongAxis: return "take_along_axis";
    case OpKind::IndexAdd: return "index_add";
    case OpKind::Bincount: return "bincount";
    case OpKind::Histogram: return "histogram";
  }
  return "?";
}

std::string_view pad_mode_name(PadMode m) {
  switch (m) {
    case PadMode::Constant: return "constant";
    case PadMode::Edge: return "edge";
    case PadMode::Reflect: return "reflect";
  }
  return "?";
}

bool is_view(OpKind k) {
  return k == OpKind::BroadcastTo || k == OpKind::Reshape || k == OpKind::Permute ||
         k == OpKind::ExpandDims || k == OpKind::Squeeze || k == OpKind::Slice;
}

bool is_gather_scatter(OpKind k) {
  return k == OpKind::Take || k == OpKind::TakeAlongAxis || k == OpKind::IndexAdd || k == OpKind::Bincount ||
         k == OpKind::Histogram;
}

std::string_view reduce_kind_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::Sum: return "sum";
    case ReduceKind::Prod: return "prod";
    case ReduceKind::Max: return "max";
    case ReduceKind::Min: return "min";
    case ReduceKind::Mean: return "mean";
    case ReduceKind::Any: return "any";
    case ReduceKind::All: return "all";
    case ReduceKind::Custom: return "reduce";
    case ReduceKind::ArgMax: return "argmax";
    case ReduceKind::ArgMin: return "argmin";
  }
  return "?";
}

NodeId Graph::add(Node n) {
  nodes.push_back(std::move(n));
  return static_cast<NodeId>(nodes.size() - 1);
}

std::vector<NodeId> Graph::input_nodes() const {
  std::vector<NodeId> ids;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].kind == OpKind::Input) ids.push_back(static_cast<NodeId>(i));
  return ids;
}

const Node* Graph::find_input(const std::string& name) const {
  for (const Node& n : nodes)
    if (n.kind == OpKind::Input && n.as<InputAttrs>().name == name) return &n;
  return nullptr;
}

// ---------------------------------------------------------------- shape rules

Shape broadcast_shapes(const std::vector<Shape>& shapes, const std::string& op, const SourceLoc& loc) {
  Shape out;
  for (const Shape& s : shapes) {
    Shape merged(std::max(out.size(), s.size()), Dim(1));
    for (size_t i = 0; i < merged.size(); ++i) {
      // Align from the right.
      const Dim* a = i < out.size() ? &out[out.size() - 1 - i] : nullptr;
      const Dim* b = i < s.size() ? &s[s.size() - 1 - i] : nullptr;
      Dim& m = merged[merged.size() - 1 - i];
      if (!a) m = *b;
      else if (!b) m = *a;
      else if (*a == *b || *b == Dim(1)) m = *a;
      else if (*a == Dim(1)) m = *b;
      else
        throw Error(op + ": shapes " + shape_str(out) + " and " + shape_str(s) +
                        " cannot be broadcast together (dim " + a->str() + " vs " + b->str() + ")",
                    loc);
    }
    out = std::move(merged);
  }
  return out;
}

Shape matmul_shape(const Shape& a, const Shape& b, const SourceLoc& loc) {
  auto fail = [&](const std::string& why) {
    return Error("matmul: shapes " + shape_str(a) + " and " + shape_str(b) + " " + why, loc);
  };
  if (a.empty() || b.empty()) throw fail("are invalid: operands must have at least 1 dim");
  Shape a2 = a.size() == 1 ? Shape{Dim(1), a[0]} : a;
  Shape b2 = b.size() == 1 ? Shape{b[0], Dim(1)} : b;
  const Dim& ka = a2[a2.size() - 1];
  const Dim& kb = b2[b2.size() - 2];
  if (!(ka == kb))
    throw fail("do not match: contracted dims " + ka.str() + " and " + kb.str() + " differ");
  Shape batch_a(a2.begin(), a2.end() - 2), batch_b(b2.begin(), b2.end() - 2);
  Shape out;
  try {
    out = broadcast_shapes({batch_a, batch_b}, "matmul", loc);
  } catch (const Error&) {
    throw fail("have batch dims that cannot be broadcast together");
  }
  if (a.size() > 1) out.push_back(a2[a2.size() - 2]);
  if (b.size() > 1) out.push_back(b2[b2.size() - 1]);
  return out;
}

Shape reduced_shape(const Shape& in, const std::vector<int>& axes, bool keepdims) {
  Shape out;
  for (int i = 0; i < static_cast<int>(in.size()); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced) out.push_back(in[i]);
    else if (keepdims) out.push_back(Dim(1));
  }
  return out;
}

DType reduce_result_dtype(ReduceKind kind, DType in) {
  switch (kind) {
    case ReduceKind::Sum:
    case ReduceKind::Prod: return arithmetic_type(in);
    case ReduceKind::Mean: return float_type(in);
    case ReduceKind::Any:
    case ReduceKind::All: return DType::Bool;
    case ReduceKind::ArgMax:
    case ReduceKind::ArgMin: return DType::I64;
    default: return in;
  }
}

// ---------------------------------------------------------------- construction

static const Node& checked(const Graph& g, NodeId id, const std::string& op, const SourceLoc& loc) {
  if (id < 0 || id >= static_cast<NodeId>(g.nodes.size()))
    throw Error(op + ": operand is not a node of this graph", loc);
  return g.nodes[id];
}

static NodeId add_node(Graph& g, OpKind kind, DType dtype, Shape shape, std::vector<NodeId> inputs,
                       NodeAttrs attrs, SourceLoc loc) {
  Node n;
  n.kind = kind;
  n.dtype = dtype;
  n.shape = std::move(shape);
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.loc = std::move(loc);
  return g.add(std::move(n));
}

static void check_dims_non_negative(const Shape& shape, const std::string& op, const SourceLoc& loc) {
  for (const Dim& d : shape)
    if (d.constant().value_or(0) < 0) throw Error(op + ": negative dimension in shape " + shape_str(shape), loc);
}

NodeId add_input(Graph& g, std::string name, DType dtype, Shape shape, SourceLoc loc) {
  if (name.empty()) throw Error("input: the name must not be empty", loc);
  if (g.find_input(name)) throw Error("input: '" + name + "' is already an input", loc);
  check_dims_non_negative(shape, "input '" + name + "'", loc);
  return add_node(g, OpKind::Input, dtype, std::move(shape), {}, InputAttrs{std::move(name)}, std::move(loc));
}

NodeId add_constant(Graph& g, HostArray value, SourceLoc loc) {
  DType t = value.dtype;
  Shape s = to_shape(value.shape);
  return add_node(g, OpKind::Constant, t, std::move(s), {}, ConstantAttrs{std::move(value)}, std::move(loc));
}

NodeId add_arange(Graph& g, Dim n, SourceLoc loc) {
  check_dims_non_negative({n}, "arange", loc);
  return add_node(g, OpKind::Arange, DType::I64, {n}, {}, NoAttrs{}, std::move(loc));
}

NodeId add_rand(Graph& g, Shape shape, uint64_t seed, SourceLoc loc) {
  check_dims_non_negative(shape, "rand", loc);
  return add_node(g, OpKind::Rand, DType::F32, std::move(shape), {}, RandAttrs{seed}, std::move(loc));
}

NodeId add_elementwise(Graph& g, std::vector<NodeId> inputs, ScalarFn body, SourceLoc loc,
                       const std::string& op_name) {
  if (inputs.empty()) throw Error(op_name + ": needs at least one tensor operand", loc);
  if (body.params.size() != inputs.size())
    throw Error(op_name + ": takes " + std::to_string(body.params.size()) + " operands but " +
                    std::to_string(inputs.size()) + " were given", loc);
  if (body.results.size() != 1)
    throw Error(op_name + ": the scalar function must return exactly one value here", loc);
  std::vector<Shape> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node& in = checked(g, inputs[i], op_name, loc);
    if (in.dtype != body.params[i])
      throw Error(op_name + ": operand " + std::to_string(i) + " is " + std::string(dtype_name(in.dtype)) +
                      " but the function takes " + std::string(dtype_name(body.params[i])), loc);
    shapes.push_back(in.shape);
  }
  Shape shape = broadcast_shapes(shapes, op_name, loc);
  DType dtype = body.result_dtype();
  return add_node(g, OpKind::Elementwise, dtype, std::move(shape), std::move(inputs),
                  ElementwiseAttrs{std::move(body)}, std::move(loc));
}

NodeId add_scalar_op(Graph& g, ScalarOp op, std::vector<NodeId> inputs, SourceLoc loc) {
  std::string name(scalar_op_name(op));
  if (static_cast<int>(inputs.size()) != scalar_op_arity(op))
    throw Error(name + ": takes " + std::to_string(scalar_op_arity(op)) + " operands but " +
                    std::to_string(inputs.size()) + " were given", loc);
  std::vector<DType> types;
  for (NodeId id : inputs) types.push_back(checked(g, id, name, loc).dtype);
  ScalarFn body;
  try {
    body = make_op_fn(op, types);
  } catch (const Error& e) {
    throw Error(e.message(), loc);
  }
  return add_elementwise(g, std::move(inputs), std::move(body), std::move(loc), name);
}

NodeId add_cast(Graph& g, NodeId x, DType to, SourceLoc loc) {
  ScalarBuilder b;
  ScalarId p = b.param(checked(g, x, "cast", loc).dtype);
  return add_elementwise(g, {x}, b.finish({b.cast(p, to)}), std::move(loc), "cast");
}

static std::vector<int> normalize_axes(const std::vector<int64_t>& axes, int rank, bool all_if_empty,
                                       const std::string& op, const Shape& shape, const SourceLoc& loc) {
  std::vector<int> out;
  if (axes.empty() && all_if_empty) {
    for (int i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes) {
    auto n = normalize_axis(a, rank);
    if (!n)
      throw Error(op + ": axis " + std::to_string(a) + " is out of range for shape " + shape_str(shape) +
                      " (rank " + std::to_string(rank) + ")", loc);
    if (std::find(out.begin(), out.end(), *n) != out.end())
      throw Error(op + ": axis " + std::to_string(a) + " is repeated", loc);
    out.push_back(*n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

NodeId add_reduce(Graph& g, NodeId x, ReduceKind kind, std::vector<int64_t> axes, bool keepdims,
                  SourceLoc loc) {
  std::string name(reduce_kind_name(kind));
  if (kind == ReduceKind::Custom) throw Error(name + ": use add_custom_reduce for user combiners", loc);
  const Node& in = checked(g, x, name, loc);
  ReduceAttrs attrs;
  attrs.kind = kind;
  attrs.axes = normalize_axes(axes, in.rank(), true, name, in.shape, loc);
  attrs.keepdims = keepdims;
  if (kind == ReduceKind::ArgMax || kind == ReduceKind::ArgMin)
    for (int a : attrs.axes)
      if (in.shape[a] == Dim(0))
        throw Error(name + ": attempt to get " + name + " of an empty sequence (axis " + std::to_string(a) +
                        " of shape " + shape_str(in.shape) + ")", loc);
  Shape shape = reduced_shape(in.shape, attrs.axes, keepdims);
  DType dtype = reduce_result_dtype(kind, in.dtype);
  return add_node(g, OpKind::Reduce, dtype, std::move(shape), {x}, std::move(attrs), std::move(loc));
}

NodeId add_custom_reduce(Graph& g, NodeId x, ScalarFn combiner, ScalarValue identity,
                         std::vector<int64_t> axes, bool keepdims, SourceLoc loc) {
  const Node& in = checked(g, x, "reduce", loc);
  if (combiner.params.size() != 2 || combiner.results.size() != 1)
    throw Error("reduce: the combiner must take two values and return one", loc);
  if (combiner.params[0] != in.dtype || combiner.params[1] != in.dtype || combiner.result_dtype() != in.dtype)
    throw Error("reduce: the combiner must take and return " + std::string(dtype_name(in.dtype)) +
                    ", the operand's dtype", loc);
  ReduceAttrs attrs;
  attrs.kind = ReduceKind::Custom;
  attrs.axes = normalize_axes(axes, in.rank(), true, "reduce", in.shape, loc);
  attrs.keepdims = keepdims;
  attrs.combiner = std::move(combiner);
  attrs.identity = identity;
  Shape shape = reduced_shape(in.shape, attrs.axes, keepdims);
  return add_node(g, OpKind::Reduce, in.dtype, std::move(shape), {x}, std::move(attrs), std::move(loc));
}

NodeId add_matmul(Graph& g, NodeId a, NodeId b, SourceLoc loc) {
  const Node& na = checked(g, a, "matmul", loc);
  const Node& nb = checked(g, b, "matmul", loc);
  Shape shape = matmul_shape(na.shape, nb.shape, loc);
  DType dtype = arithmetic_type(promote(na.dtype, nb.dtype));
  return add_node(g, OpKind::Matmul, dtype, std::move(shape), {a, b}, NoAttrs{}, std::move(loc));
}

NodeId add_broadcast_to(Graph& g, NodeId x, Shape shape, SourceLoc loc) {
  const Node& in = checked(g, x, "broadcast_to", loc);
  check_dims_non_negative(shape, "broadcast_to", loc);
  bool ok = in.shape.size() <= shape.size();
  for (size_t i = 0; ok && i < in.shape.size(); ++i) {
    const Dim& from = in.shape[in.shape.size() - 1 - i];
    const Dim& to = shape[shape.size() - 1 - i];
    ok = from == to || from == Dim(1);
  }
  if (!ok)
    throw Error("broadcast_to: cannot broadcast shape " + shape_str(in.shape) + " to " + shape_str(shape), loc);
  return add_node(g, OpKind::BroadcastTo, in.dtype, std::move(shape), {x}, NoAttrs{}, std::move(loc));
}

NodeId add_reshape(Graph& g, NodeId x, Shape shape, SourceLoc loc) {
  const Node& in = checked(g, x, "reshape", loc);
  Dim total = num_elements(in.shape);
  int inferred = -1;
  Dim known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == Dim(-1)) {
      if (inferred >= 0) throw Error("reshape: only one dim of " + shape_str(shape) + " may be -1", loc);
      inferred = static_cast<int>(i);
    } else if (shape[i].constant().value_or(0) < 0) {
      throw Error("reshape: negative dimension in " + shape_str(shape), loc);
    } else {
      known = known * shape[i];
    }
  }
  if (inferred >= 0) {
    auto d = exact_divide(total, known);
    if (!d)
      throw Error("reshape: cannot infer the -1 dim of " + shape_str(shape) + " from shape " +
                      shape_str(in.shape), loc);
    shape[inferred] = *d;
  } else if (!(known == total)) {
    throw Error("reshape: cannot reshape " + shape_str(in.shape) + " (" + total.str() + " elements) to " +
                    shape_str(shape) + " (" + known.str() + " elements)", loc);
  }
  return add_node(g, OpKind::Reshape, in.dtype, std::move(shape), {x}, NoAttrs{}, std::move(loc));
}

NodeId add_permute(Graph& g, NodeId x, std::vector<int64_t> perm, SourceLoc loc) {
  const Node& in = checked(g, x, "permute", loc);
  std::string perm_text = "[";
  for (size_t i = 0; i < perm.size(); ++i) perm_text += (i ? ", " : "") + std::to_string(perm[i]);
  perm_text += "]";
  if (static_cast<int>(perm.size()) != in.rank())
    throw Error("permute: permutation " + perm_text + " has " + std::to_string(perm.size()) +
                    " axes but the operand has shape " + shape_str(in.shape), loc);
  normalize_axes(perm, in.rank(), false, "permute", in.shape, loc);  // throws unless a permutation
  PermuteAttrs attrs;
  Shape shape;
  for (int64_t a : perm) {
    int axis = *normalize_axis(a, in.rank());
    attrs.perm.push_back(axis);
    shape.push_back(in.shape[axis]);
  }
  return add_node(g, OpKind::Permute, in.dtype, std::move(shape), {x}, std::move(attrs), std::move(loc));
}

NodeId add_transpose(Graph& g, NodeId x, SourceLoc loc) {
  int rank = checked(g, x, "transpose", loc).rank();
  std::vector<int64_t> perm;
  for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  return add_permute(g, x, std::move(perm), std::move(loc));
}

NodeId add_expand_dims(Graph& g, NodeId x, int64_t axis, SourceLoc loc) {
  const Node& in = checked(g, x, "expand_dims", loc);
  auto a = normalize_axis(axis, in.rank() + 1);
  if (!a)
    throw Error("expand_dims: axis " + std::to_string(axis) + " is out of range for shape " +
                    shape_str(in.shape), loc);
  Shape shape = in.shape;
  shape.insert(shape.begin() + *a, Dim(1));
  return add_node(g, OpKind::ExpandDims, in.dtype, std::move(shape), {x}, ExpandDimsAttrs{*a}, std::move(loc));
}

NodeId add_squeeze(Graph& g, NodeId x, std::vector<int64_t> axes, SourceLoc loc) {
  const Node& in = checked(g, x, "squeeze", loc);
  SqueezeAttrs attrs;
  if (axes.empty()) {
    for (int i = 0; i < in.rank(); ++i)
      if (in.shape[i] == Dim(1)) attrs.axes.push_back(i);
  } else {
    attrs.axes = normalize_axes(axes, in.rank(), false, "squeeze", in.shape, loc);
    for (int a : attrs.axes)
      if (!(in.shape[a] == Dim(1)))
        throw Error("squeeze: axis " + std::to_string(a) + " of shape " + shape_str(in.shape) +
                        " has size " + in.shape[a].str() + ", not 1", loc);
  }
  Shape shape = reduced_shape(in.shape, attrs.axes, false);
  return add_node(g, OpKind::Squeeze, in.dtype, std::move(shape), {x}, std::move(attrs), std::move(loc));
}

NodeId add_scan(Graph& g, NodeId x, ReduceKind kind, int64_t axis, SourceLoc loc) {
  std::string name = kind == ReduceKind::Prod ? "cumprod" : "cumsum";
  if (kind != ReduceKind::Sum && kind != ReduceKind::Prod) throw Error("scan: only sum and prod scans exist", loc);
  const Node& in = checked(g, x, name, loc);
  ScanAttrs attrs;
  attrs.kind = kind;
  attrs.axis = normalize_axes({axis}, in.rank(), false, name, in.shape, loc)[0];
  return add_node(g, OpKind::Scan, reduce_result_dtype(kind, in.dtype), in.shape, {x}, std::move(attrs), std::move(loc));
}

void add_output(Graph& g, std::string name, NodeId node, SourceLoc loc) {
  checked(g, node, "output", loc);
  if (name.empty()) throw Error("output: the name must not be empty", loc);
  for (const GraphOutput& o : g.outputs)
    if (o.name == name) throw Error("output: '" + name + "' is already an output", loc);
  g.outputs.push_back({std::move(name), node});
}

// ---------------------------------------------------------------- gather/scatter (issue 16)

static bool is_index_dtype(DType t) { return t == DType::I32 || t == DType::I64; }

static void check_index_operand(const Node& idx, const std::string& op, const std::string& what,
                                const SourceLoc& loc) {
  if (!is_index_dtype(idx.dtype))
    throw Error(op + ": " + what + " must be i32 or i64, not " + std::string(dtype_name(idx.dtype)) +
                    shape_str(idx.shape), loc);
}

static int indexed_axis(int64_t axis, const Node& x, const std::string& op, const SourceLoc& loc) {
  auto a = normalize_axis(axis, x.rank());
  if (!a)
    throw Error(op + ": axis " + std::to_string(axis) + " is out of range for shape " + shape_str(x.shape) +
                    " (rank " + std::to_string(x.rank()) + ")", loc);
  return *a;
}

Shape take_shape(const Shape& x, const Shape& idx, int axis) {
  Shape shape(x.begin(), x.begin() + axis);
  shape.insert(shape.end(), idx.begin(), idx.end());
  shape.insert(shape.end(), x.begin() + axis + 1, x.end());
  return shape;
}

Shape take_along_axis_shape(const Shape& x, const Shape& idx, int axis, const SourceLoc& loc) {
  auto bad = [&](const std::string& why) {
    return Error("take_along_axis: x " + shape_str(x) + " and indices " + shape_str(idx) + " " + why, loc);
  };
  if (x.size() != idx.size()) throw bad("must have the same rank");
  Shape shape;
  for (size_t k = 0; k < x.size(); ++k) {
    if (static_cast<int>(k) == axis) shape.push_back(idx[k]);
    else if (x[k] == idx[k] || idx[k] == Dim(1)) shape.push_back(x[k]);
    else if (x[k] == Dim(1)) shape.push_back(idx[k]);
    else throw bad("do not broadcast (dim " + std::to_string(k) + ": " + x[k].str() + " vs " + idx[k].str() + ")");
  }
  return shape;
}

NodeId add_take(Graph& g, NodeId x, NodeId idx, int64_t axis, SourceLoc loc) {
  const Node& in = checked(g, x, "take", loc);
  const Node& index = checked(g, idx, "take", loc);
  check_index_operand(index, "take", "indices", loc);
  if (in.rank() == 0) throw Error("take: x must have at least 1 dim, not shape " + shape_str(in.shape), loc);
  int a = indexed_axis(axis, in, "take", loc);
  Shape shape = take_shape(in.shape, index.shape, a);
  return add_node(g, OpKind::Take, in.dtype, std::move(shape), {x, idx}, GatherAttrs{a}, std::move(loc));
}

NodeId add_take_along_axis(Graph& g, NodeId x, NodeId idx, int64_t axis, SourceLoc loc) {
  const Node& in = checked(g, x, "take_along_axis", loc);
  const Node& index = checked(g, idx, "take_along_axis", loc);
  check_index_operand(index, "take_along_axis", "indices", loc);
  if (in.rank() == 0)
    throw Error("take_along_axis: x must have at least 1 dim, not shape " + shape_str(in.shape), loc);
  int a = indexed_axis(axis, in, "take_along_axis", loc);
  Shape shape = take_along_axis_shape(in.shape, index.shape, a, loc);
  return add_node(g, OpKind::TakeAlongAxis, in.dtype, std::move(shape), {x, idx}, GatherAttrs{a}, std::move(loc));
}

NodeId add_index_add(Graph& g, NodeId x, NodeId idx, NodeId values, int64_t axis, SourceLoc loc) {
  const Node& in = checked(g, x, "index_add", loc);
  const Node& index = checked(g, idx, "index_add", loc);
  const Node& vals = checked(g, values, "index_add", loc);
  check_index_operand(index, "index_add", "indices", loc);
  if (in.rank() == 0) throw Error("index_add: x must have at least 1 dim, not shape " + shape_str(in.shape), loc);
  if (index.rank() != 1)
    throw Error("index_add: indices must be 1-D, not " + std::string(dtype_name(index.dtype)) + shape_str(index.shape), loc);
  if (in.dtype == DType::Bool) throw Error("index_add: x must be numeric, not bool", loc);
  int a = indexed_axis(axis, in, "index_add", loc);
  Shape expected = in.shape;
  expected[a] = index.shape[0];
  if (!(vals.shape == expected))
    throw Error("index_add: values have shape " + shape_str(vals.shape) + " but x " + shape_str(in.shape) +
                    " with indices " + shape_str(index.shape) + " along axis " + std::to_string(a) + " needs " +
                    shape_str(expected), loc);
  if (vals.dtype != in.dtype)
    throw Error("index_add: values are " + std::string(dtype_name(vals.dtype)) + " but x is " +
                    std::string(dtype_name(in.dtype)) + " (cast one of them)", loc);
  return add_node(g, OpKind::IndexAdd, in.dtype, in.shape, {x, idx, values}, GatherAttrs{a}, std::move(loc));
}

NodeId add_bincount(Graph& g, NodeId x, Dim length, NodeId weights, SourceLoc loc) {
  const Node& in = checked(g, x, "bincount", loc);
  if (!is_index_dtype(in.dtype) || in.rank() != 1)
    throw Error("bincount: x must be a 1-D i32 or i64 tensor, not " + std::string(dtype_name(in.dtype)) +
                    shape_str(in.shape), loc);
  if (length.constant().value_or(1) < 0)
    throw Error("bincount: minlength must not be negative, not " + length.str(), loc);
  std::vector<NodeId> inputs = {x};
  DType dtype = DType::I64;
  if (weights >= 0) {
    const Node& w = checked(g, weights, "bincount", loc);
    if (w.dtype == DType::Bool) throw Error("bincount: weights must be numeric, not bool", loc);
    if (!(w.shape == in.shape))
      throw Error("bincount: weights have shape " + shape_str(w.shape) + " but x has shape " + shape_str(in.shape),
                  loc);
    dtype = w.dtype;
    inputs.push_back(weights);
  }
  return add_node(g, OpKind::Bincount, dtype, {length}, std::move(inputs), NoAttrs{}, std::move(loc));
}

NodeId add_histogram(Graph& g, NodeId x, int64_t bins, double lo, double hi, SourceLoc loc) {
  const Node& in = checked(g, x, "histogram", loc);
  if (in.dtype == DType::Bool) throw Error("histogram: x must be numeric, not bool", loc);
  if (bins < 1) throw Error("histogram: bins must be a positive integer, not " + std::to_string(bins), loc);
  if (!std::isfinite(lo) || !std::isfinite(hi))
    throw Error("histogram: range [" + std::to_string(lo) + ", " + std::to_string(hi) + "] must be finite", loc);
  if (lo > hi)
    throw Error("histogram: range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "]: the upper bound must not be below the lower", loc);
  if (lo == hi) {  // as NumPy: an empty range widens to one unit around it
    lo -= 0.5;
    hi += 0.5;
  }
  return add_node(g, OpKind::Histogram, DType::I64, {Dim(bins)}, {x}, HistogramAttrs{lo, hi}, std::move(loc));
}

std::vector<bool> computed_from(const Graph& g, NodeId source) {
  std::vector<bool> from(g.nodes.size(), false);
  if (source < 0 || source >= static_cast<NodeId>(g.nodes.size())) return from;
  from[source] = true;
  for (NodeId id = source + 1; id < static_cast<NodeId>(g.nodes.size()); ++id)
    for (NodeId in : g.node(id).inputs)
      if (from[in]) {
        from[id] = true;
        break;
      }
  return from;
}

// ---------------------------------------------------------------- np-views

NodeId add_slice(Graph& g, NodeId x, std::vector<Dim> starts, std::vector<int64_t> steps, Shape shape,
                 std::vector<SizeCheck> checks, SourceLoc loc) {
  const Node& in = checked(g, x, "slice", loc);
  if (static_cast<int>(starts.size()) != in.rank() || static_cast<int>(steps.size()) != in.rank() ||
      static_cast<int>(shape.size()) != in.rank())
    throw Error("slice: starts, steps and shape need one entry per axis of " + shape_str(in.shape), loc);
  for (int64_t s : steps)
    if (s == 0) throw Error("slice: a step must not be zero", loc);
  check_dims_non_negative(shape, "slice", loc);
  SliceAttrs attrs{std::move(starts), std::move(steps), std::move(checks)};
  return add_node(g, OpKind::Slice, in.dtype, std::move(shape), {x}, std::move(attrs), std::move(loc));
}

namespace {

// Whether `d` is non-negative for every binding (sizes are): positive coefficients over symbols,
// floor divisions, mins and maxes of such. Then max(d, 0) is just d (x[::-1] of N has N elements).
bool known_non_negative(const Dim& d) {
  for (const DimTerm& t : d.terms) {
    if (t.coef < 0) return false;
    for (const DimAtom& a : t.atoms)
      for (const Dim& arg : a.args)
        if (!known_non_negative(arg)) return false;
  }
  return true;
}

// Whether d <= n for every binding, from the form alone: n - d non-negative, floor(a / c) with
// a <= n, or a min with such an argument (x[:N // 2] of N has N // 2 elements, not min(N // 2, N)).
bool known_at_most(const Dim& d, const Dim& n) {
  if (known_non_negative(n - d)) return true;
  if (d.terms.size() != 1 || d.terms[0].coef != 1 || d.terms[0].atoms.size() != 1) return false;
  const DimAtom& a = d.terms[0].atoms[0];
  if (a.kind == DimAtom::Kind::FloorDiv) return known_non_negative(a.args[0]) && known_at_most(a.args[0], n);
  if (a.kind == DimAtom::Kind::Min)
    for (const Dim& arg : a.args)
      if (known_at_most(arg, n)) return true;
  return false;
}

Dim non_negative(const Dim& d) { return known_non_negative(d) ? d : dim_max(d, Dim(0)); }

// One Python slice of an axis of size n as (start, count): see the derivation in add_index.
std::pair<Dim, Dim> slice_axis(const IndexItem& item, const Dim& n) {
  int64_t step = item.step;
  // A bound as written: an integer (negative from the end) or a non-negative dim.
  auto raw = [&](const std::optional<int64_t>& i, const std::optional<Dim>& d) -> std::optional<Dim> {
    if (i) return *i < 0 ? n + Dim(*i) : Dim(*i);
    return d;
  };
  std::optional<Dim> start = raw(item.start_int, item.start), stop = raw(item.stop_int, item.stop);
  if (step > 0) {
    // Python clamps both bounds to [0, n]; the count max(ceil((stop - start) / step), 0) is the
    // same without the start's upper clamp and the stop's lower one (either makes it <= 0).
    Dim first = start ? non_negative(*start) : Dim(0);
    Dim end = !stop ? n : known_at_most(*stop, n) ? *stop : dim_min(*stop, n);
    return {first, non_negative(ceil_div(end - first, step))};
  }
  // Backwards: bounds clamp to [-1, n - 1] (-1: before the first element), likewise trimmed.
  Dim first = start ? dim_min(*start, n - Dim(1)) : n - Dim(1);
  Dim end = stop ? dim_max(*stop, Dim(-1)) : Dim(-1);
  return {first, non_negative(ceil_div(first - end, -step))};
}

}  // namespace

NodeId add_index(Graph& g, NodeId x, const std::vector<IndexItem>& items, SourceLoc loc, const std::string& text) {
  const Node& in = checked(g, x, "index", loc);
  std::string op = text.empty() ? std::string("index") : text;
  int consumed = 0, ellipses = 0;
  for (const IndexItem& item : items) {
    if (item.kind == IndexItem::Kind::Integer || item.kind == IndexItem::Kind::Slice) ++consumed;
    if (item.kind == IndexItem::Kind::Ellipsis) ++ellipses;
    if (item.kind == IndexItem::Kind::Slice && item.step == 0) throw Error(op + ": slice step cannot be zero", loc);
  }
  if (ellipses > 1) throw Error(op + ": an index can only have a single ellipsis ('...')", loc);
  if (consumed > in.rank())
    throw Error(op + ": too many indices for shape " + shape_str(in.shape) + ": " + std::to_string(in.rank()) +
                    " axes but " + std::to_string(consumed) + " were indexed", loc);
  // Spell the index out axis by axis: `...` (or the end) stands for full slices.
  std::vector<IndexItem> full;
  for (const IndexItem& item : items) {
    if (item.kind == IndexItem::Kind::Ellipsis) {
      for (int k = 0; k < in.rank() - consumed; ++k) full.push_back(IndexItem{});
    } else {
      full.push_back(item);
    }
  }
  if (!ellipses)
    for (int k = 0; k < in.rank() - consumed; ++k) full.push_back(IndexItem{});
  std::vector<Dim> starts;
  std::vector<int64_t> steps;
  Shape shape;
  std::vector<SizeCheck> checks;
  std::vector<int64_t> squeezed, new_axes;
  int axis = 0, out_axis = 0;
  for (const IndexItem& item : full) {
    if (item.kind == IndexItem::Kind::NewAxis) {
      new_axes.push_back(out_axis++);
      continue;
    }
    const Dim& n = in.shape[axis];
    if (item.kind == IndexItem::Kind::Integer) {
      int64_t i = item.index.value_or(0);
      std::string what = op + ": index " + std::to_string(i) + " is out of range for axis " + std::to_string(axis) +
                         " of size " + n.str();
      if (auto known = n.constant()) {
        if (i < -*known || i >= *known) throw Error(what + " (shape " + shape_str(in.shape) + ")", loc);
      } else {
        checks.push_back({n, i < 0 ? -i : i + 1, what, loc});
      }
      starts.push_back(i < 0 ? n + Dim(i) : Dim(i));
      steps.push_back(1);
      shape.push_back(Dim(1));
      squeezed.push_back(axis);
    } else {
      auto [start, count] = slice_axis(item, n);
      starts.push_back(start);
      steps.push_back(item.step);
      shape.push_back(count);
      ++out_axis;
    }
    ++axis;
  }
  NodeId r = x;
  bool identity = shape == in.shape && checks.empty();
  for (size_t k = 0; k < starts.size(); ++k) identity = identity && starts[k] == Dim(0) && steps[k] == 1;
  if (!identity) r = add_slice(g, x, std::move(starts), std::move(steps), std::move(shape), std::move(checks), loc);
  if (!squeezed.empty()) r = add_squeeze(g, r, squeezed, loc);
  for (int64_t a : new_axes) r = add_expand_dims(g, r, a, loc);
  return r;
}

NodeId add_pad(Graph& g, NodeId x, std::vector<Dim> before, std::vector<Dim> after, PadMode mode, double value,
               SourceLoc loc) {
  const Node& in = checked(g, x, "pad", loc);
  if (static_cast<int>(before.size()) != in.rank() || static_cast<int>(after.size()) != in.rank())
    throw Error("pad: " + std::to_string(before.size()) + " (before, after) pairs for an operand of shape " +
                    shape_str(in.shape) + ", which has " + std::to_string(in.rank()) + " axes", loc);
  PadAttrs attrs;
  Shape shape;
  for (int k = 0; k < in.rank(); ++k) {
    for (const Dim* w : {&before[k], &after[k]})
      if (w->constant().value_or(0) < 0)
        throw Error("pad: negative padding " + w->str() + " on axis " + std::to_string(k), loc);
    bool padded = !(before[k] == Dim(0) && after[k] == Dim(0));
    if (mode != PadMode::Constant && padded) {
      std::string what = "pad: mode \"" + std::string(pad_mode_name(mode)) + "\" cannot extend axis " +
                         std::to_string(k) + ": it is empty (size " + in.shape[k].str() + ")";
      if (auto known = in.shape[k].constant()) {
        if (*known == 0) throw Error(what + " (shape " + shape_str(in.shape) + ")", loc);
      } else {
        attrs.checks.push_back({in.shape[k], 1, what, loc});
      }
    }
    shape.push_back(before[k] + in.shape[k] + after[k]);
  }
  attrs.before = std::move(before);
  attrs.after = std::move(after);
  attrs.mode = mode;
  if (mode == PadMode::Constant) attrs.value = ScalarValue::of(value, in.dtype);
  return add_node(g, OpKind::Pad, in.dtype, std::move(shape), {x}, std::move(attrs), std::move(loc));
}

NodeId add_concatenate(Graph& g, std::vector<NodeId> xs, int64_t axis, SourceLoc loc) {
  if (xs.empty()) throw Error("concatenate: needs at least one array", loc);
  const Node& first = checked(g, xs[0], "concatenate", loc);
  if (first.rank() == 0) throw Error("concatenate: zero-dimensional arrays cannot be concatenated", loc);
  auto a = normalize_axis(axis, first.rank());
  if (!a)
    throw Error("concatenate: axis " + std::to_string(axis) + " is out of range for shape " + shape_str(first.shape),
                loc);
  Shape shape = first.shape;
  DType dtype = first.dtype;
  Shape first_shape = first.shape;
  for (size_t k = 1; k < xs.size(); ++k) {
    const Node& n = checked(g, xs[k], "concatenate", loc);
    std::string pair = shape_str(first_shape) + " and " + shape_str(n.shape);
    if (n.dtype != dtype)
      throw Error("concatenate: operands have dtypes " + std::string(dtype_name(dtype)) + " and " +
                      std::string(dtype_name(n.dtype)) + " (cast them to one dtype first)", loc);
    if (n.rank() != static_cast<int>(shape.size()))
      throw Error("concatenate: operands of shapes " + pair + " have different numbers of axes", loc);
    for (int d = 0; d < n.rank(); ++d)
      if (d != *a && !(n.shape[d] == shape[d]))
        throw Error("concatenate: shapes " + pair + " differ on axis " + std::to_string(d) +
                        ", which is not the concatenation axis " + std::to_string(*a), loc);
    shape[*a] = shape[*a] + n.shape[*a];
  }
  if (xs.size() == 1) return xs[0];
  return add_node(g, OpKind::Concatenate, dtype, std::move(shape), std::move(xs), ConcatenateAttrs{*a}, std::move(loc));
}

NodeId add_stack(Graph& g, std::vector<NodeId> xs, int64_t axis, SourceLoc loc) {
  if (xs.empty()) throw Error("stack: needs at least one array", loc);
  const Node& first = checked(g, xs[0], "stack", loc);
  Shape first_shape = first.shape;
  auto a = normalize_axis(axis, first.rank() + 1);
  if (!a)
    throw Error("stack: axis " + std::to_string(axis) + " is out of range for shape " + shape_str(first_shape), loc);
  std::vector<NodeId> expanded;
  for (NodeId x : xs) {
    const Node& n = checked(g, x, "stack", loc);
    if (!(n.shape == first_shape))
      throw Error("stack: all input arrays must have the same shape, not " + shape_str(first_shape) + " and " +
                      shape_str(n.shape), loc);
    expanded.push_back(add_expand_dims(g, x, *a, loc));
  }
  if (expanded.size() == 1) return expanded[0];
  return add_concatenate(g, std::move(expanded), *a, std::move(loc));
}

std::vector<SizeCheck> size_checks(const Graph& g) {
  std::vector<SizeCheck> all;
  for (const Node& n : g.nodes) {
    const std::vector<SizeCheck>* checks = n.kind == OpKind::Slice ? &n.as<SliceAttrs>().checks
                                           : n.kind == OpKind::Pad ? &n.as<PadAttrs>().checks
                                                                   : nullptr;
    if (checks) all.insert(all.end(), checks->begin(), checks->end());
    if (n.kind == OpKind::Reduce) {
      const auto& r = n.as<ReduceAttrs>();
      if (r.kind != ReduceKind::ArgMax && r.kind != ReduceKind::ArgMin) continue;
      // add_reduce rejects a reduced axis that is 0 at compile time; one that is 0 only at run
      // time needs this check, or compiled code would return index 0. NumPy allows it when the
      // result is empty too, so the condition is reduced >= 1 || results == 0.
      const Shape& in = g.node(n.inputs[0]).shape;
      Dim reduced = 1, results = 1;
      for (size_t a = 0; a < in.size(); ++a) {
        Dim& product = std::find(r.axes.begin(), r.axes.end(), static_cast<int>(a)) != r.axes.end() ? reduced : results;
        product = product * in[a];
      }
      if (reduced.is_constant() || results == Dim(0)) continue;
      std::string name(reduce_kind_name(r.kind)), axes;
      for (int a : r.axes) axes += (axes.empty() ? "" : ", ") + std::to_string(a);
      Dim condition = results.is_constant() ? reduced : reduced + (Dim(1) - dim_min(results, 1));
      all.push_back({condition, 1,
                     name + ": attempt to get " + name + " of an empty sequence (axes [" + axes + "]" +
                         " of shape " + shape_str(in) + ")",
                     n.loc});
    }
  }
  return all;
}

void check_sizes(const std::vector<SizeCheck>& checks, const SymbolBindings& symbols) {
  for (const SizeCheck& c : checks) {
    int64_t size = evaluate(c.size, symbols);
    if (size >= c.at_least) continue;
    // The symbols' values, which the user knows from the inputs' shapes, rather than the value
    // of a derived expression such as M + 1 - min(N, 1).
    std::string values;
    for (const std::string& name : c.size.symbol_names())
      values += (values.empty() ? "" : ", ") + name + " = " + std::to_string(symbols.at(name));
    if (values.empty()) values = c.size.str() + " = " + std::to_string(size);
    throw Error(c.what + " (" + values + ")", c.loc);
  }
}

}  // namespace fuse::ir
