// The .expr front end: lowering of good programs (node counts, dtypes, shapes, locations) and
// the diagnostics of bad ones (golden first lines).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "frontends/expr/compile.h"
#include "ir/printer.h"
#include "ir/verifier.h"

using namespace fuse;
using ir::DType;
using ir::OpKind;

namespace {

/// Compiles a program that must be correct; fails the test with the diagnostics otherwise.
ir::Graph compile_ok(const std::string& source) {
  expr::CompileResult r = expr::compile_expr(source, "test.expr");
  INFO(expr::format_diagnostics(r.errors, source));
  REQUIRE(r.errors.empty());
  REQUIRE(r.graph.has_value());
  CHECK(ir::verify(*r.graph).empty());
  return std::move(*r.graph);
}

int count(const ir::Graph& g, OpKind kind) {
  int n = 0;
  for (const ir::Node& node : g.nodes) n += node.kind == kind;
  return n;
}

const ir::Node& output(const ir::Graph& g, const std::string& name) {
  for (const ir::GraphOutput& o : g.outputs)
    if (o.name == name) return g.node(o.node);
  FAIL("no output " << name);
  return g.nodes.front();
}

/// The first line of the formatted diagnostics: "file:line:col: error: message".
std::string first_error(const std::string& source) {
  expr::CompileResult r = expr::compile_expr(source, "bad.expr");
  if (r.errors.empty()) return "<no error>";
  std::string text = expr::format_diagnostics(r.errors, source);
  return text.substr(0, text.find('\n'));
}

}  // namespace

// ---- good programs ----

TEST_CASE("gaussian_pdf: a user fn over broadcast scalars is one elementwise node", "[expr]") {
  ir::Graph g = compile_ok(R"(
const SQRT_2PI = 2.5066282746
fn gaussian_pdf(x, mean, sigma) = exp(-0.5 * ((x - mean) / sigma)**2) / (sigma * SQRT_2PI)
input x: f32[N]
input mean: f32
input sigma: f32
output y = gaussian_pdf(x, mean, sigma)
)");
  CHECK(g.nodes.size() == 4);
  CHECK(count(g, OpKind::Input) == 3);
  CHECK(count(g, OpKind::Elementwise) == 1);
  CHECK(count(g, OpKind::Constant) == 0);
  const ir::Node& y = output(g, "y");
  CHECK(y.dtype == DType::F32);
  CHECK(ir::shape_str(y.shape) == "[N]");
  CHECK(y.as<ir::ElementwiseAttrs>().body.params.size() == 3);
  CHECK(y.loc.line == 7);
  CHECK(y.loc.col == 12);
  CHECK(y.loc.file == "test.expr");
}

TEST_CASE("softmax: two row reductions and three elementwise nodes", "[expr]") {
  ir::Graph g = compile_ok(R"(
input x: f32[N, M]
let e = exp(x - max(x, axis=1, keepdims=true))
output y = e / sum(e, axis=-1, keepdims=true)
)");
  CHECK(g.nodes.size() == 6);
  CHECK(count(g, OpKind::Reduce) == 2);
  CHECK(count(g, OpKind::Elementwise) == 3);
  CHECK(ir::shape_str(output(g, "y").shape) == "[N, M]");
  for (const ir::Node& n : g.nodes)
    if (n.kind == OpKind::Reduce) CHECK(ir::shape_str(n.shape) == "[N, 1]");
}

TEST_CASE("layernorm: literals fold into the elementwise bodies", "[expr]") {
  ir::Graph g = compile_ok(R"(
const EPS = 1e-5
input x: f64[N, D]
input gamma: f64[D]
input beta: f64[D]
let mu = mean(x, axis=-1, keepdims=true)
let centered = x - mu
let variance = mean(centered**2, axis=-1, keepdims=true)
output y = centered * rsqrt(variance + EPS) * gamma + beta
)");
  CHECK(count(g, OpKind::Reduce) == 2);
  CHECK(count(g, OpKind::Constant) == 0);
  CHECK(count(g, OpKind::Elementwise) == 7);
  const ir::Node& y = output(g, "y");
  CHECK(y.dtype == DType::F64);  // weak literals keep f64
  CHECK(ir::shape_str(y.shape) == "[N, D]");
}

