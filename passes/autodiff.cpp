#include "passes/autodiff.h"

#include "ir/interpreter.h"

#include <algorithm>
#include <functional>
#include <numeric>

namespace fuse::passes {

using ir::DType;
using ir::Error;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::OpKind;
using ir::ReduceKind;
using ir::ScalarBuilder;
using ir::ScalarFn;
using ir::ScalarId;
using ir::ScalarOp;
using ir::Shape;
using ir::SourceLoc;

namespace {

constexpr double kLn2 = 0.6931471805599453;
constexpr double kTwoOverSqrtPi = 1.1283791670955126;

/// Ops whose derivative is zero wherever it exists: the gradient stops there.
bool has_zero_derivative(ScalarOp op) {
  switch (op) {
    case ScalarOp::Floor:
    case ScalarOp::Ceil:
    case ScalarOp::Round:
    case ScalarOp::Sign:
    case ScalarOp::FloorDiv: return true;
    default: return false;
  }
}

/// Drops the parameters `fn` does not read; `used` receives the kept ones' old indices.
ScalarFn drop_unused_params(const ScalarFn& fn, std::vector<int>& used) {
  std::vector<bool> read(fn.params.size(), false);
  for (const ir::ScalarNode& n : fn.nodes)
    for (int k = 0; k < n.arity(); ++k)
      if (const ir::ScalarNode& arg = fn.node(n.args[k]); arg.op == ScalarOp::Param) read[arg.param] = true;
  for (ScalarId r : fn.results)
    if (fn.node(r).op == ScalarOp::Param) read[fn.node(r).param] = true;
  std::vector<int> new_index(fn.params.size(), -1);
  ScalarFn out;
  for (size_t p = 0; p < fn.params.size(); ++p) {
    if (!read[p]) continue;
    new_index[p] = static_cast<int>(out.params.size());
    out.params.push_back(fn.params[p]);
    used.push_back(static_cast<int>(p));
  }
  std::vector<ScalarId> remap(fn.nodes.size(), -1);
  for (size_t i = 0; i < fn.nodes.size(); ++i) {
    ir::ScalarNode n = fn.nodes[i];
    if (n.op == ScalarOp::Param) {
      if (!read[n.param]) continue;
      n.param = new_index[n.param];
    }
    for (int k = 0; k < n.arity(); ++k) n.args[k] = remap[n.args[k]];
    remap[i] = static_cast<ScalarId>(out.nodes.size());
    out.nodes.push_back(n);
  }
  for (ScalarId r : fn.results) out.results.push_back(remap[r]);
  return out;
}

}  // namespace

ScalarFn scalar_vjp(const ScalarFn& body, int wrt, std::vector<int>& used_params) {
  used_params.clear();
  const size_t n = body.nodes.size();
  // Active: float values computed differentiably from parameter `wrt`.
  std::vector<bool> active(n, false);
  for (size_t i = 0; i < n; ++i) {
    const ir::ScalarNode& node = body.nodes[i];
    if (!ir::is_float(node.dtype) || has_zero_derivative(node.op)) continue;
    if (node.op == ScalarOp::Param) {
      active[i] = node.param == wrt;
      continue;
    }
    for (int k = 0; k < node.arity(); ++k) active[i] = active[i] || active[node.args[k]];
  }
  if (body.results.empty() || !active[body.results[0]]) return {};

  ScalarBuilder b;
  std::vector<ScalarId> params;
  for (DType t : body.params) params.push_back(b.param(t));
  ScalarId ct = b.param(body.result_dtype(0));
  // The forward value of every node, recomputed in the derivative (rematerialized, never stored).
  ScalarFn every_node = body;
  every_node.results.resize(n);
  std::iota(every_node.results.begin(), every_node.results.end(), 0);
  std::vector<ScalarId> fwd = b.inline_call(every_node, params);

  std::vector<ScalarId> adj(n, -1);
  adj[body.results[0]] = ct;
  auto accumulate = [&](ScalarId arg, ScalarId contribution) {
    adj[arg] = adj[arg] < 0 ? contribution : b.binary(ScalarOp::Add, adj[arg], contribution);
  };
  auto mul = [&](ScalarId x, ScalarId y) { return b.binary(ScalarOp::Mul, x, y); };
  auto div = [&](ScalarId x, ScalarId y) { return b.binary(ScalarOp::Div, x, y); };
  auto add = [&](ScalarId x, ScalarId y) { return b.binary(ScalarOp::Add, x, y); };
  auto sub = [&](ScalarId x, ScalarId y) { return b.binary(ScalarOp::Sub, x, y); };
  auto neg = [&](ScalarId x) { return b.unary(ScalarOp::Neg, x); };
  auto lit = [&](double v) { return b.literal(v); };

  for (size_t i = n; i-- > 0;) {
    const ir::ScalarNode& node = body.nodes[i];
    if (!active[i] || adj[i] < 0 || node.op == ScalarOp::Param) continue;
    const ScalarId a = adj[i];
    const ScalarId r = fwd[i];
    const ScalarId x = node.arity() > 0 ? fwd[node.args[0]] : -1;
    const ScalarId y = node.arity() > 1 ? fwd[node.args[1]] : -1;
    auto to = [&](int k, ScalarId contribution) {
      if (active[node.args[k]]) accumulate(node.args[k], contribution);
    };
    auto one_minus_square = [&](ScalarId v) { return sub(lit(1), mul(v, v)); };
    switch (node.op) {
      case ScalarOp::Neg: to(0, neg(a)); break;
      case ScalarOp::Abs: to(0, mul(a, b.unary(ScalarOp::Sign, x))); break;  // abs'(0) = 0
      case ScalarOp::Exp: to(0, mul(a, r)); break;
      case ScalarOp::Exp2: to(0, mul(a, mul(r, lit(kLn2)))); break;
      case ScalarOp::Log: to(0, div(a, x)); break;
      case ScalarOp::Log2: to(0, div(a, mul(x, lit(kLn2)))); break;
      case ScalarOp::Sqrt: to(0, div(a, mul(r, lit(2)))); break;
      // -0.5 * x^-1.5 as -0.5 * r / x: cost 4, cheap enough to recompute across a broadcast
      // (passes/fusion.h), which keeps layernorm's backward row reductions in one kernel.
      case ScalarOp::Rsqrt: to(0, div(mul(a, mul(lit(-0.5), r)), x)); break;
      case ScalarOp::Sin: to(0, mul(a, b.unary(ScalarOp::Cos, x))); break;
      case ScalarOp::Cos: to(0, neg(mul(a, b.unary(ScalarOp::Sin, x)))); break;
      case ScalarOp::Tan: to(0, mul(a, add(lit(1), mul(r, r)))); break;
      case ScalarOp::Tanh: to(0, mul(a, one_minus_square(r))); break;
      case ScalarOp::Sigmoid: to(0, mul(a, mul(r, sub(lit(1), r)))); break;
      case ScalarOp::Relu:  // relu'(0) = 0
        to(0, b.select(b.binary(ScalarOp::Gt, x, lit(0)), a, lit(0)));
        break;
      case ScalarOp::Log1p: to(0, div(a, add(x, lit(1)))); break;
      case ScalarOp::Expm1: to(0, mul(a, add(r, lit(1)))); break;
      case ScalarOp::Erf:
        to(0, mul(a, mul(lit(kTwoOverSqrtPi), b.unary(ScalarOp::Exp, neg(mul(x, x))))));
        break;
      case ScalarOp::Asin: to(0, mul(a, b.unary(ScalarOp::Rsqrt, one_minus_square(x)))); break;
      case ScalarOp::Acos: to(0, neg(mul(a, b.unary(ScalarOp::Rsqrt, one_minus_square(x))))); break;
      case ScalarOp::Atan: to(0, div(a, add(lit(1), mul(x, x)))); break;
      case ScalarOp::Sinh: to(0, mul(a, b.unary(ScalarOp::Cosh, x))); break;
      case ScalarOp::Cosh: to(0, mul(a, b.unary(ScalarOp::Sinh, x))); break;
      case ScalarOp::Cast: to(0, b.cast(a, body.node(node.args[0]).dtype)); break;
      case ScalarOp::Add: to(0, a); to(1, a); break;
      case ScalarOp::Sub: to(0, a); to(1, neg(a)); break;
      case ScalarOp::Mul: to(0, mul(a, y)); to(1, mul(a, x)); break;
      case ScalarOp::Div: to(0, div(a, y)); to(1, neg(div(mul(a, r), y))); break;
      case ScalarOp::Mod:  // a - floor(a / b) * b
        to(0, a);
        if (active[node.args[1]]) to(1, neg(mul(a, b.binary(ScalarOp::FloorDiv, x, y))));
        break;
      case ScalarOp::Pow:
        to(0, mul(a, mul(y, b.binary(ScalarOp::Pow, x, sub(y, lit(1))))));
        if (active[node.args[1]]) to(1, mul(a, mul(r, b.unary(ScalarOp::Log, x))));
        break;
      case ScalarOp::Minimum:
      case ScalarOp::Maximum: {  // ties share the gradient equally
        ScalarOp wins = node.op == ScalarOp::Maximum ? ScalarOp::Gt : ScalarOp::Lt;
        ScalarId tie = b.select(b.binary(ScalarOp::Eq, x, y), mul(a, lit(0.5)), lit(0));
        to(0, b.select(b.binary(wins, x, y), a, tie));
        to(1, b.select(b.binary(wins, y, x), a, tie));
        break;
      }
      case ScalarOp::Atan2: {  // atan2(p, q)
        ScalarId denom = add(mul(x, x), mul(y, y));
        to(0, div(mul(a, y), denom));
        to(1, neg(div(mul(a, x), denom)));
        break;
      }
      case ScalarOp::Select: {
        ScalarId cond = fwd[node.args[0]];
        to(1, b.select(cond, a, lit(0)));
        to(2, b.select(cond, lit(0), a));
        break;
      }
      default: break;  // no float result, or a zero derivative: not active
    }
  }
  ScalarId result = -1;
  for (size_t i = 0; i < n; ++i) {
    const ir::ScalarNode& node = body.nodes[i];
    if (node.op == ScalarOp::Param && node.param == wrt && adj[i] >= 0)
      result = result < 0 ? adj[i] : b.binary(ScalarOp::Add, result, adj[i]);
  }
  if (result < 0) return {};
  // The gradient has the parameter's dtype (a weak literal result takes it too).
  result = b.cast(result, body.params[wrt]);
  return drop_unused_params(b.finish({result}), used_params);
}

namespace {

/// Appends the backward nodes of one vjp call to the graph.
class Backward {
 public:
  Backward(Graph& g, NodeId y, const std::vector<NodeId>& wrt) : g_(g), adj_(y + 1, -1), needed_(y + 1, false) {
    // Needed: on a path from a wrt node to y.
    std::vector<bool> from_wrt(y + 1, false);
    for (NodeId w : wrt)
      if (w <= y) from_wrt[w] = true;
    for (NodeId i = 0; i <= y; ++i)
      for (NodeId in : g_.node(i).inputs) from_wrt[i] = from_wrt[i] || from_wrt[in];
    std::vector<bool> reaches_y(y + 1, false);
    reaches_y[y] = true;
    for (NodeId i = y; i >= 0; --i)
      if (reaches_y[i])
        for (NodeId in : g_.node(i).inputs) reaches_y[in] = true;
    for (NodeId i = 0; i <= y; ++i) needed_[i] = from_wrt[i] && reaches_y[i] && ir::is_float(g_.node(i).dtype);
  }

