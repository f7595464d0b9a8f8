#include "frontends/expr/lower.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <map>
#include <set>

#include "passes/autodiff.h"

namespace fuse::expr {
namespace {

using ir::DType;
using ir::NodeId;
using ir::ScalarBuilder;
using ir::ScalarId;
using ir::ScalarOp;

/// Abandons a statement that uses a name whose own statement failed: that error is reported
/// already, and a second one here would only be noise.
struct Quiet {};

/// A compile-time scalar, as a ScalarBuilder literal node holds it. `weak` literals take the
/// dtype of what they meet; `dtype` then only says whether it is a bool, integer or float.
struct Literal {
  DType dtype = DType::F32;
  ir::ScalarValue value;
  bool weak = true;
};

/// What an expression evaluates to at the tensor level: a graph node, or a literal that stays
/// a compile-time scalar until it meets a tensor (then it is folded into the elementwise body).
struct Value {
  bool is_tensor = false;
  NodeId node = -1;
  Literal literal;
};

enum class GlobalKind { Const, Fn, Input, Let, Output, Symbol };

/// One entry of the single namespace shared by consts, fns, inputs, lets, outputs and the
/// dimension symbols of input types.
struct Global {
  GlobalKind kind = GlobalKind::Let;
  Pos pos;
  bool poisoned = false;     // its statement failed: uses fail quietly
  Value value;               // Const, Input, Let, Output
  const Stmt* fn = nullptr;  // Fn
  int results = 1;           // Fn: how many values it returns
  int order = 0;             // definitions are numbered in source order
};

Global global(GlobalKind kind, Value value = {}) {
  Global g;
  g.kind = kind;
  g.value = value;
  return g;
}

// ---- builtins ----

enum class BuiltinKind {
  // scalar: allowed in fn bodies
  Constant, Unary, Binary, Where, Clip, Cast,
  // tensor only
  Reduce, CustomReduce, Matmul, Transpose, Reshape, BroadcastTo, ExpandDims, Squeeze, Arange, Rand,
  Grad,
  Scan,
  Concatenate, Stack, Pad,  // np-views
  // gather/scatter (issue 16)
  Take, TakeAlongAxis, IndexAdd, Bincount, Histogram,
};

struct Builtin {
  std::string_view name;
  BuiltinKind kind;
  std::vector<std::string_view> params;
  size_t required = 0;  // the first `required` params must be given
  ScalarOp op = ScalarOp::Neg;
  DType dtype = DType::F32;
  ir::ReduceKind reduce = ir::ReduceKind::Sum;
  double constant = 0;
};

bool is_scalar_builtin(BuiltinKind k) { return k <= BuiltinKind::Cast; }

const std::vector<Builtin>& builtins() {
  static const std::vector<Builtin> table = [] {
    using K = BuiltinKind;
    std::vector<Builtin> t;
    t.push_back({"inf", K::Constant, {}, 0, {}, {}, {}, std::numeric_limits<double>::infinity()});
    t.push_back({"nan", K::Constant, {}, 0, {}, {}, {}, std::numeric_limits<double>::quiet_NaN()});
    // The named scalar ops of ir/scalar_ops.def.
    for (int i = 0; i < ir::kScalarOpCount; ++i) {
      auto op = static_cast<ScalarOp>(i);
      const ir::ScalarOpInfo& info = ir::scalar_op_info(op);
      if (!info.named) continue;
      if (info.arity == 1) t.push_back({info.name, K::Unary, {"x"}, 1, op});
      else t.push_back({info.name, K::Binary, {"a", "b"}, 2, op});
    }
    t.push_back({"where", K::Where, {"cond", "a", "b"}, 3});
    t.push_back({"clip", K::Clip, {"x", "lo", "hi"}, 3});
    for (DType d : ir::kAllDTypes) t.push_back({ir::dtype_name(d), K::Cast, {"x"}, 1, {}, d});
    const std::pair<std::string_view, ir::ReduceKind> reductions[] = {
        {"sum", ir::ReduceKind::Sum}, {"prod", ir::ReduceKind::Prod}, {"max", ir::ReduceKind::Max},
        {"min", ir::ReduceKind::Min}, {"mean", ir::ReduceKind::Mean}, {"any", ir::ReduceKind::Any},
        {"all", ir::ReduceKind::All}, {"argmax", ir::ReduceKind::ArgMax}, {"argmin", ir::ReduceKind::ArgMin}};
    for (auto [name, kind] : reductions)
      t.push_back({name, K::Reduce, {"x", "axis", "keepdims"}, 1, {}, {}, kind});
    t.push_back({"reduce", K::CustomReduce, {"fn", "x", "init", "axis", "keepdims"}, 3});
    t.push_back({"matmul", K::Matmul, {"a", "b"}, 2});
    t.push_back({"transpose", K::Transpose, {"x", "axes"}, 1});
    t.push_back({"reshape", K::Reshape, {"x", "shape"}, 2});
    t.push_back({"broadcast_to", K::BroadcastTo, {"x", "shape"}, 2});
    t.push_back({"expand_dims", K::ExpandDims, {"x", "axis"}, 2});
    t.push_back({"squeeze", K::Squeeze, {"x", "axis"}, 2});
    t.push_back({"arange", K::Arange, {"n"}, 1});
    t.push_back({"rand", K::Rand, {"shape", "seed"}, 1});
    t.push_back({"grad", K::Grad, {"y", "x", "cotangent"}, 2});
    t.push_back({"cumsum", K::Scan, {"x", "axis"}, 1, {}, {}, ir::ReduceKind::Sum});
    t.push_back({"cumprod", K::Scan, {"x", "axis"}, 1, {}, {}, ir::ReduceKind::Prod});
    // np-views
    t.push_back({"concatenate", K::Concatenate, {"arrays", "axis"}, 1});
    t.push_back({"stack", K::Stack, {"arrays", "axis"}, 1});
    t.push_back({"pad", K::Pad, {"x", "pad_width", "mode", "value"}, 2});
    // gather/scatter (issue 16)
    t.push_back({"take", K::Take, {"x", "indices", "axis"}, 2});
    t.push_back({"take_along_axis", K::TakeAlongAxis, {"x", "indices", "axis"}, 3});
    t.push_back({"index_add", K::IndexAdd, {"x", "indices", "values", "axis"}, 3});
    t.push_back({"bincount", K::Bincount, {"x", "minlength", "weights"}, 1});
    t.push_back({"histogram", K::Histogram, {"x", "bins", "range"}, 1});
    return t;
  }();
  return table;
}

const Builtin* find_builtin(std::string_view name) {
  for (const Builtin& b : builtins())
    if (b.name == name) return &b;
  return nullptr;
}

ScalarOp scalar_op(Operator op) {
  switch (op) {
    case Operator::Neg: return ScalarOp::Neg;
    case Operator::Not: return ScalarOp::Not;
    case Operator::Add: return ScalarOp::Add;
    case Operator::Sub: return ScalarOp::Sub;
    case Operator::Mul: return ScalarOp::Mul;
    case Operator::Div: return ScalarOp::Div;
    case Operator::FloorDiv: return ScalarOp::FloorDiv;
    case Operator::Mod: return ScalarOp::Mod;
    case Operator::Pow: return ScalarOp::Pow;
    case Operator::Lt: return ScalarOp::Lt;
    case Operator::Le: return ScalarOp::Le;
    case Operator::Gt: return ScalarOp::Gt;
    case Operator::Ge: return ScalarOp::Ge;
    case Operator::Eq: return ScalarOp::Eq;
    case Operator::Ne: return ScalarOp::Ne;
    case Operator::And: return ScalarOp::And;
    case Operator::Or: return ScalarOp::Or;
    case Operator::MatMul: break;  // a tensor op, handled by the callers
  }
  return ScalarOp::Add;
}

/// Turns ir::Error (type and shape errors found by the IR) into an error at `pos`.
template <class F>
auto checked(Pos pos, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ir::Error& e) {
    throw CompileError{pos, e.message()};
  }
}

std::string plural(size_t n, std::string_view word) {
  return std::to_string(n) + " " + std::string(word) + (n == 1 ? "" : "s");
}

/// Matches a call's arguments to parameters: positional ones first, then keywords. Returns one
/// entry per parameter, nullptr for an optional parameter not given.
std::vector<const Expr*> bind_args(const Expr& call, const std::vector<std::string_view>& params,
                                   size_t required) {
  std::string callee = "'" + call.name + "'";
  std::vector<const Expr*> bound(params.size(), nullptr);
  size_t positional = 0;
  for (const Arg& a : call.args) {
    if (a.keyword.empty()) {
      if (positional >= params.size())
        throw CompileError{call.pos, callee + " takes " + (required == params.size() ? "" : "at most ") +
                                         plural(params.size(), "argument") + ", got " +
                                         std::to_string(call.args.size())};
      bound[positional++] = a.value.get();
      continue;
    }
    auto it = std::find(params.begin(), params.end(), a.keyword);
    if (it == params.end())
      throw CompileError{a.pos,
                         callee + " has no argument '" + a.keyword + "'" + did_you_mean(a.keyword, params)};
    size_t i = it - params.begin();
    if (bound[i]) throw CompileError{a.pos, "argument '" + a.keyword + "' of " + callee + " given twice"};
    bound[i] = a.value.get();
  }
  for (size_t i = 0; i < required; ++i) {
    if (bound[i]) continue;
    if (required == params.size() && positional == call.args.size())
      throw CompileError{call.pos, callee + " takes " + plural(params.size(), "argument") + ", got " +
                                       std::to_string(call.args.size())};
    throw CompileError{call.pos, callee + " is missing argument '" + std::string(params[i]) + "'"};
  }
  return bound;
}

std::vector<std::string_view> param_names(const Stmt& fn) {
  std::vector<std::string_view> names;
  for (const Ident& p : fn.params) names.push_back(p.name);
  return names;
}

/// How many values a fn returns: the length of its `return (a, b)`, or of the fn it returns.
int return_count(const Stmt& fn, const std::map<std::string, Global>& globals) {
  const Expr& ret = *fn.body.back().value;
  if (ret.kind == ExprKind::Tuple) return static_cast<int>(ret.operands.size());
  if (ret.kind == ExprKind::Call)
    if (auto it = globals.find(ret.name); it != globals.end() && it->second.kind == GlobalKind::Fn)
      return it->second.results;
  return 1;
}

/// Largest product of the constant factors of a shape: keeps every later size computation in
/// the IR and the passes far from int64 overflow.
constexpr int64_t kMaxElements = int64_t{1} << 48;
/// Bounds the work of inlining fn calls, which can grow exponentially (f2(x) = f1(f1(x)), ...).
constexpr int64_t kMaxTraceSteps = 1'000'000;
/// Bounds the recursion of tracing a fn body through the fns it calls.
constexpr int kMaxTraceDepth = 1000;
const std::string kTraceTooDeep =
    "fn calls are nested too deeply (more than " + std::to_string(kMaxTraceDepth) + " levels after inlining)";

enum class DimUse {
  Declare,  // input types: an unknown name becomes a new symbol
  Refer,    // shapes elsewhere: only known symbols
  Reshape,  // as Refer, and one dim may be -1
};

class Lowerer {
 public:
  explicit Lowerer(Diagnostics& diags) : diags_(diags) {}