TEST_CASE("mlp: matmuls with bias and activation", "[expr]") {
  ir::Graph g = compile_ok(R"(
input x: f32[B, K]
input w1: f32[K, H]
input b1: f32[H]
input w2: f32[H, N]
input b2: f32[N]
let hidden = relu(x @ w1 + b1)
output y = matmul(hidden, w2) + b2
)");
  CHECK(count(g, OpKind::Matmul) == 2);
  CHECK(count(g, OpKind::Elementwise) == 3);
  CHECK(ir::shape_str(output(g, "y").shape) == "[B, N]");
}

TEST_CASE("x * 2.0 is one elementwise node with the literal in its body", "[expr]") {
  ir::Graph g = compile_ok("input x: f32[N]\noutput y = x * 2.0\n");
  REQUIRE(g.nodes.size() == 2);
  const ir::Node& y = output(g, "y");
  CHECK(y.dtype == DType::F32);
  CHECK(y.inputs.size() == 1);
  CHECK(ir::to_string(y.as<ir::ElementwiseAttrs>().body) == "(p0: f32) -> mul(p0, 2.0:f32)");
}

TEST_CASE("a tensor used twice is one parameter", "[expr]") {
  ir::Graph g = compile_ok("input x: i32[N]\noutput y = x * x + 1\n");
  const ir::Node& mul = g.node(1);
  CHECK(mul.inputs.size() == 1);
  CHECK(output(g, "y").dtype == DType::I32);
}

TEST_CASE("pure literal expressions stay literals; as an output they become a rank-0 constant", "[expr]") {
  ir::Graph g = compile_ok("const TWO_PI = 2 * 3.14159\nlet k = TWO_PI * 2.0\noutput y = k\n");
  REQUIRE(g.nodes.size() == 1);
  const ir::Node& y = output(g, "y");
  CHECK(y.kind == OpKind::Constant);
  CHECK(y.shape.empty());
  CHECK(y.dtype == DType::F32);
  CHECK(y.as<ir::ConstantAttrs>().value.get_f64(0) == Approx(4 * 3.14159));
}

TEST_CASE("let (a, b) = f(...) gives one elementwise node per result", "[expr]") {
  ir::Graph g = compile_ok(R"(
fn to_cartesian(r, theta) {
  let a = r * cos(theta)
  return (a, r * sin(theta))
}
input r: f32[N]
input theta: f32[N]
let (x, y) = to_cartesian(r, theta)
output xs = x
output ys = y
)");
  CHECK(count(g, OpKind::Elementwise) == 2);
  CHECK(ir::to_string(output(g, "xs").as<ir::ElementwiseAttrs>().body) == "(p0: f32, p1: f32) -> mul(p0, cos(p1))");
  CHECK(ir::to_string(output(g, "ys").as<ir::ElementwiseAttrs>().body) == "(p0: f32, p1: f32) -> mul(p0, sin(p1))");
}

TEST_CASE("fns call earlier fns and builtins; literal arguments are inlined", "[expr]") {
  ir::Graph g = compile_ok(R"(
fn sq(a) = a * a
fn norm(a, b) = sqrt(sq(a) + sq(b))
input x: f64[N]
output y = norm(x, 3)
)");
  REQUIRE(g.nodes.size() == 2);
  const ir::Node& y = output(g, "y");
  CHECK(y.dtype == DType::F64);
  CHECK(y.inputs.size() == 1);
}

TEST_CASE("the math builtins: log1p expm1 erf asin acos atan sinh cosh atan2 sign isnan isinf isfinite", "[expr]") {
  ir::Graph g = compile_ok(R"(
fn f(x, y) = log1p(x) + expm1(x) + erf(x) + asin(x) + acos(x) + atan(x) + sinh(x) + cosh(x) + atan2(y, x)
fn odd(x, y, i) = isnan(x) or isinf(y) or not isfinite(i)
input x: f32[N]
input y: f64[N]
input i: i32[N]
output a = f(x, x)
output b = atan2(y, x)
output c = odd(x, y, i)
output d = sign(i) + sign(x)
)");
  CHECK(ir::to_string(output(g, "a").as<ir::ElementwiseAttrs>().body) ==
        "(p0: f32) -> add(add(add(add(add(add(add(add(log1p(p0), expm1(p0)), erf(p0)), asin(p0)), acos(p0)), atan(p0)), "
        "sinh(p0)), cosh(p0)), atan2(p0, p0))");
  CHECK(output(g, "b").dtype == DType::F64);
  CHECK(ir::to_string(output(g, "c").as<ir::ElementwiseAttrs>().body) ==
        "(p0: f32, p1: f64, p2: i32) -> or(or(isnan(p0), isinf(p1)), not(isfinite(f32(p2))))");
  CHECK(output(g, "d").dtype == DType::F32);
  CHECK_THAT(first_error("input x: f32[N]\noutput y = atan2(x)\n"), Catch::Contains("'atan2' takes 2 arguments, got 1"));
}

