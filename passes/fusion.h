// Fusion: partitions a graph (broadcasts explicit) into groups that each become one kernel.
//
// Rules, in the spirit of XLA and TVM (every refusal is recorded with its reason):
// 1. elementwise chains and DAGs fuse, across views (broadcast, permute, reshape are index maps);
// 2. elementwise producers fuse into a reduction or a matmul operand (prologue);
// 3. elementwise consumers of a reduction or matmul fuse after it (epilogue); a matmul's
//    elementwise consumers in several kernels of its space all join its epilogue when they read
//    its values only at their own elements (one kernel writes each of their outputs);
// 4. reductions over trailing axes whose results are broadcast back over the same rows make one
//    row-wise kernel (softmax, layernorm, logsumexp); a row reduction that other kernels read
//    too is computed in that row-wise kernel and stored for them (layernorm's backward);
// 5. sibling groups over the same iteration space that read a common buffer fuse horizontally;
// 6. two matmuls never fuse; a producer with consumers in several kernels is recomputed in each
//    only when cheap (cost model below), otherwise materialized.
//
// Cost model: a node's cost is the sum of its body's scalar op costs (ir/scalar_ops.def: 1 for
// arithmetic, 8 for transcendental functions such as exp, log, sin, tanh, pow). Views,
// generators and ops of cost <= kCheapCost are "cheap": they may be recomputed in several kernels, across expanding
// broadcasts, and in matmul prologues. Anything else is computed once and materialized.
//
// Thread safety: pure functions (a Partition from a const Graph); safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/program.h"

namespace fuse::passes {

inline constexpr int kCheapCost = 4;

struct FusionGroup {
  ir::KernelKind kind = ir::KernelKind::Elementwise;  // Elementwise, Reduction, RowWise or Matmul
  std::vector<ir::NodeId> nodes;  // sorted (topological)
  /// Elementwise: the output space. Reduction and RowWise: the space reduced over. Matmul: C's.
  ir::Shape space;
  std::vector<int> axes;  // Reduction and RowWise: the reduced axes
};

/// An edge producer -> consumer that crosses a kernel boundary, and the rule that kept them apart.
struct FusionBoundary {
  ir::NodeId producer = -1;
  ir::NodeId consumer = -1;
  std::string reason;
};

struct Partition {
  std::vector<FusionGroup> groups;
  std::vector<FusionBoundary> boundaries;
};

struct FusionOptions {
  bool enabled = true;     // false: every op is its own kernel (the unfused baseline)
  bool horizontal = true;  // rule 5
};

/// The cost of evaluating one element of node `n` (see the cost model above).
int node_cost(const ir::Node& n);

/// Partitions every non-input node of `g` into groups. `g` must have explicit broadcasts.
Partition partition_graph(const ir::Graph& g, const FusionOptions& options = {});

/// One line per boundary: "%3 exp -> %5 matmul: <reason>", for `fusec --explain-fusion`.
std::string explain_fusion(const ir::Graph& g, const Partition& p);

}  // namespace fuse::passes
