// Reverse-mode automatic differentiation on the graph: a gradient is just more graph.
//
// vjp appends the backward nodes to the graph being differentiated, so the backward pass is an
// ordinary graph: it is simplified, fused, tiled and compiled like any forward graph, forward
// and backward can share kernels, and the result can be differentiated again (higher order)
// wherever its ops are differentiable.
//
// Rules, per op (ct is the cotangent of the op's result):
// - Elementwise: the scalar body is differentiated symbolically (scalar_vjp below); each
//   operand's gradient is one elementwise node over the forward operands and ct, so the forward
//   values it needs are recomputed inside it rather than read back from memory, then summed
//   over the axes the operand was broadcast along.
//   Conventions at kinks: relu'(0) = 0, abs'(0) = 0 (sign(0) = 0), maximum/minimum of equal
//   values share the gradient equally (0.5 each). floor, ceil, round, sign, floordiv have a zero
//   derivative; mod(a, b) gives (1, -floordiv(a, b)); pow(a, b) gives b*a^(b-1) and
//   a^b*log(a) (the latter only when b is computed from a differentiated value).
//   Comparisons, logical ops, isnan/isinf/isfinite, and every integer or bool value carry no
//   gradient; a cast passes the gradient between float types and stops at integers and bool.
// - Reduce: sum broadcasts ct back; mean also divides by the count; prod gives ct*prod/x (the
//   product of the others where x is zero); max and min send ct to the elements equal to the
//   result, shared equally among ties (as JAX). any/all carry no gradient. A user combiner is
//   an error: "grad of a user combiner is not supported".
// - Matmul (batched, 1-D operands included): ct @ b^T and a^T @ ct, summed over the batch dims
//   an operand was broadcast along.
// - Views: the inverse view (broadcast_to: sum over the broadcast axes; reshape back; the
//   inverse permutation; squeeze for expand_dims and expand_dims for squeeze).
// - Input, Constant, Arange, Rand: leaves.
//
// Thread safety: pure functions of their arguments; vjp modifies only the graph it is given.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace fuse::passes {

/// The gradient of `body`'s result with respect to its parameter `wrt`, times a cotangent: a
/// function of (params of body..., ct) -> d body / d p_wrt * ct, where ct has the result's dtype.
/// Parameters the derivative does not read are dropped: `used_params` receives the indices (into
/// body.params, and body.params.size() for ct) of the parameters the returned function takes, in
/// order. Returns an empty function (no nodes) when the result does not depend differentiably
/// on p_wrt (an integer or bool parameter or result, or only through comparisons, floor, ...).
ir::ScalarFn scalar_vjp(const ir::ScalarFn& body, int wrt, std::vector<int>& used_params);

/// Appends to `g` the nodes that compute the vector-Jacobian product of `y` with respect to each
/// node of `wrt`: the gradients of sum(y * cotangent). `cotangent` must have y's shape and dtype;
/// -1 means ones (for a scalar y, plain dy/dx). Returns one node per `wrt` node, of its shape and
/// dtype (zeros when y does not depend on it). Throws ir::Error when y or a wrt node is not a
/// float, when the cotangent does not fit y, and at the op's location when a node on the path
/// has no gradient rule (a user combiner).
std::vector<ir::NodeId> vjp(ir::Graph& g, ir::NodeId y, const std::vector<ir::NodeId>& wrt,
                            ir::NodeId cotangent = -1);

struct GradOptions {
  /// The name of an input of the graph holding the cotangent of the output (a VJP); empty: ones.
  std::string cotangent;
  /// The prefix of the gradient outputs' names: "grad_" gives grad_w for input w.
  std::string prefix = "grad_";
};

/// A new graph whose outputs are `g`'s outputs followed by one output per name in `wrt`:
/// prefix + name, the gradient of output `output` with respect to that input (same shape and
/// dtype). Without a cotangent a non-scalar output is differentiated as sum(output). Throws
/// ir::Error naming the output or input when it is unknown or not a float, or the cotangent
/// input when it does not match the output's shape and dtype.
ir::Graph grad(const ir::Graph& g, const std::string& output, const std::vector<std::string>& wrt,
               const GradOptions& options = {});

}  // namespace fuse::passes
