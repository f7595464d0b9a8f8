#include "ir/rounding_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fuse::ir {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_comparison(ScalarOp op) { return op >= ScalarOp::Eq && op <= ScalarOp::Ge; }

// The spacing of t's values at |r| (0 for NaN, infinities and non-float dtypes).
double ulp(double r, DType t) {
  if (!is_float(t) || !std::isfinite(r)) return 0;
  if (t == DType::F64) return std::nextafter(std::fabs(r), kInf) - std::fabs(r);
  float f = std::fabs(static_cast<float>(r));
  return static_cast<double>(std::nextafter(f, std::numeric_limits<float>::infinity())) - f;
}

// NaN bounds (inf * 0 and the like) are unbounded.
double sane(double d) { return std::isnan(d) ? kInf : d; }

// The exact type a scalar op is sampled in: f64 for floats, i64 for integers (bool stays bool).
DType exact(DType t) { return is_float(t) ? DType::F64 : t == DType::Bool ? DType::Bool : DType::I64; }

ScalarValue load(const HostArray& a, int64_t i) {
  ScalarValue v;
  if (is_float(a.dtype)) v.f = a.get_f64(i);
  else v.i = a.get_i64(i);
  return v;
}

// |p - q| of two sampled results, NaN equal to NaN and an infinity to itself; infinite otherwise.
double change(double p, double q) {
  if (std::isnan(p) || std::isnan(q)) return std::isnan(p) && std::isnan(q) ? 0 : kInf;
  if (p == q) return 0;
  return std::fabs(p - q);
}

// The largest change of `op` over the grid {x - δ, x - δ/2, x, x + δ/2, x + δ} of each operand,
// evaluated in the exact types (rounding_model.h, "propagated").
double propagated(ScalarOp op, DType operand, DType result, const ScalarValue* args, const double* d, int arity) {
  static constexpr double kSteps[] = {-1, -0.5, 0, 0.5, 1};
  DType in = exact(operand), out = exact(result);
  ScalarValue centre[3];
  for (int k = 0; k < arity; ++k) {
    centre[k] = args[k];
    if (!is_float(operand) && d[k] > 0x1p53) return kInf;  // beyond exact integer offsets
  }
  auto value = [&](const ScalarValue* at) {
    ScalarValue v = evaluate_scalar_op(op, in, out, at);
    return v.as_double(out);
  };
  double c = value(centre), worst = 0;
  int points = arity == 1 ? 5 : 25;
  for (int p = 0; p < points; ++p) {
    ScalarValue at[3];
    int rest = p;
    for (int k = 0; k < arity; ++k, rest /= 5) {
      double step = kSteps[rest % 5];
      at[k] = centre[k];
      if (is_float(operand)) at[k].f += step * d[k];
      else at[k].i += static_cast<int64_t>(std::llround(step * std::ceil(d[k])));
    }
    worst = std::max(worst, change(value(at), c));
  }
  return worst;
}

// The bound of one scalar op's result r, given its operands and their bounds (the elementwise
// rules of rounding_model.h).
double scalar_bound(const ScalarNode& node, DType operand, const ScalarValue* args, const double* d,
                    const ScalarValue& r) {
  ScalarOp op = node.op;
  int arity = node.arity();
  if (op == ScalarOp::Select) {
    if (d[0] == 0) return args[0].i ? d[1] : d[2];
    return sane(std::max(d[1], d[2]) + std::fabs(args[1].as_double(node.dtype) - args[2].as_double(node.dtype)));
  }
  if (op == ScalarOp::Not) return d[0];
  if (op == ScalarOp::And || op == ScalarOp::Or) {
    bool decides = op == ScalarOp::Or;
    for (int k = 0; k < 2; ++k)
      if (d[k] == 0 && (args[k].i != 0) == decides) return 0;
    return std::max(d[0], d[1]);
  }
  double in = 0;
  for (int k = 0; k < arity; ++k) in = std::max(in, d[k]);
  if (std::isinf(in)) return kInf;
  if (is_comparison(op)) {
    if (in == 0) return 0;
    double gap = is_float(operand) ? std::fabs(args[0].f - args[1].f)
                                   : std::fabs(static_cast<double>(args[0].i) - static_cast<double>(args[1].i));
    return gap <= d[0] + d[1] ? kInf : 0;
  }
  if (op == ScalarOp::Cast && node.dtype == DType::Bool) {
    if (in == 0) return 0;
    return std::fabs(args[0].as_double(operand)) <= d[0] ? kInf : 0;
  }
  double own_ulps = transcendental_ulps(op, node.dtype);
  double moved = in == 0 ? 0 : propagated(op, operand, node.dtype, args, d, arity);
  if (moved > 0) own_ulps += 1;
  return sane(moved + own_ulps * ulp(r.as_double(node.dtype), node.dtype));
}

