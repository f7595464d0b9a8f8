#include "ir/verifier.h"

#include <algorithm>
#include <set>

namespace fuse::ir {

std::vector<std::string> verify_scalar_fn(const ScalarFn& fn) {
  std::vector<std::string> problems;
  auto bad = [&](size_t i, const std::string& what) {
    problems.push_back("scalar node " + std::to_string(i) + " (" + std::string(scalar_op_name(fn.nodes[i].op)) +
                       "): " + what);
  };
  for (size_t i = 0; i < fn.nodes.size(); ++i) {
    const ScalarNode& n = fn.nodes[i];
    if (n.op == ScalarOp::Param) {
      if (n.param < 0 || n.param >= static_cast<int>(fn.params.size())) bad(i, "parameter index out of range");
      else if (fn.params[n.param] != n.dtype) bad(i, "dtype differs from the parameter's");
      continue;
    }
    if (n.op == ScalarOp::Literal) continue;
    bool args_ok = true;
    for (int k = 0; k < n.arity(); ++k)
      if (n.args[k] < 0 || n.args[k] >= static_cast<ScalarId>(i)) args_ok = false;
    if (!args_ok) { bad(i, "an argument does not precede its user"); continue; }
    const ScalarNode& a0 = fn.nodes[n.args[0]];
    if (n.op == ScalarOp::Select) {
      if (a0.dtype != DType::Bool) bad(i, "condition is not bool");
      if (fn.nodes[n.args[1]].dtype != n.dtype || fn.nodes[n.args[2]].dtype != n.dtype)
        bad(i, "branches differ from the result dtype");
    } else if (n.op != ScalarOp::Cast && n.arity() == 2 && fn.nodes[n.args[1]].dtype != a0.dtype) {
      bad(i, "operands have different dtypes");
    }
  }
  if (fn.results.empty()) problems.push_back("scalar function has no result");
  for (ScalarId r : fn.results)
    if (r < 0 || r >= static_cast<ScalarId>(fn.nodes.size())) problems.push_back("result id out of range");
  return problems;
}

static int expected_arity(OpKind k) {
  switch (k) {
    case OpKind::Input: case OpKind::Constant: case OpKind::Arange: case OpKind::Rand: return 0;
    case OpKind::Elementwise: return -1;  // one or more
    case OpKind::Matmul: return 2;
    case OpKind::Concatenate: return -1;  // one or more
    // gather/scatter (issue 16)
    case OpKind::Take: case OpKind::TakeAlongAxis: return 2;
    case OpKind::IndexAdd: return 3;
    case OpKind::Bincount: return -2;  // x, or x and weights
    default: return 1;
  }
}

static bool attrs_match(const Node& n) {
  switch (n.kind) {
    case OpKind::Input: return std::holds_alternative<InputAttrs>(n.attrs);
    case OpKind::Constant: return std::holds_alternative<ConstantAttrs>(n.attrs);
    case OpKind::Rand: return std::holds_alternative<RandAttrs>(n.attrs);
    case OpKind::Elementwise: return std::holds_alternative<ElementwiseAttrs>(n.attrs);
    case OpKind::Reduce: return std::holds_alternative<ReduceAttrs>(n.attrs);
    case OpKind::Permute: return std::holds_alternative<PermuteAttrs>(n.attrs);
    case OpKind::ExpandDims: return std::holds_alternative<ExpandDimsAttrs>(n.attrs);
    case OpKind::Squeeze: return std::holds_alternative<SqueezeAttrs>(n.attrs);
    case OpKind::Scan: return std::holds_alternative<ScanAttrs>(n.attrs);
    case OpKind::Slice: return std::holds_alternative<SliceAttrs>(n.attrs);
    case OpKind::Pad: return std::holds_alternative<PadAttrs>(n.attrs);
    case OpKind::Concatenate: return std::holds_alternative<ConcatenateAttrs>(n.attrs);
    // gather/scatter (issue 16)
    case OpKind::Take: case OpKind::TakeAlongAxis: case OpKind::IndexAdd:
      return std::holds_alternative<GatherAttrs>(n.attrs);
    case OpKind::Histogram: return std::holds_alternative<HistogramAttrs>(n.attrs);
    default: return std::holds_alternative<NoAttrs>(n.attrs);
  }
}

// Checks the node's dtype and shape against the op's rules given its (already checked) operands.
static void check_types(const Graph& g, const Node& n, VerifyOptions options, std::vector<std::string>& out) {
  auto in = [&](size_t i) -> const Node& { return g.node(n.inputs[i]); };
  auto expect_shape = [&](const Shape& s) {
    if (!(s == n.shape)) out.push_back("shape " + shape_str(n.shape) + " should be " + shape_str(s));
  };
  auto expect_dtype = [&](DType t) {
    if (t != n.dtype)
      out.push_back("dtype " + std::string(dtype_name(n.dtype)) + " should be " + std::string(dtype_name(t)));
  };
  switch (n.kind) {
    case OpKind::Constant: {
      const HostArray& v = n.as<ConstantAttrs>().value;
      expect_dtype(v.dtype);
      expect_shape(to_shape(v.shape));
      if (v.bytes.size() != static_cast<size_t>(v.size()) * dtype_size(v.dtype)) out.push_back("constant data size");
      break;
    }
    case OpKind::Arange:
      expect_dtype(DType::I64);
      if (n.rank() != 1) out.push_back("arange must be 1-D");
      break;
    case OpKind::Rand: expect_dtype(DType::F32); break;
    case OpKind::Elementwise: {
      const ScalarFn& body = n.as<ElementwiseAttrs>().body;
      for (const std::string& p : verify_scalar_fn(body)) out.push_back("body: " + p);
      if (body.params.size() != n.inputs.size()) { out.push_back("body parameter count differs from operands"); break; }
      if (body.results.size() != 1) { out.push_back("body must have one result"); break; }
      std::vector<Shape> shapes;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (in(i).dtype != body.params[i]) out.push_back("operand " + std::to_string(i) + " dtype differs from the body's parameter");
        shapes.push_back(in(i).shape);
        if (options.explicit_broadcasts && !(in(i).shape == n.shape))
          out.push_back("operand " + std::to_string(i) + " has shape " + shape_str(in(i).shape) +
                        " but broadcasts must be explicit");
      }
      expect_dtype(body.result_dtype());
      try {
        expect_shape(broadcast_shapes(shapes, "elementwise", {}));
      } catch (const Error& e) {
        out.push_back(e.message());
      }
      break;
    }
    case OpKind::Reduce: {
      const ReduceAttrs& r = n.as<ReduceAttrs>();
      for (size_t i = 0; i < r.axes.size(); ++i)
        if (r.axes[i] < 0 || r.axes[i] >= in(0).rank() || (i && r.axes[i] <= r.axes[i - 1]))
          out.push_back("axes must be sorted, distinct and in range");
      expect_shape(reduced_shape(in(0).shape, r.axes, r.keepdims));
      if (r.kind == ReduceKind::Custom) {
        expect_dtype(in(0).dtype);
        if (r.combiner.params.size() != 2 || r.combiner.results.size() != 1) out.push_back("combiner must be binary");
      } else {
        expect_dtype(reduce_result_dtype(r.kind, in(0).dtype));
      }
      break;
    }
    case OpKind::Scan: {
      const ScanAttrs& sc = n.as<ScanAttrs>();
      if (sc.kind != ReduceKind::Sum && sc.kind != ReduceKind::Prod) out.push_back("scan kind must be sum or prod");
      if (sc.axis < 0 || sc.axis >= in(0).rank()) out.push_back("scan axis out of range");
      expect_shape(in(0).shape);
      expect_dtype(reduce_result_dtype(sc.kind, in(0).dtype));
      break;
    }
    case OpKind::Matmul:
      expect_dtype(arithmetic_type(promote(in(0).dtype, in(1).dtype)));
      try {
        expect_shape(matmul_shape(in(0).shape, in(1).shape, {}));
      } catch (const Error& e) {
        out.push_back(e.message());
      }
      if (options.explicit_broadcasts && (in(0).rank() < 2 || in(1).rank() != in(0).rank() ||
                                          !std::equal(in(0).shape.begin(), in(0).shape.end() - 2, in(1).shape.begin())))
        out.push_back("matmul operands must have rank >= 2 and equal batch dims");
      break;
    case OpKind::BroadcastTo: {
      expect_dtype(in(0).dtype);
      const Shape& from = in(0).shape;
      bool ok = from.size() <= n.shape.size();
      for (size_t i = 0; ok && i < from.size(); ++i) {
        const Dim& f = from[from.size() - 1 - i];
        ok = f == n.shape[n.shape.size() - 1 - i] || f == Dim(1);
      }
      if (!ok) out.push_back("cannot broadcast " + shape_str(from) + " to " + shape_str(n.shape));
      break;
    }
    case OpKind::Reshape:
      expect_dtype(in(0).dtype);
      if (!(num_elements(in(0).shape) == num_elements(n.shape))) out.push_back("reshape changes the element count");
      break;
    case OpKind::Permute: {
      expect_dtype(in(0).dtype);
      std::vector<int> perm = n.as<PermuteAttrs>().perm;
      std::vector<int> sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      bool is_perm = static_cast<int>(perm.size()) == in(0).rank();
      for (size_t i = 0; is_perm && i < sorted.size(); ++i) is_perm = sorted[i] == static_cast<int>(i);
      if (!is_perm) { out.push_back("perm is not a permutation of the operand's axes"); break; }
      Shape s;
      for (int a : perm) s.push_back(in(0).shape[a]);
      expect_shape(s);
      break;
    }
    case OpKind::ExpandDims: {
      expect_dtype(in(0).dtype);
      int axis = n.as<ExpandDimsAttrs>().axis;
      if (axis < 0 || axis > in(0).rank()) { out.push_back("axis out of range"); break; }
      Shape s = in(0).shape;
      s.insert(s.begin() + axis, Dim(1));
      expect_shape(s);
      break;
    }
    case OpKind::Squeeze: {
      expect_dtype(in(0).dtype);
      const std::vector<int>& axes = n.as<SqueezeAttrs>().axes;
      for (int a : axes)
        if (a < 0 || a >= in(0).rank() || !(in(0).shape[a] == Dim(1))) { out.push_back("squeezed axis is not of size 1"); return; }
      expect_shape(reduced_shape(in(0).shape, axes, false));
      break;
    }
    // ---- np-views
    case OpKind::Slice: {
      expect_dtype(in(0).dtype);
      const SliceAttrs& a = n.as<SliceAttrs>();
      if (static_cast<int>(a.starts.size()) != in(0).rank() || static_cast<int>(a.steps.size()) != in(0).rank() ||
          n.rank() != in(0).rank()) {
        out.push_back("slice needs one start, step and dim per operand axis");
        break;
      }
      for (int64_t step : a.steps)
        if (step == 0) out.push_back("slice step is zero");
      break;
    }
    case OpKind::Pad: {
      expect_dtype(in(0).dtype);
      const PadAttrs& a = n.as<PadAttrs>();
      if (static_cast<int>(a.before.size()) != in(0).rank() || static_cast<int>(a.after.size()) != in(0).rank()) {
        out.push_back("pad needs one (before, after) pair per operand axis");
        break;
      }
      Shape s;
      for (int k = 0; k < in(0).rank(); ++k) s.push_back(a.before[k] + in(0).shape[k] + a.after[k]);
      expect_shape(s);
      break;
    }
    case OpKind::Concatenate: {
      int axis = n.as<ConcatenateAttrs>().axis;
      if (axis < 0 || axis >= in(0).rank()) { out.push_back("axis out of range"); break; }
      Shape s = in(0).shape;
      s[axis] = Dim(0);
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (in(i).dtype != n.dtype) out.push_back("operand " + std::to_string(i) + " has another dtype");
        if (in(i).rank() != in(0).rank()) { out.push_back("operands differ in rank"); return; }
        for (int d = 0; d < in(0).rank(); ++d)
          if (d != axis && !(in(i).shape[d] == in(0).shape[d])) out.push_back("operands differ off the axis");
        s[axis] = s[axis] + in(i).shape[axis];
      }
      expect_shape(s);
      break;
    }
    case OpKind::Input: break;
    // gather/scatter (issue 16)
    case OpKind::Take:
    case OpKind::TakeAlongAxis:
    case OpKind::IndexAdd: {
      expect_dtype(in(0).dtype);
      int axis = n.as<GatherAttrs>().axis;
      if (axis < 0 || axis >= in(0).rank()) { out.push_back("axis out of range"); break; }
      if (in(1).dtype != DType::I32 && in(1).dtype != DType::I64) out.push_back("indices must be i32 or i64");
      if (n.kind == OpKind::Take) {
        expect_shape(take_shape(in(0).shape, in(1).shape, axis));
      } else if (n.kind == OpKind::TakeAlongAxis) {
        try {
          expect_shape(take_along_axis_shape(in(0).shape, in(1).shape, axis));
        } catch (const Error& e) {
          out.push_back(e.message());
        }
      } else {
        expect_shape(in(0).shape);
        Shape values = in(0).shape;
        if (in(1).rank() == 1) values[axis] = in(1).shape[0];
        else out.push_back("indices must be 1-D");
        if (!(in(2).shape == values) || in(2).dtype != in(0).dtype)
          out.push_back("values must be " + std::string(dtype_name(in(0).dtype)) + shape_str(values));
      }
      break;
    }
    case OpKind::Bincount: {
      if ((in(0).dtype != DType::I32 && in(0).dtype != DType::I64) || in(0).rank() != 1)
        out.push_back("x must be 1-D i32 or i64");
      if (n.rank() != 1) out.push_back("result must be 1-D");
      if (n.inputs.size() == 2) {
        expect_dtype(in(1).dtype);
        if (!(in(1).shape == in(0).shape)) out.push_back("weights must have x's shape");
      } else {
        expect_dtype(DType::I64);
      }
      break;
    }
    case OpKind::Histogram: {
      expect_dtype(DType::I64);
      const HistogramAttrs& h = n.as<HistogramAttrs>();
      if (n.rank() != 1 || n.shape[0].constant().value_or(0) < 1) out.push_back("result must be [B] with B >= 1");
      if (!(h.lo < h.hi)) out.push_back("range must have lo < hi");
      break;
    }
  }
}

