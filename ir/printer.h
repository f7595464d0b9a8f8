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
/// np-views attrs as text: "starts=[0, N - 1] steps=[1, -1]", "before=[1] after=[2] mode=edge".
std::string slice_str(const SliceAttrs& a);
std::string pad_str(const PadAttrs& a, DType t);

}  // namespace fuse::ir
