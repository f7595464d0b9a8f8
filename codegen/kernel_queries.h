// Facts about a kernel's body that both code generators ask (plain IR, no MLIR). Internal to
// codegen/.
#pragma once

#include <vector>

#include "ir/program.h"

namespace fuse::codegen {

/// Whether element i of every value of `k` is element i of its operands: every node on the
/// outputs' paths is an input, constant or elementwise op shaped like the kernel's space, or a
/// broadcast of a single element. Then a flat loop needs neither views nor index arithmetic
/// (lane j of a vector is element base + j).
inline bool elementwise_contiguous(const ir::Kernel& k) {
  std::vector<bool> seen(k.body.nodes.size(), false);
  std::vector<ir::NodeId> stack;
  for (const ir::GraphOutput& o : k.body.outputs) {
    if (!(k.body.node(o.node).shape == k.space)) return false;
    stack.push_back(o.node);
  }
  while (!stack.empty()) {
    ir::NodeId id = stack.back();
    stack.pop_back();
    if (seen[id]) continue;
    seen[id] = true;
    const ir::Node& n = k.body.node(id);
    if (n.kind == ir::OpKind::BroadcastTo && ir::num_elements(k.body.node(n.inputs[0]).shape) == ir::Dim(1)) continue;
    bool plain = n.kind == ir::OpKind::Input || n.kind == ir::OpKind::Constant || n.kind == ir::OpKind::Elementwise;
    if (!plain || !(n.shape == k.space)) return false;
    for (ir::NodeId in : n.inputs) stack.push_back(in);
  }
  return true;
}

}  // namespace fuse::codegen
