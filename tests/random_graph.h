// Seeded random graphs for differential testing: the passes and every backend are checked against
// the reference interpreter on thousands of small graphs that no one wrote by hand.
//
// A case is fully determined by its seed (a splitmix64 stream, not <random>'s distributions, so
// a seed reproduces the same graph with every standard library). Graphs mix elementwise bodies
// traced like user functions, implicit broadcasting, views, reductions of every kind, matmuls and
// generators, with softmax/layernorm-like "reduce with keepdims, broadcast back" patterns often.
// Float bodies keep values bounded (exp only of bounded values, division only by 1 + x*x) so
// that a tolerance stays meaningful; integer ops may wrap, which is exact.
//
// Header-only so that any test can include it without a library of its own.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/rounding_model.h"
#include "runtime/compare.h"

namespace fuse::testing {

struct RandomGraphOptions {
  int max_nodes = 12;            // ops are added until a random 1..max_nodes exist (a pattern may pass it)
  int max_inputs = 4;            // inputs, the first 1-2 made up front, the others when an op needs one
  int64_t max_elements = 2048;   // no tensor exceeds this at the case's symbol bindings
  bool allow_matmul = true;
  bool allow_symbolic = true;    // dims `N` and `M`, bound by the case to 1..9
  bool allow_integer = true;     // bool, i32 and i64 tensors
  bool allow_empty = true;       // rarely, a dim or a binding of size 0
  bool allow_special_values = true;  // rarely, NaN, infinities and -0.0 in float inputs
  // User combiners only of the kinds a backend may fold in chunks (associative, with their
  // identity; exact in floats): CUDA's reductions, which assume it as NumPy's reduce does.
  // The same random choices are made, so the graphs differ only in those combiners.
  bool associative_combiners = false;
  // Issue 16's NumPy ops too: basic indexing, concatenate/stack, pad, argmax/argmin, cumsum/
  // cumprod. Off by default so that the seeds of the older tests keep drawing the same graphs.
  bool numpy_ops = false;
  // Issue 16's gather/scatter ops too: take, take_along_axis, index_add, bincount, histogram.
  // Indices are valid by construction (wrapped into [-n, n) or [0, n) inside the graph, or an
  // argmax), histogram ranges put values on edges and outside. Off by default, as numpy_ops.
  bool gather_scatter_ops = false;
};

struct RandomCase {
  ir::Graph graph;
  ir::TensorMap inputs;
  ir::SymbolBindings symbols;  // as bound from `inputs`
  std::string description;     // one line: seed, sizes, the patterns used
};

RandomCase random_case(uint64_t seed, const RandomGraphOptions& options = {});
/// Values for every input of `g`, shapes evaluated under `symbols`: floats mostly in [-2, 2]
/// (sometimes multiples of 0.5, to hit ties and equalities), integers in [-6, 6] (sometimes near
/// the type's limits, to wrap), bools 0/1; with special_values, rarely NaN, +-inf and -0.0.
ir::TensorMap random_inputs(const ir::Graph& g, const ir::SymbolBindings& symbols, uint64_t seed,
                            bool special_values = true);
/// Compares two output maps: names, dtypes and shapes must match; bool and integer elements
/// exactly; float elements within |e - a| <= atol + rtol * |e|, NaN equal to NaN, infinities only
/// to the same infinity. Returns "" or a description of the first mismatch.
std::string compare_outputs(const ir::TensorMap& expected, const ir::TensorMap& actual, double rtol,
                            double atol);
/// Compares a backend's outputs with the interpreter's under the rounding model
/// (ir::interpret_with_bounds, runtime::compare_arrays with bounds): names as above, each element
/// within its error bound. Returns "" or a description of the first mismatch.
std::string compare_outputs(const ir::ValuesAndBounds& expected, const ir::TensorMap& actual);

// ------------------------------------------------------------------------------------------------

namespace detail {

/// splitmix64: tiny, fast and the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
  int range(int lo, int hi) { return lo + below(hi - lo + 1); }  // inclusive
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return uniform() < p; }
  /// An index drawn with the given relative weights.
  int weighted(const std::vector<int>& weights) {
    int total = 0;
    for (int w : weights) total += w;
    int r = below(total);
    for (size_t i = 0; i < weights.size(); ++i) {
      if (r < weights[i]) return static_cast<int>(i);
      r -= weights[i];
    }
    return 0;
  }
  template <class T> const T& pick(const std::vector<T>& v) { return v[below(static_cast<int>(v.size()))]; }

 private:
  uint64_t state_;
};

using runtime::format_double;
using ir::DType;
using ir::NodeId;
using ir::ScalarBuilder;
using ir::ScalarId;
using ir::ScalarOp;
using ir::Shape;

/// Builds one random graph. Every op choice goes through ir::add_*, which validates it; a choice
/// that is invalid (or too large) throws, and the graph is rolled back to before it.
class GraphGenerator {
 public:
  GraphGenerator(uint64_t seed, const RandomGraphOptions& options) : rng_(seed), opt_(options) {}

  ir::Graph run() {
    if (opt_.allow_symbolic && rng_.chance(0.4)) {
      bool empty = opt_.allow_empty && rng_.chance(0.03);
      bindings_["N"] = empty ? 0 : rng_.range(1, 9);
      bindings_["M"] = rng_.range(1, 9);
    }
    int first_inputs = std::min(opt_.max_inputs, rng_.range(1, 2));
    for (int i = 0; i < first_inputs; ++i) {
      Shape s = random_shape(rng_.weighted({1, 3, 4, 3}));
      new_input(s, random_dtype());
    }
    int target = rng_.range(1, std::max(1, opt_.max_nodes));
    for (int attempt = 0; attempt < 40 * target && added() < target; ++attempt) try_op();
    add_outputs();
    return std::move(g_);
  }

  const ir::SymbolBindings& bindings() const { return bindings_; }

  std::string notes() const {
    std::string s;
    for (const std::string& n : notes_) s += (s.empty() ? "" : ", ") + n;
    return s;
  }

 private:
  // ---------------------------------------------------------------- bookkeeping

  int added() const { return static_cast<int>(g_.nodes.size()) - inputs_; }
  const ir::Node& node(NodeId id) const { return g_.node(id); }
  const Shape& shape(NodeId id) const { return g_.node(id).shape; }
  int rank(NodeId id) const { return g_.node(id).rank(); }
  DType dtype(NodeId id) const { return g_.node(id).dtype; }

  int64_t size_of(const Shape& s) const {
    int64_t n = 1;
    for (const ir::Dim& d : s) n *= ir::evaluate(d, bindings_);
    return n;
  }

  // One random op; rolled back when any ir::add_* refuses it or a result is too large.
  void try_op() {
    size_t nodes_before = g_.nodes.size();
    int inputs_before = inputs_;
    size_t notes_before = notes_.size();
    try {
      random_op();
      for (size_t i = nodes_before; i < g_.nodes.size(); ++i)
        if (g_.nodes[i].rank() > 4 || size_of(g_.nodes[i].shape) > opt_.max_elements)
          throw ir::Error("too large for a test case");
    } catch (const ir::Error&) {
      g_.nodes.resize(nodes_before);
      inputs_ = inputs_before;
      notes_.resize(notes_before);
    }
  }

  NodeId new_input(Shape s, DType t) {
    if (inputs_ >= opt_.max_inputs) throw ir::Error("no inputs left");
    ++inputs_;
    return ir::add_input(g_, "x" + std::to_string(inputs_ - 1), t, std::move(s));
  }

