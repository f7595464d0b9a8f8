// Structural invariants of a Graph and of a Program, checked after every pass (PipelineOptions::
// verify_each_pass, on by default).
//
// Thread safety: pure functions that only read their argument; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/program.h"

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

/// Invariants of a Program: every kernel's body valid, its buffers in range and shaped and typed
/// like the body's inputs and outputs, reduced axes in range, intermediates in planned slots, the
/// launch order a permutation in which every buffer is written before it is read, and (once
/// scheduled) a loop form of the schedule's target that the kernel's body allows, with the
/// parameters that form reads. Every broken invariant, one message each ("k1_reduction: ...").
std::vector<std::string> verify(const Program& p);
/// Throws fuse::ir::Error listing the problems, prefixed by `stage` (e.g. "after scheduling").
void verify_or_throw(const Program& p, const std::string& stage);

/// Invariants of a ScalarFn: args precede users, arities, parameter indices, operand dtypes.
std::vector<std::string> verify_scalar_fn(const ScalarFn& fn);

}  // namespace fuse::ir