  void run(NodeId y, NodeId cotangent) {
    adj_[y] = cotangent;
    for (NodeId i = y; i >= 0; --i)
      if (needed_[i] && adj_[i] >= 0) propagate(i);
  }

  NodeId gradient(NodeId w) const { return w < static_cast<NodeId>(adj_.size()) ? adj_[w] : -1; }

 private:
  void accumulate(NodeId target, NodeId contribution) {
    if (!needed_[target]) return;
    const DType dtype = g_.node(target).dtype;
    const SourceLoc loc = g_.node(target).loc;  // a copy: adding nodes may move the vector
    if (g_.node(contribution).dtype != dtype) contribution = ir::add_cast(g_, contribution, dtype, loc);
    adj_[target] = adj_[target] < 0 ? contribution
                                    : ir::add_scalar_op(g_, ScalarOp::Add, {adj_[target], contribution}, loc);
  }

  /// An elementwise node over `operands` whose body `make` builds from their parameters.
  NodeId zip(const std::vector<NodeId>& operands, const SourceLoc& loc,
             const std::function<ScalarId(ScalarBuilder&, const std::vector<ScalarId>&)>& make) {
    ScalarBuilder b;
    std::vector<ScalarId> params;
    for (NodeId o : operands) params.push_back(b.param(g_.node(o).dtype));
    ScalarId r = make(b, params);
    return ir::add_elementwise(g_, operands, b.finish({r}), loc, "grad");
  }