// Evaluates `fn` on one set of operands with their bounds: values[i] and bounds[i] for each
// scalar node. Values come from evaluate_scalar_op, as in the interpreter.
void evaluate_bounded(const ScalarFn& fn, const ScalarValue* params, const double* param_bounds,
                      std::vector<ScalarValue>& values, std::vector<double>& bounds) {
  values.resize(fn.nodes.size());
  bounds.resize(fn.nodes.size());
  for (size_t i = 0; i < fn.nodes.size(); ++i) {
    const ScalarNode& n = fn.nodes[i];
    if (n.op == ScalarOp::Param) {
      values[i] = params[n.param];
      bounds[i] = param_bounds[n.param];
      continue;
    }
    if (n.op == ScalarOp::Literal) {
      values[i] = n.value;
      bounds[i] = 0;
      continue;
    }
    ScalarValue args[3];
    double d[3] = {};
    for (int k = 0; k < n.arity(); ++k) {
      args[k] = values[n.args[k]];
      d[k] = bounds[n.args[k]];
    }
    DType operand = fn.nodes[n.args[n.op == ScalarOp::Select ? 1 : 0]].dtype;
    values[i] = evaluate_scalar_op(n.op, operand, n.dtype, args);
    bounds[i] = scalar_bound(n, operand, args, d, values[i]);
  }
}

// A node like `n` that the interpreter evaluates on derived arrays (bounds, magnitudes).
Node derived(const Node& n, OpKind kind, DType dtype, Shape shape) {
  Node d = n;
  d.kind = kind;
  d.dtype = dtype;
  d.shape = std::move(shape);
  return d;
}

Shape constant_shape(const ConcreteShape& s) { return Shape(s.begin(), s.end()); }

HostArray broadcast(const Node& n, const HostArray& x, const ConcreteShape& shape, const SymbolBindings& symbols) {
  if (x.shape == shape) return x;
  Node b = derived(n, OpKind::BroadcastTo, x.dtype, constant_shape(shape));
  b.inputs = {0};
  b.attrs = NoAttrs{};
  return evaluate_node(b, {&x}, symbols);
}

HostArray map_f64(const HostArray& x, double (*f)(double)) {
  HostArray out(DType::F64, x.shape);
  for (int64_t i = 0; i < x.size(); ++i) out.set_f64(i, f(x.get_f64(i)));
  return out;
}

bool all_zero(const HostArray& bounds) {
  for (int64_t i = 0; i < bounds.size(); ++i)
    if (bounds.get_f64(i) != 0) return false;
  return true;
}

HostArray elementwise_bound(const Node& n, const std::vector<const HostArray*>& ops,
                            const std::vector<const HostArray*>& bounds, const ConcreteShape& shape,
                            const SymbolBindings& symbols) {
  const ScalarFn& body = n.as<ElementwiseAttrs>().body;
  std::vector<HostArray> values, deltas;
  for (size_t k = 0; k < ops.size(); ++k) {
    values.push_back(broadcast(n, *ops[k], shape, symbols));
    deltas.push_back(broadcast(n, *bounds[k], shape, symbols));
  }
  HostArray out(DType::F64, shape);
  std::vector<ScalarValue> params(ops.size()), scratch;
  std::vector<double> param_bounds(ops.size()), scratch_bounds;
  for (int64_t i = 0; i < out.size(); ++i) {
    for (size_t k = 0; k < ops.size(); ++k) {
      params[k] = load(values[k], i);
      param_bounds[k] = deltas[k].get_f64(i);
    }
    evaluate_bounded(body, params.data(), param_bounds.data(), scratch, scratch_bounds);
    out.set_f64(i, scratch_bounds[body.results[0]]);
  }
  return out;
}