  ir::Graph run(const Program& program) {
    for (const Stmt& s : program.statements) {
      try {
        statement(s);
      } catch (const CompileError& e) {
        diags_.error(e);
        poison(s);
      } catch (const Quiet&) {
        poison(s);
      }
    }
    if (diags_.empty() && graph_.outputs.empty())
      diags_.error({1, 1}, "the program has no outputs; add 'output NAME = ...'");
    return std::move(graph_);
  }

 private:
  ir::SourceLoc loc(Pos pos) const { return diags_.loc(pos); }

  // ---- names ----

  /// What a fn body sees: its parameters and lets, and the globals defined before the fn
  /// (`visible` is the fn's definition order), so that later definitions cannot change it.
  struct Scope {
    std::map<std::string, ScalarId> locals;
    int visible = std::numeric_limits<int>::max();
  };

  std::vector<std::string_view> candidates(const Scope* scope) const {
    std::vector<std::string_view> names;
    for (const auto& [name, g] : globals_) names.push_back(name);
    for (const Builtin& b : builtins()) names.push_back(b.name);
    if (scope)
      for (const auto& [name, id] : scope->locals) names.push_back(name);
    return names;
  }

  [[noreturn]] void unknown_name(const Expr& e, std::string_view what, const Scope* scope) const {
    throw CompileError{e.pos, "unknown " + std::string(what) + " '" + e.name + "'" +
                                  did_you_mean(e.name, candidates(scope))};
  }

  void check_new_name(const Ident& id) const {
    if (auto it = globals_.find(id.name); it != globals_.end())
      throw CompileError{id.pos, "redefinition of '" + id.name + "' (first defined at line " +
                                     std::to_string(it->second.pos.line) + ")"};
  }

  void define(const Ident& id, Global g) {
    g.pos = id.pos;
    g.order = static_cast<int>(globals_.size());
    globals_.emplace(id.name, std::move(g));
  }

  /// Defines the names of a failed statement, so that their later uses fail quietly.
  void poison(const Stmt& s) {
    for (const Ident& id : s.names) {
      if (globals_.count(id.name)) continue;
      Global g = global(GlobalKind::Let);
      g.poisoned = true;
      define(id, g);
    }
  }

  /// What a call refers to: a user fn (which may shadow a builtin of the same name), else a
  /// builtin. Parameters, consts and tensors are never callable.
  struct Callee {
    const Global* fn = nullptr;
    const Builtin* builtin = nullptr;
  };

  Callee callee(const Expr& call, const Scope* scope) const {
    const Global* g = find_global(call.name, scope ? scope->visible : std::numeric_limits<int>::max());
    if (g && g->kind == GlobalKind::Fn) return {g, nullptr};
    const Builtin* b = find_builtin(call.name);
    if (b && b->kind != BuiltinKind::Constant) return {nullptr, b};
    if (g || b || (scope && scope->locals.count(call.name)))
      throw CompileError{call.pos, "'" + call.name + "' is not a fn"};
    unknown_name(call, "fn", scope);
  }

  /// The global `name` defined before `visible`, if any; a poisoned one abandons the statement.
  const Global* find_global(const std::string& name, int visible = std::numeric_limits<int>::max()) const {
    auto it = globals_.find(name);
    if (it == globals_.end() || it->second.order >= visible) return nullptr;
    if (it->second.poisoned) throw Quiet{};
    return &it->second;
  }

  // ---- statements ----

  void statement(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::Invalid:
      case StmtKind::Return:  // the parser allows `return` only in fn bodies
        return poison(s);
      case StmtKind::Const: {
        check_new_name(s.names[0]);
        Value v = lower(*s.value);
        if (v.is_tensor)
          throw CompileError{s.value->pos, "the value of const '" + s.names[0].name +
                                               "' must be a number or an expression of numbers"};
        return define(s.names[0], global(GlobalKind::Const, v));
      }
      case StmtKind::Let: return s.names.size() == 1 ? let(s) : unpack(s);
      case StmtKind::Output: {
        check_new_name(s.names[0]);
        Value v = lower(*s.value);
        NodeId node = to_tensor(v, s.value->pos);
        checked(s.names[0].pos, [&] { ir::add_output(graph_, s.names[0].name, node, loc(s.names[0].pos)); });
        return define(s.names[0], global(GlobalKind::Output, tensor(node)));
      }
      case StmtKind::Input: return input(s);
      case StmtKind::Fn: {
        check_new_name(s.names[0]);
        check_fn(s);
        Global g = global(GlobalKind::Fn);
        g.fn = &s;
        g.results = return_count(s, globals_);
        return define(s.names[0], g);
      }
    }
  }