  /// Sums `ct` over the axes along which a value of shape `to` was broadcast to ct's shape.
  NodeId unbroadcast(NodeId ct, Shape to, const SourceLoc& loc) {  // `to` by value: nodes get added
    const Shape from = g_.node(ct).shape;
    const int lead = static_cast<int>(from.size() - to.size());
    std::vector<int64_t> axes;
    for (int i = 0; i < lead; ++i) axes.push_back(i);
    for (size_t i = 0; i < to.size(); ++i)
      if (to[i] == ir::Dim(1) && !(from[lead + i] == ir::Dim(1))) axes.push_back(lead + static_cast<int>(i));
    if (axes.empty()) return ct;
    NodeId r = ir::add_reduce(g_, ct, ReduceKind::Sum, axes, true, loc);
    if (lead > 0) r = ir::add_squeeze(g_, r, std::vector<int64_t>(axes.begin(), axes.begin() + lead), loc);
    return r;
  }

  /// `ct` of a reduction's result with the reduced axes back as size 1 (keepdims form).
  NodeId keepdims_form(NodeId ct, const ir::ReduceAttrs& attrs, const SourceLoc& loc) {
    if (attrs.keepdims) return ct;
    for (int axis : attrs.axes) ct = ir::add_expand_dims(g_, ct, axis, loc);
    return ct;
  }

  NodeId swap_last_two(NodeId x, const SourceLoc& loc) {
    std::vector<int64_t> perm(g_.node(x).rank());
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    return ir::add_permute(g_, x, perm, loc);
  }