// A custom reduction's bound: the combiner folded over each output's elements in row-major
// order. The input is permuted so that each output's elements are contiguous.
HostArray custom_bound(const Node& n, const HostArray& x, const HostArray& dx, const ConcreteShape& shape,
                       const SymbolBindings& symbols) {
  const ReduceAttrs& attrs = n.as<ReduceAttrs>();
  std::vector<int> perm;
  ConcreteShape permuted;
  int64_t count = 1;
  for (int pass = 0; pass < 2; ++pass)
    for (int axis = 0; axis < x.rank(); ++axis) {
      bool reduced = std::find(attrs.axes.begin(), attrs.axes.end(), axis) != attrs.axes.end();
      if (reduced != (pass == 1)) continue;
      perm.push_back(axis);
      permuted.push_back(x.shape[axis]);
      if (reduced) count *= x.shape[axis];
    }
  Node p = derived(n, OpKind::Permute, x.dtype, constant_shape(permuted));
  p.attrs = PermuteAttrs{perm};
  HostArray xs = evaluate_node(p, {&x}, symbols);
  p.dtype = DType::F64;
  HostArray ds = evaluate_node(p, {&dx}, symbols);
  HostArray out(DType::F64, shape);
  std::vector<ScalarValue> values;
  std::vector<double> bounds;
  for (int64_t o = 0; o < out.size(); ++o) {
    ScalarValue acc[2] = {attrs.identity, {}};
    double d[2] = {0, 0};
    for (int64_t j = 0; j < count; ++j) {
      acc[1] = load(xs, o * count + j);
      d[1] = ds.get_f64(o * count + j);
      evaluate_bounded(attrs.combiner, acc, d, values, bounds);
      acc[0] = values[attrs.combiner.results[0]];
      d[0] = bounds[attrs.combiner.results[0]];
    }
    out.set_f64(o, d[0]);
  }
  return out;
}

