#include "ir/index_check.h"

namespace fuse::ir {

bool has_index_check(OpKind k) {
  return k == OpKind::Take || k == OpKind::TakeAlongAxis || k == OpKind::IndexAdd || k == OpKind::Bincount;
}

std::vector<NodeId> checked_nodes(const Graph& body) {
  std::vector<NodeId> ids;
  for (NodeId id = 0; id < static_cast<NodeId>(body.nodes.size()); ++id)
    if (has_index_check(body.node(id).kind)) ids.push_back(id);
  return ids;
}

std::vector<IndexCheck> index_checks(const Program& p) {
  std::vector<IndexCheck> checks;
  for (size_t ki = 0; ki < p.kernels.size(); ++ki) {
    const Graph& body = p.kernels[ki].body;
    for (NodeId id : checked_nodes(body)) {
      const Node& n = body.node(id);
      IndexCheck c{n.kind, 0, n.shape.empty() ? Dim(0) : n.shape[0], n.loc, static_cast<int>(ki), id};
      if (n.kind != OpKind::Bincount) {  // the indexed axis of x
        c.axis = n.as<GatherAttrs>().axis;
        c.size = body.node(n.inputs[0]).shape[c.axis];
      }
      checks.push_back(std::move(c));
    }
  }
  return checks;
}

int first_index_check(const Program& p, int kernel) {
  int first = 0;
  for (int ki = 0; ki < kernel; ++ki) first += static_cast<int>(checked_nodes(p.kernels[ki].body).size());
  return first;
}

Error index_check_error(const std::vector<IndexCheck>& checks, int64_t check_plus_one, int64_t index,
                        const SymbolBindings& symbols) {
  if (check_plus_one < 1 || check_plus_one > static_cast<int64_t>(checks.size()))
    return Error("internal error: a kernel reported index check " + std::to_string(check_plus_one - 1) + " of " +
                 std::to_string(checks.size()));
  const IndexCheck& c = checks[check_plus_one - 1];
  return index_error(c.op, index, evaluate(c.size, symbols), c.axis, c.loc);
}

}  // namespace fuse::ir