  void propagate(NodeId id) {
    const Node n = g_.node(id);  // a copy: adding nodes may move the vector
    const NodeId ct = adj_[id];
    const SourceLoc& loc = n.loc;
    switch (n.kind) {
      case OpKind::Input:
      case OpKind::Constant:
      case OpKind::Arange:
      case OpKind::Rand: return;
      case OpKind::Elementwise: {
        const ScalarFn& body = n.as<ir::ElementwiseAttrs>().body;
        for (size_t k = 0; k < n.inputs.size(); ++k) {
          if (!needed_[n.inputs[k]]) continue;
          std::vector<int> used;
          ScalarFn d = scalar_vjp(body, static_cast<int>(k), used);
          if (d.nodes.empty()) continue;
          std::vector<NodeId> operands;
          for (int p : used) operands.push_back(p == static_cast<int>(n.inputs.size()) ? ct : n.inputs[p]);
          if (operands.empty()) continue;  // cannot happen: the derivative is linear in ct
          // d/dx (x + y) passes ct through: no node for the identity.
          bool identity = d.nodes.size() == 1 && d.node(d.results[0]).op == ScalarOp::Param;
          NodeId grad = identity ? operands[0] : ir::add_elementwise(g_, operands, d, loc, "grad");
          if (g_.node(grad).shape != n.shape) grad = ir::add_broadcast_to(g_, grad, n.shape, loc);
          accumulate(n.inputs[k], unbroadcast(grad, g_.node(n.inputs[k]).shape, loc));
        }
        return;
      }
      case OpKind::Reduce: {
        const auto& attrs = n.as<ir::ReduceAttrs>();
        const NodeId x = n.inputs[0];
        const Shape in_shape = g_.node(x).shape;
        std::vector<int64_t> axes(attrs.axes.begin(), attrs.axes.end());
        NodeId ct_k = keepdims_form(ct, attrs, loc);
        switch (attrs.kind) {
          case ReduceKind::Sum: accumulate(x, ir::add_broadcast_to(g_, ct_k, in_shape, loc)); return;
          case ReduceKind::Mean: {
            ir::Dim count = 1;
            for (int axis : attrs.axes) count = count * in_shape[axis];
            NodeId spread = ir::add_broadcast_to(g_, ct_k, in_shape, loc);
            if (auto c = count.constant()) {
              double inv = 1.0 / static_cast<double>(*c);
              accumulate(x, zip({spread}, loc, [&](ScalarBuilder& b, const auto& p) {
                return b.binary(ScalarOp::Mul, p[0], b.literal(inv));
              }));
            } else {  // a symbolic count: the sum of ones over the reduced axes
              NodeId one = ir::add_constant(g_, ir::HostArray::scalar<double>(1.0).cast(n.dtype), loc);
              NodeId ones = ir::add_broadcast_to(g_, one, in_shape, loc);
              NodeId cnt = ir::add_reduce(g_, ones, ReduceKind::Sum, axes, true, loc);
              accumulate(x, ir::add_scalar_op(g_, ScalarOp::Div, {spread, cnt}, loc));
            }
            return;
          }
          case ReduceKind::Max:
          case ReduceKind::Min: {  // ties share the gradient equally (as JAX)
            NodeId r_k = keepdims_form(id, attrs, loc);
            NodeId hit = zip({x, r_k}, loc, [&](ScalarBuilder& b, const auto& p) {
              return b.cast(b.binary(ScalarOp::Eq, p[0], p[1]), n.dtype);
            });
            NodeId ties = ir::add_reduce(g_, hit, ReduceKind::Sum, axes, true, loc);
            accumulate(x, zip({x, r_k, ct_k, ties}, loc, [&](ScalarBuilder& b, const auto& p) {
              return b.select(b.binary(ScalarOp::Eq, p[0], p[1]), b.binary(ScalarOp::Div, p[2], p[3]), b.literal(0));
            }));
            return;
          }
          case ReduceKind::Prod: {  // ct * prod / x, or the product of the others where x == 0
            NodeId r_k = keepdims_form(id, attrs, loc);
            NodeId is_zero = zip({x}, loc, [&](ScalarBuilder& b, const auto& p) {
              return b.cast(b.binary(ScalarOp::Eq, p[0], b.literal(0)), n.dtype);
            });
            NodeId zeros = ir::add_reduce(g_, is_zero, ReduceKind::Sum, axes, true, loc);
            NodeId nonzero = zip({x}, loc, [&](ScalarBuilder& b, const auto& p) {
              return b.select(b.binary(ScalarOp::Eq, p[0], b.literal(0)), b.literal(1), p[0]);
            });
            NodeId others = ir::add_reduce(g_, nonzero, ReduceKind::Prod, axes, true, loc);
            accumulate(x, zip({x, r_k, ct_k, zeros, others}, loc, [&](ScalarBuilder& b, const auto& p) {
              ScalarId at_zero = b.select(b.binary(ScalarOp::Eq, p[3], b.literal(1)),
                                          b.binary(ScalarOp::Mul, p[2], p[4]), b.literal(0));
              ScalarId elsewhere = b.binary(ScalarOp::Div, b.binary(ScalarOp::Mul, p[2], p[1]), p[0]);
              return b.select(b.binary(ScalarOp::Eq, p[0], b.literal(0)), at_zero, elsewhere);
            }));
            return;
          }
          case ReduceKind::Custom: throw Error("grad of a user combiner is not supported", loc);
          case ReduceKind::Any:
          case ReduceKind::All: return;
          // Indices are i64: never on a float path, so never reached; the cotangent is zero.
          case ReduceKind::ArgMax:
          case ReduceKind::ArgMin: return;
        }
        return;
      }
      case OpKind::Scan: {
        // cumsum: x[i] feeds every y[j] with j >= i, so dx is the reverse cumsum of ct, computed
        // as total - cumsum(ct) + ct (there is no reversing view). cumprod: dx[i] = reverse
        // cumsum of ct * y, divided by x[i]; where x[i] == 0 that division is not finite (a
        // documented limitation, as TensorFlow's cumprod gradient has it).
        const auto& attrs = n.as<ir::ScanAttrs>();
        const NodeId x = n.inputs[0];
        const Shape shape = n.shape;
        NodeId terms = ct;
        if (attrs.kind == ReduceKind::Prod) terms = ir::add_scalar_op(g_, ScalarOp::Mul, {ct, id}, loc);
        NodeId total = ir::add_reduce(g_, terms, ReduceKind::Sum, {attrs.axis}, true, loc);
        NodeId prefix = ir::add_scan(g_, terms, ReduceKind::Sum, attrs.axis, loc);
        NodeId spread = ir::add_broadcast_to(g_, total, shape, loc);
        NodeId suffix = zip({spread, prefix, terms}, loc, [&](ScalarBuilder& b, const auto& p) {
          return b.binary(ScalarOp::Add, b.binary(ScalarOp::Sub, p[0], p[1]), p[2]);
        });
        if (attrs.kind == ReduceKind::Prod) suffix = ir::add_scalar_op(g_, ScalarOp::Div, {suffix, x}, loc);
        accumulate(x, suffix);
        return;
      }
      case OpKind::Matmul: {
        const NodeId a = n.inputs[0], b = n.inputs[1];
        const Node na = g_.node(a), nb = g_.node(b);
        // 1-D operands as np.matmul promotes them: a row [1, K], a column [K, 1].
        NodeId a2 = na.rank() == 1 ? ir::add_expand_dims(g_, a, 0, loc) : a;
        NodeId b2 = nb.rank() == 1 ? ir::add_expand_dims(g_, b, 1, loc) : b;
        NodeId ct2 = ct;
        if (na.rank() == 1) ct2 = ir::add_expand_dims(g_, ct2, g_.node(ct2).rank() - (nb.rank() == 1 ? 0 : 1), loc);
        if (nb.rank() == 1) ct2 = ir::add_expand_dims(g_, ct2, g_.node(ct2).rank(), loc);
        if (needed_[a]) {
          NodeId da = ir::add_matmul(g_, ct2, swap_last_two(b2, loc), loc);
          da = unbroadcast(da, g_.node(a2).shape, loc);
          if (na.rank() == 1) da = ir::add_squeeze(g_, da, {0}, loc);
          accumulate(a, da);
        }
        if (needed_[b]) {
          NodeId db = ir::add_matmul(g_, swap_last_two(a2, loc), ct2, loc);
          db = unbroadcast(db, g_.node(b2).shape, loc);
          if (nb.rank() == 1) db = ir::add_squeeze(g_, db, {1}, loc);
          accumulate(b, db);
        }
        return;
      }
      case OpKind::BroadcastTo: accumulate(n.inputs[0], unbroadcast(ct, g_.node(n.inputs[0]).shape, loc)); return;
      case OpKind::Reshape: accumulate(n.inputs[0], ir::add_reshape(g_, ct, g_.node(n.inputs[0]).shape, loc)); return;
      case OpKind::Permute: {
        const auto& perm = n.as<ir::PermuteAttrs>().perm;
        std::vector<int64_t> inverse(perm.size());
        for (size_t k = 0; k < perm.size(); ++k) inverse[perm[k]] = static_cast<int64_t>(k);
        accumulate(n.inputs[0], ir::add_permute(g_, ct, inverse, loc));
        return;
      }
      case OpKind::ExpandDims:
        accumulate(n.inputs[0], ir::add_squeeze(g_, ct, {n.as<ir::ExpandDimsAttrs>().axis}, loc));
        return;
      case OpKind::Squeeze: {
        NodeId r = ct;
        for (int axis : n.as<ir::SqueezeAttrs>().axes) r = ir::add_expand_dims(g_, r, axis, loc);
        accumulate(n.inputs[0], r);
        return;
      }
      // ---- np-views
      case OpKind::Slice: accumulate(n.inputs[0], slice_vjp(n, ct, loc)); return;
      case OpKind::Pad: accumulate(n.inputs[0], pad_vjp(n, ct, loc)); return;
      case OpKind::Concatenate: {
        int axis = n.as<ir::ConcatenateAttrs>().axis;
        ir::Dim offset(0);
        for (NodeId in : n.inputs) {
          ir::Dim size = g_.node(in).shape[axis];
          if (needed_[in]) accumulate(in, axis_slice(ct, axis, offset, size, loc));
          offset = offset + size;
        }
        return;
      }
      // ---- gather/scatter (issue 16)
      case OpKind::Take: {  // scatter the cotangent back: index_add into zeros (repeats accumulate)
        const NodeId x = n.inputs[0], idx = n.inputs[1];
        if (!needed_[x]) return;
        const int axis = n.as<ir::GatherAttrs>().axis;
        const Shape x_shape = g_.node(x).shape;
        const ir::Dim m = ir::num_elements(g_.node(idx).shape);
        Shape values_shape = x_shape;
        values_shape[axis] = m;
        NodeId flat_idx = ir::add_reshape(g_, idx, {m}, loc);
        NodeId values = ir::add_reshape(g_, ct, values_shape, loc);
        NodeId zero = ir::add_constant(g_, ir::HostArray::scalar<double>(0.0).cast(n.dtype), loc);
        NodeId zeros = ir::add_broadcast_to(g_, zero, x_shape, loc);
        accumulate(x, ir::add_index_add(g_, zeros, flat_idx, values, axis, loc));
        return;
      }
      case OpKind::TakeAlongAxis: {
        // dx[.., p, ..] = sum over j of ct[.., j, ..] where idx[.., j, ..] points at p: a one-hot
        // over a new axis after `axis`, summed over `axis`, then over x's broadcast dims.
        const NodeId x = n.inputs[0], idx = n.inputs[1];
        if (!needed_[x]) return;
        const int axis = n.as<ir::GatherAttrs>().axis;
        const Shape x_shape = g_.node(x).shape;
        const int rank = static_cast<int>(x_shape.size());
        NodeId positions = ir::add_arange(g_, x_shape[axis], loc);
        NodeId one = ir::add_constant(g_, ir::HostArray::scalar<int64_t>(1), loc);
        NodeId size = ir::add_reduce(g_, ir::add_broadcast_to(g_, one, {x_shape[axis]}, loc), ReduceKind::Sum,
                                     ir::kAllAxes, false, loc);  // the axis size as a value (it may be symbolic)
        for (int k = 0; k <= axis; ++k) positions = ir::add_expand_dims(g_, positions, 0, loc);
        for (int k = axis + 1; k < rank; ++k) positions = ir::add_expand_dims(g_, positions, k + 1, loc);
        NodeId idx_e = ir::add_expand_dims(g_, idx, axis + 1, loc);
        NodeId ct_e = ir::add_expand_dims(g_, ct, axis + 1, loc);
        NodeId hits = zip({idx_e, positions, size, ct_e}, loc, [&](ScalarBuilder& b, const auto& p) {
          ScalarId i = b.cast(p[0], ir::DType::I64);
          ScalarId normalized = b.select(b.binary(ScalarOp::Lt, i, b.literal(0)), b.binary(ScalarOp::Add, i, p[2]), i);
          return b.select(b.binary(ScalarOp::Eq, normalized, p[1]), p[3], b.literal(0));
        });
        NodeId summed = ir::add_reduce(g_, hits, ReduceKind::Sum, {axis}, false, loc);
        accumulate(x, unbroadcast(summed, x_shape, loc));
        return;
      }
      case OpKind::IndexAdd: {  // identity for x; the cotangent taken at the indices for values
        accumulate(n.inputs[0], ct);
        if (needed_[n.inputs[2]])
          accumulate(n.inputs[2], ir::add_take(g_, ct, n.inputs[1], n.as<ir::GatherAttrs>().axis, loc));
        return;
      }
      case OpKind::Bincount:
      case OpKind::Histogram:
        throw Error("grad: " + std::string(ir::op_kind_name(n.kind)) +
                        " is not differentiable (its result counts data-dependent positions)", loc);
    }
  }

