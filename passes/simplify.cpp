#include "passes/simplify.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "ir/interpreter.h"

namespace fuse::passes {

using ir::Node;
using ir::NodeId;
using ir::OpKind;
using ir::ScalarBuilder;
using ir::ScalarFn;
using ir::ScalarId;
using ir::ScalarNode;
using ir::ScalarOp;
using ir::ScalarValue;

namespace {

// Folding copies the node's whole value into the graph (and into every kernel that reads it):
// past this many elements the graph would grow instead of shrink.
constexpr int64_t kMaxFoldedElements = 1024;

// ---------------------------------------------------------------- elementwise bodies

// Is `id` a literal equal to v? Signed zeros differ: x + (-0.0) is an identity, x + 0.0 is not.
bool is_literal(const ScalarBuilder& b, ScalarId id, double v) {
  const ScalarNode& n = b.peek().node(id);
  if (n.op != ScalarOp::Literal) return false;
  double x = n.value.as_double(n.dtype);
  return x == v && std::signbit(x) == std::signbit(v);
}

bool is_zero(const ScalarBuilder& b, ScalarId id) { return is_literal(b, id, 0.0) || is_literal(b, id, -0.0); }

// Emits op `n` on already simplified arguments `a`, applying the identities that hold for every
// value, NaN, infinities and signed zeros included; with fast_math also those that do not.
ScalarId emit_op(ScalarBuilder& b, const ScalarNode& n, const ScalarId* a, bool fast_math) {
  // Integers have no NaN, infinity or -0, so x + 0 and x * 0 are exact for them.
  bool loose = !ir::is_float(n.dtype) || fast_math;
  switch (n.op) {
    case ScalarOp::Add:  // x + (-0.0) is x for every x; x + 0.0 gives +0.0 for x = -0.0
      if (is_literal(b, a[1], -0.0) || (loose && is_zero(b, a[1]))) return a[0];
      if (is_literal(b, a[0], -0.0) || (loose && is_zero(b, a[0]))) return a[1];
      break;
    case ScalarOp::Sub:  // x - 0.0 is x for every x; x - (-0.0) is x + 0.0
      if (is_literal(b, a[1], 0.0) || (loose && is_zero(b, a[1]))) return a[0];
      break;
    case ScalarOp::Mul:  // x * 0.0 is NaN for x = inf or NaN, and -0.0 for negative x
      if (is_literal(b, a[1], 1.0)) return a[0];
      if (is_literal(b, a[0], 1.0)) return a[1];
      if (loose && (is_zero(b, a[0]) || is_zero(b, a[1])))
        return b.typed_literal(ScalarValue::of_int(0, n.dtype), n.dtype);
      break;
    case ScalarOp::Div:
      if (is_literal(b, a[1], 1.0)) return a[0];
      break;
    case ScalarOp::Neg:
      if (b.peek().node(a[0]).op == ScalarOp::Neg) return b.peek().node(a[0]).args[0];
      break;
    case ScalarOp::Pow:
      if (is_literal(b, a[1], 1.0)) return a[0];
      // pow and x * x agree on -0, infinities and NaN. For f32 (computed in f64, rounded once)
      // x * x is exact before the rounding, and so is pow then; for f64 glibc's pow is off by
      // one ulp from the correctly rounded x * x in about 1 case in 1000, so only with fast_math.
      if (is_literal(b, a[1], 2.0) && (n.dtype != ir::DType::F64 || fast_math))
        return b.binary(ScalarOp::Mul, a[0], a[0]);
      break;
    default: break;
  }
  if (n.op == ScalarOp::Cast) return b.cast(a[0], n.dtype);
  if (n.op == ScalarOp::Select) return b.select(a[0], a[1], a[2]);
  if (n.arity() == 2) return b.binary(n.op, a[0], a[1]);
  return b.unary(n.op, a[0]);
}

// `fn` rebuilt through ScalarBuilder (hash-consing, folding literal-only subtrees) with the
// identities of emit_op. Parameter p becomes the literal fixed[p] where that is set, and leaves
// the signature.
ScalarFn rebuild_body(const ScalarFn& fn, const std::vector<std::optional<ScalarValue>>& fixed, bool fast_math) {
  ScalarBuilder b;
  std::vector<ScalarId> params;
  for (size_t p = 0; p < fn.params.size(); ++p)
    params.push_back(fixed[p] ? b.typed_literal(*fixed[p], fn.params[p]) : b.param(fn.params[p]));
  std::vector<ScalarId> map(fn.nodes.size());
  for (size_t i = 0; i < fn.nodes.size(); ++i) {
    const ScalarNode& n = fn.nodes[i];
    if (n.op == ScalarOp::Param) {
      map[i] = params[n.param];
    } else if (n.op == ScalarOp::Literal) {
      map[i] = b.typed_literal(n.value, n.dtype);
    } else {
      ScalarId args[3];
      for (int k = 0; k < n.arity(); ++k) args[k] = map[n.args[k]];
      map[i] = emit_op(b, n, args, fast_math);
    }
  }
  std::vector<ScalarId> results;
  for (ScalarId r : fn.results) results.push_back(map[r]);
  return b.finish(std::move(results));
}

// Which parameters the body reads.
std::vector<bool> params_read(const ScalarFn& fn) {
  std::vector<bool> read(fn.params.size(), false);
  auto mark = [&](ScalarId id) {
    if (fn.node(id).op == ScalarOp::Param) read[fn.node(id).param] = true;
  };
  for (const ScalarNode& n : fn.nodes)
    for (int k = 0; k < n.arity(); ++k) mark(n.args[k]);
  for (ScalarId r : fn.results) mark(r);
  return read;
}

// The value of every element of `id`, when it is a constant whose elements are all bitwise
// equal, an elementwise node whose body is a literal (i32 x * 0), or a view of either.
std::optional<ScalarValue> splat_value(const ir::Graph& g, NodeId id) {
  while (ir::is_view(g.node(id).kind)) id = g.node(id).inputs[0];
  const Node& n = g.node(id);
  if (n.kind == OpKind::Elementwise) {
    const ScalarFn& body = n.as<ir::ElementwiseAttrs>().body;
    const ScalarNode& result = body.node(body.results[0]);
    if (result.op == ScalarOp::Literal) return result.value;
  }
  if (n.kind != OpKind::Constant) return std::nullopt;
  const ir::HostArray& v = n.as<ir::ConstantAttrs>().value;
  size_t width = ir::dtype_size(v.dtype);
  if (v.size() == 0) return std::nullopt;
  for (int64_t i = 1; i < v.size(); ++i)
    if (std::memcmp(&v.bytes[i * width], v.bytes.data(), width) != 0) return std::nullopt;
  ScalarValue s;
  if (ir::is_float(v.dtype)) s.f = v.get_f64(0);
  else s.i = v.get_i64(0);
  return s;
}

// Inlines splat-constant operands into the body as literals, drops operands the body no longer
// reads, and simplifies the body. An operand is only removed while the remaining ones still
// broadcast to the node's shape. Returns whether `n` changed.
bool simplify_elementwise(const ir::Graph& g, Node& n, bool fast_math) {
  const ScalarFn& body = n.as<ir::ElementwiseAttrs>().body;
  size_t count = n.inputs.size();
  std::vector<std::optional<ScalarValue>> fixed(count);
  auto removable = [&](size_t i) {
    std::vector<ir::Shape> rest;
    for (size_t j = 0; j < count; ++j)
      if (j != i && !fixed[j]) rest.push_back(g.node(n.inputs[j]).shape);
    return !rest.empty() && ir::broadcast_shapes(rest, "elementwise", n.loc) == n.shape;
  };
  bool any_fixed = false;
  for (size_t i = 0; i < count; ++i)
    if (auto v = splat_value(g, n.inputs[i]); v && removable(i)) {
      fixed[i] = v;
      any_fixed = true;
    }
  ScalarFn fn = rebuild_body(body, fixed, fast_math);
  // An operand the body no longer reads (i32 x * 0) can be fixed to any value.
  std::vector<bool> read = params_read(fn);
  bool dropped = false;
  for (size_t i = 0, p = 0; i < count; ++i) {
    if (fixed[i]) continue;
    if (!read[p++] && removable(i)) {
      fixed[i] = ScalarValue{};
      dropped = true;
    }
  }
  if (dropped) fn = rebuild_body(body, fixed, fast_math);
  if (!any_fixed && !dropped && fn == body) return false;
  std::vector<NodeId> inputs;
  for (size_t i = 0; i < count; ++i)
    if (!fixed[i]) inputs.push_back(n.inputs[i]);
  n.inputs = std::move(inputs);
  n.attrs = ir::ElementwiseAttrs{std::move(fn)};
  return true;
}

// ---------------------------------------------------------------- views and constants

// Makes a view of a view one view of the inner view's operand: permute of permute, reshape of
// any reshape-like view (reshape, expand_dims, squeeze), broadcast_to of broadcast_to, slice of
// slice.
// Returns whether `n` changed.
bool fold_view_chain(const ir::Graph& g, Node& n) {
  const Node& in = g.node(n.inputs[0]);
  bool reshape_like = in.kind == OpKind::Reshape || in.kind == OpKind::ExpandDims || in.kind == OpKind::Squeeze;
  if (n.kind == OpKind::Permute && in.kind == OpKind::Permute) {
    // n's axis k is in's axis perm[k], which is the operand's axis inner[perm[k]].
    const std::vector<int>& inner = in.as<ir::PermuteAttrs>().perm;
    for (int& axis : std::get<ir::PermuteAttrs>(n.attrs).perm) axis = inner[axis];
  } else if (n.kind == OpKind::Slice && in.kind == OpKind::Slice) {
    // np-views: in[s + t * (s' + t' * i)] = in[(s + t * s') + (t * t') * i]; both checks stay.
    ir::SliceAttrs& outer = std::get<ir::SliceAttrs>(n.attrs);
    const ir::SliceAttrs& inner = in.as<ir::SliceAttrs>();
    std::vector<int64_t> steps(outer.steps.size());
    for (size_t k = 0; k < steps.size(); ++k)
      if (__builtin_mul_overflow(outer.steps[k], inner.steps[k], &steps[k])) return false;
    for (size_t k = 0; k < steps.size(); ++k) outer.starts[k] = inner.starts[k] + ir::Dim(inner.steps[k]) * outer.starts[k];
    outer.steps = steps;
    outer.checks.insert(outer.checks.begin(), inner.checks.begin(), inner.checks.end());
  } else if (!(n.kind == OpKind::Reshape && reshape_like) &&
             !(n.kind == OpKind::BroadcastTo && in.kind == OpKind::BroadcastTo)) {
    return false;
  }
  n.inputs[0] = in.inputs[0];
  return true;
}

// An existing node of `g` with the value of `n`: the operand of a view that changes nothing
// (an identity permute; a reshape, broadcast_to or squeeze to the operand's shape; squeeze of
// an expand_dims back to the original shape), or the operand an elementwise body returns.
std::optional<NodeId> equivalent_node(const ir::Graph& g, const Node& n) {
  if (n.inputs.empty()) return std::nullopt;
  const Node& in = g.node(n.inputs[0]);
  switch (n.kind) {
    case OpKind::Permute: {
      const std::vector<int>& perm = n.as<ir::PermuteAttrs>().perm;
      for (size_t k = 0; k < perm.size(); ++k)
        if (perm[k] != static_cast<int>(k)) return std::nullopt;
      return n.inputs[0];
    }
    case OpKind::Squeeze:
      // expand_dims and squeeze only reshape: back to the original shape is the original value.
      if (in.kind == OpKind::ExpandDims && g.node(in.inputs[0]).shape == n.shape) return in.inputs[0];
      [[fallthrough]];
    case OpKind::Reshape:
    case OpKind::BroadcastTo:
      if (in.shape == n.shape) return n.inputs[0];
      return std::nullopt;
    case OpKind::Slice: {  // np-views: all of every axis, forwards, and nothing to check
      const ir::SliceAttrs& a = n.as<ir::SliceAttrs>();
      if (!(in.shape == n.shape) || !a.checks.empty()) return std::nullopt;
      for (size_t k = 0; k < a.steps.size(); ++k)
        if (a.steps[k] != 1 || !(a.starts[k] == ir::Dim(0))) return std::nullopt;
      return n.inputs[0];
    }
    case OpKind::Elementwise: {
      const ScalarFn& body = n.as<ir::ElementwiseAttrs>().body;
      const ScalarNode& result = body.node(body.results[0]);
      if (result.op != ScalarOp::Param) return std::nullopt;
      NodeId operand = n.inputs[result.param];
      if (g.node(operand).shape == n.shape) return operand;
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

// `n` evaluated into a constant, when all its operands are constants and its result is small.
std::optional<Node> folded(const ir::Graph& g, const Node& n) {
  if (n.inputs.empty()) return std::nullopt;
  // A constant needs a concrete shape: [0, N] has a constant count (0) but is still symbolic.
  for (const ir::Dim& d : n.shape)
    if (!d.is_constant()) return std::nullopt;
  if (*ir::num_elements(n.shape).constant() > kMaxFoldedElements) return std::nullopt;
  std::vector<const ir::HostArray*> operands;
  for (NodeId id : n.inputs) {
    const Node& in = g.node(id);
    if (in.kind != OpKind::Constant) return std::nullopt;
    operands.push_back(&in.as<ir::ConstantAttrs>().value);
  }
  Node c;
  c.kind = OpKind::Constant;
  c.dtype = n.dtype;
  c.shape = n.shape;
  c.attrs = ir::ConstantAttrs{ir::evaluate_node(n, operands, {})};
  c.loc = n.loc;
  return c;
}

// ---------------------------------------------------------------- one round over the graph

size_t node_hash(const Node& n) {
  size_t h = static_cast<size_t>(n.kind) * 31 + static_cast<size_t>(n.dtype);
  auto mix = [&h](size_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(n.attrs.index());
  for (NodeId id : n.inputs) mix(static_cast<size_t>(id));
  for (const ir::Dim& d : n.shape) mix(std::hash<std::string>{}(d.str()));
  if (n.kind == OpKind::Elementwise) mix(n.as<ir::ElementwiseAttrs>().body.nodes.size());
  return h;
}

bool same_node(const Node& a, const Node& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.shape == b.shape && a.inputs == b.inputs && a.attrs == b.attrs;
}

struct Round {
  const SimplifyOptions& options;
  ir::Graph out;
  std::unordered_multimap<size_t, NodeId> by_hash;  // every node of `out` but inputs
  bool changed = false;
};

// Appends `n`, or returns the node of `out` structurally identical to it (CSE). Inputs are never
// merged: each is part of the program's interface.
NodeId add_unique(Round& r, Node n) {
  if (n.kind == OpKind::Input) return r.out.add(std::move(n));
  size_t h = node_hash(n);
  auto [begin, end] = r.by_hash.equal_range(h);
  for (auto it = begin; it != end; ++it)
    if (same_node(r.out.node(it->second), n)) {
      r.changed = true;
      return it->second;
    }
  NodeId id = r.out.add(std::move(n));
  r.by_hash.emplace(h, id);
  return id;
}

// Adds `n` (its operands already ids of r.out) simplified, returning the node that has its value.
NodeId add_simplified(Round& r, Node n) {
  if (std::optional<Node> c = folded(r.out, n)) {
    n = std::move(*c);
    r.changed = true;
  } else if (n.kind == OpKind::Elementwise ? simplify_elementwise(r.out, n, r.options.fast_math)
                                           : ir::is_view(n.kind) && fold_view_chain(r.out, n)) {
    r.changed = true;
  }
  if (std::optional<NodeId> same = equivalent_node(r.out, n)) {
    r.changed = true;
    return *same;
  }
  return add_unique(r, std::move(n));
}

// Drops the nodes no output depends on, except inputs.
ir::Graph remove_dead(const ir::Graph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (const ir::GraphOutput& o : g.outputs) live[o.node] = true;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    if (g.nodes[i].kind == OpKind::Input) live[i] = true;
    if (live[i])
      for (NodeId id : g.nodes[i].inputs) live[id] = true;
  }
  ir::Graph out;
  std::vector<NodeId> remap(g.nodes.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!live[i]) continue;
    Node n = g.nodes[i];
    for (NodeId& id : n.inputs) id = remap[id];
    remap[i] = out.add(std::move(n));
  }
  for (const ir::GraphOutput& o : g.outputs) out.outputs.push_back({o.name, remap[o.node]});
  return out;
}

// One pass over the graph in order; `changed` tells whether any rewrite applied.
ir::Graph simplify_round(const ir::Graph& g, const SimplifyOptions& options, bool& changed) {
  Round r{options, {}, {}, false};
  std::vector<NodeId> remap(g.nodes.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node n = g.nodes[i];
    for (NodeId& id : n.inputs) id = remap[id];
    remap[i] = add_simplified(r, std::move(n));
  }
  for (const ir::GraphOutput& o : g.outputs) r.out.outputs.push_back({o.name, remap[o.node]});
  ir::Graph live = remove_dead(r.out);
  changed = r.changed || live.nodes.size() != r.out.nodes.size();
  return live;
}

}  // namespace

ir::Graph simplify(const ir::Graph& g, const SimplifyOptions& options) {
  bool changed = false;
  ir::Graph out = simplify_round(g, options, changed);
  while (changed) out = simplify_round(out, options, changed);
  return out;
}

}  // namespace fuse::passes
