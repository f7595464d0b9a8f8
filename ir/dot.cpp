#include "ir/dot.h"

#include <sstream>

#include "ir/printer.h"

namespace fuse::ir {

namespace {

constexpr size_t kMaxBodyChars = 60;  // longer scalar bodies are cut so nodes stay readable

std::string shortened(std::string s) {
  if (s.size() > kMaxBodyChars) s = s.substr(0, kMaxBodyChars - 3) + "...";
  return s;
}

/// The body of a scalar function without its "(p0: f32, ...) -> " signature, which the
/// node's input edges already show.
std::string scalar_body(const ScalarFn& fn) {
  std::string s = to_string(fn);
  size_t arrow = s.find(") -> ");
  return shortened(arrow == std::string::npos ? s : s.substr(arrow + 5));
}

std::string number(double v) {
  std::ostringstream s;
  s << v;  // 6 significant digits: enough for a picture
  return s.str();
}

std::string int_list(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return "[" + s + "]";
}

/// The op and its parameters: the first line(s) of a node's label.
std::vector<std::string> op_lines(const Node& n) {
  std::string kind(op_kind_name(n.kind));
  switch (n.kind) {
    case OpKind::Input: return {"input " + n.as<InputAttrs>().name};
    case OpKind::Constant: {
      const HostArray& v = n.as<ConstantAttrs>().value;
      if (v.size() != 1) return {kind};
      return {kind + " " + number(v.get_f64(0))};
    }
    case OpKind::Rand: return {kind + " seed=" + std::to_string(n.as<RandAttrs>().seed)};
    case OpKind::Elementwise: return {kind, scalar_body(n.as<ElementwiseAttrs>().body)};
    case OpKind::Reduce: {
      const ReduceAttrs& r = n.as<ReduceAttrs>();
      std::string axes = " axes=" + int_list(r.axes) + (r.keepdims ? " keepdims" : "");
      if (r.kind != ReduceKind::Custom)
        return {kind + " " + std::string(reduce_kind_name(r.kind)) + axes};
      return {kind + axes + " init=" + number(r.identity.as_double(n.dtype)), scalar_body(r.combiner)};
    }
    case OpKind::BroadcastTo:
    case OpKind::Reshape: return {kind + " " + shape_str(n.shape)};
    case OpKind::Permute: return {kind + " " + int_list(n.as<PermuteAttrs>().perm)};
    case OpKind::ExpandDims: return {kind + " axis=" + std::to_string(n.as<ExpandDimsAttrs>().axis)};
    case OpKind::Squeeze: return {kind + " axes=" + int_list(n.as<SqueezeAttrs>().axes)};
    case OpKind::Scan: {
      const ScanAttrs& sc = n.as<ScanAttrs>();
      return {std::string(sc.kind == ReduceKind::Prod ? "cumprod" : "cumsum") + " axis=" + std::to_string(sc.axis)};
    }
    case OpKind::Arange:
    case OpKind::Matmul: return {kind};
    // ---- np-views
    case OpKind::Slice: return {kind + " " + slice_str(n.as<SliceAttrs>())};
    case OpKind::Pad: return {kind + " " + pad_str(n.as<PadAttrs>(), n.dtype)};
    case OpKind::Concatenate: return {kind + " axis=" + std::to_string(n.as<ConcatenateAttrs>().axis)};
    // gather/scatter (issue 16)
    case OpKind::Take:
    case OpKind::TakeAlongAxis:
    case OpKind::IndexAdd: return {kind + " axis=" + std::to_string(n.as<GatherAttrs>().axis)};
    case OpKind::Bincount: return {kind + " " + shape_str(n.shape) + (n.inputs.size() == 2 ? " weighted" : "")};
    case OpKind::Histogram: {
      const HistogramAttrs& h = n.as<HistogramAttrs>();
      return {kind + " bins=" + shape_str(n.shape) + " range=[" + number(h.lo) + ", " + number(h.hi) + "]"};
    }
  }
  return {kind};
}

/// A dot double-quoted string; `\n` separates label lines (Graphviz's centered line break).
std::string quoted(const std::vector<std::string>& lines) {
  std::string out = "\"";
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\\n";
    for (char c : lines[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c == '\n' ? ' ' : c;
    }
  }
  return out + "\"";
}

bool is_output(const Graph& g, NodeId id) {
  for (const GraphOutput& o : g.outputs)
    if (o.node == id) return true;
  return false;
}

void write_node(std::ostringstream& out, const Graph& g, NodeId id, const std::string& indent) {
  out << indent << "n" << id << " [label=" << quoted(dot_node_label(g, id));
  if (g.node(id).kind == OpKind::Input) out << ", shape=ellipse, fillcolor=\"#dbeafe\"";
  if (is_output(g, id)) out << ", peripheries=2, fillcolor=\"#dcfce7\"";
  out << "];\n";
}

}  // namespace

std::vector<std::string> dot_node_label(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::vector<std::string> lines = op_lines(n);
  lines.push_back(std::string(dtype_name(n.dtype)) + shape_str(n.shape));
  for (const GraphOutput& o : g.outputs)
    if (o.node == id) lines.push_back("output " + o.name);
  return lines;
}

namespace {

// The graph-level attributes both pictures share.
void write_header(std::ostringstream& out, const std::string& title) {
  out << "digraph " << quoted({title}) << " {\n";
  if (!title.empty()) out << "  graph [label=" << quoted({title}) << ", labelloc=t];\n";
  out << "  graph [fontname=\"Helvetica\"];\n"
         "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#f5f5f5\", "
         "fontname=\"Helvetica\", fontsize=11];\n"
         "  edge [fontname=\"Helvetica\", fontsize=9];\n";
}

const char* kind_colour(KernelKind k) {
  switch (k) {
    case KernelKind::Elementwise: return "#e0f2fe";
    case KernelKind::Reduction: return "#fef3c7";
    case KernelKind::RowWise: return "#fce7f3";
    case KernelKind::Matmul: return "#ede9fe";
    case KernelKind::Transpose: return "#dcfce7";
    case KernelKind::Copy: return "#f3f4f6";
    case KernelKind::Scan: return "#ffedd5";
    case KernelKind::Scatter: return "#fee2e2";
  }
  return "#ffffff";
}

}  // namespace

std::string program_to_dot(const Program& p, const std::string& title) {
  std::ostringstream out;
  write_header(out, title);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& buf = p.buffers[b];
    out << "  b" << b << " [label="
        << quoted({buf.name, std::string(dtype_name(buf.dtype)) + shape_str(buf.shape)});
    if (buf.role == BufferRole::Input) out << ", shape=ellipse, fillcolor=\"#dbeafe\"";
    else if (buf.role == BufferRole::Output) out << ", peripheries=2, fillcolor=\"#dcfce7\"";
    else out << ", shape=note, fillcolor=\"#ffffff\"";
    out << "];\n";
  }
  for (int ki : p.launch_order) {
    const Kernel& k = p.kernels[ki];
    const Graph& body = k.body;
    std::string prefix = "k" + std::to_string(ki) + "_n";
    // Body inputs are the buffers themselves: map each to its buffer node.
    auto source = [&](NodeId id) {
      const Node& n = body.node(id);
      if (n.kind == OpKind::Input) return "b" + std::to_string(p.find_buffer(n.as<InputAttrs>().name));
      return prefix + std::to_string(id);
    };
    out << "  subgraph cluster_k" << ki << " {\n"
        << "    label=" << quoted({k.name + " (" + std::string(kernel_kind_name(k.kind)) + ")"}) << ";\n"
        << "    style=\"rounded,filled\"; fillcolor=\"" << kind_colour(k.kind) << "\";\n";
    for (NodeId id = 0; id < static_cast<NodeId>(body.nodes.size()); ++id)
      if (body.node(id).kind != OpKind::Input)
        out << "    " << prefix << id << " [label=" << quoted(op_lines(body.node(id))) << "];\n";
    out << "  }\n";
    for (NodeId id = 0; id < static_cast<NodeId>(body.nodes.size()); ++id)
      for (NodeId in : body.node(id).inputs)
        out << "  " << source(in) << " -> " << prefix << id << " [label="
            << quoted({shape_str(body.node(in).shape)}) << "];\n";
    for (const GraphOutput& o : body.outputs)
      out << "  " << source(o.node) << " -> b" << p.find_buffer(o.name) << " [label="
          << quoted({shape_str(body.node(o.node).shape)}) << "];\n";
  }
  out << "}\n";
  return out.str();
}