HostArray reduce_bound(const Node& n, const HostArray& x, const HostArray& dx, const ConcreteShape& shape,
                       const SymbolBindings& symbols) {
  const ReduceAttrs& attrs = n.as<ReduceAttrs>();
  if (attrs.kind == ReduceKind::Custom) return custom_bound(n, x, dx, shape, symbols);
  int64_t count = 1;
  for (int axis : attrs.axes) count *= x.shape.at(axis);
  auto fold = [&](ReduceKind kind, const HostArray& in) {
    Node r = derived(n, OpKind::Reduce, reduce_result_dtype(kind, in.dtype), n.shape);
    std::get<ReduceAttrs>(r.attrs).kind = kind;
    return evaluate_node(r, {&in}, symbols);
  };
  HostArray out(DType::F64, shape);
  switch (attrs.kind) {
    case ReduceKind::Sum:
    case ReduceKind::Mean: {
      double u = unit_roundoff(n.dtype), n_u = static_cast<double>(count) * u;
      double gamma = n_u < 1 ? n_u / (1 - n_u) : kInf;
      HostArray terms(DType::F64, x.shape);
      for (int64_t i = 0; i < x.size(); ++i)
        terms.set_f64(i, dx.get_f64(i) + (gamma > 0 ? gamma * std::fabs(x.get_f64(i)) : 0));
      HostArray sums = fold(ReduceKind::Sum, terms);
      double scale = attrs.kind == ReduceKind::Mean && count > 0 ? 1.0 / static_cast<double>(count) : 1.0;
      for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, sane(sums.get_f64(i) * scale));
      return out;
    }
    case ReduceKind::Prod: {
      double u = unit_roundoff(n.dtype), n_u = static_cast<double>(count) * u;
      double gamma = n_u < 1 ? n_u / (1 - n_u) : kInf;
      HostArray widened(DType::F64, x.shape), magnitudes(DType::F64, x.shape);
      for (int64_t i = 0; i < x.size(); ++i) {
        magnitudes.set_f64(i, std::fabs(x.get_f64(i)));
        widened.set_f64(i, std::fabs(x.get_f64(i)) + dx.get_f64(i));
      }
      HostArray upper = fold(ReduceKind::Prod, widened), exact = fold(ReduceKind::Prod, magnitudes);
      for (int64_t i = 0; i < out.size(); ++i) {
        double e = exact.get_f64(i);
        out.set_f64(i, sane(upper.get_f64(i) - e + (gamma > 0 ? gamma * e : 0)));
      }
      return out;
    }
    case ReduceKind::Max:
    case ReduceKind::Min: {
      HostArray largest = fold(ReduceKind::Max, dx);
      for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, std::max(0.0, largest.get_f64(i)));
      return out;
    }
    case ReduceKind::Any:
    case ReduceKind::All: {
      bool want = attrs.kind == ReduceKind::Any;
      HostArray decides(DType::Bool, x.shape), unsure(DType::Bool, x.shape);
      for (int64_t i = 0; i < x.size(); ++i) {
        double v = x.get_f64(i), d = dx.get_f64(i);
        bool uncertain = d > 0 && std::fabs(v) <= d;
        unsure.set_i64(i, uncertain);
        decides.set_i64(i, !uncertain && (v != 0) == want);
      }
      HostArray decided = fold(ReduceKind::Any, decides), open = fold(ReduceKind::Any, unsure);
      for (int64_t i = 0; i < out.size(); ++i)
        out.set_f64(i, !decided.get_i64(i) && open.get_i64(i) ? kInf : 0);
      return out;
    }
    case ReduceKind::ArgMax:
    case ReduceKind::ArgMin: {
      // An exact row picks exactly; an uncertain one may pick any index.
      HostArray largest = fold(ReduceKind::Max, dx);
      for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, largest.get_f64(i) > 0 ? kInf : 0);
      return out;
    }
    case ReduceKind::Custom: break;
  }
  return out;
}

// A scan's prefixes bounded as the sum or product of their terms, each with the rounding of a
// fold over the whole axis (the longest prefix).
HostArray scan_bound(const Node& n, const HostArray& x, const HostArray& dx, const SymbolBindings& symbols) {
  const ScanAttrs& attrs = n.as<ScanAttrs>();
  double n_u = static_cast<double>(x.shape.at(attrs.axis)) * unit_roundoff(n.dtype);
  double gamma = n_u < 1 ? n_u / (1 - n_u) : kInf;
  Node scan = derived(n, OpKind::Scan, DType::F64, n.shape);
  HostArray out(DType::F64, x.shape), a(DType::F64, x.shape), b(DType::F64, x.shape);
  for (int64_t i = 0; i < x.size(); ++i) {
    double m = std::fabs(x.get_f64(i)), d = dx.get_f64(i);
    a.set_f64(i, attrs.kind == ReduceKind::Prod ? m + d : d + (gamma > 0 ? gamma * m : 0));
    b.set_f64(i, m);
  }
  HostArray first = evaluate_node(scan, {&a}, symbols);
  if (attrs.kind != ReduceKind::Prod) {
    for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, sane(first.get_f64(i)));
    return out;
  }
  HostArray exact = evaluate_node(scan, {&b}, symbols);
  for (int64_t i = 0; i < out.size(); ++i) {
    double e = exact.get_f64(i);
    out.set_f64(i, sane(first.get_f64(i) - e + (gamma > 0 ? gamma * e : 0)));
  }
  return out;
}