TEST_CASE("reductions, custom reduce, views and generators", "[expr]") {
  ir::Graph g = compile_ok(R"(
fn absmax(acc, v) = maximum(acc, abs(v))
input x: f32[N, M, K]
output s = sum(x, axis=[0, 2], keepdims=true)
output m = mean(x)
output a = any(x > 0.0, axis=1)
output r = reduce(absmax, x, axis=-1, init=0.0)
output t = x.T
output p = transpose(x, [1, 0, 2])
output flat = reshape(x, [N*M, -1])
output b = broadcast_to(sum(x, axis=0), [4, M, K])
output e = expand_dims(m, 0)
output q = squeeze(expand_dims(x, 1), 1)
output i = arange(N*2)
output u = rand([N, 3], seed=7)
)");
  CHECK(ir::shape_str(output(g, "s").shape) == "[1, M, 1]");
  CHECK(output(g, "m").shape.empty());
  CHECK(output(g, "a").dtype == DType::Bool);
  CHECK(output(g, "r").as<ir::ReduceAttrs>().kind == ir::ReduceKind::Custom);
  CHECK(ir::shape_str(output(g, "r").shape) == "[N, M]");
  CHECK(ir::shape_str(output(g, "t").shape) == "[K, M, N]");
  CHECK(ir::shape_str(output(g, "p").shape) == "[M, N, K]");
  CHECK(ir::shape_str(output(g, "flat").shape) == "[M*N, K]");
  CHECK(ir::shape_str(output(g, "b").shape) == "[4, M, K]");
  CHECK(ir::shape_str(output(g, "e").shape) == "[1]");
  CHECK(ir::shape_str(output(g, "q").shape) == "[N, M, K]");
  CHECK(output(g, "i").dtype == DType::I64);
  CHECK(ir::shape_str(output(g, "i").shape) == "[2*N]");
  CHECK(output(g, "u").dtype == DType::F32);
  CHECK(output(g, "u").as<ir::RandAttrs>().seed == 7);
}