  void let(const Stmt& s) {
    check_new_name(s.names[0]);
    define(s.names[0], global(GlobalKind::Let, lower(*s.value)));
  }

  /// let (a, b) = f(...): one Elementwise node per result of f, each with f's whole body
  /// traced and only its own result kept.
  void unpack(const Stmt& s) {
    std::set<std::string> seen;
    for (const Ident& id : s.names) {
      check_new_name(id);
      if (!seen.insert(id.name).second) throw CompileError{id.pos, "'" + id.name + "' appears twice"};
    }
    const Expr& rhs = *s.value;
    const Global* callee = rhs.kind == ExprKind::Call ? find_global(rhs.name) : nullptr;
    if (rhs.kind == ExprKind::Call && !callee && rhs.name == "grad") {  // let (dw, db) = grad(loss, [w, b])
      std::vector<Value> grads = grad(rhs);
      if (grads.size() != s.names.size())
        throw CompileError{s.names[0].pos, unpack_count_message(rhs.name, static_cast<int>(grads.size()), s.names.size())};
      for (size_t i = 0; i < s.names.size(); ++i) define(s.names[i], global(GlobalKind::Let, grads[i]));
      return;
    }
    if (!callee || callee->kind != GlobalKind::Fn || callee->results == 1)
      throw CompileError{rhs.pos, kUnpackOnlyCalls};
    if (callee->results != static_cast<int>(s.names.size()))
      throw CompileError{s.names[0].pos, unpack_count_message(rhs.name, callee->results, s.names.size())};
    std::vector<Value> args = lower_args(rhs, *callee->fn);
    for (size_t i = 0; i < s.names.size(); ++i)
      define(s.names[i], global(GlobalKind::Let, fn_call(rhs, *callee, args, i)));
  }

  void input(const Stmt& s) {
    check_new_name(s.names[0]);
    std::optional<DType> dtype = ir::dtype_from_name(s.dtype.name);
    if (!dtype)
      throw CompileError{s.dtype.pos,
                         "unknown dtype '" + s.dtype.name + "'; expected bool, i32, i64, f32 or f64"};
    ir::Shape shape = dims(s.dims, DimUse::Declare, s.dtype.pos);
    check_new_name(s.names[0]);  // its own type may have used the name as a symbol
    NodeId node = checked(s.names[0].pos, [&] {
      return ir::add_input(graph_, s.names[0].name, *dtype, shape, loc(s.names[0].pos));
    });
    define(s.names[0], global(GlobalKind::Input, tensor(node)));
  }

  // ---- fn definitions: structure and names, checked once; types come with each call ----

  struct FnCheck {
    const Stmt& fn;
    Scope scope;  // the ids of the locals are unused here: names only
  };

  void check_fn(const Stmt& fn) {
    FnCheck c{fn, {}};
    for (const Ident& p : fn.params) add_local(c, p);
    bool returned = false;
    for (const Stmt& s : fn.body) {
      if (returned) throw CompileError{s.pos, "statement after 'return' in fn '" + fn.names[0].name + "'"};
      if (s.kind == StmtKind::Return) {
        returned = true;
        if (s.value->kind == ExprKind::Tuple) {
          for (const ExprPtr& item : s.value->operands) check_one(*item, c);
        } else {
          check_values(*s.value, c);
        }
        continue;
      }
      int n = check_values(*s.value, c);
      if (n != static_cast<int>(s.names.size())) {
        if (s.names.size() == 1) throw CompileError{s.value->pos, multi_value_message(s.value->name, n)};
        if (n == 1) throw CompileError{s.value->pos, kUnpackOnlyCalls};
        throw CompileError{s.names[0].pos, unpack_count_message(s.value->name, n, s.names.size())};
      }
      for (const Ident& id : s.names) add_local(c, id);
    }
    if (!returned) throw CompileError{fn.names[0].pos, "fn '" + fn.names[0].name + "' has no 'return'"};
  }

  void add_local(FnCheck& c, const Ident& id) {
    if (!c.scope.locals.emplace(id.name, 0).second)
      throw CompileError{id.pos, "redefinition of '" + id.name + "' in fn '" + c.fn.names[0].name + "'"};
  }

  static constexpr const char* kUnpackOnlyCalls =
      "only the results of a call of a fn returning several values can be unpacked";

  static std::string unpack_count_message(const std::string& fn, int results, size_t names) {
    return "'" + fn + "' returns " + plural(results, "value") + ", but " + std::to_string(names) +
           " names are given";
  }

  static std::string multi_value_message(const std::string& fn, int n) {
    return "'" + fn + "' returns " + plural(n, "value") + "; unpack them with 'let (a, b) = " + fn + "(...)'";
  }

  /// Checks an expression that may produce several values (a call of a multi-value fn).
  int check_values(const Expr& e, FnCheck& c) {
    if (e.kind == ExprKind::Call && e.name != c.fn.names[0].name) {
      if (const Global* g = callee(e, &c.scope).fn) {
        for (const Expr* a : bind_args(e, param_names(*g->fn), g->fn->params.size())) check_one(*a, c);
        return g->results;
      }
    }
    check_one(e, c);
    return 1;
  }

  void check_one(const Expr& e, FnCheck& c) {
    const std::string& fn = c.fn.names[0].name;
    auto not_scalar = [&](const std::string& what) {
      return CompileError{
          e.pos, what + " cannot be used in a fn body: fn bodies are scalar (use it on tensors outside fns)"};
    };
    switch (e.kind) {
      case ExprKind::Int:
      case ExprKind::Float:
      case ExprKind::Bool: return;
      case ExprKind::Name: {
        if (c.scope.locals.count(e.name)) return;
        if (const Global* g = find_global(e.name)) {
          if (g->kind == GlobalKind::Fn)
            throw CompileError{e.pos, "'" + e.name + "' is a fn; call it as " + e.name + "(...)"};
          if (g->kind == GlobalKind::Symbol)
            throw CompileError{e.pos, "'" + e.name + "' is a dimension symbol, not a value"};
          if (g->value.is_tensor)
            throw CompileError{e.pos, "fn bodies are scalar: '" + e.name + "' is a tensor; pass it to '" +
                                          fn + "' as a parameter"};
          return;
        }
        if (const Builtin* b = find_builtin(e.name); b && b->kind == BuiltinKind::Constant) return;
        if (find_builtin(e.name))
          throw CompileError{e.pos, "'" + e.name + "' is a builtin fn; call it as " + e.name + "(...)"};
        unknown_name(e, "name", &c.scope);
      }
      case ExprKind::Unary:
      case ExprKind::Binary:
        if (e.op == Operator::MatMul) throw not_scalar("'@' (matmul)");
        for (const ExprPtr& o : e.operands) check_one(*o, c);
        return;
      case ExprKind::Transpose: throw not_scalar("'.T' (transpose)");
      case ExprKind::List: throw not_scalar("a list");
      case ExprKind::Tuple: throw CompileError{e.pos, "a tuple (a, b) can only be returned: 'return (a, b)'"};
      case ExprKind::Call: break;
      // np-views
      case ExprKind::Index: throw not_scalar("indexing x[...]");
      case ExprKind::Slice:
      case ExprKind::Ellipsis: throw CompileError{e.pos, "a slice or '...' can only be an index: x[1:], x[..., 0]"};
      case ExprKind::String: throw not_scalar("a string");
    }
    if (e.name == fn) throw CompileError{e.pos, "fn '" + fn + "' calls itself: recursion is not supported"};
    Callee target = callee(e, &c.scope);
    if (const Builtin* b = target.builtin) {
      if (!is_scalar_builtin(b->kind)) throw not_scalar("'" + e.name + "'");
      for (const Expr* a : bind_args(e, b->params, b->required)) check_one(*a, c);
      return;
    }
    const Global* g = target.fn;
    if (g->results != 1) throw CompileError{e.pos, multi_value_message(e.name, g->results)};
    for (const Expr* a : bind_args(e, param_names(*g->fn), g->fn->params.size())) check_one(*a, c);
  }

