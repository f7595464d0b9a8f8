// The syntax tree of a .expr program, as the parser produces it: no names resolved, no types.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frontends/expr/diagnostics.h"

namespace fuse::expr {

enum class ExprKind {
  Int, Float, Bool,  // literals
  Name,              // a const, input, let, output, fn parameter or local
  Unary,             // op operands[0]
  Binary,            // operands[0] op operands[1]
  Call,              // name(args): a builtin or a user fn
  Transpose,         // operands[0].T
  List,              // [operands...]: axes, dims, permutations
  Tuple,             // (operands...): only in `return (a, b)`
  // np-views
  Index,             // operands[0][operands[1], ...]: NumPy basic indexing
  Slice,             // start:stop:step inside an Index: operands are the parts written, in that
                     // order; int_value's bits say which (1 start, 2 stop, 4 step)
  Ellipsis,          // `...` inside an Index
  String,            // "edge": name holds the text without the quotes (pad's mode)
};

enum class Operator {
  Neg, Not,
  Add, Sub, Mul, Div, FloorDiv, Mod, Pow, MatMul,
  Lt, Le, Gt, Ge, Eq, Ne,
  And, Or,
};

/// The operator as written: "+", "not", "@".
std::string_view operator_text(Operator op);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

/// One call argument; `keyword` is empty for a positional argument.
struct Arg {
  std::string keyword;
  Pos pos;
  ExprPtr value;
};

struct Expr {
  ExprKind kind = ExprKind::Int;
  Pos pos;                        // operators: the operator; calls: the callee name
  int depth = 1;                  // height of this subtree, bounded by the parser
  int64_t int_value = 0;          // Int
  double float_value = 0;         // Float
  bool bool_value = false;        // Bool
  std::string name;               // Name, Call
  Operator op = Operator::Neg;    // Unary, Binary
  std::vector<ExprPtr> operands;  // Unary, Binary, Transpose, List, Tuple
  std::vector<Arg> args;          // Call
};

struct Ident {
  std::string name;
  Pos pos;
};

enum class StmtKind { Const, Fn, Input, Let, Output, Return, Invalid };

struct Stmt {
  StmtKind kind = StmtKind::Invalid;
  Pos pos;
  /// The names the statement defines (several for `let (a, b) = ...`). An Invalid statement
  /// keeps the names parsed before its error, so that later uses of them stay quiet.
  std::vector<Ident> names;
  ExprPtr value;                 // Const, Let, Output, Return (a Tuple returns several values)
  std::vector<Ident> params;     // Fn
  std::vector<Stmt> body;        // Fn: lets then one return; `fn f(x) = e` is one return
  Ident dtype;                   // Input
  bool has_dims = false;         // Input: `f32[...]` rather than the scalar `f32`
  std::vector<ExprPtr> dims;     // Input
};

struct Program {
  std::vector<Stmt> statements;
};

/// Deepest expression nesting accepted: deeper input is an error, never a stack overflow.
inline constexpr int kMaxNesting = 200;

}  // namespace fuse::expr