HostArray matmul_bound(const Node& n, const HostArray& a_in, const HostArray& b_in, const HostArray& da,
                       const HostArray& db, const SymbolBindings& symbols) {
  HostArray a = a_in.dtype == n.dtype ? a_in : a_in.cast(n.dtype);
  HostArray b = b_in.dtype == n.dtype ? b_in : b_in.cast(n.dtype);
  Node m = derived(n, OpKind::Matmul, DType::F64, n.shape);
  auto product = [&](const HostArray& x, const HostArray& y) { return evaluate_node(m, {&x, &y}, symbols); };
  HostArray abs_a = map_f64(a, [](double v) { return std::fabs(v); });
  HostArray abs_b = map_f64(b, [](double v) { return std::fabs(v); });
  int64_t k = a.shape.back();
  double k_u = static_cast<double>(k) * unit_roundoff(n.dtype), gamma = k_u < 1 ? k_u / (1 - k_u) : kInf;
  HostArray out = gamma > 0 ? product(abs_a, abs_b) : HostArray(DType::F64, evaluate(n.shape, symbols));
  for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, gamma > 0 ? gamma * out.get_f64(i) : 0);
  bool exact_a = all_zero(da), exact_b = all_zero(db);
  if (!exact_b) {
    HostArray t = product(abs_a, db);
    for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, out.get_f64(i) + t.get_f64(i));
  }
  if (!exact_a) {
    HostArray t = product(da, abs_b);
    for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, out.get_f64(i) + t.get_f64(i));
  }
  if (!exact_a && !exact_b) {
    HostArray t = product(da, db);
    for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, out.get_f64(i) + t.get_f64(i));
  }
  for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, sane(out.get_f64(i)));
  return out;
}

// Bounds for a result that may be anything: a gather or scatter whose indices may differ.
HostArray unbounded(const ConcreteShape& shape) {
  HostArray out(DType::F64, shape);
  for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, kInf);
  return out;
}

// Whether some value of a histogram's x, moved by up to its bound, may reach another bin (or
// leave the range): its equal-width edges are widened by an f32 rounding so that T-rounded edges
// (HistogramAttrs) are covered too. Exact values (bound 0) never do.
bool may_cross_bin_edge(const Node& n, const HostArray& x, const HostArray& dx) {
  const HistogramAttrs& h = n.as<HistogramAttrs>();
  int64_t bins = n.shape.at(0).constant().value_or(1);
  double width = (h.hi - h.lo) / static_cast<double>(bins);
  for (int64_t i = 0; i < x.size(); ++i) {
    double d = dx.get_f64(i), v = x.get_f64(i);
    if (d == 0) continue;
    if (!std::isfinite(d) || std::isnan(v)) return true;
    for (int64_t b = 0; b <= bins; ++b) {
      double edge = b == bins ? h.hi : h.lo + static_cast<double>(b) * width;
      if (std::fabs(v - edge) <= d + 0x1p-22 * (std::fabs(edge) + 1)) return true;
    }
  }
  return false;
}

}  // namespace

double unit_roundoff(DType t) {
  if (t == DType::F32) return 0x1p-24;
  if (t == DType::F64) return 0x1p-53;
  return 0;
}

int transcendental_ulps(ScalarOp op, DType t) {
  if (!is_float(t)) return 0;
  const ScalarOpInfo& info = scalar_op_info(op);
  return t == DType::F64 ? info.ulps_f64 : info.ulps_f32;
}

