// Graphviz dot text for a graph: the picture form of the IR (`fusec --emit=dot -o g.svg`).
//
// Thread safety: free functions that only read their Graph; any number may run at once on graphs
// nobody is modifying.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/program.h"

namespace fuse::ir {

/// A group of nodes drawn inside one box, e.g. the nodes fused into one kernel.
struct DotCluster {
  std::string label;
  std::vector<NodeId> nodes;
};

/// The lines of a node's label: what it computes (the op with its parameters: an elementwise
/// body, a reduction's kind and axes, a view's shape or axes), then its dtype and shape, e.g.
/// {"reduce sum axes=[1]", "f32[N]"}. Inputs and outputs also carry their names.
std::vector<std::string> dot_node_label(const Graph& g, NodeId id);

/// A `digraph` with one node per graph node labelled by dot_node_label, inputs drawn as
/// ellipses, outputs with a double border, each edge labelled with the shape flowing along it.
/// Nodes named in `clusters` are drawn inside a box per cluster. Deterministic: nodes and edges
/// come in node order.
std::string graph_to_dot(const Graph& g, const std::string& title = "",
                         const std::vector<DotCluster>& clusters = {});

/// The fused Program: each kernel a cluster coloured by its kind, holding its sub-graph's nodes;
/// buffers drawn between kernels (inputs as ellipses, outputs with a double border), every edge
/// into or out of a buffer labelled with the buffer's shape.
std::string program_to_dot(const Program& p, const std::string& title = "");

}  // namespace fuse::ir