TEST_CASE("dims outside input types are integer expressions of symbols", "[expr][shape]") {
  ir::Graph g = compile_ok(R"(
const H = 2
input x: f32[N, M]
output a = arange(N - 1)
output b = arange(N // 2)
output c = arange((N + 1) // 2)
output d = arange(N + M - N)
output e = reshape(x, [-1, M - 1 + 1])
output f = broadcast_to(sum(x), [N * M - 1, (H*N + 1) // H])
)");
  CHECK(ir::shape_str(output(g, "a").shape) == "[N - 1]");
  CHECK(ir::shape_str(output(g, "b").shape) == "[N // 2]");
  CHECK(ir::shape_str(output(g, "c").shape) == "[(N + 1) // 2]");
  CHECK(ir::shape_str(output(g, "d").shape) == "[M]");
  CHECK(ir::shape_str(output(g, "e").shape) == "[N, M]");
  CHECK(ir::shape_str(output(g, "f").shape) == "[M*N - 1, N]");
}

TEST_CASE("precedence follows the language's table", "[expr]") {
  // -x**2 is -(x**2); 2**-1 parses; ** is right-associative.
  ir::Graph g = compile_ok("input x: f32[N]\noutput y = -x**2\noutput z = x ** 2 ** -1\n");
  CHECK(ir::to_string(g.node(1).as<ir::ElementwiseAttrs>().body) == "(p0: f32) -> pow(p0, 2.0:f32)");
  CHECK(ir::to_string(g.node(2).as<ir::ElementwiseAttrs>().body) == "(p0: f32) -> neg(p0)");
  // a + b * c < d and not e or f: or(and(lt(add(a, mul(b, c)), d), not(e)), f)
  ir::Graph h = compile_ok(R"(
fn f(a, b, c, d, e, g) = a + b * c < d and not e or g
input x: f32[N]
input p: bool[N]
output y = f(x, x, x, x, p, p)
)");
  CHECK(ir::to_string(output(h, "y").as<ir::ElementwiseAttrs>().body) ==
        "(p0: f32, p1: bool) -> or(and(lt(add(p0, mul(p0, p0)), p0), not(p1)), p1)");
  // `not` binds like unary minus: not a < b is (not a) < b.
  ir::Graph k = compile_ok("input a: bool[N]\ninput b: bool[N]\noutput y = where(not a < b, 1, 2)\n");
  CHECK_THAT(ir::print_graph(k), Catch::Contains("not(p0)") && Catch::Contains("lt("));
}

TEST_CASE("builtin names can be shadowed by user names", "[expr]") {
  ir::Graph g = compile_ok(R"(
fn relu(v) = maximum(v, 0.0)
input mean: f32[N]
output y = relu(mean) + mean(mean)
)");
  CHECK(count(g, OpKind::Reduce) == 1);
}

TEST_CASE("a fn sees the names defined before it, not later ones", "[expr]") {
  ir::Graph g = compile_ok(R"(
fn f(a) = relu(a) * inf
fn relu(a) = a * 2.0
input x: f32[N]
let inf = x
output y = f(x)
)");
  CHECK(ir::to_string(output(g, "y").as<ir::ElementwiseAttrs>().body) == "(p0: f32) -> mul(relu(p0), inf:f32)");
}

TEST_CASE("expressions span lines inside brackets; comments and blank lines are ignored", "[expr]") {
  ir::Graph g = compile_ok(R"(
# a comment
input x: f32[N, M]   # trailing comment

output y = sum(
  x * 2.0,
  axis=[0,
        1],
)
fn one(a) { return a }
output z = one(x)
)");
  CHECK(g.outputs.size() == 2);
}

TEST_CASE("every example program compiles", "[expr][examples]") {
  namespace fs = std::filesystem;
  int compiled = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(fs::path(FUSE_SOURCE_DIR) / "examples")) {
    if (entry.path().extension() != ".expr") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    expr::CompileResult r = expr::compile_expr(text.str(), entry.path().filename().string());
    INFO(entry.path().filename().string() << "\n" << expr::format_diagnostics(r.errors, text.str()));
    CHECK(r.errors.empty());
    if (r.graph) CHECK(ir::verify(*r.graph).empty());
    ++compiled;
  }
  CHECK(compiled > 0);
}

// ---- diagnostics ----

TEST_CASE("diagnostics show the source line and a caret under the column", "[expr][diagnostics]") {
  std::string source = "input x: f32[N]\n\toutput y = x + $\n";
  expr::CompileResult r = expr::compile_expr(source, "caret.expr");
  REQUIRE(r.errors.size() == 1);
  CHECK(expr::format_diagnostics(r.errors, source) ==
        "caret.expr:2:17: error: unexpected character '$'\n"
        "\toutput y = x + $\n"
        "\t               ^\n");
}

TEST_CASE("independent errors are all reported, in source order, at most 20", "[expr][diagnostics]") {
  expr::CompileResult r = expr::compile_expr(R"(input x: f32[N]
let a = x +
let b = exq(x)
let c = a * 2
let d = sum(x, axis=3)
output y = x $ 1
output z = b
)", "multi.expr");
  // c and z use names whose statements failed: they fail quietly.
  REQUIRE(r.errors.size() == 4);
  CHECK(r.errors[0].loc.line == 2);
  CHECK(r.errors[1].loc.line == 3);
  CHECK(r.errors[2].loc.line == 5);
  CHECK(r.errors[3].loc.line == 6);
  CHECK_FALSE(r.graph.has_value());

  std::string many;
  for (int i = 0; i < 50; ++i) many += "let v" + std::to_string(i) + " = undefined_name\n";
  CHECK(expr::compile_expr(many, "many.expr").errors.size() == 20);
}

struct BadProgram {
  std::string source;
  std::string first_error;
};

// Each program with the first line of its diagnostics. The file is always "bad.expr".
const BadProgram kBadPrograms[] = {
    // lexical
    {"input x: f32[N]\noutput y = x $ 2\n", "bad.expr:2:14: error: unexpected character '$'"},
    {"input x: f32[N]\noutput y = x ^ 2\n", "bad.expr:2:14: error: '^' is not an operator; use '**' for powers"},
    {"input x: f32[N]\noutput y = !x\n", "bad.expr:2:12: error: unexpected character '!'; use 'not' for logical negation"},
    {"const C = 99999999999999999999\n", "bad.expr:1:11: error: integer '99999999999999999999' is too large (the largest is 9223372036854775807)"},
    {"const C = 1e999\n", "bad.expr:1:11: error: number '1e999' is out of the range of f64"},
    {"const C = 12abc\n", "bad.expr:1:11: error: invalid number '12abc': unexpected 'a'"},
    {"input \xc3\xa9: f32[N]\n", "bad.expr:1:7: error: unexpected non-ASCII character"},
    // syntax
    {"input x: f32[N]\noutput y = x +\n", "bad.expr:2:15: error: expected an expression, found end of line"},
    {"input x: f32[N]\noutput y = (x + 1\noutput z = x\n", "bad.expr:2:12: error: '(' was never closed"},
    {"input x: f32[N]\noutput y = 1 < x < 2\n", "bad.expr:2:18: error: comparisons cannot be chained; write 'a < b and b < c'"},
    {"input x: f32[N]\nx = 3\n", "bad.expr:2:1: error: expected a statement; to define 'x' write 'let x = ...'"},
    {"input x: f32[N]\noutput y = x.foo\n", "bad.expr:2:14: error: expected 'T' after '.' (x.T is the transpose), found name 'foo'"},
    {"input x: f32[N]\noutput y = x[]\n", "bad.expr:2:13: error: empty index: write x[:] for all of x"},  // np-views
    {"input x: f32[N]\noutput y = x[..]\n", "bad.expr:2:16: error: expected '...' (an ellipsis), found ']'"},
    {"input x: f32[N]\noutput y = pad(x, 1, mode=\"edge)\n", "bad.expr:2:27: error: unterminated string (it must end on its line)"},
    {"input x: f32[N] x\n", "bad.expr:1:17: error: expected end of line after the statement, found name 'x'"},
    {"input x f32[N]\n", "bad.expr:1:9: error: expected ':' and a type after the input name, found name 'f32'"},
    {"fn f(a) {\n  return a\ninput x: f32[N]\n", "bad.expr:1:9: error: '{' of fn 'f' was never closed"},
    {"let x = 1\n}\n", "bad.expr:2:1: error: unmatched '}'"},
    {"return 1\n", "bad.expr:1:1: error: 'return' outside of a fn body"},
    {"input x: f32[N]\nreturn (x, x)\n", "bad.expr:2:1: error: 'return' outside of a fn body"},  // fuzz: once hung
    {"input x: f32[N]\noutput y = sum(axis=0, x)\n", "bad.expr:2:24: error: positional argument after a keyword argument"},
    {"output y = " + std::string(300, '(') + "1" + std::string(300, ')') + "\n",
     "bad.expr:1:212: error: expression is nested too deeply (more than 200 levels)"},
    // names
    {"input x: f32[N]\noutput y = exq(x)\n", "bad.expr:2:12: error: unknown fn 'exq'; did you mean 'exp'?"},
    {"input value: f32[N]\noutput y = valeu * 2\n", "bad.expr:2:12: error: unknown name 'valeu'; did you mean 'value'?"},
    {"input x: f32[N]\nlet y = x\nlet y = x\n", "bad.expr:3:5: error: redefinition of 'y' (first defined at line 2)"},
    {"input x: f32[N]\noutput y = N\n", "bad.expr:2:12: error: 'N' is a dimension symbol, not a value"},
    {"input x: f32[N]\noutput y = exp\n", "bad.expr:2:12: error: 'exp' is a builtin fn; call it as exp(...)"},
    {"input x: f32[N]\noutput y = x(1)\n", "bad.expr:2:12: error: 'x' is not a fn"},
    {"fn f(a) = a\ninput x: f32[N]\noutput y = f\n", "bad.expr:3:12: error: 'f' is a fn; call it as f(...)"},
    {"input x: f32[N]\noutput y = reshape(x, [K])\n", "bad.expr:2:24: error: unknown dimension 'K' (dimension symbols are introduced by input types)"},
    {"input x: f16[N]\n", "bad.expr:1:10: error: unknown dtype 'f16'; expected bool, i32, i64, f32 or f64"},
    // fns
    {"fn f(a) = f(a)\n", "bad.expr:1:11: error: fn 'f' calls itself: recursion is not supported"},
    {"fn f(a) = sum(a)\n", "bad.expr:1:11: error: 'sum' cannot be used in a fn body: fn bodies are scalar (use it on tensors outside fns)"},
    {"fn f(a) = a @ a\n", "bad.expr:1:13: error: '@' (matmul) cannot be used in a fn body: fn bodies are scalar (use it on tensors outside fns)"},
    {"input x: f32[N]\nfn f(a) = a + x\n", "bad.expr:2:15: error: fn bodies are scalar: 'x' is a tensor; pass it to 'f' as a parameter"},
    {"fn f(a, a) = a\n", "bad.expr:1:9: error: redefinition of 'a' in fn 'f'"},
    {"fn f(a) {\n  let t = a\n}\n", "bad.expr:1:4: error: fn 'f' has no 'return'"},
    {"fn f(a) {\n  return a\n  let t = a\n}\n", "bad.expr:3:3: error: statement after 'return' in fn 'f'"},
    {"fn f(a, b) {\n  return (a + b, a - b)\n}\ninput x: f32[N]\noutput y = f(x, x)\n",
     "bad.expr:5:12: error: 'f' returns 2 values; unpack them with 'let (a, b) = f(...)'"},
    {"fn f(a, b) {\n  return (a + b, a - b)\n}\ninput x: f32[N]\nlet (p, q, r) = f(x, x)\n",
     "bad.expr:5:6: error: 'f' returns 2 values, but 3 names are given"},
    {"input x: f32[N]\nlet (p, q) = exp(x)\n", "bad.expr:2:14: error: only the results of a call of a fn returning several values can be unpacked"},
    {"fn f(a) = (a, a)\ninput x: f32[N]\nlet (p, p) = f(x)\n", "bad.expr:3:9: error: 'p' appears twice"},
    {"fn f(a) {\n  fn g(b) = b\n  return a\n}\n", "bad.expr:2:3: error: a fn cannot be defined inside another fn"},
    {"fn f(a) {\n  output z = a\n}\n", "bad.expr:2:3: error: expected 'let' or 'return' in a fn body, found 'output'"},
    {"fn f(a) = -a\ninput x: i32[N]\noutput y = f(x > 0)\n",
     "bad.expr:1:11: error: 'neg' is not defined for bool (use 'not') (in the call of 'f' at line 3)"},
    // arity and arguments
    {"input x: f32[N]\noutput y = where(x > 0, x)\n", "bad.expr:2:12: error: 'where' takes 3 arguments, got 2"},
    {"input x: f32[N]\noutput y = exp(x, x)\n", "bad.expr:2:12: error: 'exp' takes 1 argument, got 2"},
    {"input x: f32[N]\noutput y = sum(x, 0, true, 3)\n", "bad.expr:2:12: error: 'sum' takes at most 3 arguments, got 4"},
    {"input x: f32[N]\noutput y = sum(x, axes=1)\n", "bad.expr:2:19: error: 'sum' has no argument 'axes'; did you mean 'axis'?"},
    {"input x: f32[N]\noutput y = sum(x, axis=0, axis=0)\n", "bad.expr:2:27: error: argument 'axis' of 'sum' given twice"},
    {"fn f(a) = a\ninput x: f32[N]\noutput y = reduce(f, x)\n", "bad.expr:3:12: error: 'reduce' is missing argument 'init'"},
    {"input x: f32[N]\noutput y = sum(x, axis=1.5)\n", "bad.expr:2:24: error: 'axis' must be an integer"},
    {"input x: f32[N]\noutput y = sum(x, keepdims=1)\n", "bad.expr:2:28: error: 'keepdims' must be true or false"},
    {"input x: f32[N]\noutput y = rand([N], seed=-1)\n", "bad.expr:2:27: error: 'seed' must be a non-negative integer"},
    {"input x: f32[N]\noutput y = broadcast_to(x, N)\n", "bad.expr:2:28: error: expected a shape: a list of dimensions like [N, 4]"},
    {"const K = 4.5\ninput x: f32[K]\n", "bad.expr:2:14: error: 'K' is not an integer, so it cannot be a dimension"},
    {"input x: f32[N - 1]\n", "bad.expr:1:16: error: expected a dimension: an integer, a symbol or a product like 2*N"},
    {"input x: f32[N]\noutput y = arange(N // 0)\n", "bad.expr:2:24: error: a dimension can only be divided by a positive integer"},
    {"input x: f32[N]\noutput y = arange(2 - 5)\n", "bad.expr:2:21: error: dimension 2 - 5 is negative (-3)"},
    {"input x: f32[N]\noutput y = arange(N / 2)\n", "bad.expr:2:21: error: expected a dimension: an integer, a symbol, or an expression of them with +, -, * and // like N // 2"},
    {"input x: f32[2147483648, 2147483648, 2147483648]\n", "bad.expr:1:10: error: shape [2147483648, 2147483648, 2147483648] is too large (more than 2^48 elements)"},
    // types and shapes (found by the IR, reported at the user's expression)
    {"input b: bool[N]\noutput y = -b\n", "bad.expr:2:12: error: 'neg' is not defined for bool (use 'not')"},
    {"input x: f32[N]\ninput y: f32[M]\noutput z = x + y\n", "bad.expr:3:14: error: add: shapes [N] and [M] cannot be broadcast together (dim N vs M)"},
    {"input x: f32[N, M]\noutput y = sum(x, axis=2)\n", "bad.expr:2:12: error: sum: axis 2 is out of range for shape [N, M] (rank 2)"},
    {"input x: f32[N, M]\noutput y = x @ x\n", "bad.expr:2:14: error: matmul: shapes [N, M] and [N, M] do not match: contracted dims M and N differ"},
    {"fn add(a, b) = a + b\ninput x: bool[N]\noutput y = reduce(add, x, init=0)\n",
     "bad.expr:3:19: error: the combiner 'add' returns i32 for bool arguments; it must return the dtype of the reduced tensor"},
    // programs
    {"# nothing\n", "bad.expr:1:1: error: the program has no outputs; add 'output NAME = ...'"},
};

TEST_CASE("bad programs: golden first diagnostic", "[expr][diagnostics]") {
  for (const BadProgram& p : kBadPrograms) {
    INFO(p.source);
    CHECK(first_error(p.source) == p.first_error);
  }
}

TEST_CASE("hostile inputs never crash", "[expr][robustness]") {
  const std::string inputs[] = {
      std::string(100000, '('),
      std::string(100000, '-') + "1",
      "output y = 1" + std::string(50000, '+'),
      "fn f(a) {" + std::string(1000, '{'),
      std::string("\0\0\0", 3),
      "output y = 2" + [] {
        std::string s;
        for (int i = 0; i < 100000; ++i) s += "**2";
        return s;
      }(),
      // Each fn doubles the work of inlining the one before: bounded, not exponential.
      [] {
        std::string s = "fn f0(a) = a + 1\n";
        for (int i = 1; i < 40; ++i)
          s += "fn f" + std::to_string(i) + "(a) = f" + std::to_string(i - 1) + "(f" + std::to_string(i - 1) + "(a))\n";
        return s + "input x: f32[N]\noutput y = f39(x)\n";
      }(),
      [] {
        std::string s = "fn f0(a) = a\n";
        for (int i = 1; i < 2000; ++i)
          s += "fn f" + std::to_string(i) + "(a) = f" + std::to_string(i - 1) + "(a)\n";
        return s + "input x: f32[N]\noutput y = f1999(x)\n";
      }(),
  };
  for (const std::string& source : inputs) {
    expr::CompileResult r = expr::compile_expr(source, "hostile.expr");
    CHECK(r.errors.size() <= 20);
    CHECK_NOTHROW(expr::format_diagnostics(r.errors, source));
  }
}
