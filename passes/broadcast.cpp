#include "passes/broadcast.h"

namespace fuse::passes {

using ir::Dim;
using ir::Node;
using ir::NodeId;
using ir::OpKind;
using ir::Shape;

static NodeId broadcast_if_needed(ir::Graph& g, NodeId x, const Shape& shape, const ir::SourceLoc& loc) {
  if (g.node(x).shape == shape) return x;
  return ir::add_broadcast_to(g, x, shape, loc);
}

// Rewrites a matmul into the canonical form described in the header.
static NodeId canonical_matmul(ir::Graph& g, const Node& n, NodeId a, NodeId b) {
  const ir::SourceLoc& loc = n.loc;
  bool a_vector = g.node(a).rank() == 1, b_vector = g.node(b).rank() == 1;
  if (a_vector) a = ir::add_expand_dims(g, a, 0, loc);
  if (b_vector) b = ir::add_expand_dims(g, b, 1, loc);
  if (g.node(a).dtype != n.dtype) a = ir::add_cast(g, a, n.dtype, loc);
  if (g.node(b).dtype != n.dtype) b = ir::add_cast(g, b, n.dtype, loc);
  const Shape &sa = g.node(a).shape, &sb = g.node(b).shape;
  Shape batch = ir::broadcast_shapes({Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2)},
                                     "matmul", loc);
  auto with_batch = [&](const Shape& s) {
    Shape full = batch;
    full.insert(full.end(), s.end() - 2, s.end());
    return full;
  };
  Shape full_a = with_batch(sa), full_b = with_batch(sb);
  a = broadcast_if_needed(g, a, full_a, loc);
  b = broadcast_if_needed(g, b, full_b, loc);
  NodeId out = ir::add_matmul(g, a, b, loc);
  int rank = g.node(out).rank();
  std::vector<int64_t> squeeze;
  if (a_vector) squeeze.push_back(rank - 2);
  if (b_vector) squeeze.push_back(rank - 1);
  if (!squeeze.empty()) out = ir::add_squeeze(g, out, squeeze, loc);
  return out;
}

ir::Graph make_broadcasts_explicit(const ir::Graph& g) {
  ir::Graph out;
  std::vector<NodeId> remap(g.nodes.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    std::vector<NodeId> inputs;
    for (NodeId id : n.inputs) inputs.push_back(remap[id]);
    if (n.kind == OpKind::Elementwise) {
      for (NodeId& in : inputs) in = broadcast_if_needed(out, in, n.shape, n.loc);
    } else if (n.kind == OpKind::Matmul) {
      remap[i] = canonical_matmul(out, n, inputs[0], inputs[1]);
      continue;
    }
    Node copy = n;
    copy.inputs = std::move(inputs);
    remap[i] = out.add(std::move(copy));
  }
  for (const ir::GraphOutput& o : g.outputs) out.outputs.push_back({o.name, remap[o.node]});
  return out;
}

}  // namespace fuse::passes