std::string graph_to_dot(const Graph& g, const std::string& title,
                         const std::vector<DotCluster>& clusters) {
  std::vector<int> cluster_of(g.nodes.size(), -1);
  for (size_t c = 0; c < clusters.size(); ++c) {
    for (NodeId id : clusters[c].nodes) {
      if (id < 0 || id >= static_cast<NodeId>(g.nodes.size()) || cluster_of[id] >= 0)
        throw Error("dot cluster '" + clusters[c].label + "' names node " + std::to_string(id) +
                    ", which is not in the graph or already in a cluster");
      cluster_of[id] = static_cast<int>(c);
    }
  }

  std::ostringstream out;
  write_header(out, title);
  for (size_t c = 0; c < clusters.size(); ++c) {
    out << "  subgraph cluster_" << c << " {\n"
        << "    label=" << quoted({clusters[c].label}) << ";\n"
        << "    style=\"rounded,dashed\";\n";
    for (NodeId id : clusters[c].nodes) write_node(out, g, id, "    ");
    out << "  }\n";
  }
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes.size()); ++id)
    if (cluster_of[id] < 0) write_node(out, g, id, "  ");
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes.size()); ++id)
    for (NodeId in : g.node(id).inputs)
      out << "  n" << in << " -> n" << id << " [label=" << quoted({shape_str(g.node(in).shape)})
          << "];\n";
  out << "}\n";
  return out.str();
}

}  // namespace fuse::ir