  DType random_dtype() {
    if (!opt_.allow_integer) return rng_.chance(0.85) ? DType::F32 : DType::F64;
    static const DType types[] = {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool};
    return types[rng_.weighted({60, 10, 12, 8, 10})];
  }

  std::vector<std::string> symbols() const {
    std::vector<std::string> s;
    for (const auto& [name, size] : bindings_) s.push_back(name);
    return s;
  }

  // Symbols only come from inputs, so every symbol a node uses is bound when the graph runs.
  ir::Dim random_dim(bool allow_symbol) {
    if (allow_symbol && !bindings_.empty() && rng_.chance(0.3)) return ir::Dim::symbol(rng_.pick(symbols()));
    if (opt_.allow_empty && rng_.chance(0.01)) return 0;
    return rng_.chance(0.2) ? 1 : rng_.range(2, 7);
  }

  Shape random_shape(int rank) {
    Shape s;
    for (int i = 0; i < rank; ++i) s.push_back(random_dim(true));
    return s;
  }

  // A dim already used by some node, so a generator never introduces an unbound symbol.
  ir::Dim known_dim() {
    std::vector<ir::Dim> dims;
    for (const ir::Node& n : g_.nodes)
      for (const ir::Dim& d : n.shape) dims.push_back(d);
    if (dims.empty() || rng_.chance(0.3)) return random_dim(false);
    return rng_.pick(dims);
  }

  // Mostly one of the last nodes made, so graphs grow deep rather than wide, or a node nobody
  // uses yet, so that branches join again rather than die.
  NodeId pick(const std::function<bool(NodeId)>& ok = nullptr) {
    std::vector<NodeId> candidates, unused;
    std::vector<bool> used(g_.nodes.size(), false);
    for (const ir::Node& n : g_.nodes)
      for (NodeId in : n.inputs) used[in] = true;
    for (NodeId id = 0; id < static_cast<NodeId>(g_.nodes.size()); ++id) {
      if (ok && !ok(id)) continue;
      candidates.push_back(id);
      if (!used[id] && node(id).kind != ir::OpKind::Input) unused.push_back(id);
    }
    if (candidates.empty()) throw ir::Error("no operand fits");
    if (!unused.empty() && rng_.chance(0.3)) return rng_.pick(unused);
    if (rng_.chance(0.55)) {
      int recent = std::min<int>(3, static_cast<int>(candidates.size()));
      return candidates[candidates.size() - 1 - rng_.below(recent)];
    }
    return rng_.pick(candidates);
  }

  bool broadcastable(const Shape& a, const Shape& b) const {
    try {
      ir::broadcast_shapes({a, b}, "", {});
      return true;
    } catch (const ir::Error&) {
      return false;
    }
  }

  // A tensor of `like`'s trailing dims with some set to 1: it broadcasts against `like`.
  Shape broadcast_partner_shape(const Shape& like) {
    int keep = rng_.range(0, static_cast<int>(like.size()));
    Shape s(like.end() - keep, like.end());
    for (ir::Dim& d : s)
      if (rng_.chance(0.3)) d = 1;
    return s;
  }

  // An operand that broadcasts with `a`: an existing node, a new input or a generator.
  NodeId partner(NodeId a) {
    int choice = rng_.weighted({6, 2, 1, 1});
    if (choice == 0) return pick([&](NodeId id) { return broadcastable(shape(a), shape(id)); });
    if (choice == 1) {
      Shape s = broadcast_partner_shape(shape(a));
      return new_input(s, random_dtype());
    }
    if (choice == 2) return keepdims_reduction(a);
    return generator(broadcast_partner_shape(shape(a)));
  }

  std::vector<int64_t> random_axes(int rank) {
    std::vector<int64_t> axes;
    if (rank == 0 || rng_.chance(0.15)) return axes;  // every axis
    if (rng_.chance(0.5)) {
      int n = rng_.range(1, rank);  // trailing axes: the row-wise shape
      for (int a = rank - n; a < rank; ++a) axes.push_back(rng_.chance(0.3) ? a - rank : a);
      return axes;
    }
    for (int a = 0; a < rank; ++a)
      if (rng_.chance(0.5)) axes.push_back(rng_.chance(0.3) ? a - rank : a);
    if (axes.empty()) axes.push_back(rng_.below(rank));
    return axes;
  }

  // ---------------------------------------------------------------- scalar bodies

  ScalarId literal(ScalarBuilder& b) {
    switch (rng_.below(6)) {
      case 0: return b.literal(0.5);
      case 1: return b.literal(-1.5);
      case 2: return b.literal(2.0);
      case 3: return b.literal_int(rng_.range(-3, 3));
      case 4: return b.literal_bool(rng_.chance(0.5));
      default: return b.literal(0.25 * rng_.range(-8, 8));
    }
  }

  // 1 + x*x in x's float type: a denominator that is never near 0.
  static ScalarId positive(ScalarBuilder& b, ScalarId x) {
    return b.binary(ScalarOp::Add, b.literal(1.0), b.binary(ScalarOp::Mul, x, x));
  }

  // A unary transform that keeps floats bounded (or grows them at most linearly).
  ScalarId unary(ScalarBuilder& b, ScalarId x) {
    DType t = b.dtype(x);
    if (t == DType::Bool) {
      switch (rng_.below(4)) {
        case 0: return b.unary(ScalarOp::Not, x);
        case 1: return b.cast(x, rng_.chance(0.5) ? DType::I32 : DType::F32);
        case 2: {
          ScalarId then = literal(b);
          return b.select(x, then, literal(b));
        }
        default: return b.binary(ScalarOp::Or, x, b.literal_bool(rng_.chance(0.5)));
      }
    }
    if (ir::is_integer(t)) {
      switch (rng_.below(10)) {
        case 0: return b.unary(ScalarOp::Neg, x);
        case 1: return b.unary(ScalarOp::Abs, x);
        case 2: return b.binary(ScalarOp::Add, b.binary(ScalarOp::Mul, x, b.literal_int(3)), b.literal_int(1));
        case 3: return b.binary(ScalarOp::Mod, x, b.literal_int(rng_.range(-3, 3)));
        case 4: return b.binary(ScalarOp::FloorDiv, x, b.literal_int(rng_.range(-3, 3)));
        case 5: return b.unary(ScalarOp::Relu, x);
        case 6: return b.binary(ScalarOp::Pow, x, b.literal_int(rng_.range(0, 3)));
        case 7: return b.binary(ScalarOp::Lt, x, b.literal_int(rng_.range(-2, 2)));
        case 8: return b.cast(x, rng_.chance(0.5) ? DType::F32 : DType::F64);
        default: return b.binary(ScalarOp::Minimum, x, b.literal_int(rng_.range(-2, 4)));
      }
    }
    switch (rng_.below(24)) {
      case 0: return b.unary(ScalarOp::Tanh, x);
      case 1: return b.unary(ScalarOp::Sin, x);
      case 2: return b.unary(ScalarOp::Cos, x);
      case 3: return b.unary(ScalarOp::Sigmoid, x);
      case 4: return b.unary(ScalarOp::Abs, x);
      case 5: return b.unary(ScalarOp::Neg, x);
      case 6: return b.unary(ScalarOp::Relu, x);
      case 7: return b.unary(rng_.pick(std::vector{ScalarOp::Floor, ScalarOp::Ceil, ScalarOp::Round}),
                             b.binary(ScalarOp::Mul, x, b.literal(2.0)));
      case 8: return b.binary(ScalarOp::Mul, x, literal(b));
      case 9: return b.binary(ScalarOp::Add, x, literal(b));
      case 10: return b.unary(ScalarOp::Exp, b.unary(ScalarOp::Tanh, x));
      case 11: return b.unary(ScalarOp::Exp, b.unary(ScalarOp::Neg, b.binary(ScalarOp::Mul, x, x)));
      case 12: return b.unary(ScalarOp::Log, positive(b, x));
      case 13: return b.unary(ScalarOp::Sqrt, b.unary(ScalarOp::Abs, x));
      case 14: return b.unary(ScalarOp::Rsqrt, positive(b, x));
      case 15: return b.binary(ScalarOp::Div, x, positive(b, x));
      case 16: return b.unary(ScalarOp::Exp2, b.unary(ScalarOp::Sin, x));
      case 17: return b.binary(ScalarOp::Pow, b.binary(ScalarOp::Add, b.unary(ScalarOp::Abs, x), b.literal(1.0)),
                               b.literal(rng_.chance(0.5) ? 0.5 : 2.0));
      case 18: return b.binary(rng_.chance(0.5) ? ScalarOp::Minimum : ScalarOp::Maximum, x, literal(b));
      case 19: return b.unary(ScalarOp::Tan, b.unary(ScalarOp::Tanh, x));
      case 20: return b.unary(ScalarOp::Log2, b.binary(ScalarOp::Add, b.unary(ScalarOp::Sigmoid, x), b.literal(0.5)));
      case 21: return b.cast(x, rng_.pick(std::vector{DType::I32, DType::I64, DType::F64, DType::F32}));
      case 22: return b.binary(ScalarOp::Gt, x, literal(b));
      default: return b.binary(ScalarOp::Mul, x, x);
    }
  }

