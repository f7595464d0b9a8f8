// The rounding model: how far a correct compiled backend may be from the reference interpreter.
//
// The interpreter (ir/interpreter.h) defines every op: f32 ops computed in f64 and rounded once,
// float sums and matmuls accumulated in f64. A correct backend differs from it only by rounding:
// it accumulates f32 matmuls in f32 (as BLAS does), sums in another order, and computes f32
// transcendentals with polynomial approximations a few ulps off. A first-order running error
// analysis carries, next to every element of every node's reference value r, an absolute bound
// δ >= 0 on how far a backend's value may be from r. u is the unit roundoff of the node's dtype
// (f32 2^-24, f64 2^-53; 0 for bool and integers, which are exact), ulp(r) the spacing of the
// dtype's values at r, γ(n) = n·u / (1 - n·u) the bound on n roundings in any order.
//
//  - Input, Constant, Arange, Rand: δ = 0 (rand is Philox, computed identically everywhere).
//  - Views (broadcast_to, reshape, permute, expand_dims, squeeze): δ moves with the data.
//  - Elementwise: the body is evaluated op by op on the reference values (evaluate_scalar_op),
//    each scalar op p with operands x_k ± δ_k:
//      propagated(p) = the largest |p(y) - p(x)| over the grid of points y_k in
//        {x_k - δ_k, x_k - δ_k/2, x_k, x_k + δ_k/2, x_k + δ_k} (p evaluated in f64; for an integer
//        op, in i64 with the δ_k rounded up), or infinite when a point gives NaN and p(x) does not.
//        This is exact for the monotone and bilinear ops (+ - * / min max floor casts, exp, log,
//        sqrt, ...), and the midpoints catch a turn of sin and cos inside the interval. A jump
//        within reach (floor, round, a float->int cast's truncation) is part of the change, so a
//        float->int cast gets δ_int <= δ_float + 1, and integer ops then carry it exactly.
//      own(p) = ulps(p)·ulp(r) for a float transcendental (the CPU lowering's measured ulp
//        bounds, tests/test_cpu_accuracy.cpp: f32 exp 6, tanh 4, log2 and sigmoid 2, exp2, log,
//        rsqrt, sin, cos, tan and pow 1; f64 1: the same libm, but LLVM rewrites some calls, e.g.
//        pow(8, y) into exp2(3 * y), random graph seed 1919), plus ulp(r) when propagated > 0
//        (the result of other operands may round the other way); 0 otherwise (IEEE ops on the
//        same operands give the same result).
//      δ(p) = propagated(p) + own(p).
//    Decisions: a comparison is uncertain when its operands' intervals meet, |a - b| <= δa + δb
//    with δa + δb > 0; a float->bool cast when |x| <= δ; an uncertain bool gets δ = inf (its
//    output elements are not checked). not keeps δ; and/or are certain when a certain operand
//    decides them (false and ..., true or ...). select with a certain condition takes the chosen
//    operand's δ; with an uncertain one, max(δx, δy) + |x - y|. Any other op with an infinite
//    operand bound has an infinite bound.
//  - Reduce over n elements x_i (n the product of the reduced dims):
//      sum: Σ δ_i + γ(n)·Σ |x_i|; mean: that divided by n (integer sums: Σ δ_i, wrapping exact);
//      prod: Π(|x_i| + δ_i) - Π|x_i| + γ(n)·Π|x_i|;
//      max, min: max_i δ_i (both are 1-Lipschitz in the largest element change);
//      any, all: an element is uncertain when |x_i| <= δ_i with δ_i > 0; the result is certain
//        (δ = 0) when a certain element decides it (any: a certain nonzero; all: a certain zero)
//        or no element is uncertain, else δ = inf;
//      custom: the combiner folded in row-major order, each step bounded like an elementwise body.
//  - Matmul over K (operands converted to the result dtype first):
//      Σ_k (|a|·δb + δa·|b| + δa·δb) + γ(K)·Σ_k |a|·|b|.
// Any δ that comes out NaN is infinite. The bound of a graph output is what compare_arrays
// (runtime/compare.h) holds a backend's output to.
//
// The bounds are worst-case and element-wise: errors are assumed to add up with the worst signs,
// and the shared errors of related values (e and sum(e) in a softmax) are not known to cancel. So
// a bound is never tripped by a correct backend but grows along chains of matmuls (each multiplies
// it by about Σ|a||b| / |Σab|, √K for random signs) far beyond the errors that occur.
//
// Thread safety: pure functions of their arguments; safe from any thread.
#pragma once

#include "ir/interpreter.h"

namespace fuse::ir {

/// The reference values of a graph's outputs (as interpret gives them) and, under the same
/// names, their error bounds: f64 arrays of the outputs' shapes.
struct ValuesAndBounds {
  TensorMap values;
  TensorMap bounds;
};

/// Interprets the graph (interpret's semantics, errors and input checks) and carries the error
/// bounds of the rounding model above alongside.
ValuesAndBounds interpret_with_bounds(const Graph& g, const TensorMap& inputs, const SymbolBindings& known = {});

/// The error bound of node `n` (the rules above): operands[k] and bounds[k] are the reference
/// value and the bound of n.inputs[k], `value` n's reference value (evaluate_node).
HostArray node_error_bound(const Node& n, const std::vector<const HostArray*>& operands,
                           const std::vector<const HostArray*>& bounds, const HostArray& value,
                           const SymbolBindings& symbols);

/// The unit roundoff of a dtype: 2^-24 for f32, 2^-53 for f64, 0 for bool and integers.
double unit_roundoff(DType t);

/// The ulps a correct backend's float `op` may be from the interpreter's on the same operands
/// (0 for IEEE ops, which round the same exact result).
int transcendental_ulps(ScalarOp op, DType t);

}  // namespace fuse::ir