HostArray node_error_bound(const Node& n, const std::vector<const HostArray*>& operands,
                           const std::vector<const HostArray*>& bounds, const HostArray& value,
                           const SymbolBindings& symbols) {
  switch (n.kind) {
    case OpKind::Input:
    case OpKind::Constant:
    case OpKind::Arange:
    case OpKind::Rand: return HostArray(DType::F64, value.shape);
    case OpKind::Elementwise: return elementwise_bound(n, operands, bounds, value.shape, symbols);
    case OpKind::Reduce: return reduce_bound(n, *operands[0], *bounds[0], value.shape, symbols);
    case OpKind::Scan: return scan_bound(n, *operands[0], *bounds[0], symbols);
    case OpKind::Matmul: return matmul_bound(n, *operands[0], *operands[1], *bounds[0], *bounds[1], symbols);
    case OpKind::BroadcastTo:
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::ExpandDims:
    case OpKind::Squeeze: {
      Node view = n;
      view.dtype = DType::F64;
      return evaluate_node(view, {bounds[0]}, symbols);
    }
    // np-views: index maps move the bounds with the values; a pad's constant is exact.
    case OpKind::Slice:
    case OpKind::Pad:
    case OpKind::Concatenate: {
      Node view = n;
      view.dtype = DType::F64;
      if (n.kind == OpKind::Pad) std::get<PadAttrs>(view.attrs).value = ScalarValue{};
      return evaluate_node(view, bounds, symbols);
    }
    // gather/scatter (issue 16)
    case OpKind::Take:
    case OpKind::TakeAlongAxis: {  // δ moves with the gathered data
      if (!all_zero(*bounds[1])) return unbounded(value.shape);  // an index that may differ
      Node gather = n;
      gather.dtype = DType::F64;
      return evaluate_node(gather, {bounds[0], operands[1]}, symbols);
    }
    case OpKind::IndexAdd:    // out = x + Σ v_j: Σ δ + γ(M + 1)·Σ |terms| (sums in any order)
    case OpKind::Bincount: {  // weighted: Σ δw + γ(count)·Σ |w|; counts are exact
      if (!all_zero(*bounds[n.kind == OpKind::IndexAdd ? 1 : 0])) return unbounded(value.shape);
      if (n.kind == OpKind::Bincount && n.inputs.size() == 1) return HostArray(DType::F64, value.shape);
      const HostArray& values = *operands.back();
      const HostArray& dvalues = *bounds.back();
      Node f64 = n;
      f64.dtype = DType::F64;
      std::vector<const HostArray*> delta_ops = {n.kind == OpKind::IndexAdd ? bounds[0] : operands[0]};
      if (n.kind == OpKind::IndexAdd) delta_ops.push_back(operands[1]);
      delta_ops.push_back(&dvalues);
      HostArray x_abs = map_f64(*operands[0], std::fabs), v_abs = map_f64(values, std::fabs);
      std::vector<const HostArray*> abs_ops = {n.kind == OpKind::IndexAdd ? &x_abs : operands[0]};
      if (n.kind == OpKind::IndexAdd) abs_ops.push_back(operands[1]);
      abs_ops.push_back(&v_abs);
      HostArray delta = evaluate_node(f64, delta_ops, symbols), sums = evaluate_node(f64, abs_ops, symbols);
      double u = unit_roundoff(n.dtype), terms = static_cast<double>(values.size()) + 1;
      double gamma = terms * u < 1 ? terms * u / (1 - terms * u) : kInf;
      for (int64_t i = 0; i < delta.size(); ++i) delta.set_f64(i, sane(delta.get_f64(i) + gamma * sums.get_f64(i)));
      return delta;
    }
    case OpKind::Histogram:  // counts are exact unless a value may cross a bin edge
      if (may_cross_bin_edge(n, *operands[0], *bounds[0])) return unbounded(value.shape);
      return HostArray(DType::F64, value.shape);
  }
  throw Error(std::string(op_kind_name(n.kind)) + ": no rounding rule", n.loc);
}

ValuesAndBounds interpret_with_bounds(const Graph& g, const TensorMap& inputs, const SymbolBindings& known) {
  SymbolBindings symbols = bind_inputs(g, inputs, known);
  size_t count = g.nodes.size();
  std::vector<size_t> last_use = last_uses(g);
  std::vector<HostArray> values(count), bounds(count);
  for (size_t id = 0; id < count; ++id) {
    if (last_use[id] == 0) continue;
    const Node& n = g.nodes[id];
    std::vector<const HostArray*> operands, operand_bounds;
    for (NodeId in : n.inputs) {
      operands.push_back(&values[in]);
      operand_bounds.push_back(&bounds[in]);
    }
    values[id] = n.kind == OpKind::Input ? inputs.at(n.as<InputAttrs>().name) : evaluate_node(n, operands, symbols);
    bounds[id] = node_error_bound(n, operands, operand_bounds, values[id], symbols);
    for (NodeId in : n.inputs)
      if (last_use[in] == id) values[in] = bounds[in] = HostArray();
  }
  ValuesAndBounds out;
  for (const GraphOutput& o : g.outputs) {
    out.values[o.name] = values[o.node];
    out.bounds[o.name] = bounds[o.node];
  }
  return out;
}

}  // namespace fuse::ir