  // A binary combination; divisors are kept away from 0 for floats (integer x // 0 is 0).
  ScalarId binary(ScalarBuilder& b, ScalarId x, ScalarId y) {
    bool floats = ir::is_float(b.dtype(x)) || ir::is_float(b.dtype(y));
    switch (rng_.below(16)) {
      case 0: case 1: return b.binary(ScalarOp::Add, x, y);
      case 2: return b.binary(ScalarOp::Sub, x, y);
      case 3: case 4: return b.binary(ScalarOp::Mul, x, y);
      case 5: return b.binary(rng_.chance(0.5) ? ScalarOp::Minimum : ScalarOp::Maximum, x, y);
      case 6: return floats ? b.binary(ScalarOp::Div, x, positive(b, b.cast(y, b.dtype(y) == DType::F64 ? DType::F64 : DType::F32)))
                            : b.binary(ScalarOp::FloorDiv, x, y);
      case 7: return floats ? b.binary(ScalarOp::Mod, x, b.binary(ScalarOp::Add, b.unary(ScalarOp::Abs, y), b.literal(1.5)))
                            : b.binary(ScalarOp::Mod, x, y);
      case 8: return b.binary(rng_.pick(std::vector{ScalarOp::Lt, ScalarOp::Le, ScalarOp::Eq, ScalarOp::Ne, ScalarOp::Ge}), x, y);
      case 9: return b.select(b.binary(ScalarOp::Gt, x, y), x, y);
      case 10: return b.binary(rng_.chance(0.5) ? ScalarOp::And : ScalarOp::Or, x, y);
      case 11: return b.unary(ScalarOp::Sqrt, b.binary(ScalarOp::Add, b.binary(ScalarOp::Mul, x, x), b.binary(ScalarOp::Mul, y, y)));
      case 12: return b.binary(ScalarOp::Mul, x, b.unary(ScalarOp::Sigmoid, y));
      case 13: return b.binary(ScalarOp::Pow, b.binary(ScalarOp::Add, b.unary(ScalarOp::Abs, b.cast(x, DType::F32)), b.literal(1.0)),
                               b.unary(ScalarOp::Tanh, y));
      case 14: return b.unary(ScalarOp::Exp, b.binary(ScalarOp::Mul, b.literal(-0.5),
                                                      b.binary(ScalarOp::Mul, b.binary(ScalarOp::Sub, x, y), b.binary(ScalarOp::Sub, x, y))));
      default: return b.binary(ScalarOp::Sub, b.binary(ScalarOp::Mul, x, b.literal(0.5)), y);
    }
  }

  // A user-function-like body over `params`: each parameter, maybe transformed, folded together
  // with random binary ops, maybe a final transform; now and then a select between them.
  ir::ScalarFn random_body(const std::vector<DType>& params) {
    for (int attempt = 0;; ++attempt) {
      try {
        ScalarBuilder b;
        std::vector<ScalarId> terms;
        for (DType t : params) terms.push_back(b.param(t));
        for (ScalarId& t : terms)
          while (rng_.chance(0.35)) t = unary(b, t);
        if (terms.size() == 3 && rng_.chance(0.3)) {
          terms = {b.select(b.binary(ScalarOp::Gt, terms[0], literal(b)), terms[1], terms[2])};
        }
        ScalarId r = terms[0];
        for (size_t i = 1; i < terms.size(); ++i) r = binary(b, r, terms[i]);
        if (rng_.chance(0.3)) r = binary(b, r, literal(b));
        while (rng_.chance(0.3)) r = unary(b, r);
        if (params.size() == 1 && b.peek().nodes.size() == 1) r = unary(b, r);  // not an identity map
        return b.finish({r});
      } catch (const ir::Error&) {
        if (attempt >= 20) throw;  // e.g. neg of bool: try another body
      }
    }
  }

  NodeId elementwise(const std::vector<NodeId>& inputs) {
    std::vector<DType> types;
    for (NodeId id : inputs) types.push_back(dtype(id));
    return ir::add_elementwise(g_, inputs, random_body(types), {}, inputs.size() == 1 ? "map" : "zip");
  }

  // An elementwise node with a fixed body `fn(builder, params)`.
  NodeId traced(const std::vector<NodeId>& inputs,
                const std::function<ScalarId(ScalarBuilder&, const std::vector<ScalarId>&)>& fn) {
    ScalarBuilder b;
    std::vector<ScalarId> params;
    for (NodeId id : inputs) params.push_back(b.param(dtype(id)));
    return ir::add_elementwise(g_, inputs, b.finish({fn(b, params)}));
  }

  NodeId as_float(NodeId x) { return ir::is_float(dtype(x)) ? x : ir::add_cast(g_, x, DType::F32); }

  // ---------------------------------------------------------------- ops

  void random_op() {
    std::vector<int> weights = {8, 10, 9, 6, 9, opt_.allow_matmul ? 4 : 0, 3, 2, 2, 1, opt_.numpy_ops ? 30 : 0,
                                opt_.gather_scatter_ops ? 30 : 0};
    switch (rng_.weighted(weights)) {
      case 0: elementwise({pick()}); break;
      case 1: zip(); break;
      case 2: row_pattern(); break;
      case 3: reduction(pick()); break;
      case 4: view(pick()); break;
      case 5: matmul(); break;
      case 6: {
        NodeId x = pick();
        NodeId gen = generator(broadcast_partner_shape(shape(x)));
        if (rng_.chance(0.6)) elementwise({x, gen});
        break;
      }
      case 7: select(); break;
      case 8: cast(pick()); break;
      case 10: numpy_op(pick()); break;
      case 11: gather_scatter_op(); break;
      default: {  // a copy of a node, for common-subexpression elimination to find
        NodeId x = pick([&](NodeId id) { return node(id).kind != ir::OpKind::Input; });
        g_.add(ir::Node(node(x)));
        notes_.push_back("duplicate");
        break;
      }
    }
  }

