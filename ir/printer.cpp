#include "ir/printer.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace fuse::ir {

template <class T>
static std::string list_str(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

static std::string constant_str(const HostArray& a) {
  // Small constants print in full so that goldens show them; large ones by size only.
  if (a.size() > 8) return "<" + std::to_string(a.size()) + " values>";
  std::ostringstream s;
  s << "[";
  for (int64_t i = 0; i < a.size(); ++i) {
    if (i) s << ", ";
    if (is_float(a.dtype)) s << a.get_f64(i);
    else s << a.get_i64(i);
  }
  s << "]";
  return s.str();
}

// A double as text that reads back as the same double: 15 digits when they do (0.1), else 17.
static std::string exact_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", v);
  if (std::strtod(text, nullptr) != v) std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

std::string print_node(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::string s(op_kind_name(n.kind));
  if (n.kind == OpKind::Reduce) s += "." + std::string(reduce_kind_name(n.as<ReduceAttrs>().kind));
  if (n.kind == OpKind::Scan) s += "." + std::string(reduce_kind_name(n.as<ScanAttrs>().kind));
  if (!n.inputs.empty()) {
    s += "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) s += (i ? ", %" : "%") + std::to_string(n.inputs[i]);
    s += ")";
  }
  switch (n.kind) {
    case OpKind::Input: s += " \"" + n.as<InputAttrs>().name + "\""; break;
    case OpKind::Constant: s += " " + constant_str(n.as<ConstantAttrs>().value); break;
    case OpKind::Rand: s += " seed=" + std::to_string(n.as<RandAttrs>().seed); break;
    case OpKind::Elementwise: s += " " + to_string(n.as<ElementwiseAttrs>().body); break;
    case OpKind::Reduce: {
      const ReduceAttrs& r = n.as<ReduceAttrs>();
      s += " axes=" + list_str(r.axes) + " keepdims=" + (r.keepdims ? "true" : "false");
      if (r.kind == ReduceKind::Custom) {
        s += " combiner=" + to_string(r.combiner) + " init=" +
             (is_float(n.dtype) ? std::to_string(r.identity.f) : std::to_string(r.identity.i));
      }
      break;
    }
    case OpKind::Permute: s += " perm=" + list_str(n.as<PermuteAttrs>().perm); break;
    case OpKind::ExpandDims: s += " axis=" + std::to_string(n.as<ExpandDimsAttrs>().axis); break;
    case OpKind::Squeeze: s += " axes=" + list_str(n.as<SqueezeAttrs>().axes); break;
    case OpKind::Scan: s += " axis=" + std::to_string(n.as<ScanAttrs>().axis); break;
    // ---- np-views
    case OpKind::Slice: s += " " + slice_str(n.as<SliceAttrs>()); break;
    case OpKind::Pad: s += " " + pad_str(n.as<PadAttrs>(), n.dtype); break;
    case OpKind::Concatenate: s += " axis=" + std::to_string(n.as<ConcatenateAttrs>().axis); break;
    // gather/scatter (issue 16)
    case OpKind::Take:
    case OpKind::TakeAlongAxis:
    case OpKind::IndexAdd: s += " axis=" + std::to_string(n.as<GatherAttrs>().axis); break;
    case OpKind::Histogram: {
      const HistogramAttrs& h = n.as<HistogramAttrs>();
      s += " range=[" + exact_number(h.lo) + ", " + exact_number(h.hi) + "]";
      break;
    }
    default: break;
  }
  return s + " : " + std::string(dtype_name(n.dtype)) + shape_str(n.shape);
}

static std::string dims_str(const std::vector<Dim>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + dims[i].str();
  return s + "]";
}

std::string slice_str(const SliceAttrs& a) { return "starts=" + dims_str(a.starts) + " steps=" + list_str(a.steps); }

std::string pad_str(const PadAttrs& a, DType t) {
  std::string s = "before=" + dims_str(a.before) + " after=" + dims_str(a.after) + " mode=" +
                  std::string(pad_mode_name(a.mode));
  if (a.mode == PadMode::Constant) {
    double v = a.value.as_double(t);
    std::string text = std::to_string(v);
    if (v == static_cast<double>(static_cast<int64_t>(v))) text = std::to_string(static_cast<int64_t>(v));
    s += " value=" + text;
  }
  return s;
}

std::string print_graph(const Graph& g) {
  std::string s = "graph {\n";
  for (size_t i = 0; i < g.nodes.size(); ++i)
    s += "  %" + std::to_string(i) + " = " + print_node(g, static_cast<NodeId>(i)) + "\n";
  for (const GraphOutput& o : g.outputs) s += "  output " + o.name + " = %" + std::to_string(o.node) + "\n";
  return s + "}\n";
}

}  // namespace fuse::ir