  // ---- fn bodies traced into a ScalarBuilder (structure already checked) ----

  /// Inlines a call of `fn`: its parameters are `args`, its results are returned.
  std::vector<ScalarId> trace_call(ScalarBuilder& b, const Global& fn, const std::vector<ScalarId>& args) {
    Scope scope;
    scope.visible = fn.order;
    for (size_t i = 0; i < fn.fn->params.size(); ++i) scope.locals[fn.fn->params[i].name] = args[i];
    for (const Stmt& s : fn.fn->body) {
      if (s.kind == StmtKind::Return) {
        if (s.value->kind != ExprKind::Tuple) return scalar_values(b, *s.value, scope);
        std::vector<ScalarId> ids;
        for (const ExprPtr& item : s.value->operands) ids.push_back(scalar(b, *item, scope));
        return ids;
      }
      std::vector<ScalarId> ids = scalar_values(b, *s.value, scope);
      for (size_t i = 0; i < s.names.size(); ++i) scope.locals[s.names[i].name] = ids[i];
    }
    return {};
  }

  std::vector<ScalarId> scalar_values(ScalarBuilder& b, const Expr& e, Scope& scope) {
    if (e.kind == ExprKind::Call)
      if (const Global* g = callee(e, &scope).fn) return scalar_call(b, e, *g, scope);
    return {scalar(b, e, scope)};
  }

  std::vector<ScalarId> scalar_call(ScalarBuilder& b, const Expr& e, const Global& g, Scope& scope) {
    DepthGuard guard(trace_depth_, kMaxTraceDepth, e.pos,
                     kTraceTooDeep);  // `return g(x)` nests calls without nesting scalar()
    std::vector<ScalarId> args;
    for (const Expr* a : bind_args(e, param_names(*g.fn), g.fn->params.size()))
      args.push_back(scalar(b, *a, scope));
    return trace_call(b, g, args);
  }

  ScalarId scalar(ScalarBuilder& b, const Expr& e, Scope& scope) {
    DepthGuard guard(trace_depth_, kMaxTraceDepth, e.pos, kTraceTooDeep);
    if (++trace_steps_ > kMaxTraceSteps)
      throw CompileError{e.pos, "fn calls expand to too many operations (more than " +
                                    std::to_string(kMaxTraceSteps) + " in this program)"};
    switch (e.kind) {
      case ExprKind::Int: return b.literal_int(e.int_value);
      case ExprKind::Float: return b.literal(e.float_value);
      case ExprKind::Bool: return b.literal_bool(e.bool_value);
      case ExprKind::Name: {
        if (auto it = scope.locals.find(e.name); it != scope.locals.end()) return it->second;
        if (const Global* g = find_global(e.name, scope.visible))
          return checked(e.pos, [&] { return emit(b, g->value.literal); });
        return b.literal(find_builtin(e.name)->constant);
      }
      case ExprKind::Unary: {
        ScalarId x = scalar(b, *e.operands[0], scope);
        return checked(e.pos, [&] { return b.unary(scalar_op(e.op), x); });
      }
      case ExprKind::Binary: {
        ScalarId x = scalar(b, *e.operands[0], scope);
        ScalarId y = scalar(b, *e.operands[1], scope);
        return checked(e.pos, [&] { return b.binary(scalar_op(e.op), x, y); });
      }
      case ExprKind::Call: {
        Callee target = callee(e, &scope);
        if (target.fn) return scalar_call(b, e, *target.fn, scope)[0];
        const Builtin* builtin = target.builtin;
        std::vector<ScalarId> args;
        for (const Expr* a : bind_args(e, builtin->params, builtin->required))
          args.push_back(scalar(b, *a, scope));
        return checked(e.pos, [&] { return apply_builtin(b, *builtin, args); });
      }
      default: throw CompileError{e.pos, "internal error: unchecked expression in a fn body"};
    }
  }

  static ScalarId apply_builtin(ScalarBuilder& b, const Builtin& f, const std::vector<ScalarId>& args) {
    switch (f.kind) {
      case BuiltinKind::Unary: return b.unary(f.op, args[0]);
      case BuiltinKind::Binary: return b.binary(f.op, args[0], args[1]);
      case BuiltinKind::Where: return b.select(args[0], args[1], args[2]);
      case BuiltinKind::Clip:  // np.clip: NaN propagates through maximum and minimum
        return b.binary(ScalarOp::Minimum, b.binary(ScalarOp::Maximum, args[0], args[1]), args[2]);
      default: return b.cast(args[0], f.dtype);
    }
  }

  // ---- literals and values ----

  static ScalarId emit(ScalarBuilder& b, const Literal& l) {
    if (!l.weak) return b.typed_literal(l.value, l.dtype);
    if (ir::is_float(l.dtype)) return b.literal(l.value.f);
    if (l.dtype == DType::Bool) return b.literal_bool(l.value.i != 0);
    return b.literal_int(l.value.i);
  }

  Value tensor(NodeId node) const { return {true, node, {}}; }

  /// Adds a node with `add`, reporting IR errors and results too large to size safely at `pos`.
  template <class F>
  Value make_node(Pos pos, F&& add) {
    NodeId node = checked(pos, add);
    check_size(graph_.node(node).shape, pos);
    return tensor(node);
  }

  /// A literal used where a tensor is needed (an output, a reduction, a view): a rank-0 Constant.
  NodeId to_tensor(const Value& v, Pos pos) {
    if (v.is_tensor) return v.node;
    return checked(pos, [&] {
      ScalarBuilder b;
      ir::ScalarFn fn = b.finish({emit(b, v.literal)});
      const ir::ScalarNode& n = fn.node(fn.results[0]);
      ir::HostArray a(n.dtype, {});
      if (ir::is_float(n.dtype))
        a.set_f64(0, n.value.f);
      else
        a.set_i64(0, n.value.i);
      return ir::add_constant(graph_, std::move(a), loc(pos));
    });
  }

  using ScalarBody = std::function<ScalarId(ScalarBuilder&, const std::vector<ScalarId>&)>;

  /// Applies a scalar body to values: tensors become the parameters of one Elementwise node
  /// (a tensor used twice is one parameter), literals are inlined as weak literals, and when
  /// there is no tensor at all the literal result is returned, folded at compile time.
  Value elementwise(const std::vector<Value>& args, Pos pos, const std::string& name,
                    const ScalarBody& body) {
    return checked(pos, [&] {
      ScalarBuilder b;
      std::vector<NodeId> inputs;
      std::vector<ScalarId> params, ids;
      for (const Value& v : args) {
        if (!v.is_tensor) {
          ids.push_back(emit(b, v.literal));
          continue;
        }
        auto it = std::find(inputs.begin(), inputs.end(), v.node);
        if (it != inputs.end()) {
          ids.push_back(params[it - inputs.begin()]);
          continue;
        }
        inputs.push_back(v.node);
        params.push_back(b.param(graph_.node(v.node).dtype));
        ids.push_back(params.back());
      }
      ScalarId result = body(b, ids);
      if (inputs.empty()) {
        const ir::ScalarNode& n = b.peek().node(result);
        if (n.op != ScalarOp::Literal)
          throw CompileError{pos, "internal error: literal expression not folded"};
        return Value{false, -1, {n.dtype, n.value, n.weak}};
      }
      NodeId node = ir::add_elementwise(graph_, inputs, b.finish({result}), loc(pos), name);
      check_size(graph_.node(node).shape, pos);
      return tensor(node);
    });
  }