  // ---------------------------------------------------------------- NumPy ops (issue 16)

  int64_t size_now(const ir::Dim& d) const { return ir::evaluate(d, bindings_); }

  // A random Python slice item for an axis of `n` elements now: bounds negative or not, omitted
  // or not, steps of either sign; sometimes an integer index (in range at these bindings).
  ir::IndexItem random_index_item(int64_t n) {
    ir::IndexItem item;
    if (n > 0 && rng_.chance(0.2)) {
      item.kind = ir::IndexItem::Kind::Integer;
      item.index = rng_.chance(0.5) ? rng_.range(0, n - 1) : -rng_.range(1, n);
      return item;
    }
    item.step = rng_.pick(std::vector<int64_t>{1, 1, 1, 2, 3, -1, -2});
    if (rng_.chance(0.6)) item.start_int = rng_.range(-4, 4);
    if (rng_.chance(0.6)) item.stop_int = rng_.range(-4, 4);
    return item;
  }

  static ir::IndexItem item_of_kind(ir::IndexItem::Kind kind) {
    ir::IndexItem item;
    item.kind = kind;
    return item;
  }

  void numpy_op(NodeId x) {
    const Shape s = shape(x);
    const int r = rank(x);
    switch (rng_.below(6)) {
      case 0: {  // basic indexing: a slice per axis, sometimes None or a leading ...
        std::vector<ir::IndexItem> items;
        if (rng_.chance(0.2)) items.push_back(item_of_kind(ir::IndexItem::Kind::Ellipsis));
        for (int k = items.empty() ? 0 : std::max(r - 1, 0); k < r; ++k) items.push_back(random_index_item(size_now(s[k])));
        if (rng_.chance(0.2)) items.insert(items.begin() + rng_.below(static_cast<int>(items.size()) + 1),
                                           item_of_kind(ir::IndexItem::Kind::NewAxis));
        ir::add_index(g_, x, items);
        notes_.push_back("index");
        break;
      }
      case 1: {  // concatenate x with an elementwise function of itself, or stack
        if (r == 0 && rng_.chance(0.5)) throw ir::Error("no axis to concatenate");
        NodeId other = traced({x}, [&](ScalarBuilder& b, const std::vector<ScalarId>& p) { return unary(b, p[0]); });
        if (dtype(other) != dtype(x)) other = ir::add_cast(g_, other, dtype(x));
        bool stack = r == 0 || rng_.chance(0.3);
        int64_t axis = rng_.range(-(r + (stack ? 1 : 0)), r - (stack ? 0 : 1));
        std::vector<NodeId> parts = rng_.chance(0.5) ? std::vector{x, other} : std::vector{other, x, x};
        stack ? ir::add_stack(g_, parts, axis) : ir::add_concatenate(g_, parts, axis);
        notes_.push_back(stack ? "stack" : "concatenate");
        break;
      }
      case 2: {  // pad: constant anywhere; edge and reflect only where the axis is not empty
        if (r == 0) throw ir::Error("nothing to pad");
        ir::PadMode mode = rng_.pick(std::vector{ir::PadMode::Constant, ir::PadMode::Edge, ir::PadMode::Reflect});
        std::vector<ir::Dim> before, after;
        for (int k = 0; k < r; ++k) {
          bool pad = rng_.chance(0.6) && (mode == ir::PadMode::Constant || size_now(s[k]) > 0);
          before.push_back(pad ? rng_.range(0, 3) : 0);
          after.push_back(pad ? rng_.range(0, 3) : 0);
        }
        ir::add_pad(g_, x, before, after, mode, rng_.chance(0.5) ? 0.0 : 1.5);
        notes_.push_back("pad." + std::string(ir::pad_mode_name(mode)));
        break;
      }
      case 3: {  // argmax/argmin of one axis or all, where the reduced elements are not empty now
        if (dtype(x) == DType::Bool && rng_.chance(0.5)) throw ir::Error("fewer bool argmaxes");
        std::vector<int64_t> axes = rng_.chance(0.3) || r == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{rng_.range(-r, r - 1)};
        int64_t reduced = 1;
        for (int k = 0; k < r; ++k)
          if (axes.empty() || (axes[0] + r) % r == k) reduced *= size_now(s[k]);
        if (reduced == 0) throw ir::Error("argmax of an empty axis");
        ir::ReduceKind kind = rng_.chance(0.5) ? ir::ReduceKind::ArgMax : ir::ReduceKind::ArgMin;
        ir::add_reduce(g_, x, kind, axes, rng_.chance(0.3));
        notes_.push_back(std::string(ir::reduce_kind_name(kind)));
        break;
      }
      case 4: {  // cumsum; cumprod of values near 1, so that long products stay finite
        if (r == 0) throw ir::Error("no axis to scan");
        int64_t axis = rng_.range(-r, r - 1);
        bool prod = rng_.chance(0.4);
        NodeId in = x;
        if (prod && ir::is_float(dtype(x)))
          in = traced({x}, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
            return b.binary(ScalarOp::Add, b.literal(1.0), b.binary(ScalarOp::Mul, b.literal(0.125), b.unary(ScalarOp::Tanh, p[0])));
          });
        ir::add_scan(g_, in, prod ? ir::ReduceKind::Prod : ir::ReduceKind::Sum, axis);
        notes_.push_back(prod ? "cumprod" : "cumsum");
        break;
      }
      default: {  // a stencil: neighbours along the last axis, one kernel with the consumer
        if (r == 0 || size_now(s[r - 1]) < 3) throw ir::Error("too short for a stencil");
        auto shifted = [&](int64_t from, int64_t to) {
          std::vector<ir::IndexItem> items{item_of_kind(ir::IndexItem::Kind::Ellipsis), {}};
          items[1].start_int = from;
          if (to) items[1].stop_int = to;
          return ir::add_index(g_, x, items);
        };
        elementwise({shifted(0, -2), shifted(1, -1), shifted(2, 0)});
        notes_.push_back("stencil");
        break;
      }
    }
  }

  // ---------------------------------------------------------------- gather/scatter (issue 16)

  // Indices for an axis of `n` elements now, valid by construction: `i` (a node of any dtype)
  // wrapped by a floor modulo into [-n, n) (NumPy's range: negative ones count from the end) or
  // [0, n) when `non_negative` (bincount), or clipped into it; i32 or i64. A float `i` is floored
  // first: its index may then be uncertain, which the rounding model makes an unbounded result.
  // `n` is the size at the case's bindings, a literal: a case runs only at its own bindings.
  NodeId wrap_index(NodeId i, int64_t n, bool non_negative) {
    if (n < 1) throw ir::Error("no index fits an empty axis");
    DType t = rng_.chance(0.5) ? DType::I32 : DType::I64;
    int how = rng_.below(non_negative ? 2 : 3);
    bool from_float = ir::is_float(dtype(i));
    return traced({i}, [&](ScalarBuilder& b, const std::vector<ScalarId>& p) {
      ScalarId v = p[0];
      if (from_float) v = b.unary(ScalarOp::Floor, b.binary(ScalarOp::Mul, v, b.literal(2.0)));
      v = b.cast(v, DType::I64);
      ScalarId r;
      if (how == 0) {
        r = b.binary(ScalarOp::Mod, v, b.literal_int(n));
      } else if (how == 1) {
        r = b.binary(ScalarOp::Minimum, b.binary(ScalarOp::Maximum, v, b.literal_int(non_negative ? 0 : -n)),
                     b.literal_int(n - 1));
      } else {
        r = b.binary(ScalarOp::Sub, b.binary(ScalarOp::Mod, v, b.literal_int(2 * n)), b.literal_int(n));
      }
      return b.cast(r, t);
    });
  }

  // A node of shape `s` to make indices from: a new i32/i64 input (small values, sometimes near
  // the type's limits), an existing node of that shape, an integer constant or an arange.
  NodeId index_source(Shape s) {
    bool constant_shape = std::all_of(s.begin(), s.end(), [](const ir::Dim& d) { return d.is_constant(); });
    switch (rng_.weighted({5, 3, constant_shape ? 2 : 0, s.size() == 1 ? 2 : 0})) {
      case 0: return new_input(s, rng_.chance(0.6) ? DType::I64 : DType::I32);
      case 1: return pick([&](NodeId id) { return shape(id) == s; });
      case 2: {
        ir::ConcreteShape cs;
        for (const ir::Dim& d : s) cs.push_back(*d.constant());
        ir::HostArray value(rng_.chance(0.5) ? DType::I64 : DType::I32, cs);
        for (int64_t i = 0; i < value.size(); ++i) value.set_i64(i, rng_.range(-9, 9));
        return ir::add_constant(g_, value);
      }
      default: return ir::add_arange(g_, s[0]);
    }
  }

  // Dims already in use (an arange's or a constant's may not introduce a symbol).
  Shape known_shape(int rank) {
    Shape s;
    for (int i = 0; i < rank; ++i) s.push_back(known_dim());
    return s;
  }

  // np.take of `x` along a random axis: indices of rank 0-2, new or an existing node's values.
  NodeId take(NodeId x) {
    int r = rank(x);
    if (r == 0) throw ir::Error("nothing to take from");
    int axis = rng_.below(r);
    NodeId source = rng_.chance(0.3) ? pick([&](NodeId id) { return rank(id) <= 2; })
                                     : index_source(known_shape(rng_.weighted({1, 4, 2})));
    NodeId idx = wrap_index(source, size_now(shape(x)[axis]), false);
    notes_.push_back("take");
    return ir::add_take(g_, x, idx, rng_.chance(0.3) ? axis - r : axis);
  }

  // A take of shape `s` (rank >= 1) from a new tensor: an operand for some kernel's epilogue.
  NodeId take_shaped_like(Shape s) {  // a copy: adding nodes moves the node that holds it
    if (s.empty()) throw ir::Error("a take has at least one dim");
    Shape from = s;
    from[0] = rng_.range(1, 7);
    NodeId x = rng_.chance(0.5) ? new_input(from, random_dtype()) : generator(from);
    NodeId idx = wrap_index(index_source({s[0]}), size_now(from[0]), false);
    notes_.push_back("take");
    return ir::add_take(g_, x, idx, 0);
  }

  void gather_scatter_op() {
    switch (rng_.weighted({6, 3, 4, 3, 3})) {
      case 0: take_op(); break;
      case 1: take_along_axis_op(); break;
      case 2: index_add_op(); break;
      case 3: bincount_op(); break;
      default: histogram_op(); break;
    }
  }

  // Takes where fusion matters: of a reduction, scan or matmul (the gather reads their result),
  // a take of a take, a take reduced or scanned at once (a prologue) or joined to a reduction's
  // or matmul's result elementwise (an epilogue operand).
  void take_op() {
    NodeId x = -1;
    switch (rng_.below(6)) {
      case 0: x = reduction(pick([&](NodeId id) { return rank(id) >= 1; })); break;
      case 1: {
        NodeId y = pick([&](NodeId id) { return rank(id) >= 1; });
        x = ir::add_scan(g_, y, ir::ReduceKind::Sum, rng_.below(rank(y)));
        notes_.push_back("cumsum");
        break;
      }
      case 2: {
        matmul();
        NodeId m = static_cast<NodeId>(g_.nodes.size()) - 1;
        if (rng_.chance(0.5)) {  // a take in the matmul's epilogue
          elementwise({m, take_shaped_like(shape(m))});
          return;
        }
        x = m;
        break;
      }
      case 3: {  // a take in a reduction's epilogue
        NodeId red = reduction(pick([&](NodeId id) { return rank(id) >= 1; }));
        elementwise({red, take_shaped_like(shape(red))});
        return;
      }
      default: x = pick([&](NodeId id) { return rank(id) >= 1; }); break;
    }
    NodeId t = take(x);
    if (rng_.chance(0.25)) t = take(t);  // a take of a take
    switch (rng_.below(4)) {
      case 0: reduction(t); break;
      case 1:
        if (rank(t) >= 1) {
          ir::add_scan(g_, t, ir::ReduceKind::Sum, rng_.below(rank(t)));
          notes_.push_back("cumsum");
        }
        break;
      default: break;
    }
  }

  // np.take_along_axis with wrapped indices (other dims sometimes 1, broadcasting), or the
  // NumPy idiom: x's values at its argmax/argmin along the axis.
  void take_along_axis_op() {
    NodeId x = pick([&](NodeId id) { return rank(id) >= 1; });
    int r = rank(x), axis = rng_.below(r);
    int64_t n = size_now(shape(x)[axis]);
    NodeId idx;
    if (rng_.chance(0.3) && n >= 1 && dtype(x) != DType::Bool) {
      idx = ir::add_reduce(g_, x, rng_.chance(0.5) ? ir::ReduceKind::ArgMax : ir::ReduceKind::ArgMin, {axis}, true);
      notes_.push_back("argmax-along");
    } else {
      Shape s = shape(x);
      s[axis] = rng_.chance(0.5) ? known_dim() : ir::Dim(rng_.range(1, 7));
      for (int k = 0; k < r; ++k)
        if (k != axis && rng_.chance(0.25)) s[k] = 1;
      idx = wrap_index(index_source(s), n, false);
    }
    NodeId t = ir::add_take_along_axis(g_, x, idx, rng_.chance(0.3) ? axis - r : axis);
    notes_.push_back("take_along_axis");
    if (rng_.chance(0.3)) reduction(t);
  }

  // index_add with M indices along an axis of n, M often > n (repeated indices accumulate); the
  // values new, computed elementwise (a prologue) or gathered from x itself.
  void index_add_op() {
    NodeId x = pick([&](NodeId id) { return rank(id) >= 1 && dtype(id) != DType::Bool; });
    int r = rank(x), axis = rng_.below(r);
    int64_t n = size_now(shape(x)[axis]);
    ir::Dim m = rng_.chance(0.4) ? known_dim() : ir::Dim(rng_.range(1, 12));
    NodeId idx = wrap_index(index_source({m}), n, false);
    Shape vs = shape(x);
    vs[axis] = m;
    NodeId values;
    switch (rng_.below(3)) {
      case 0: values = new_input(vs, dtype(x)); break;
      case 1: values = elementwise({new_input(vs, random_dtype())}); break;
      default: values = elementwise({ir::add_take(g_, x, wrap_index(index_source({m}), n, false), axis)}); break;
    }
    if (dtype(values) != dtype(x)) values = ir::add_cast(g_, values, dtype(x));
    ir::add_index_add(g_, x, idx, values, rng_.chance(0.3) ? axis - r : axis);
    notes_.push_back("index_add");
  }

  // bincount of wrapped values (a new or existing node's elements), with or without weights.
  void bincount_op() {
    ir::Dim length = rng_.chance(0.3) ? known_dim() : ir::Dim(rng_.range(1, 9));
    NodeId source = rng_.chance(0.3) ? ir::add_reshape(g_, pick(), {-1})
                                     : index_source({rng_.chance(0.5) ? known_dim() : ir::Dim(rng_.range(1, 40))});
    NodeId x = wrap_index(source, size_now(length), true);
    NodeId weights = -1;
    if (rng_.chance(0.5)) {
      weights = elementwise({rng_.chance(0.5) ? source : new_input(shape(x), random_dtype())});
      if (dtype(weights) == DType::Bool) weights = ir::add_cast(g_, weights, rng_.chance(0.5) ? DType::F32 : DType::I32);
    }
    ir::add_bincount(g_, x, length, weights);
    notes_.push_back(weights >= 0 ? "bincount.weighted" : "bincount");
  }

  // np.histogram with ranges of multiples of 0.5, so that values (often halves or integers) fall
  // on bin edges and outside the range; sometimes lo == hi (NumPy widens it).
  void histogram_op() {
    NodeId x = pick([&](NodeId id) { return dtype(id) != DType::Bool; });
    if (rng_.chance(0.4)) x = elementwise({x});  // a prologue
    if (dtype(x) == DType::Bool) x = ir::add_cast(g_, x, DType::F32);
    static const std::vector<int64_t> bin_counts = {1, 2, 3, 4, 5, 8, 16};
    double lo = 0.5 * rng_.range(-6, 2), hi = lo + 0.5 * rng_.range(rng_.chance(0.1) ? 0 : 1, 8);
    ir::add_histogram(g_, x, rng_.pick(bin_counts), lo, hi);
    notes_.push_back("histogram");
  }

  void zip() {
    NodeId a = pick();
    std::vector<NodeId> operands = {a, partner(a)};
    if (rng_.chance(0.2)) operands.push_back(partner(a));
    if (rng_.chance(0.5)) std::swap(operands[0], operands[1]);
    elementwise(operands);
  }

  void select() {
    NodeId a = pick();
    NodeId cond = rng_.chance(0.5) ? pick([&](NodeId id) { return dtype(id) == DType::Bool && broadcastable(shape(id), shape(a)); })
                                   : traced({a}, [&](ScalarBuilder& b, const std::vector<ScalarId>& p) {
                                       return b.binary(ScalarOp::Lt, p[0], literal(b));
                                     });
    ir::add_scalar_op(g_, ScalarOp::Select, {cond, a, partner(a)});
    notes_.push_back("select");
  }

  void cast(NodeId x) {
    DType to = random_dtype();
    ir::add_cast(g_, x, to);
  }

  // x's reduction over random axes with keepdims: it broadcasts back against x.
  NodeId keepdims_reduction(NodeId x) {
    ir::ReduceKind kind = rng_.pick(std::vector{ir::ReduceKind::Sum, ir::ReduceKind::Max, ir::ReduceKind::Mean});
    return ir::add_reduce(g_, x, kind, random_axes(rank(x)), true);
  }

  NodeId reduction(NodeId x) {
    std::vector<int64_t> axes = random_axes(rank(x));
    bool keepdims = rng_.chance(0.4);
    static const ir::ReduceKind kinds[] = {ir::ReduceKind::Sum, ir::ReduceKind::Prod, ir::ReduceKind::Max,
                                           ir::ReduceKind::Min, ir::ReduceKind::Mean, ir::ReduceKind::Any,
                                           ir::ReduceKind::All, ir::ReduceKind::Custom};
    ir::ReduceKind kind = kinds[rng_.weighted({6, 1, 4, 2, 4, 1, 1, 3})];
    if (kind == ir::ReduceKind::Prod) {
      // Products of many floats overflow: only short products of bounded values.
      int64_t count = 1;
      for (int a = 0; a < rank(x); ++a)
        if (axes.empty() || std::find(axes.begin(), axes.end(), a) != axes.end() ||
            std::find(axes.begin(), axes.end(), a - rank(x)) != axes.end())
          count *= ir::evaluate(shape(x)[a], bindings_);
      if (count > 16) kind = ir::ReduceKind::Sum;
      else if (ir::is_float(dtype(x))) x = traced({x}, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
        return b.binary(ScalarOp::Add, b.unary(ScalarOp::Tanh, p[0]), b.literal(0.5));
      });
    }
    if (kind != ir::ReduceKind::Custom) {
      notes_.push_back("reduce." + std::string(ir::reduce_kind_name(kind)));
      return ir::add_reduce(g_, x, kind, axes, keepdims);
    }
    notes_.push_back("custom reduce");
    DType t = dtype(x);
    ScalarBuilder b;
    ScalarId acc = b.param(t), v = b.param(t);
    ScalarId r;
    ir::ScalarValue identity = ir::ScalarValue::of_int(0, t);
    if (t == DType::Bool) {
      int c = rng_.below(3);
      r = b.binary(c == 0 ? ScalarOp::Or : c == 1 ? ScalarOp::And : ScalarOp::Ne, acc, v);
      if (c == 1) identity = ir::ScalarValue::of_int(1, t);
    } else {
      switch (rng_.below(4)) {
        case 0: r = b.binary(ScalarOp::Maximum, acc, b.unary(ScalarOp::Abs, v)); break;
        case 1:
          if (!opt_.associative_combiners) {
            r = b.binary(ScalarOp::Add, acc, b.binary(ScalarOp::Mul, v, v));
          } else if (ir::is_float(t)) {
            r = b.binary(ScalarOp::Maximum, acc, v);
            identity = ir::ScalarValue::of(-std::numeric_limits<double>::infinity(), t);
          } else {
            r = b.binary(ScalarOp::Add, acc, v);  // wraps: exact in any grouping
          }
          break;
        case 2:  // order-dependent: checks that every backend folds in row-major order
          if (opt_.associative_combiners)
            r = v;  // the last element: associative, not commutative
          else
            r = ir::is_float(t) ? b.binary(ScalarOp::Add, b.binary(ScalarOp::Mul, acc, b.literal(0.5)), v)
                                : b.binary(ScalarOp::Add, b.binary(ScalarOp::Mul, acc, b.literal_int(3)), v);
          break;
        default:
          r = b.binary(ScalarOp::Minimum, acc, v);
          identity = ir::is_float(t) ? ir::ScalarValue::of(std::numeric_limits<double>::infinity(), t)
                                     : ir::ScalarValue::of_int(1000, t);
          break;
      }
    }
    return ir::add_custom_reduce(g_, x, b.finish({b.cast(r, t)}), identity, axes, keepdims);
  }

  // Reductions whose results are broadcast back over the reduced tensor: softmax, layernorm,
  // logsumexp, or a random reduction and a random body.
  void row_pattern() {
    NodeId x = pick([&](NodeId id) { return rank(id) >= 1; });
    std::vector<int64_t> axes = rng_.chance(0.7) ? std::vector<int64_t>{-1} : random_axes(rank(x));
    using K = ir::ReduceKind;
    auto reduce = [&](NodeId v, K kind, bool keepdims) { return ir::add_reduce(g_, v, kind, axes, keepdims); };
    auto body = [&](NodeId a, NodeId b, ScalarId (*f)(ScalarBuilder&, const std::vector<ScalarId>&)) {
      return traced({a, b}, f);
    };
    switch (rng_.below(5)) {
      case 0: {
        notes_.push_back("softmax");
        x = as_float(x);
        NodeId m = reduce(x, K::Max, true);
        if (axes.size() == 1 && rng_.chance(0.3)) {  // the keepdims dim restored by a view instead
          m = ir::add_expand_dims(g_, reduce(x, K::Max, false), axes[0]);
        }
        NodeId e = body(x, m, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
          return b.unary(ScalarOp::Exp, b.binary(ScalarOp::Sub, p[0], p[1]));
        });
        NodeId s = reduce(e, K::Sum, true);
        body(e, s, [](ScalarBuilder& b, const std::vector<ScalarId>& p) { return b.binary(ScalarOp::Div, p[0], p[1]); });
        break;
      }
      case 1: {
        notes_.push_back("layernorm");
        x = as_float(x);
        NodeId mu = reduce(x, K::Mean, true);
        NodeId d = body(x, mu, [](ScalarBuilder& b, const std::vector<ScalarId>& p) { return b.binary(ScalarOp::Sub, p[0], p[1]); });
        NodeId sq = traced({d}, [](ScalarBuilder& b, const std::vector<ScalarId>& p) { return b.binary(ScalarOp::Mul, p[0], p[0]); });
        NodeId var = reduce(sq, K::Mean, true);
        NodeId y = body(d, var, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
          return b.binary(ScalarOp::Mul, p[0], b.unary(ScalarOp::Rsqrt, b.binary(ScalarOp::Add, p[1], b.literal(1e-5))));
        });
        if (rng_.chance(0.5)) {  // scale and shift by [last dim] vectors
          Shape row{shape(x).back()};
          NodeId gamma = rng_.chance(0.5) ? new_input(row, dtype(x)) : generator(row);
          NodeId beta = rng_.chance(0.5) ? new_input(row, dtype(x)) : generator(row);
          traced({y, gamma, beta}, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
            return b.binary(ScalarOp::Add, b.binary(ScalarOp::Mul, p[0], p[1]), p[2]);
          });
        }
        break;
      }
      case 2: {
        notes_.push_back("logsumexp");
        x = as_float(x);
        NodeId m = reduce(x, K::Max, true);
        NodeId e = body(x, m, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
          return b.unary(ScalarOp::Exp, b.binary(ScalarOp::Sub, p[0], p[1]));
        });
        NodeId s = reduce(e, K::Sum, true);
        NodeId l = body(s, m, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
          return b.binary(ScalarOp::Add, b.unary(ScalarOp::Log, p[0]), p[1]);
        });
        if (rng_.chance(0.5)) ir::add_squeeze(g_, l, axes);
        break;
      }
      case 3: {
        notes_.push_back("normalize");
        NodeId s = reduce(traced({as_float(x)}, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
          return b.unary(ScalarOp::Abs, p[0]);
        }), K::Sum, true);
        body(x, s, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
          return b.binary(ScalarOp::Div, p[0], b.binary(ScalarOp::Add, p[1], b.literal(1.0)));
        });
        break;
      }
      default: {
        notes_.push_back("reduce-broadcast");
        NodeId r = rng_.chance(0.7) ? keepdims_reduction(x) : reduction(x);
        elementwise(rng_.chance(0.5) ? std::vector{x, r} : std::vector{r, x});
        break;
      }
    }
  }

  void view(NodeId x) {
    Shape s = shape(x);
    int r = rank(x);
    switch (rng_.below(7)) {
      case 0: {  // broadcast_to: size-1 dims grow, sometimes a new leading dim
        for (ir::Dim& d : s)
          if (d == ir::Dim(1) && rng_.chance(0.7)) d = known_dim();
        if (rng_.chance(0.4)) s.insert(s.begin(), known_dim());
        ir::add_broadcast_to(g_, x, s);
        notes_.push_back("broadcast_to");
        break;
      }
      case 1: {  // reshape
        Shape to;
        switch (rng_.below(5)) {
          case 0: to = {-1}; break;
          case 1: {  // merge two adjacent dims
            if (r < 2) throw ir::Error("nothing to merge");
            int i = rng_.below(r - 1);
            to = s;
            to[i] = s[i] * s[i + 1];
            to.erase(to.begin() + i + 1);
            break;
          }
          case 2: {  // split a constant dim
            to = s;
            int i = r ? rng_.below(r) : 0;
            if (!r || !s[i].is_constant() || *s[i].constant() % 2) throw ir::Error("nothing to split");
            to[i] = 2;
            to.insert(to.begin() + i + 1, ir::Dim(*s[i].constant() / 2));
            break;
          }
          case 3:
            to = s;
            to.insert(to.begin() + (r ? rng_.below(r + 1) : 0), 1);
            break;
          default:
            to = s;
            if (r) to[rng_.below(r)] = -1;
            break;
        }
        ir::add_reshape(g_, x, to);
        notes_.push_back("reshape");
        break;
      }
      case 2: case 3: {
        if (r < 2) throw ir::Error("nothing to permute");
        if (rng_.chance(0.4)) {
          ir::add_transpose(g_, x);
        } else {
          std::vector<int64_t> perm;
          for (int i = 0; i < r; ++i) perm.push_back(i);
          for (int i = r - 1; i > 0; --i) std::swap(perm[i], perm[rng_.below(i + 1)]);
          ir::add_permute(g_, x, perm);
        }
        notes_.push_back("permute");
        break;
      }
      case 4: case 5:
        ir::add_expand_dims(g_, x, rng_.range(-(r + 1), r));
        break;
      default: {
        std::vector<int64_t> axes;
        for (int i = 0; i < r; ++i)
          if (s[i] == ir::Dim(1) && rng_.chance(0.7)) axes.push_back(rng_.chance(0.3) ? i - r : i);
        if (axes.empty() && rng_.chance(0.5)) throw ir::Error("nothing to squeeze");
        ir::add_squeeze(g_, x, axes);
        break;
      }
    }
  }

  void matmul() {
    notes_.push_back("matmul");
    NodeId a = pick([&](NodeId id) { return rank(id) >= 1; });
    const Shape sa = shape(a);
    const ir::Dim k = sa.back();
    Shape batch(sa.begin(), sa.end() - std::min<int>(2, static_cast<int>(sa.size())));
    if (rng_.chance(0.3) && !batch.empty()) batch[0] = 1;  // batch dims broadcast
    if (rng_.chance(0.3)) batch = {};
    ir::Dim n = known_dim();
    switch (rng_.below(5)) {
      case 0: {  // a @ a^T
        if (sa.size() < 2) throw ir::Error("no transpose of a vector");
        std::vector<int64_t> perm;
        for (int i = 0; i < rank(a); ++i) perm.push_back(i);
        std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
        ir::add_matmul(g_, a, ir::add_permute(g_, a, perm));
        break;
      }
      case 1: {  // a @ vector or matrix from a generator
        Shape sb = batch;
        sb.push_back(k);
        if (rng_.chance(0.75)) sb.push_back(n);
        else sb = {k};
        ir::add_matmul(g_, a, generator(sb));
        break;
      }
      case 2: {
        Shape sb = rng_.chance(0.7) ? Shape{k, n} : Shape{k};
        ir::add_matmul(g_, a, new_input(sb, random_dtype()));
        break;
      }
      case 3: {  // an existing node whose contracted dim fits
        NodeId b = pick([&](NodeId id) {
          const Shape& s = shape(id);
          return (s.size() == 1 && s[0] == k) || (s.size() >= 2 && s[s.size() - 2] == k);
        });
        ir::add_matmul(g_, a, b);
        break;
      }
      default: {  // something @ a
        if (sa.size() < 2) {
          ir::add_matmul(g_, a, generator(Shape{k, n}));
        } else {
          Shape sl = rng_.chance(0.8) ? Shape{n, sa[sa.size() - 2]} : Shape{sa[sa.size() - 2]};
          ir::add_matmul(g_, rng_.chance(0.5) ? generator(sl) : new_input(sl, random_dtype()), a);
        }
        break;
      }
    }
  }

  // A generator of shape `s`: rand, a constant (splat or not), or a cast arange when 1-D.
  NodeId generator(const Shape& s) {
    int choice = rng_.weighted({4, 3, s.size() == 1 ? 2 : 0});
    if (choice == 0) {
      notes_.push_back("rand");
      return ir::add_rand(g_, s, rng_.next() % 1000);
    }
    if (choice == 2) {
      notes_.push_back("arange");
      NodeId a = ir::add_arange(g_, s[0]);
      return rng_.chance(0.5) ? a : traced({a}, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
        return b.binary(ScalarOp::Mul, b.cast(p[0], DType::F32), b.literal(0.25));
      });
    }
    notes_.push_back("constant");
    ir::ConcreteShape cs;
    for (const ir::Dim& d : s) cs.push_back(d.constant().value_or(1));  // a 1 broadcasts like N
    ir::HostArray value(opt_.allow_integer ? random_dtype() : DType::F32, cs);
    bool splat = rng_.chance(0.3);
    double v0 = 0.5 * rng_.range(-4, 4);
    for (int64_t i = 0; i < value.size(); ++i) value.set_f64(i, splat ? v0 : 0.5 * rng_.range(-4, 4));
    return ir::add_constant(g_, value);
  }

  // 1-3 outputs: mostly the results nobody uses, latest first; sometimes any node, a node twice
  // or an input.
  void add_outputs() {
    std::vector<bool> used(g_.nodes.size(), false);
    for (const ir::Node& n : g_.nodes)
      for (NodeId in : n.inputs) used[in] = true;
    std::vector<NodeId> leaves;
    for (NodeId id = static_cast<NodeId>(g_.nodes.size()) - 1; id >= 0; --id)
      if (!used[id] && node(id).kind != ir::OpKind::Input) leaves.push_back(id);
    std::vector<NodeId> outs = {leaves.empty() ? static_cast<NodeId>(g_.nodes.size()) - 1 : leaves[0]};
    size_t next_leaf = 1;
    int count = rng_.range(1, 3);
    while (static_cast<int>(outs.size()) < count) {
      double r = rng_.uniform();
      if (r < 0.1) outs.push_back(outs.back());
      else if (r < 0.18) outs.push_back(rng_.pick(g_.input_nodes()));
      else if (r < 0.8 && next_leaf < leaves.size()) outs.push_back(leaves[next_leaf++]);
      else outs.push_back(pick());
    }
    for (size_t i = 0; i < outs.size(); ++i) ir::add_output(g_, "out" + std::to_string(i), outs[i]);
  }

  Rng rng_;
  const RandomGraphOptions& opt_;
  ir::Graph g_;
  ir::SymbolBindings bindings_;
  int inputs_ = 0;
  std::vector<std::string> notes_;
};

}  // namespace detail

