// The reference interpreter: runs a Graph directly on host arrays. It is the definition of what
// every op means; every backend is tested against it. It favours being obviously right over
// being fast, but evaluates elementwise bodies column-wise so that graphs of millions of elements
// and thousands of small random graphs stay cheap to check.
//
// Thread safety: interpret() keeps its state per call: any number may run at once on graphs and
// inputs nobody is modifying.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/host_array.h"
#include "ir/shape.h"

namespace fuse::ir {

using TensorMap = std::map<std::string, HostArray>;

/// Checks `inputs` against the graph's input nodes and binds the shape symbols from them.
/// Throws Error, at the input node's location, when an input is missing, when an input's dtype
/// differs from the declared one, when its shape does not fit the declared shape (another rank,
/// another constant dim, or a symbol already bound to another size: the message names the
/// symbol and both sizes), when its byte count does not match its shape, or when `inputs` holds
/// a name that is not an input of the graph. `known` holds sizes bound beforehand (a fused
/// kernel's sub-graph may use a symbol none of its own inputs carries).
SymbolBindings bind_inputs(const Graph& g, const TensorMap& inputs, const SymbolBindings& known = {});

/// Runs the graph: binds the inputs (bind_inputs), evaluates in order every node that an output
/// depends on (evaluate_node; values are dropped after their last use), and returns each
/// output's value under its name. A pure function of its arguments: safe from any threads.
TensorMap interpret(const Graph& g, const TensorMap& inputs, const SymbolBindings& known = {});

/// For each node, the last node that reads it (g.nodes.size() for an output), or 0 when no output
/// depends on it: the nodes interpret evaluates, and when it may drop each value. Throws Error
/// when an output is not a node or a node reads one that does not precede it.
std::vector<size_t> last_uses(const Graph& g);

/// The value of node `n`, given operands[k] = the value of n.inputs[k] and the bound symbols.
/// The result has n.dtype and the shape evaluate(n.shape, symbols). Exact semantics:
///  - Input: has no operands; its value comes from the inputs (interpret): throws here.
///  - Constant: its value. Arange: i64 [0, 1, ..., n-1]. Rand: out[i] = rand_uniform(seed, i)
///    for the flat row-major index i.
///  - Elementwise: out[idx] = body(in0[bidx0], in1[bidx1], ...) with NumPy broadcasting (shapes
///    aligned from the right; a size-1 or missing dim reads index 0), each scalar op as defined
///    by evaluate_scalar_op (f32 ops computed in f64 and rounded once per op; integers wrap;
///    integer x // 0 and x % 0 are 0).
///  - Reduce: each output element folds the reduced elements in row-major order.
///    Sum, Prod and Mean of floats accumulate in f64 and round once to the result dtype; Mean
///    divides the f64 sum by the count (0 / 0 = NaN for an empty axis); Sum and Prod of bool and
///    integers wrap at the result's width; Mean of integers sums in f64. Max/Min return NaN if
///    any reduced element is NaN. Any/All test x != 0 (so NaN counts as true, as in NumPy).
///    Empty reductions give sum 0, prod 1, max -inf or the dtype's minimum (false for bool),
///    min +inf or the maximum (true for bool), any false, all true, custom the identity.
///    Custom: acc = identity, then acc = combiner(acc, x) for each reduced x.
///  - Matmul: np.matmul. Each operand is first converted to the result dtype. A 1-D `a` is a
///    row [1, K] and a 1-D `b` a column [K, 1], that dim dropped from the result; batch dims
///    broadcast. out[..., i, j] = sum over k = 0..K-1 of a[..., i, k] * b[..., k, j], summed in
///    increasing k: floats in f64 (f32 rounded once at the end), integers wrapping; K = 0 gives 0.
///  - Views produce copies: broadcast_to (as elementwise broadcasting), reshape / expand_dims /
///    squeeze (same elements in row-major order, new shape), permute
///    (out.shape[k] = in.shape[perm[k]], out[i_0, ..] = in[j] with j[perm[k]] = i_k).
///  - Take, TakeAlongAxis, IndexAdd, Bincount, Histogram: as documented at GatherAttrs and
///    HistogramAttrs in ir/graph.h. A bad data-dependent index (or bincount value) throws the
///    run-time Error made by index_error, at the node's location; nothing is returned.
/// Throws Error when the operands do not fit the node (count, dtype or shape).
/// np.pad's source index along one axis of size n for padded position i (relative to the
/// operand: i < 0 is before it): i itself inside; outside, -1 for Constant (or an empty axis),
/// the nearest edge for Edge, the mirror image (repeated, edges not repeated) for Reflect.
int64_t pad_source_index(PadMode mode, int64_t i, int64_t n);
HostArray evaluate_node(const Node& n, const std::vector<const HostArray*>& operands,
                        const SymbolBindings& symbols);

/// The run-time error of a bad data-dependent index, shared by the interpreter and the
/// compiled executables so that all report it alike: "take: index 7 is out of range for axis 0
/// of size 5" (bincount: "value 7 is out of range for minlength 5"), at `loc`.
Error index_error(OpKind op, int64_t index, int64_t size, int axis, const SourceLoc& loc);

}  // namespace fuse::ir