  // ---- np-views: the cotangents of index maps

  // x[start : start + count] along `axis` (step 1).
  NodeId axis_slice(NodeId x, int axis, const ir::Dim& start, const ir::Dim& count, const SourceLoc& loc) {
    Shape shape = g_.node(x).shape;
    std::vector<ir::Dim> starts(shape.size(), ir::Dim(0));
    starts[axis] = start;
    shape[axis] = count;
    return ir::add_slice(g_, x, starts, std::vector<int64_t>(shape.size(), 1), shape, {}, loc);
  }

  // Zeros before and after along `axis` (pad, mode constant 0).
  NodeId axis_zeros_around(NodeId x, int axis, const ir::Dim& before, const ir::Dim& after, const SourceLoc& loc) {
    size_t rank = g_.node(x).shape.size();
    std::vector<ir::Dim> b(rank, ir::Dim(0)), a(rank, ir::Dim(0));
    b[axis] = before;
    a[axis] = after;
    return ir::add_pad(g_, x, b, a, ir::PadMode::Constant, 0, loc);
  }

  // The slice's cotangent scattered into zeros of the operand's shape, axis by axis: a step s
  // puts each element s apart (s - 1 zeros after each, through a new axis and a reshape), a
  // negative step reverses first; then zeros before and after.
  NodeId slice_vjp(const Node& n, NodeId ct, const SourceLoc& loc) {
    const ir::SliceAttrs& a = n.as<ir::SliceAttrs>();
    const Shape in = g_.node(n.inputs[0]).shape;  // a copy: adding nodes may move the vector
    NodeId r = ct;
    for (int axis = 0; axis < static_cast<int>(in.size()); ++axis) {
      ir::Dim count = n.shape[axis], size = in[axis];
      int64_t step = a.steps[axis];
      if (step == 1 && a.starts[axis] == ir::Dim(0) && count == size) continue;
      ir::Dim low = a.starts[axis];
      if (step < 0) {  // walk it forwards: the lowest index read is start + step * (count - 1)
        Shape shape = g_.node(r).shape;
        std::vector<ir::Dim> starts(shape.size(), ir::Dim(0));
        std::vector<int64_t> steps(shape.size(), 1);
        starts[axis] = count - ir::Dim(1);
        steps[axis] = -1;
        r = ir::add_slice(g_, r, starts, steps, shape, {}, loc);
        low = a.starts[axis] + ir::Dim(step) * (count - ir::Dim(1));
        step = -step;
      }
      ir::Dim span = count;  // elements from the lowest index read to the highest, inclusive
      if (step > 1) {
        Shape shape = g_.node(r).shape;
        r = ir::add_expand_dims(g_, r, axis + 1, loc);
        r = axis_zeros_around(r, axis + 1, ir::Dim(0), ir::Dim(step - 1), loc);
        shape[axis] = count * ir::Dim(step);
        r = ir::add_reshape(g_, r, shape, loc);
        span = ir::dim_max(count * ir::Dim(step) - ir::Dim(step - 1), ir::Dim(0));
        r = axis_slice(r, axis, ir::Dim(0), span, loc);
      }
      // (With count 0 the start can lie anywhere: clamped so the padding stays non-negative.)
      ir::Dim before = ir::dim_min(ir::dim_max(low, ir::Dim(0)), size);
      r = axis_zeros_around(r, axis, before, size - before - span, loc);
    }
    return r;
  }