inline ir::TensorMap random_inputs(const ir::Graph& g, const ir::SymbolBindings& symbols, uint64_t seed,
                                   bool special_values) {
  detail::Rng rng(seed ^ 0x5DEECE66Dull);
  ir::TensorMap inputs;
  for (ir::NodeId id : g.input_nodes()) {
    const ir::Node& n = g.node(id);
    ir::HostArray a(n.dtype, ir::evaluate(n.shape, symbols));
    bool halves = rng.chance(0.2), extremes = rng.chance(0.1), specials = special_values && rng.chance(0.04);
    for (int64_t i = 0; i < a.size(); ++i) {
      if (n.dtype == ir::DType::Bool) {
        a.set_i64(i, rng.below(2));
      } else if (ir::is_integer(n.dtype)) {
        int64_t limit = n.dtype == ir::DType::I32 ? std::numeric_limits<int32_t>::max()
                                                  : std::numeric_limits<int64_t>::max();
        a.set_i64(i, extremes && rng.chance(0.3) ? limit - rng.below(3) * (limit / 2) : rng.range(-6, 6));
      } else if (specials && rng.chance(0.2)) {
        static const double values[] = {NAN, INFINITY, -INFINITY, -0.0};
        a.set_f64(i, values[rng.below(4)]);
      } else {
        a.set_f64(i, halves ? 0.5 * rng.range(-4, 4) : 4.0 * rng.uniform() - 2.0);
      }
    }
    inputs[n.as<ir::InputAttrs>().name] = std::move(a);
  }
  return inputs;
}

