// Scalar expressions: the bodies of elementwise ops and reduce combiners, the analogue of a
// Numba @vectorize function. A ScalarFn is a hash-consed DAG in topological order.
//
// Typing: every op's operands have one dtype (the builder inserts casts), except `select`
// (bool condition) and `cast`. Literals are weakly typed while they stand alone: a weak literal
// takes the dtype of what it meets (`x * 2.0` keeps x's f32, `i32 + 1` stays i32); a float
// literal meeting an integer gives f32. Expressions made only of literals are folded.
//
// Thread safety: plain values and pure functions (the op table is constant); safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/dtype.h"

namespace fuse::ir {

/// The scalar ops: one row each in ir/scalar_ops.def.
enum class ScalarOp {
#define FUSE_SCALAR_OP(Enum, ...) Enum,
#include "ir/scalar_ops.def"
};
inline constexpr int kScalarOpCount = 0
#define FUSE_SCALAR_OP(...) +1
#include "ir/scalar_ops.def"
    ;

/// What kind of function an op is (ir/scalar_ops.def).
enum class ScalarOpCategory { Leaf, Arithmetic, Transcendental, Rounding, Comparison, Logical, Classification, Conversion, Selection };

/// How an op's operand and result dtypes follow from its operands' common dtype (ir/scalar_ops.def).
enum class ScalarTyping { Same, Arithmetic, Float, Compare, Logical, FloatTest, Special };

/// An op's row of ir/scalar_ops.def.
struct ScalarOpInfo {
  std::string_view name;  // "add", "exp", ...
  int arity;              // 0 for Param/Literal
  ScalarOpCategory category;
  ScalarTyping typing;
  int cost;               // the fusion cost model's weight of one evaluation
  bool gpu_f64;           // f32 computed in f64 on CUDA (unless fast math)
  bool named;             // a builtin of .expr and a free function of the C++ API
  int ulps_f32, ulps_f64; // the CPU lowering's largest error in ulp on normal values (0: exact)
};

const ScalarOpInfo& scalar_op_info(ScalarOp op);
inline std::string_view scalar_op_name(ScalarOp op) { return scalar_op_info(op).name; }
inline int scalar_op_arity(ScalarOp op) { return scalar_op_info(op).arity; }

using ScalarId = int32_t;

/// A value computed by a scalar op: `f` for float dtypes, `i` for bool and integer dtypes.
struct ScalarValue {
  double f = 0;
  int64_t i = 0;
  static ScalarValue of(double v, DType t);   // converts v to t's representation
  static ScalarValue of_int(int64_t v, DType t);
  double as_double(DType t) const { return is_float(t) ? f : static_cast<double>(i); }
  bool operator==(const ScalarValue&) const = default;
};

struct ScalarNode {
  ScalarOp op = ScalarOp::Literal;
  DType dtype = DType::F32;   // dtype of the result
  ScalarId args[3] = {-1, -1, -1};
  int param = -1;             // Param: which parameter
  ScalarValue value;          // Literal: the value (in dtype's representation unless weak)
  bool weak = false;          // Literal only: value kept exact in both f and i, dtype a default

  int arity() const { return scalar_op_arity(op); }
};

struct ScalarFn {
  std::vector<DType> params;
  std::vector<ScalarNode> nodes;  // topological: args always precede their users
  std::vector<ScalarId> results;  // one for elementwise bodies; several for multi-value user fns

  const ScalarNode& node(ScalarId id) const { return nodes[id]; }
  DType result_dtype(size_t i = 0) const { return nodes[results[i]].dtype; }
  /// One evaluation's weight in the cost model: the sum of its ops' ScalarOpInfo::cost.
  int cost() const;
  bool operator==(const ScalarFn& other) const;
};

/// A transcendental's ScalarOpInfo::cost (ir/scalar_ops.def): work from this much per element on
/// is worth a different loop shape (a rolled matmul epilogue, f32 sums in blocks).
inline constexpr int kTranscendentalCost = 8;

/// Builds a ScalarFn with the typing rules above. Throws fuse::ir::Error on ill-typed operands
/// (e.g. neg of bool); callers add the user's location.
class ScalarBuilder {
 public:
  ScalarId param(DType t);                       // the next parameter
  ScalarId literal(double v);                    // weak float literal
  ScalarId literal_int(int64_t v);               // weak integer literal
  ScalarId literal_bool(bool v);                 // weak bool literal
  ScalarId typed_literal(ScalarValue v, DType t);  // strong literal

  ScalarId unary(ScalarOp op, ScalarId x);
  ScalarId binary(ScalarOp op, ScalarId a, ScalarId b);
  ScalarId select(ScalarId cond, ScalarId a, ScalarId b);
  ScalarId cast(ScalarId x, DType to);

  /// Calls `fn` with `args` as its parameters: its nodes are copied into this builder (inlined).
  std::vector<ScalarId> inline_call(const ScalarFn& fn, const std::vector<ScalarId>& args);

  DType dtype(ScalarId id) const { return fn_.nodes[id].dtype; }
  bool is_weak(ScalarId id) const { return fn_.nodes[id].weak; }
  const ScalarFn& peek() const { return fn_; }

  /// Finishes with these results; weak literal results become strong at their default dtype.
  /// Dead nodes are dropped.
  ScalarFn finish(std::vector<ScalarId> results);

 private:
  ScalarId add(ScalarNode node);  // hash-consed, folds when every argument is a literal
  ScalarId to_dtype(ScalarId x, DType t);  // cast, or re-emit a weak literal at t
  DType common_type(ScalarId a, ScalarId b) const;

  ScalarFn fn_;
  std::unordered_map<std::string, ScalarId> memo_;
};

/// Evaluates one op on literal arguments: the exact definition of each op (integer overflow
/// wraps; x // 0 and x % 0 are 0 for integers; f32 results are computed in f64 and rounded
/// once). `operand` is the dtype of the operands, `result` the dtype of the result.
ScalarValue evaluate_scalar_op(ScalarOp op, DType operand, DType result, const ScalarValue* args);

/// Evaluates a whole ScalarFn on one set of parameter values.
std::vector<ScalarValue> evaluate_scalar_fn(const ScalarFn& fn, const std::vector<ScalarValue>& params);

/// One-line text form, e.g. "(p0: f32, p1: f32) -> sqrt(add(mul(p0, p0), mul(p1, p1)))" for
/// small trees, with `let` bindings for shared nodes.
std::string to_string(const ScalarFn& fn);

/// A ScalarFn with one parameter per dtype in `params` and the body `op(p0, p1, ...)`.
ScalarFn make_op_fn(ScalarOp op, const std::vector<DType>& params);

}  // namespace fuse::ir