  // Pad's cotangent: the middle; edge adds each side's sum to the edge element; reflect adds
  // each padded element to the element it mirrors (a 0/1 matrix, for known sizes).
  NodeId pad_vjp(const Node& n, NodeId ct, const SourceLoc& loc) {
    const ir::PadAttrs& a = n.as<ir::PadAttrs>();
    const Shape in = g_.node(n.inputs[0]).shape;  // a copy: adding nodes may move the vector
    NodeId r = ct;
    for (int axis = 0; axis < static_cast<int>(in.size()); ++axis) {
      const ir::Dim &before = a.before[axis], &after = a.after[axis], &size = in[axis];
      if (before == ir::Dim(0) && after == ir::Dim(0)) continue;
      if (a.mode == ir::PadMode::Reflect) {
        r = reflect_vjp_axis(r, axis, a, size, loc);
        continue;
      }
      NodeId middle = axis_slice(r, axis, before, size, loc);
      if (a.mode == ir::PadMode::Edge) {
        // (edge needs size >= 1 whenever it pads: the op's own check)
        if (!(before == ir::Dim(0))) {
          NodeId side = ir::add_reduce(g_, axis_slice(r, axis, ir::Dim(0), before, loc), ir::ReduceKind::Sum, {axis}, true, loc);
          side = axis_zeros_around(side, axis, ir::Dim(0), size - ir::Dim(1), loc);
          middle = ir::add_scalar_op(g_, ScalarOp::Add, {middle, side}, loc);
        }
        if (!(after == ir::Dim(0))) {
          NodeId side = ir::add_reduce(g_, axis_slice(r, axis, before + size, after, loc), ir::ReduceKind::Sum, {axis}, true, loc);
          side = axis_zeros_around(side, axis, size - ir::Dim(1), ir::Dim(0), loc);
          middle = ir::add_scalar_op(g_, ScalarOp::Add, {middle, side}, loc);
        }
      }
      r = middle;
    }
    return r;
  }

