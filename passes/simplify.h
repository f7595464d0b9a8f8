// Simplification: CSE, constant folding, algebraic identities, view folding, dead-code elimination.
//
// Thread safety: a pure function; safe from any thread.
#pragma once

#include "ir/graph.h"

namespace fuse::passes {

struct SimplifyOptions {
  /// Also apply identities that change NaN, infinity or signed-zero results (x + 0.0 -> x,
  /// x * 0.0 -> 0.0, x - (-0.0) -> x) or the last bit (f64 x ** 2 -> x * x).
  bool fast_math = false;
};

/// Returns an equivalent graph (same results in the reference interpreter), rewritten to a
/// fixed point:
/// - CSE: structurally identical nodes (kind, dtype, shape, operands, attributes) are merged;
///   inputs never are. Rand nodes with the same seed and shape are identical (counter-based).
/// - constant folding: a node whose operands are all constants becomes a constant when its
///   result is small; elementwise operands that are splat constants (every element equal) become
///   literals of the body, so `x * c` is one node.
/// - identities inside elementwise bodies that keep every result bit of the interpreter (x*1,
///   x/1, x-0.0, x+(-0.0), --x, x**1, x**2 -> x*x except for f64; x+0 and x*0 only for integers;
///   with fast_math also x+0.0, x*0.0 and f64 x**2); an elementwise node that reduces to one of
///   its operands is replaced by it.
/// - view folding: permute of permute, reshape of reshape (or of expand_dims/squeeze),
///   broadcast_to of broadcast_to, squeeze of the axis expand_dims added, and views that change
///   nothing are removed.
/// - DCE: nodes no output depends on are removed, except inputs (the program's interface).
/// Node order stays topological, locations are kept and outputs keep their names (two outputs may
/// name the same node). Explicit broadcasts (passes/broadcast.h) stay explicit.
ir::Graph simplify(const ir::Graph& g, const SimplifyOptions& options = {});

}  // namespace fuse::passes