std::vector<std::string> verify(const Graph& g, VerifyOptions options) {
  std::vector<std::string> problems;
  std::set<std::string> input_names;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    std::vector<std::string> local;
    int arity = expected_arity(n.kind);
    bool operands_ok = arity == -2   ? n.inputs.size() == 1 || n.inputs.size() == 2
                       : arity < 0 ? !n.inputs.empty()
                                   : static_cast<int>(n.inputs.size()) == arity;
    if (!operands_ok) local.push_back("wrong number of operands (" + std::to_string(n.inputs.size()) + ")");
    for (NodeId id : n.inputs)
      if (id < 0 || id >= static_cast<NodeId>(i)) {
        local.push_back("operand %" + std::to_string(id) + " does not precede the node");
        operands_ok = false;
      }
    if (!attrs_match(n)) {
      local.push_back("attributes do not match the op kind");
      operands_ok = false;
    }
    for (const Dim& d : n.shape)
      if (d.constant().value_or(0) < 0) local.push_back("negative dim in " + shape_str(n.shape));
    if (n.kind == OpKind::Input && operands_ok && !input_names.insert(n.as<InputAttrs>().name).second)
      local.push_back("duplicate input name '" + n.as<InputAttrs>().name + "'");
    if (operands_ok) check_types(g, n, options, local);
    for (const std::string& p : local)
      problems.push_back("%" + std::to_string(i) + " " + std::string(op_kind_name(n.kind)) + ": " + p);
  }
  std::set<std::string> output_names;
  for (const GraphOutput& o : g.outputs) {
    if (o.node < 0 || o.node >= static_cast<NodeId>(g.nodes.size()))
      problems.push_back("output '" + o.name + "' refers to a missing node");
    if (!output_names.insert(o.name).second) problems.push_back("duplicate output name '" + o.name + "'");
  }
  return problems;
}

void verify_or_throw(const Graph& g, const std::string& stage, VerifyOptions options) {
  std::vector<std::string> problems = verify(g, options);
  if (problems.empty()) return;
  std::string msg = "invalid graph " + stage + ":";
  for (const std::string& p : problems) msg += "\n  " + p;
  throw Error(msg);
}

}  // namespace fuse::ir
