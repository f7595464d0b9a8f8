// The stable text form of a Graph, one node per line (what `fusec --emit=graph` prints and the
// golden tests compare against).
//
// Thread safety: pure functions of their argument; safe from any thread on a Graph nobody modifies.
#pragma once

#include <string>

#include "ir/graph.h"

namespace fuse::ir {

/// One line, without the leading "%id = ": e.g. `reduce.sum(%2) axes=[1] keepdims=true : f32[N, 1]`.
std::string print_node(const Graph& g, NodeId id);
/// Every node as `%id = ...`, then the outputs, inside `graph { ... }`.
std::string print_graph(const Graph& g);

}  // namespace fuse::ir
