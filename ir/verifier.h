// Structural invariants of a Graph, checked after every pass in tests and debug builds.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace fuse::ir {

struct VerifyOptions {
  /// After the broadcasting pass: every elementwise operand has exactly the output's shape and
  /// every matmul operand has rank >= 2 with the batch dims of the result.
  bool explicit_broadcasts = false;
};

/// Every broken invariant, one message each ("%3: elementwise: ..."); empty when the graph is valid.
std::vector<std::string> verify(const Graph& g, VerifyOptions options = {});
/// Throws fuse::ir::Error listing the problems, prefixed by `stage` (e.g. "after broadcast").
void verify_or_throw(const Graph& g, const std::string& stage, VerifyOptions options = {});

/// Invariants of a ScalarFn: args precede users, arities, parameter indices, operand dtypes.
std::vector<std::string> verify_scalar_fn(const ScalarFn& fn);

}  // namespace fuse::ir