  NodeId reflect_vjp_axis(NodeId r, int axis, const ir::PadAttrs& a, const ir::Dim& size, const SourceLoc& loc) {
    std::optional<int64_t> n = size.constant(), before = a.before[axis].constant(), after = a.after[axis].constant();
    if (!n || !before || !after)
      throw Error("grad: pad mode \"reflect\" has a gradient only for known sizes and padding (axis " +
                      std::to_string(axis) + " has size " + size.str() + ")", loc);
    int64_t out = *before + *n + *after;
    DType t = g_.node(r).dtype;
    ir::HostArray m(DType::F64, {out, *n});
    for (int64_t i = 0; i < out; ++i) m.as<double>()[i * *n + ir::pad_source_index(ir::PadMode::Reflect, i - *before, *n)] = 1;
    NodeId matrix = ir::add_constant(g_, m.cast(t), loc);
    int rank = g_.node(r).rank();
    std::vector<int64_t> to_last, back(rank);
    for (int k = 0; k < rank; ++k)
      if (k != axis) to_last.push_back(k);
    to_last.push_back(axis);
    for (int k = 0; k < rank; ++k) back[to_last[k]] = k;
    NodeId moved = ir::add_permute(g_, r, to_last, loc);
    return ir::add_permute(g_, ir::add_matmul(g_, moved, matrix, loc), back, loc);
  }