inline RandomCase random_case(uint64_t seed, const RandomGraphOptions& options) {
  detail::GraphGenerator gen(seed, options);
  RandomCase c;
  c.graph = gen.run();
  c.inputs = random_inputs(c.graph, gen.bindings(), seed, options.allow_special_values);
  c.symbols = ir::bind_inputs(c.graph, c.inputs);
  int ops = static_cast<int>(c.graph.nodes.size() - c.graph.input_nodes().size());
  c.description = "seed " + std::to_string(seed) + ": " + std::to_string(c.graph.input_nodes().size()) +
                  " inputs, " + std::to_string(ops) + " ops, " + std::to_string(c.graph.outputs.size()) + " outputs";
  for (const auto& [name, size] : c.symbols) c.description += ", " + name + "=" + std::to_string(size);
  std::string notes = gen.notes();
  if (!notes.empty()) c.description += "; " + notes;
  return c;
}

// The checks of names both compare_outputs share; `compare` compares one output.
template <class Compare>
std::string compare_output_maps(const ir::TensorMap& expected, const ir::TensorMap& actual, Compare&& compare) {
  for (const auto& [name, value] : actual)
    if (!expected.count(name)) return "unexpected output '" + name + "'";
  for (const auto& [name, e] : expected) {
    auto it = actual.find(name);
    if (it == actual.end()) return "output '" + name + "' is missing";
    std::string mismatch = compare(name, e, it->second);
    if (!mismatch.empty()) return mismatch;
  }
  return "";
}

inline std::string compare_outputs(const ir::TensorMap& expected, const ir::TensorMap& actual, double rtol,
                                   double atol) {
  return compare_output_maps(expected, actual, [&](const std::string& name, const ir::HostArray& e, const ir::HostArray& a) {
    return runtime::compare_arrays(e, a, rtol, atol, "output '" + name + "'");
  });
}

inline std::string compare_outputs(const ir::ValuesAndBounds& expected, const ir::TensorMap& actual) {
  return compare_output_maps(expected.values, actual,
                             [&](const std::string& name, const ir::HostArray& e, const ir::HostArray& a) {
                               return runtime::compare_arrays(e, a, expected.bounds.at(name), "output '" + name + "'");
                             });
}

/// How many times `needle` occurs in `text` (e.g. an op's name in a kernel's MLIR).
inline size_t count_occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace fuse::testing