  // ---- tensor-level expressions ----

  Value lower(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Int:
        return elementwise({}, e.pos, "literal",
                           [&](ScalarBuilder& b, auto&) { return b.literal_int(e.int_value); });
      case ExprKind::Float:
        return elementwise({}, e.pos, "literal",
                           [&](ScalarBuilder& b, auto&) { return b.literal(e.float_value); });
      case ExprKind::Bool:
        return elementwise({}, e.pos, "literal",
                           [&](ScalarBuilder& b, auto&) { return b.literal_bool(e.bool_value); });
      case ExprKind::Name: return name_value(e);
      case ExprKind::Unary: {
        ScalarOp op = scalar_op(e.op);
        return elementwise(
            {lower(*e.operands[0])}, e.pos, std::string(ir::scalar_op_name(op)),
            [&](ScalarBuilder& b, const std::vector<ScalarId>& x) { return b.unary(op, x[0]); });
      }
      case ExprKind::Binary: {
        if (e.op == Operator::MatMul) return matmul(*e.operands[0], *e.operands[1], e.pos);
        Value a = lower(*e.operands[0]);
        Value c = lower(*e.operands[1]);
        ScalarOp op = scalar_op(e.op);
        return elementwise(
            {a, c}, e.pos, std::string(ir::scalar_op_name(op)),
            [&](ScalarBuilder& b, const std::vector<ScalarId>& x) { return b.binary(op, x[0], x[1]); });
      }
      case ExprKind::Transpose: {
        NodeId x = to_tensor(lower(*e.operands[0]), e.pos);
        return make_node(e.pos, [&] { return ir::add_transpose(graph_, x, loc(e.pos)); });
      }
      case ExprKind::Call: return call(e);
      case ExprKind::List:
        throw CompileError{e.pos, "a list [...] is only allowed as a shape, axis or permutation argument"};
      case ExprKind::Tuple:
        throw CompileError{e.pos, "a tuple (a, b) is only allowed after 'return' in a fn"};
      // np-views
      case ExprKind::Index: return index(e);
      case ExprKind::Slice:
      case ExprKind::Ellipsis: throw CompileError{e.pos, "a slice or '...' can only be an index: x[1:], x[..., 0]"};
      case ExprKind::String:
        throw CompileError{e.pos, "a string is only allowed as pad's mode: \"constant\", \"edge\" or \"reflect\""};
    }
    return {};
  }

  // ---- np-views: basic indexing, concatenate, stack, pad ----

  // Whether `e` mentions a dimension symbol (then it is a dim expression, not an integer).
  bool mentions_symbol(const Expr& e) const {
    if (e.kind == ExprKind::Name) {
      const Global* g = find_global(e.name);
      return g && g->kind == GlobalKind::Symbol;
    }
    for (const ExprPtr& o : e.operands)
      if (mentions_symbol(*o)) return true;
    return false;
  }

  static std::string index_text(const Expr& e) {
    std::string text = "index";
    if (e.operands[0]->kind == ExprKind::Name) text = e.operands[0]->name + "[...]";
    return text;
  }

  Value index(const Expr& e) {
    NodeId x = to_tensor(lower(*e.operands[0]), e.operands[0]->pos);
    std::vector<ir::IndexItem> items;
    for (size_t k = 1; k < e.operands.size(); ++k) {
      const Expr& item = *e.operands[k];
      ir::IndexItem it;
      if (item.kind == ExprKind::Ellipsis) {
        it.kind = ir::IndexItem::Kind::Ellipsis;
      } else if (item.kind == ExprKind::Name && item.name == "None" && !find_global("None")) {
        it.kind = ir::IndexItem::Kind::NewAxis;
      } else if (item.kind == ExprKind::Slice) {
        size_t part = 0;
        auto bound = [&](std::optional<int64_t>& as_int, std::optional<ir::Dim>& as_dim) {
          const Expr& b = *item.operands[part++];
          if (mentions_symbol(b)) as_dim = dim(b, DimUse::Refer);
          else as_int = index_int(b, "a slice bound");
        };
        if (item.int_value & 1) bound(it.start_int, it.start);
        if (item.int_value & 2) bound(it.stop_int, it.stop);
        if (item.int_value & 4) {
          const Expr& step = *item.operands[part++];
          it.step = index_int(step, "a slice step");
          if (it.step == 0) throw CompileError{step.pos, "slice step cannot be zero"};
        }
      } else {
        it.kind = ir::IndexItem::Kind::Integer;
        it.index = index_int(item, "an index");
      }
      items.push_back(std::move(it));
    }
    return make_node(e.pos, [&] { return ir::add_index(graph_, x, items, loc(e.pos), index_text(e)); });
  }

  int64_t index_int(const Expr& e, const std::string& what) {
    if (e.kind != ExprKind::List && !mentions_symbol(e)) {
      Value v = lower(e);
      if (!v.is_tensor && !ir::is_float(v.literal.dtype) && v.literal.dtype != DType::Bool) return v.literal.value.i;
      if (v.is_tensor)
        throw CompileError{e.pos, what + " must be an integer known at compile time, not a tensor " + describe(v) +
                                      " (gather with take(x, indices) instead)"};
    }
    if (mentions_symbol(e))
      throw CompileError{e.pos, what + " must be an integer; a dimension can only be a slice bound (x[:N // 2])"};
    throw CompileError{e.pos, what + " must be an integer, a slice (a:b:s), None or '...'"};
  }

  std::vector<NodeId> tensor_list(const Expr& e, const std::string& op) {
    if (e.kind != ExprKind::List || e.operands.empty())
      throw CompileError{e.pos, op + ": expected a non-empty list of arrays like [a, b]"};
    std::vector<NodeId> xs;
    for (const ExprPtr& item : e.operands) xs.push_back(to_tensor(lower(*item), item->pos));
    return xs;
  }

  Value views_call(const Expr& e, const Builtin& f, const std::vector<const Expr*>& a) {
    ir::SourceLoc l = loc(e.pos);
    if (f.kind == BuiltinKind::Concatenate || f.kind == BuiltinKind::Stack) {
      std::vector<NodeId> xs = tensor_list(*a[0], e.name);
      int64_t axis = a[1] ? static_int(*a[1], "'axis'") : 0;
      if (f.kind == BuiltinKind::Stack) return make_node(e.pos, [&] { return ir::add_stack(graph_, xs, axis, l); });
      return make_node(e.pos, [&] { return ir::add_concatenate(graph_, xs, axis, l); });
    }
    NodeId x = to_tensor(lower(*a[0]), a[0]->pos);
    int rank = graph_.node(x).rank();
    ir::PadMode mode = ir::PadMode::Constant;
    if (a[2]) {
      const Expr& m = *a[2];
      bool known = m.kind == ExprKind::String && (m.name == "constant" || m.name == "edge" || m.name == "reflect");
      if (!known)
        throw CompileError{m.pos, "pad: 'mode' must be \"constant\", \"edge\" or \"reflect\"" +
                                      (m.kind == ExprKind::String ? ", not \"" + m.name + "\"" : std::string())};
      mode = m.name == "edge" ? ir::PadMode::Edge : m.name == "reflect" ? ir::PadMode::Reflect : ir::PadMode::Constant;
    }
    double value = 0;
    if (a[3]) {
      if (mode != ir::PadMode::Constant) throw CompileError{a[3]->pos, "pad: 'value' is only for mode \"constant\""};
      Value v = lower(*a[3]);
      if (v.is_tensor) throw CompileError{a[3]->pos, "pad: 'value' must be a number"};
      value = ir::is_float(v.literal.dtype) ? v.literal.value.f : static_cast<double>(v.literal.value.i);
    }
    // pad_width: n (every side), [before, after] (every axis) or [[before, after], ...] per axis.
    const Expr& w = *a[1];
    const std::string kWidth = "pad: 'pad_width' must be an integer, a pair [before, after] or one pair per axis "
                               "[[before, after], ...]";
    std::vector<ir::Dim> before, after;
    auto pair = [&](const Expr& p) {
      if (p.kind != ExprKind::List || p.operands.size() != 2) throw CompileError{p.pos, kWidth};
      before.push_back(pad_dim(*p.operands[0]));
      after.push_back(pad_dim(*p.operands[1]));
    };
    if (w.kind != ExprKind::List) {
      ir::Dim n = pad_dim(w);
      before.assign(rank, n);
      after.assign(rank, n);
    } else if (!w.operands.empty() && w.operands[0]->kind == ExprKind::List) {
      for (const ExprPtr& p : w.operands) pair(*p);
      if (before.size() == 1 && rank != 1) {
        before.assign(rank, before[0]);
        after.assign(rank, after[0]);
      }
    } else {
      pair(w);
      before.assign(rank, before[0]);
      after.assign(rank, after[0]);
    }
    if (static_cast<int>(before.size()) != rank)
      throw CompileError{w.pos, "pad: " + std::to_string(before.size()) + " (before, after) pairs for an array of shape " +
                                    ir::shape_str(graph_.node(x).shape) + ", which has " + std::to_string(rank) + " axes"};
    return make_node(e.pos, [&] { return ir::add_pad(graph_, x, before, after, mode, value, l); });
  }

  ir::Dim pad_dim(const Expr& e) {
    if (e.kind == ExprKind::Unary && e.op == Operator::Neg) throw CompileError{e.pos, "pad: padding cannot be negative"};
    return dim(e, DimUse::Refer);
  }

  Value name_value(const Expr& e) {
    if (const Global* g = find_global(e.name)) {
      if (g->kind == GlobalKind::Fn)
        throw CompileError{e.pos, "'" + e.name + "' is a fn; call it as " + e.name + "(...)"};
      if (g->kind == GlobalKind::Symbol)
        throw CompileError{e.pos, "'" + e.name + "' is a dimension symbol, not a value"};
      return g->value;
    }
    if (const Builtin* b = find_builtin(e.name)) {
      if (b->kind != BuiltinKind::Constant)
        throw CompileError{e.pos, "'" + e.name + "' is a builtin fn; call it as " + e.name + "(...)"};
      return elementwise({}, e.pos, "literal",
                         [&](ScalarBuilder& sb, auto&) { return sb.literal(b->constant); });
    }
    unknown_name(e, "name", nullptr);
  }

  Value matmul(const Expr& a, const Expr& b, Pos pos) {
    NodeId x = to_tensor(lower(a), a.pos);
    NodeId y = to_tensor(lower(b), b.pos);
    return make_node(pos, [&] { return ir::add_matmul(graph_, x, y, loc(pos)); });
  }

  std::vector<Value> lower_args(const Expr& call, const Stmt& fn) {
    std::vector<Value> args;
    for (const Expr* a : bind_args(call, param_names(fn), fn.params.size())) args.push_back(lower(*a));
    return args;
  }

  /// Result `index` of a user fn applied elementwise to `args`: one Elementwise node.
  Value fn_call(const Expr& call, const Global& fn, const std::vector<Value>& args, size_t index) {
    return elementwise(args, call.pos, call.name, [&](ScalarBuilder& b, const std::vector<ScalarId>& ids) {
      try {
        return trace_call(b, fn, ids)[index];
      } catch (CompileError& err) {
        // The error is inside the fn body; the types that caused it come from this call.
        if (err.pos.line != call.pos.line || err.pos.col != call.pos.col)
          err.message +=
              " (in the call of '" + call.name + "' at line " + std::to_string(call.pos.line) + ")";
        throw;
      }
    });
  }

  Value call(const Expr& e) {
    Callee target = callee(e, nullptr);
    if (const Global* g = target.fn) {
      if (g->results != 1) throw CompileError{e.pos, multi_value_message(e.name, g->results)};
      return fn_call(e, *g, lower_args(e, *g->fn), 0);
    }
    const Builtin* f = target.builtin;
    std::vector<const Expr*> a = bind_args(e, f->params, f->required);
    if (is_scalar_builtin(f->kind)) {
      std::vector<Value> args;
      for (const Expr* x : a) args.push_back(lower(*x));
      return elementwise(args, e.pos, e.name, [&](ScalarBuilder& b, const std::vector<ScalarId>& ids) {
        return apply_builtin(b, *f, ids);
      });
    }
    if (f->kind == BuiltinKind::Arange) {
      ir::Dim n = dim(*a[0], DimUse::Refer);
      check_size({n}, a[0]->pos);
      return make_node(e.pos, [&] { return ir::add_arange(graph_, n, loc(e.pos)); });
    }
    if (f->kind == BuiltinKind::Rand) {
      ir::Shape shape = shape_arg(*a[0], DimUse::Refer);
      int64_t seed = a[1] ? static_int(*a[1], "'seed'") : 0;
      if (seed < 0) throw CompileError{a[1]->pos, "'seed' must be a non-negative integer"};
      return make_node(e.pos,
                       [&] { return ir::add_rand(graph_, shape, static_cast<uint64_t>(seed), loc(e.pos)); });
    }
    if (f->kind == BuiltinKind::CustomReduce) return custom_reduce(e, a);
    if (f->kind == BuiltinKind::Grad) {
      std::vector<Value> grads = grad(e);
      if (grads.size() != 1) throw CompileError{e.pos, multi_value_message(e.name, static_cast<int>(grads.size()))};
      return grads[0];
    }
    if (f->kind == BuiltinKind::Matmul) return matmul(*a[0], *a[1], e.pos);
    if (f->kind >= BuiltinKind::Take) return gather_scatter(e, *f, a);
    if (f->kind >= BuiltinKind::Concatenate) return views_call(e, *f, a);  // np-views
    NodeId x = to_tensor(lower(*a[0]), a[0]->pos);
    ir::SourceLoc l = loc(e.pos);
    switch (f->kind) {
      case BuiltinKind::Reduce: {
        std::vector<int64_t> axes = a[1] ? static_ints(*a[1], "'axis'") : ir::kAllAxes;
        bool keepdims = a[2] && static_bool(*a[2], "'keepdims'");
        return make_node(e.pos, [&] { return ir::add_reduce(graph_, x, f->reduce, axes, keepdims, l); });
      }
      case BuiltinKind::Transpose: {
        if (!a[1]) return make_node(e.pos, [&] { return ir::add_transpose(graph_, x, l); });
        std::vector<int64_t> perm = static_ints(*a[1], "'axes'");
        return make_node(e.pos, [&] { return ir::add_permute(graph_, x, perm, l); });
      }
      case BuiltinKind::Reshape: {
        ir::Shape shape = shape_arg(*a[1], DimUse::Reshape);
        return make_node(e.pos, [&] { return ir::add_reshape(graph_, x, shape, l); });
      }
      case BuiltinKind::BroadcastTo: {
        ir::Shape shape = shape_arg(*a[1], DimUse::Refer);
        return make_node(e.pos, [&] { return ir::add_broadcast_to(graph_, x, shape, l); });
      }
      case BuiltinKind::ExpandDims: {
        int64_t axis = static_int(*a[1], "'axis'");
        return make_node(e.pos, [&] { return ir::add_expand_dims(graph_, x, axis, l); });
      }
      case BuiltinKind::Scan: {
        // Without an axis, NumPy scans the flattened tensor.
        std::optional<int64_t> axis;
        if (a[1]) axis = static_int(*a[1], "'axis'");
        return make_node(e.pos, [&] {
          NodeId in = axis ? x : ir::add_reshape(graph_, x, {ir::num_elements(graph_.node(x).shape)}, l);
          return ir::add_scan(graph_, in, f->reduce, axis.value_or(0), l);
        });
      }
      default: {
        std::vector<int64_t> axes = static_ints(*a[1], "'axis'");
        return make_node(e.pos, [&] { return ir::add_squeeze(graph_, x, axes, l); });
      }
    }
  }

  // ---- gather/scatter (issue 16) ----

  /// take, take_along_axis, index_add, bincount, histogram: their static arguments checked here
  /// (shape rules in ir::add_*); bins, minlength and range are required since fuse shapes do not
  /// depend on data.
  Value gather_scatter(const Expr& e, const Builtin& f, const std::vector<const Expr*>& a) {
    NodeId x = to_tensor(lower(*a[0]), a[0]->pos);
    ir::SourceLoc l = loc(e.pos);
    switch (f.kind) {
      case BuiltinKind::Take:
      case BuiltinKind::TakeAlongAxis: {
        NodeId idx = to_tensor(lower(*a[1]), a[1]->pos);
        int64_t axis = a[2] ? static_int(*a[2], "'axis'") : 0;
        if (f.kind == BuiltinKind::Take) return make_node(e.pos, [&] { return ir::add_take(graph_, x, idx, axis, l); });
        return make_node(e.pos, [&] { return ir::add_take_along_axis(graph_, x, idx, axis, l); });
      }
      case BuiltinKind::IndexAdd: {
        NodeId idx = to_tensor(lower(*a[1]), a[1]->pos);
        NodeId values = to_tensor(lower(*a[2]), a[2]->pos);
        int64_t axis = a[3] ? static_int(*a[3], "'axis'") : 0;
        return make_node(e.pos, [&] { return ir::add_index_add(graph_, x, idx, values, axis, l); });
      }
      case BuiltinKind::Bincount: {
        if (!a[1])
          throw CompileError{e.pos, "'bincount' needs minlength=K: the result has exactly K bins (fuse shapes "
                                    "do not depend on data; a value outside [0, K) is a run-time error)"};
        ir::Dim length = dim(*a[1], DimUse::Refer);
        NodeId weights = a[2] ? to_tensor(lower(*a[2]), a[2]->pos) : -1;
        return make_node(e.pos, [&] { return ir::add_bincount(graph_, x, length, weights, l); });
      }
      default: {
        if (!a[1]) throw CompileError{e.pos, "'histogram' needs bins=B: a positive integer"};
        if (!a[2]) throw CompileError{e.pos, "'histogram' needs range=[lo, hi]: fuse does not take it from the data"};
        int64_t bins = static_int(*a[1], "'bins'");
        if (bins < 1) throw CompileError{a[1]->pos, "'bins' must be a positive integer, not " + std::to_string(bins)};
        if (a[2]->kind != ExprKind::List || a[2]->operands.size() != 2)
          throw CompileError{a[2]->pos, "'range' must be a list of two numbers like [0.0, 1.0]"};
        double lo = static_number(*a[2]->operands[0], "the lower bound of 'range'");
        double hi = static_number(*a[2]->operands[1], "the upper bound of 'range'");
        if (!(lo <= hi))  // NaN too
          throw CompileError{a[2]->pos, "'range' must have lower bound <= upper bound, got [" + number_text(lo) +
                                            ", " + number_text(hi) + "]"};
        if (!std::isfinite(lo) || !std::isfinite(hi))
          throw CompileError{a[2]->pos, "'range' must be finite, got [" + number_text(lo) + ", " + number_text(hi) + "]"};
        return make_node(e.pos, [&] { return ir::add_histogram(graph_, x, bins, lo, hi, l); });
      }
    }
  }

  static std::string number_text(double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", v);
    return text;
  }

  double static_number(const Expr& e, const std::string& what) {
    if (e.kind != ExprKind::List) {
      Value v = lower(e);
      if (!v.is_tensor && v.literal.dtype != DType::Bool)
        return ir::is_float(v.literal.dtype) ? v.literal.value.f : static_cast<double>(v.literal.value.i);
    }
    throw CompileError{e.pos, what + " must be a number"};
  }

  /// grad(y, x) or grad(y, [x1, x2, ...], cotangent=dy): the gradients of sum(y * dy) (dy ones
  /// when not given) with respect to each x, added to the graph (passes/autodiff.h).
  std::vector<Value> grad(const Expr& e) {
    std::vector<const Expr*> a = bind_args(e, {"y", "x", "cotangent"}, 2);
    Value y_value = lower(*a[0]);
    if (!y_value.is_tensor || !ir::is_float(graph_.node(y_value.node).dtype))
      throw CompileError{a[0]->pos, "grad: the value to differentiate must be a float tensor, not " +
                                        describe(y_value)};
    std::vector<const Expr*> var_exprs;
    if (a[1]->kind == ExprKind::List) {
      if (a[1]->operands.empty()) throw CompileError{a[1]->pos, "grad: the list of variables is empty"};
      for (const ExprPtr& item : a[1]->operands) var_exprs.push_back(item.get());
    } else {
      var_exprs.push_back(a[1]);
    }
    std::vector<NodeId> vars;
    for (const Expr* v : var_exprs) {
      Value value = lower(*v);
      std::string what = v->kind == ExprKind::Name ? "'" + v->name + "'" : "this value";
      if (!value.is_tensor || !ir::is_float(graph_.node(value.node).dtype))
        throw CompileError{v->pos, "grad: cannot differentiate with respect to " + what + ": it is " +
                                       describe(value) + "; only float tensors have gradients"};
      vars.push_back(value.node);
    }
    NodeId cotangent = a[2] ? to_tensor(lower(*a[2]), a[2]->pos) : -1;
    std::vector<NodeId> grads;
    try {
      grads = passes::vjp(graph_, y_value.node, vars, cotangent);
    } catch (const ir::Error& err) {
      if (a[2] && err.message().find("cotangent") != std::string::npos) throw CompileError{a[2]->pos, err.message()};
      std::string where;
      if (err.loc().known() && err.loc().line > 0)  // the op without a gradient, e.g. a user combiner
        where = " (at line " + std::to_string(err.loc().line) + ", col " + std::to_string(err.loc().col) + ")";
      throw CompileError{e.pos, err.message() + where};
    }
    std::vector<Value> out;
    for (NodeId g : grads) out.push_back(tensor(g));
    return out;
  }

  std::string describe(const Value& v) const {
    if (v.is_tensor) return std::string(ir::dtype_name(graph_.node(v.node).dtype)) + ir::shape_str(graph_.node(v.node).shape);
    return "a constant";
  }

  /// reduce(fn, x, init, axis, keepdims): fn(acc, x) traced with both parameters of x's dtype.
  Value custom_reduce(const Expr& e, const std::vector<const Expr*>& a) {
    const Expr& fn_arg = *a[0];
    const Global* g = fn_arg.kind == ExprKind::Name ? find_global(fn_arg.name) : nullptr;
    if (!g || g->kind != GlobalKind::Fn || g->fn->params.size() != 2 || g->results != 1)
      throw CompileError{fn_arg.pos,
                         "the first argument of 'reduce' must name a fn of two parameters "
                         "returning one value, like 'fn add(acc, x) = acc + x'"};
    NodeId x = to_tensor(lower(*a[1]), a[1]->pos);
    DType dtype = graph_.node(x).dtype;
    Value init = lower(*a[2]);
    if (init.is_tensor) throw CompileError{a[2]->pos, "'init' must be a number"};
    ir::ScalarValue identity = ir::is_float(init.literal.dtype)
                                   ? ir::ScalarValue::of(init.literal.value.f, dtype)
                                   : ir::ScalarValue::of_int(init.literal.value.i, dtype);
    std::vector<int64_t> axes = a[3] ? static_ints(*a[3], "'axis'") : ir::kAllAxes;
    bool keepdims = a[4] && static_bool(*a[4], "'keepdims'");
    ScalarBuilder b;
    std::vector<ScalarId> params = {b.param(dtype), b.param(dtype)};
    ScalarId r = trace_call(b, *g, params)[0];
    if (b.is_weak(r)) r = checked(e.pos, [&] { return b.cast(r, dtype); });
    if (b.dtype(r) != dtype)
      throw CompileError{fn_arg.pos, "the combiner '" + fn_arg.name + "' returns " +
                                         std::string(ir::dtype_name(b.dtype(r))) + " for " +
                                         std::string(ir::dtype_name(dtype)) +
                                         " arguments; it must return the dtype of the reduced tensor"};
    return make_node(e.pos, [&] {
      return ir::add_custom_reduce(graph_, x, b.finish({r}), identity, axes, keepdims, loc(e.pos));
    });
  }

  // ---- static arguments: axes, flags, seeds, shapes ----

  int64_t static_int(const Expr& e, const std::string& what) {
    if (e.kind != ExprKind::List) {
      Value v = lower(e);
      if (!v.is_tensor && !ir::is_float(v.literal.dtype) && v.literal.dtype != DType::Bool)
        return v.literal.value.i;
    }
    throw CompileError{e.pos, what + " must be an integer"};
  }

  std::vector<int64_t> static_ints(const Expr& e, const std::string& what) {
    if (e.kind != ExprKind::List) return {static_int(e, what)};
    if (e.operands.empty()) throw CompileError{e.pos, what + " must not be an empty list"};
    std::vector<int64_t> values;
    for (const ExprPtr& item : e.operands) values.push_back(static_int(*item, what));
    return values;
  }

  bool static_bool(const Expr& e, const std::string& what) {
    if (e.kind != ExprKind::List) {
      Value v = lower(e);
      if (!v.is_tensor && v.literal.dtype == DType::Bool) return v.literal.value.i != 0;
    }
    throw CompileError{e.pos, what + " must be true or false"};
  }

  ir::Shape shape_arg(const Expr& e, DimUse use) {
    if (e.kind != ExprKind::List)
      throw CompileError{e.pos, "expected a shape: a list of dimensions like [N, 4]"};
    return dims(e.operands, use, e.pos);
  }

  ir::Shape dims(const std::vector<ExprPtr>& items, DimUse use, Pos pos) {
    ir::Shape shape;
    for (const ExprPtr& item : items) shape.push_back(dim(*item, use));
    check_size(shape, pos);
    return shape;
  }

  void check_size(const ir::Shape& shape, Pos pos) const {
    // Symbolic dims count with their constant factor only (2*N counts 2): a bound, not the size.
    int64_t n = 1;
    for (const ir::Dim& d : shape) {
      int64_t factor = d.terms.size() == 1 ? d.terms[0].coef : 1;
      if (factor > 0 && (__builtin_mul_overflow(n, factor, &n) || n > kMaxElements))
        throw CompileError{pos, "shape " + ir::shape_str(shape) + " is too large (more than 2^48 elements)"};
    }
  }

  /// A dimension: an integer, a symbol, an integer const, or a product of them; `-1` alone
  /// in reshape. Outside input types also sums, differences and `//` by a positive constant
  /// (`N - 1`, `N // 2`): only plain symbols can be bound from the inputs.
  ir::Dim dim(const Expr& e, DimUse use) {
    const std::string kExpected = use == DimUse::Declare
                                      ? "expected a dimension: an integer, a symbol or a product like 2*N"
                                      : "expected a dimension: an integer, a symbol, or an expression of them "
                                        "with +, -, * and // like N // 2";
    switch (e.kind) {
      case ExprKind::Int: return e.int_value;
      case ExprKind::Unary:
        if (use == DimUse::Reshape && e.op == Operator::Neg && e.operands[0]->kind == ExprKind::Int &&
            e.operands[0]->int_value == 1)
          return -1;
        if (e.op == Operator::Neg) throw CompileError{e.pos, "a dimension cannot be negative"};
        break;
      case ExprKind::Binary: {
        bool arithmetic = e.op == Operator::Add || e.op == Operator::Sub || e.op == Operator::FloorDiv;
        if (e.op != Operator::Mul && (use == DimUse::Declare || !arithmetic)) break;
        ir::Dim a = dim(*e.operands[0], use == DimUse::Reshape ? DimUse::Refer : use);
        ir::Dim b = dim(*e.operands[1], use == DimUse::Reshape ? DimUse::Refer : use);
        ir::Dim result;
        try {
          switch (e.op) {
            case Operator::Add: result = a + b; break;
            case Operator::Sub: result = a - b; break;
            case Operator::FloorDiv: {
              std::optional<int64_t> divisor = b.constant();
              if (!divisor || *divisor <= 0)
                throw CompileError{e.operands[1]->pos, "a dimension can only be divided by a positive integer"};
              result = ir::floor_div(a, *divisor);
              break;
            }
            default: result = a * b; break;
          }
        } catch (const ir::Error&) {
          throw CompileError{e.pos, "dimension (" + a.str() + ") " + std::string(operator_text(e.op)) + " (" + b.str() +
                                        ") is too large"};
        }
        if (std::optional<int64_t> c = result.constant()) {
          if (*c < 0)
            throw CompileError{e.pos, "dimension " + a.str() + " " + std::string(operator_text(e.op)) + " " + b.str() +
                                          " is negative (" + result.str() + ")"};
          if (*c > kMaxElements) throw CompileError{e.pos, "dimension " + result.str() + " is too large"};
        }
        for (const ir::DimTerm& t : result.terms)
          if (t.coef > kMaxElements || t.coef < -kMaxElements)
            throw CompileError{e.pos, "dimension " + result.str() + " is too large"};
        return result;
      }
      case ExprKind::Name: return symbol(e, use);
      default: break;
    }
    throw CompileError{e.pos, kExpected};
  }

  ir::Dim symbol(const Expr& e, DimUse use) {
    auto it = globals_.find(e.name);
    if (it == globals_.end()) {
      if (use != DimUse::Declare) {
        std::vector<std::string_view> symbols;
        for (const auto& [name, g] : globals_)
          if (g.kind == GlobalKind::Symbol) symbols.push_back(name);
        throw CompileError{e.pos, "unknown dimension '" + e.name +
                                      "' (dimension symbols are introduced by input types)" +
                                      did_you_mean(e.name, symbols)};
      }
      define({e.name, e.pos}, global(GlobalKind::Symbol));
      return ir::Dim::symbol(e.name);
    }
    const Global& g = it->second;
    if (g.poisoned) throw Quiet{};
    if (g.kind == GlobalKind::Symbol) return ir::Dim::symbol(e.name);
    const Literal& l = g.value.literal;
    if (g.kind == GlobalKind::Fn || g.value.is_tensor)
      throw CompileError{e.pos, "'" + e.name + "' is a " + (g.kind == GlobalKind::Fn ? "fn" : "tensor") +
                                    ", not a dimension"};
    if (ir::is_float(l.dtype) || l.dtype == DType::Bool)
      throw CompileError{e.pos, "'" + e.name + "' is not an integer, so it cannot be a dimension"};
    if (l.value.i < 0) throw CompileError{e.pos, "a dimension cannot be negative"};
    if (l.value.i > kMaxElements) throw CompileError{e.pos, "dimension " + e.name + " is too large"};
    return l.value.i;
  }

  Diagnostics& diags_;
  ir::Graph graph_;
  std::map<std::string, Global> globals_;
  int64_t trace_steps_ = 0;
  int trace_depth_ = 0;
};

}  // namespace

ir::Graph lower(const Program& program, Diagnostics& diags) { return Lowerer(diags).run(program); }

}  // namespace fuse::expr
