// Shape inference and broadcasting: makes every implicit broadcast an explicit view.
//
// Thread safety: a pure function (a new Graph from a const one); safe from any thread.
#pragma once

#include "ir/graph.h"

namespace fuse::passes {

/// Returns a graph where
/// - every elementwise operand has exactly the output's shape (broadcast_to views inserted
///   where NumPy rules broadcast it);
/// - every matmul has operands of rank >= 2, equal batch dims and the result's dtype:
///   1-D operands get expand_dims (and the result a squeeze), batch dims get broadcast_to,
///   operands of another dtype get a cast.
/// Node locations are kept, so errors found later still point at the user's line.
ir::Graph make_broadcasts_explicit(const ir::Graph& g);

}  // namespace fuse::passes