  Graph& g_;
  std::vector<NodeId> adj_;     // the cotangent of each forward node, once it has one
  std::vector<bool> needed_;    // float nodes on a path from a wrt node to y
};

NodeId filled(Graph& g, double value, DType dtype, Shape shape, SourceLoc loc) {
  NodeId c = ir::add_constant(g, ir::HostArray::scalar<double>(value).cast(dtype), loc);
  return shape.empty() ? c : ir::add_broadcast_to(g, c, shape, loc);
}

}  // namespace

std::vector<NodeId> vjp(Graph& g, NodeId y, const std::vector<NodeId>& wrt, NodeId cotangent) {
  if (y < 0 || y >= static_cast<NodeId>(g.nodes.size())) throw Error("grad: the value is not a node of this graph");
  const Node out = g.node(y);
  if (!ir::is_float(out.dtype))
    throw Error("grad: the differentiated value is " + std::string(ir::dtype_name(out.dtype)) +
                    "; only float values have gradients", out.loc);
  for (NodeId w : wrt) {
    if (w < 0 || w >= static_cast<NodeId>(g.nodes.size())) throw Error("grad: a variable is not a node of this graph");
    if (!ir::is_float(g.node(w).dtype))
      throw Error("grad: cannot differentiate with respect to a " + std::string(ir::dtype_name(g.node(w).dtype)) +
                      " value (only float values have gradients)", g.node(w).loc);
  }
  if (cotangent < 0) {
    cotangent = filled(g, 1.0, out.dtype, out.shape, out.loc);
  } else {
    const Node& c = g.node(cotangent);
    if (c.dtype != out.dtype || c.shape != out.shape)
      throw Error("grad: the cotangent is " + std::string(ir::dtype_name(c.dtype)) + ir::shape_str(c.shape) +
                      " but the value is " + std::string(ir::dtype_name(out.dtype)) + ir::shape_str(out.shape),
                  c.loc);
  }
  Backward backward(g, y, wrt);
  backward.run(y, cotangent);
  std::vector<NodeId> grads;
  for (NodeId w : wrt) {
    NodeId d = backward.gradient(w);
    const Node wn = g.node(w);
    grads.push_back(d >= 0 ? d : filled(g, 0.0, wn.dtype, wn.shape, wn.loc));
  }
  return grads;
}

ir::Graph grad(const ir::Graph& g, const std::string& output, const std::vector<std::string>& wrt,
               const GradOptions& options) {
  Graph out = g;
  auto it = std::find_if(g.outputs.begin(), g.outputs.end(), [&](const ir::GraphOutput& o) { return o.name == output; });
  if (it == g.outputs.end()) throw Error("grad: the graph has no output '" + output + "'");
  std::vector<NodeId> vars;
  for (const std::string& name : wrt) {
    const Node* in = g.find_input(name);
    if (!in) throw Error("grad: the graph has no input '" + name + "'");
    if (!ir::is_float(in->dtype))
      throw Error("grad: input '" + name + "' is " + std::string(ir::dtype_name(in->dtype)) +
                      "; only float inputs have gradients", in->loc);
    vars.push_back(static_cast<NodeId>(in - g.nodes.data()));
  }
  if (!ir::is_float(g.node(it->node).dtype))
    throw Error("grad: output '" + output + "' is " + std::string(ir::dtype_name(g.node(it->node).dtype)) +
                "; only float outputs have gradients");
  NodeId cotangent = -1;
  if (!options.cotangent.empty()) {
    const Node* c = g.find_input(options.cotangent);
    if (!c) throw Error("grad: the graph has no input '" + options.cotangent + "' (the cotangent)");
    cotangent = static_cast<NodeId>(c - g.nodes.data());
  }
  std::vector<NodeId> grads = vjp(out, it->node, vars, cotangent);
  for (size_t i = 0; i < wrt.size(); ++i) ir::add_output(out, options.prefix + wrt[i], grads[i]);
  return out;
}

}  // namespace fuse::passes
