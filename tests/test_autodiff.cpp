// Reverse-mode autodiff (passes/autodiff.h): every rule against central finite differences in
// f64 on the reference interpreter, higher order, the seed workloads against hand-derived
// gradients, compiled code against the interpreter, and the kernel counts of backward graphs.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>

#include "frontends/api.h"
#include "frontends/compile.h"
#include "frontends/expr/compile.h"
#include "ir/interpreter.h"
#include "passes/autodiff.h"
#include "tests/examples.h"
#include "tests/ptxas.h"
#include "tests/random_graph.h"

using namespace fuse;
using ir::TensorMap;

namespace {

/// f64 values uniform in [lo, hi], with a random sign when `signed_away_from_zero` (then |v| in
/// [lo, hi]: points away from the kinks at 0).
ir::HostArray random_array(ir::ConcreteShape shape, double lo, double hi, uint32_t seed,
                           bool signed_away_from_zero = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  ir::HostArray a(DType::F64, std::move(shape));
  for (int64_t i = 0; i < a.size(); ++i) {
    double v = u(rng);
    if (signed_away_from_zero && (rng() & 1)) v = -v;
    a.set_f64(i, v);
  }
  return a;
}

const ir::GraphOutput& find_output(const ir::Graph& g, const std::string& name) {
  for (const ir::GraphOutput& o : g.outputs)
    if (o.name == name) return o;
  FAIL("no output " << name);
  return g.outputs[0];
}

/// sum(y * dy) of output "y" of `g` on `inputs`.
double weighted_sum(const ir::Graph& g, const TensorMap& inputs, const ir::HostArray& dy) {
  ir::HostArray y = ir::interpret(g, inputs).at("y");
  double s = 0;
  for (int64_t i = 0; i < y.size(); ++i) s += y.get_f64(i) * dy.get_f64(i);
  return s;
}

/// Checks the VJP of output "y" with respect to each input in `wrt` against central finite
/// differences of sum(y * dy) for a random dy, element by element. Returns the gradients.
TensorMap check_vjp(const ir::Graph& g, const TensorMap& inputs, const std::vector<std::string>& wrt,
                    double tolerance = 1e-6, double h = 1e-5) {
  ir::HostArray y = ir::interpret(g, inputs).at("y");
  ir::HostArray dy = random_array(y.shape, -1, 1, 99).cast(y.dtype);
  ir::Graph with_dy = g;
  const ir::Node& y_node = g.node(find_output(g, "y").node);
  ir::add_input(with_dy, "dy", y_node.dtype, y_node.shape);
  ir::Graph gg = passes::grad(with_dy, "y", wrt, {.cotangent = "dy"});
  TensorMap all = inputs;
  all["dy"] = dy;
  TensorMap got = ir::interpret(gg, all);
  for (const std::string& name : wrt) {
    const ir::HostArray& grad = got.at("grad_" + name);
    REQUIRE(grad.dtype == inputs.at(name).dtype);
    REQUIRE(grad.shape == inputs.at(name).shape);
    for (int64_t i = 0; i < grad.size(); ++i) {
      TensorMap plus = inputs, minus = inputs;
      plus[name].set_f64(i, inputs.at(name).get_f64(i) + h);
      minus[name].set_f64(i, inputs.at(name).get_f64(i) - h);
      double fd = (weighted_sum(g, plus, dy) - weighted_sum(g, minus, dy)) / (2 * h);
      INFO("d/d" << name << "[" << i << "]");
      CHECK(grad.get_f64(i) == Approx(fd).epsilon(tolerance).margin(tolerance));
    }
  }
  return got;
}

}  // namespace

// ---------------------------------------------------------------- elementwise

TEST_CASE("grad of every differentiable unary scalar op matches finite differences", "[autodiff][scalar]") {
  struct Case {
    ir::ScalarOp op;
    double lo, hi;
    bool signed_values;
  };
  using Op = ir::ScalarOp;
  const Case cases[] = {
      {Op::Neg, 0.2, 2, true},    {Op::Abs, 0.2, 2, true},    {Op::Exp, 0.2, 2, true},
      {Op::Exp2, 0.2, 2, true},   {Op::Log, 0.3, 3, false},   {Op::Log2, 0.3, 3, false},
      {Op::Sqrt, 0.3, 3, false},  {Op::Rsqrt, 0.3, 3, false}, {Op::Sin, 0.1, 3, true},
      {Op::Cos, 0.1, 3, true},    {Op::Tan, 0.1, 1.2, true},  {Op::Tanh, 0.1, 2, true},
      {Op::Sigmoid, 0.1, 3, true}, {Op::Relu, 0.2, 2, true},  {Op::Log1p, 0.1, 0.9, true},
      {Op::Expm1, 0.1, 2, true},  {Op::Erf, 0.1, 2, true},    {Op::Asin, 0.1, 0.9, true},
      {Op::Acos, 0.1, 0.9, true}, {Op::Atan, 0.1, 3, true},   {Op::Sinh, 0.1, 2, true},
      {Op::Cosh, 0.1, 2, true},
  };
  for (const Case& c : cases) {
    SECTION(std::string(ir::scalar_op_name(c.op))) {
      for (int64_t n : {1, 7}) {
        Graph g;
        Tensor x = g.input("x", DType::F64, {sym("N")});
        g.output("y", apply(c.op, {x}));
        check_vjp(g.ir(), {{"x", random_array({n}, c.lo, c.hi, 1, c.signed_values)}}, {"x"});
      }
    }
  }
}

TEST_CASE("grad of floor ceil round and sign is zero", "[autodiff][scalar]") {
  using Op = ir::ScalarOp;
  for (Op op : {Op::Floor, Op::Ceil, Op::Round, Op::Sign}) {
    Graph g;
    Tensor x = g.input("x", DType::F64, {7});
    g.output("y", apply(op, {x}) + x * 0.0);
    TensorMap got = check_vjp(g.ir(), {{"x", random_array({7}, 0.1, 0.4, 2, true)}}, {"x"});
    for (double v : got.at("grad_x").to_doubles()) CHECK(v == 0.0);
  }
}

TEST_CASE("grad at the kinks follows the documented conventions", "[autodiff][scalar]") {
  Graph g;
  Tensor x = g.input("x", DType::F64, {3});
  Tensor z = g.input("z", DType::F64, {3});
  g.output("y", relu(x) + abs(x) + maximum(x, z) + minimum(x, z));
  ir::Graph gg = passes::grad(g.ir(), "y", {"x", "z"});
  TensorMap got = ir::interpret(gg, {{"x", ir::HostArray::from<double>({3}, {0, 0, 2})},
                                     {"z", ir::HostArray::from<double>({3}, {0, 1, 2})}});
  // relu'(0) = 0, abs'(0) = 0; max and min of equal values share the gradient equally.
  CHECK(got.at("grad_x").to_doubles() == std::vector<double>{1.0, 1.0, 3.0});
  CHECK(got.at("grad_z").to_doubles() == std::vector<double>{1.0, 1.0, 1.0});
}

TEST_CASE("grad of binary scalar ops with broadcasting matches finite differences", "[autodiff][scalar][broadcast]") {
  using Op = ir::ScalarOp;
  for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Mod, Op::Pow, Op::Minimum, Op::Maximum, Op::Atan2}) {
    SECTION(std::string(ir::scalar_op_name(op))) {
      // [3, 1] with [4], [1] with [2, 1, 5] (size-1 dims), and equal shapes.
      const std::pair<ir::ConcreteShape, ir::ConcreteShape> shapes[] = {
          {{3, 1}, {4}}, {{1}, {2, 1, 5}}, {{7}, {7}}, {{}, {1}}};
      for (auto [sa, sb] : shapes) {
        Graph g;
        Tensor a = g.input("a", DType::F64, ir::to_shape(sa));
        Tensor b = g.input("b", DType::F64, ir::to_shape(sb));
        g.output("y", apply(op, {a, b}));
        bool positive = op == Op::Pow || op == Op::Mod;
        check_vjp(g.ir(),
                  {{"a", random_array(sa, 0.5, 2, 3, !positive)}, {"b", random_array(sb, 0.6, 2.2, 4, !positive)}},
                  {"a", "b"}, 1e-5);
      }
    }
  }
}

TEST_CASE("grad of where and casts and user functions", "[autodiff][scalar]") {
  Graph g;
  Tensor a = g.input("a", DType::F64, {4, 1});
  Tensor b = g.input("b", DType::F64, {5});
  auto f = vectorize([](Scalar p, Scalar q) {
    Scalar t = tanh(p * q) + p / (q * q + 1.0);
    return where(p > q, t * p, sin(q) * t);
  });
  g.output("y", f(a, b) * where(a < 0.0, a, 2.0));
  check_vjp(g.ir(), {{"a", random_array({4, 1}, 0.1, 1.5, 5, true)}, {"b", random_array({5}, 0.12, 1.5, 6, true)}},
            {"a", "b"}, 1e-5);
}

TEST_CASE("a cast to f32 passes the gradient and a cast to an integer stops it", "[autodiff][scalar]") {
  Graph g;
  Tensor x = g.input("x", DType::F64, {5});
  g.output("y", cast(cast(x, DType::F32) * 3.0, DType::F64) + cast(cast(x, DType::I64), DType::F64));
  TensorMap got = ir::interpret(passes::grad(g.ir(), "y", {"x"}), {{"x", random_array({5}, -3, 3, 7)}});
  for (double v : got.at("grad_x").to_doubles()) CHECK(v == 3.0);
}

TEST_CASE("grad in f32 keeps f32", "[autodiff][dtype]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor w = g.input("w", DType::F32, {});
  g.output("loss", sum(exp(x * w)));
  ir::Graph gg = passes::grad(g.ir(), "loss", {"x", "w"});
  TensorMap got = ir::interpret(gg, {{"x", ir::HostArray::from<float>({3}, {0.5f, 1.0f, -1.0f})},
                                     {"w", ir::HostArray::scalar<float>(2.0f)}});
  REQUIRE(got.at("grad_x").dtype == DType::F32);
  REQUIRE(got.at("grad_w").dtype == DType::F32);
  CHECK(got.at("grad_x").get_f64(1) == Approx(2 * std::exp(2.0)).epsilon(1e-6));
  CHECK(got.at("grad_w").get_f64(0) ==
        Approx(0.5 * std::exp(1.0) + 1.0 * std::exp(2.0) - 1.0 * std::exp(-2.0)).epsilon(1e-6));
}

// ---------------------------------------------------------------- reductions, matmul, views

TEST_CASE("grad of reductions matches finite differences", "[autodiff][reduce]") {
  using fuse::max;
  using fuse::min;
  const std::vector<std::pair<std::string, std::function<Tensor(Tensor, Axes, bool)>>> reductions = {
      {"sum", [](Tensor x, Axes a, bool k) { return sum(x, a, k); }},
      {"mean", [](Tensor x, Axes a, bool k) { return mean(x, a, k); }},
      {"prod", [](Tensor x, Axes a, bool k) { return prod(x, a, k); }},
      {"max", [](Tensor x, Axes a, bool k) { return max(x, a, k); }},
      {"min", [](Tensor x, Axes a, bool k) { return min(x, a, k); }},
  };
  const std::vector<Axes> axes = {Axes{}, Axes{1}, Axes{0, 2}, Axes{-1}};
  for (const auto& [name, reduce] : reductions) {
    SECTION(name) {
      for (const Axes& a : axes) {
        for (bool keepdims : {false, true}) {
          Graph g;
          Tensor x = g.input("x", DType::F64, {2, 3, 4});
          g.output("y", reduce(x, a, keepdims) * 1.5);
          check_vjp(g.ir(), {{"x", random_array({2, 3, 4}, 0.5, 1.5, 8, true)}}, {"x"}, 1e-5);
        }
      }
    }
  }
}

TEST_CASE("grad of max and min share ties equally and prod handles zeros", "[autodiff][reduce]") {
  Graph g;
  Tensor x = g.input("x", DType::F64, {2, 3});
  g.output("mx", fuse::max(x, 1));
  g.output("mn", fuse::min(x, 1));
  g.output("p", prod(x, 1));
  ir::HostArray xs = ir::HostArray::from<double>({2, 3}, {1, 3, 3, 0, 2, 0});
  CHECK(ir::interpret(passes::grad(g.ir(), "mx", {"x"}), {{"x", xs}}).at("grad_x").to_doubles() ==
        std::vector<double>{0, 0.5, 0.5, 0, 1, 0});
  CHECK(ir::interpret(passes::grad(g.ir(), "mn", {"x"}), {{"x", xs}}).at("grad_x").to_doubles() ==
        std::vector<double>{1, 0, 0, 0.5, 0, 0.5});
  // Row 0 has no zero: prod / x. Row 1 has two zeros: every gradient is 0.
  CHECK(ir::interpret(passes::grad(g.ir(), "p", {"x"}), {{"x", xs}}).at("grad_x").to_doubles() ==
        std::vector<double>{9, 3, 3, 0, 0, 0});
  // One zero: its gradient is the product of the others.
  ir::HostArray one_zero = ir::HostArray::from<double>({2, 3}, {2, 0, 5, 1, 1, 1});
  CHECK(ir::interpret(passes::grad(g.ir(), "p", {"x"}), {{"x", one_zero}}).at("grad_x").to_doubles() ==
        std::vector<double>{0, 10, 0, 1, 1, 1});
}

TEST_CASE("grad of matmul matches finite differences", "[autodiff][matmul]") {
  const std::pair<ir::ConcreteShape, ir::ConcreteShape> shapes[] = {
      {{3, 4}, {4, 5}},          {{2, 3, 4}, {4, 5}},    {{2, 1, 3, 4}, {3, 4, 2}},
      {{4}, {4, 5}},             {{3, 4}, {4}},          {{4}, {4}},
      {{1, 1}, {1, 1}},          {{2, 4}, {3, 4, 2}},    {{4}, {2, 4, 3}}};
  for (auto [sa, sb] : shapes) {
    INFO(ir::shape_str(sa) << " @ " << ir::shape_str(sb));
    Graph g;
    Tensor a = g.input("a", DType::F64, ir::to_shape(sa));
    Tensor b = g.input("b", DType::F64, ir::to_shape(sb));
    g.output("y", matmul(a, b));
    check_vjp(g.ir(), {{"a", random_array(sa, -1, 1, 9)}, {"b", random_array(sb, -1, 1, 10)}}, {"a", "b"});
  }
}

TEST_CASE("grad of views matches finite differences", "[autodiff][views]") {
  Graph g;
  Tensor x = g.input("x", DType::F64, {2, 1, 3});
  Tensor v = g.input("v", DType::F64, {3});
  Tensor t = permute(broadcast_to(x, {4, 2, 5, 3}), {3, 0, 2, 1});  // [3, 4, 5, 2]
  Tensor r = reshape(t, {6, -1});                                    // [6, 20]
  Tensor s = squeeze(expand_dims(transpose(r), 1), 1);               // [20, 6]
  Tensor u = expand_dims(reshape(v, {3, 1}), 0);                     // [1, 3, 1]
  g.output("y", sum(s * s, 0) + sum(squeeze(u * x)) * 0.5);
  check_vjp(g.ir(), {{"x", random_array({2, 1, 3}, -1, 1, 11)}, {"v", random_array({3}, -1, 1, 12)}}, {"x", "v"});
}

TEST_CASE("grad over symbolic shapes binds at run time", "[autodiff][symbolic]") {
  Graph g;
  Tensor x = g.input("x", DType::F64, {sym("N"), sym("M")});
  Tensor b = g.input("b", DType::F64, {sym("M")});
  g.output("y", mean(tanh(x + b), 1, true) * fuse::max(x, 0, true));
  for (auto [n, m] : {std::pair<int64_t, int64_t>{1, 1}, {7, 3}, {2, 9}})
    check_vjp(g.ir(), {{"x", random_array({n, m}, -2, 2, 13)}, {"b", random_array({m}, -2, 2, 14)}}, {"x", "b"});
}

// ---------------------------------------------------------------- API, higher order, errors

TEST_CASE("grad of grad: MinPy's 5x^2 + 3x - 2", "[autodiff][higher]") {
  Graph g;
  Tensor x = g.input("x", DType::F64);
  Tensor f = 5.0 * x * x + 3.0 * x - 2.0;
  Tensor df = grad(f, x);
  Tensor ddf = grad(df, x);
  g.output("f", f);
  g.output("df", df);
  g.output("ddf", ddf);
  g.output("dddf", grad(ddf, x));
  TensorMap got = ir::interpret(g.ir(), {{"x", ir::HostArray::scalar<double>(4.0)}});
  CHECK(got.at("f").get_f64(0) == 90.0);
  CHECK(got.at("df").get_f64(0) == 43.0);
  CHECK(got.at("ddf").get_f64(0) == 10.0);
  CHECK(got.at("dddf").get_f64(0) == 0.0);
}

TEST_CASE("second derivatives of elementwise chains match finite differences", "[autodiff][higher]") {
  Graph g;
  Tensor x = g.input("x", DType::F64, {sym("N")});
  Tensor w = g.input("w", DType::F64, {});
  Tensor y = sin(x * w) * exp(-x) + sqrt(x * x + 1.0) / (w + 2.0) + sigmoid(x) * tanh(w * x);
  g.output("y", vjp(y, {x})[0]);  // elementwise: the diagonal of the Hessian, and a mixed one
  check_vjp(g.ir(), {{"x", random_array({7}, -2, 2, 15)}, {"w", random_array({}, 0.5, 1.5, 16)}}, {"x", "w"});
}

TEST_CASE("vjp inside a graph under construction and grad of a whole graph", "[autodiff][api]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), 3});
  Tensor w = g.input("w", DType::F32, {3});
  Tensor dy = g.input("dy", DType::F32, {sym("N"), 3});
  Tensor y = x * w;
  std::vector<Tensor> grads = vjp(y, {x, w}, dy);
  REQUIRE(grads.size() == 2);
  CHECK(grads[0].shape() == x.shape());
  CHECK(grads[1].shape() == w.shape());
  g.output("dx", grads[0]);
  g.output("dw", grads[1]);
  ir::HostArray xs = ir::HostArray::from<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  ir::HostArray ws = ir::HostArray::from<float>({3}, {1, 10, 100});
  ir::HostArray ds = ir::HostArray::from<float>({2, 3}, {1, 1, 1, 2, 2, 2});
  TensorMap got = ir::interpret(g.ir(), {{"x", xs}, {"w", ws}, {"dy", ds}});
  CHECK(got.at("dx").to_doubles() == std::vector<double>{1, 10, 100, 2, 20, 200});
  CHECK(got.at("dw").to_doubles() == std::vector<double>{9, 12, 15});

  // fuse::grad on a finished graph: the outputs stay, grad_<name> are added, a non-scalar output
  // without a cotangent is differentiated as its sum, an unused input gets zeros.
  Graph h;
  Tensor a = h.input("a", DType::F32, {2});
  h.input("unused", DType::F64, {3});
  h.output("y", a * a);
  ir::Graph gh = grad(h, "y", {"a", "unused"});
  REQUIRE(gh.outputs.size() == 3);
  CHECK(gh.outputs[0].name == "y");
  CHECK(gh.outputs[1].name == "grad_a");
  CHECK(gh.outputs[2].name == "grad_unused");
  TensorMap r = ir::interpret(gh, {{"a", ir::HostArray::from<float>({2}, {3, 4})}, {"unused", ir::HostArray(DType::F64, {3})}});
  CHECK(r.at("grad_a").to_doubles() == std::vector<double>{6, 8});
  CHECK(r.at("grad_unused").to_doubles() == std::vector<double>{0, 0, 0});
  CHECK(r.at("grad_unused").dtype == DType::F64);
}

TEST_CASE("grad errors name what is wrong", "[autodiff][errors]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {4});
  Tensor i = g.input("i", DType::I32, {4});
  g.input("dy", DType::F32, {5});
  g.output("y", x * 2.0);
  g.output("n", i + 1);
  g.output("c", reduce([](Scalar acc, Scalar v) { return acc * 0.5 + v; }, x, 0.0));
  CHECK_THROWS_WITH(grad(g, "nope", {"x"}), Catch::Contains("no output 'nope'"));
  CHECK_THROWS_WITH(grad(g, "y", {"z"}), Catch::Contains("no input 'z'"));
  CHECK_THROWS_WITH(grad(g, "y", {"i"}), Catch::Contains("input 'i' is i32; only float inputs have gradients"));
  CHECK_THROWS_WITH(grad(g, "n", {"x"}), Catch::Contains("output 'n' is i32"));
  CHECK_THROWS_WITH(grad(g, "y", {"x"}, {.cotangent = "dy"}), Catch::Contains("the cotangent is f32[5] but the value is f32[4]"));
  CHECK_THROWS_WITH(grad(g, "y", {"x"}, {.cotangent = "q"}), Catch::Contains("no input 'q'"));
  CHECK_THROWS_WITH(grad(g, "c", {"x"}), Catch::Contains("grad of a user combiner is not supported"));
  CHECK_THROWS_WITH(vjp(x * 2.0, {i}), Catch::Contains("only float values have gradients"));
  // A user combiner off the differentiated path is fine.
  CHECK_NOTHROW(grad(g, "y", {"x"}));
}

// ---------------------------------------------------------------- the .expr language

namespace {

ir::Graph compile_source(const std::string& source) {
  expr::CompileResult r = expr::compile_expr(source, "grad.expr");
  INFO(expr::format_diagnostics(r.errors, source));
  REQUIRE(r.graph);
  return std::move(*r.graph);
}

std::string diagnostics_of(const std::string& source) {
  expr::CompileResult r = expr::compile_expr(source, "bad.expr");
  CHECK_FALSE(r.graph);
  return expr::format_diagnostics(r.errors, source);
}

}  // namespace

TEST_CASE("expr: grad with unpacked gradients and a cotangent", "[autodiff][expr]") {
  ir::Graph g = compile_source(
      "input x: f64[N]\n"
      "input w: f64[N]\n"
      "input b: f64\n"
      "input dy: f64[N]\n"
      "let y = tanh(x * w + b)\n"
      "let loss = sum(y * y)\n"
      "let (dw, db) = grad(loss, [w, b])\n"
      "output loss_value = loss\n"
      "output gw = dw\n"
      "output gb = db\n"
      "output dx = grad(y, x)\n"
      "output vx = grad(y, [x], cotangent=dy)\n"
      "output ddx = grad(grad(x * x * x, x), x)\n");
  ir::HostArray x = random_array({5}, -1, 1, 21), w = random_array({5}, -1, 1, 22), dy = random_array({5}, -1, 1, 23);
  double b = 0.3;
  TensorMap got = ir::interpret(g, {{"x", x}, {"w", w}, {"b", ir::HostArray::scalar<double>(b)}, {"dy", dy}});
  double gb = 0;
  for (int64_t i = 0; i < 5; ++i) {
    double xi = x.get_f64(i), wi = w.get_f64(i), y = std::tanh(xi * wi + b), dt = 1 - y * y;
    CHECK(got.at("gw").get_f64(i) == Approx(2 * y * dt * xi));
    CHECK(got.at("dx").get_f64(i) == Approx(dt * wi));
    CHECK(got.at("vx").get_f64(i) == Approx(dt * wi * dy.get_f64(i)));
    CHECK(got.at("ddx").get_f64(i) == Approx(6 * xi));
    gb += 2 * y * dt;
  }
  CHECK(got.at("gb").get_f64(0) == Approx(gb));
}

TEST_CASE("expr: grad errors point at the source", "[autodiff][expr][errors]") {
  CHECK(diagnostics_of("input x: f32[N]\noutput d = grad(sum(x), [x, zz])\n") ==
        "bad.expr:2:29: error: unknown name 'zz'\n"
        "output d = grad(sum(x), [x, zz])\n"
        "                            ^\n");
  CHECK_THAT(diagnostics_of("input x: f32[N]\ninput i: i32[N]\noutput d = grad(sum(x), i)\n"),
             Catch::StartsWith("bad.expr:3:25: error: grad: cannot differentiate with respect to 'i': it is i32[N]; "
                               "only float tensors have gradients\n"));
  CHECK_THAT(diagnostics_of("input i: i32[N]\noutput d = grad(sum(i), i)\n"),
             Catch::StartsWith("bad.expr:2:17: error: grad: the value to differentiate must be a float tensor, not i32[]"));
  CHECK_THAT(diagnostics_of("fn f(acc, v) = acc * 0.5 + v\ninput x: f32[N]\nlet r = reduce(f, x, 0.0)\n"
                            "output d = grad(r, x)\n"),
             Catch::StartsWith("bad.expr:4:12: error: grad of a user combiner is not supported (at line 3, col 9)\n"
                               "output d = grad(r, x)\n"
                               "           ^\n"));
  CHECK_THAT(diagnostics_of("input x: f32[N]\ninput w: f32[N]\nlet (a, b, c) = grad(sum(x * w), [x, w])\noutput o = a\n"),
             Catch::Contains("'grad' returns 2 values, but 3 names are given"));
  CHECK_THAT(diagnostics_of("input x: f32[N]\ninput w: f32[N]\noutput o = grad(sum(x * w), [x, w])\n"),
             Catch::Contains("'grad' returns 2 values; unpack them with 'let (a, b) = grad(...)'"));
  CHECK_THAT(diagnostics_of("input x: f32[N]\ninput dy: f32[M]\noutput o = grad(x * 2.0, x, cotangent=dy)\n"),
             Catch::Contains("bad.expr:3:39: error: grad: the cotangent is f32[M] but the value is f32[N]"));
  CHECK_THAT(diagnostics_of("fn f(x) = grad(x, x)\ninput x: f32[N]\noutput o = f(x)\n"),
             Catch::Contains("cannot be used in a fn body"));
}

// ---------------------------------------------------------------- the seed workloads

namespace {

ir::HostArray random_f32(ir::ConcreteShape shape, double lo, double hi, uint32_t seed) {
  return random_array(std::move(shape), lo, hi, seed).cast(DType::F32);
}

/// The example's graph with a cotangent input "dy" for `output`, differentiated with respect to
/// `wrt`; `inputs` gets a random dy. The gradients of the interpreter are checked against the
/// compiled CPU code's here, and returned.
struct SeedRun {
  ir::Graph graph;
  TensorMap inputs;
  TensorMap got;
};

SeedRun run_seed(const std::string& file, const std::string& output, const std::vector<std::string>& wrt,
                 TensorMap inputs) {
  SeedRun run;
  ir::Graph g = testing::compile_example(std::filesystem::path(FUSE_SOURCE_DIR) / "examples" / file);
  ir::HostArray y = ir::interpret(g, inputs).at(output);
  inputs["dy"] = random_array(y.shape, -1, 1, 77).cast(y.dtype);
  const ir::Node y_node = g.node(find_output(g, output).node);
  ir::add_input(g, "dy", y_node.dtype, y_node.shape);
  run.graph = passes::grad(g, output, wrt, {.cotangent = "dy"});
  run.got = ir::interpret(run.graph, inputs);
  // The backward graph compiles like any other: the CPU's results agree with the interpreter's.
  CHECK(testing::compare_outputs(run.got, compile(run.graph).run(inputs), 1e-4, 1e-5) == "");
  run.inputs = std::move(inputs);
  return run;
}

/// |got - want| within a relative 1e-4 (f32 arithmetic in different orders).
void check_close(const ir::HostArray& got, const std::vector<double>& want, const std::string& what) {
  REQUIRE(got.size() == static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(what << "[" << i << "]");
    CHECK(got.get_f64(static_cast<int64_t>(i)) == Approx(want[i]).epsilon(1e-4).margin(1e-5));
  }
}

}  // namespace

TEST_CASE("seed hypot against hand-derived gradients", "[autodiff][seeds]") {
  for (int64_t n : {1, 7, 1023}) {
    SeedRun r = run_seed("hypot.expr", "r", {"x", "y"}, {{"x", random_f32({n}, -2, 2, 31)}, {"y", random_f32({n}, -2, 2, 32)}});
    std::vector<double> dx, dy;
    for (int64_t i = 0; i < n; ++i) {
      double x = r.inputs["x"].get_f64(i), y = r.inputs["y"].get_f64(i), d = r.inputs["dy"].get_f64(i);
      double h = std::hypot(x, y);
      dx.push_back(d * x / h);
      dy.push_back(d * y / h);
    }
    check_close(r.got.at("grad_x"), dx, "grad_x");
    check_close(r.got.at("grad_y"), dy, "grad_y");
  }
}

TEST_CASE("seed gaussian_pdf against hand-derived gradients", "[autodiff][seeds]") {
  for (int64_t n : {1, 7, 1023}) {
    SeedRun r = run_seed("gaussian_pdf.expr", "y", {"x", "mu", "sigma"},
                         {{"x", random_f32({n}, -2, 2, 33)}, {"mu", random_f32({}, -0.5, 0.5, 34)},
                          {"sigma", random_f32({}, 0.5, 1.5, 35)}});
    double mu = r.inputs["mu"].get_f64(0), sigma = r.inputs["sigma"].get_f64(0), dmu = 0, dsigma = 0;
    std::vector<double> dx;
    for (int64_t i = 0; i < n; ++i) {
      double x = r.inputs["x"].get_f64(i), d = r.inputs["dy"].get_f64(i);
      double z = (x - mu) / sigma, y = std::exp(-0.5 * z * z) / (sigma * 2.5066282746);
      dx.push_back(-d * y * z / sigma);
      dmu += d * y * z / sigma;
      dsigma += d * y * (z * z - 1) / sigma;
    }
    check_close(r.got.at("grad_x"), dx, "grad_x");
    check_close(r.got.at("grad_mu"), {dmu}, "grad_mu");
    check_close(r.got.at("grad_sigma"), {dsigma}, "grad_sigma");
  }
}

TEST_CASE("seed polar_distance against hand-derived gradients", "[autodiff][seeds]") {
  for (int64_t n : {1, 7}) {
    SeedRun r = run_seed("polar_distance.expr", "distance", {"r1", "theta1", "r2", "theta2"},
                         {{"r1", random_f32({n}, 0.5, 2, 36)}, {"theta1", random_f32({n}, -3, 3, 37)},
                          {"r2", random_f32({n}, 0.5, 2, 38)}, {"theta2", random_f32({n}, -3, 3, 39)}});
    std::vector<double> dr1, dt1, dr2, dt2;
    for (int64_t i = 0; i < n; ++i) {
      double r1 = r.inputs["r1"].get_f64(i), t1 = r.inputs["theta1"].get_f64(i);
      double r2 = r.inputs["r2"].get_f64(i), t2 = r.inputs["theta2"].get_f64(i), d = r.inputs["dy"].get_f64(i);
      double ex = r1 * std::cos(t1) - r2 * std::cos(t2), ey = r1 * std::sin(t1) - r2 * std::sin(t2);
      double dist = std::hypot(ex, ey);
      dr1.push_back(d * (ex * std::cos(t1) + ey * std::sin(t1)) / dist);
      dt1.push_back(d * (-ex * r1 * std::sin(t1) + ey * r1 * std::cos(t1)) / dist);
      dr2.push_back(-d * (ex * std::cos(t2) + ey * std::sin(t2)) / dist);
      dt2.push_back(-d * (-ex * r2 * std::sin(t2) + ey * r2 * std::cos(t2)) / dist);
    }
    check_close(r.got.at("grad_r1"), dr1, "grad_r1");
    check_close(r.got.at("grad_theta1"), dt1, "grad_theta1");
    check_close(r.got.at("grad_r2"), dr2, "grad_r2");
    check_close(r.got.at("grad_theta2"), dt2, "grad_theta2");
  }
}

TEST_CASE("seed hidden_layer against hand-derived gradients", "[autodiff][seeds]") {
  for (int64_t n : {1, 7, 1023}) {
    SeedRun r = run_seed("hidden_layer.expr", "activations", {"greyscales", "weights"},
                         {{"greyscales", random_f32({n}, 0, 255, 40)}, {"weights", random_f32({n}, -2, 2, 41)}});
    std::vector<double> dg, dw;
    for (int64_t i = 0; i < n; ++i) {
      double g = r.inputs["greyscales"].get_f64(i), w = r.inputs["weights"].get_f64(i), d = r.inputs["dy"].get_f64(i);
      double a = std::tanh(g / 255.0 * w), da = d * (1 - a * a);
      dg.push_back(da * w / 255.0);
      dw.push_back(da * g / 255.0);
    }
    check_close(r.got.at("grad_greyscales"), dg, "grad_greyscales");
    check_close(r.got.at("grad_weights"), dw, "grad_weights");
  }
}

TEST_CASE("seed softmax against hand-derived gradients", "[autodiff][seeds]") {
  for (auto [n, m] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {2, 1023}}) {
    SeedRun r = run_seed("softmax.expr", "y", {"x"}, {{"x", random_f32({n, m}, -3, 3, 42)}});
    std::vector<double> dx;
    for (int64_t i = 0; i < n; ++i) {
      double mx = -INFINITY, total = 0, dot = 0;
      for (int64_t j = 0; j < m; ++j) mx = std::max(mx, r.inputs["x"].get_f64(i * m + j));
      for (int64_t j = 0; j < m; ++j) total += std::exp(r.inputs["x"].get_f64(i * m + j) - mx);
      auto y = [&](int64_t j) { return std::exp(r.inputs["x"].get_f64(i * m + j) - mx) / total; };
      for (int64_t j = 0; j < m; ++j) dot += r.inputs["dy"].get_f64(i * m + j) * y(j);
      for (int64_t j = 0; j < m; ++j) dx.push_back(y(j) * (r.inputs["dy"].get_f64(i * m + j) - dot));
    }
    check_close(r.got.at("grad_x"), dx, "grad_x");
  }
}

TEST_CASE("seed layernorm against hand-derived gradients", "[autodiff][seeds]") {
  for (auto [n, d] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {2, 1023}}) {
    SeedRun r = run_seed("layernorm.expr", "y", {"x", "gamma", "beta"},
                         {{"x", random_f32({n, d}, -2, 2, 43)}, {"gamma", random_f32({d}, 0.5, 1.5, 44)},
                          {"beta", random_f32({d}, -1, 1, 45)}});
    auto at = [&](const char* name, int64_t i) { return r.inputs[name].get_f64(i); };
    std::vector<double> dx(n * d), dgamma(d, 0), dbeta(d, 0);
    for (int64_t i = 0; i < n; ++i) {
      double mu = 0, var = 0;
      for (int64_t j = 0; j < d; ++j) mu += at("x", i * d + j) / d;
      for (int64_t j = 0; j < d; ++j) var += (at("x", i * d + j) - mu) * (at("x", i * d + j) - mu) / d;
      double rstd = 1 / std::sqrt(var + 1e-5), mean_g = 0, mean_gx = 0;
      std::vector<double> xhat(d), g(d);
      for (int64_t j = 0; j < d; ++j) {
        xhat[j] = (at("x", i * d + j) - mu) * rstd;
        g[j] = at("dy", i * d + j) * at("gamma", j);
        mean_g += g[j] / d;
        mean_gx += g[j] * xhat[j] / d;
        dgamma[j] += at("dy", i * d + j) * xhat[j];
        dbeta[j] += at("dy", i * d + j);
      }
      for (int64_t j = 0; j < d; ++j) dx[i * d + j] = rstd * (g[j] - mean_g - xhat[j] * mean_gx);
    }
    check_close(r.got.at("grad_x"), dx, "grad_x");
    check_close(r.got.at("grad_gamma"), dgamma, "grad_gamma");
    check_close(r.got.at("grad_beta"), dbeta, "grad_beta");
  }
}

TEST_CASE("seed mlp against hand-derived gradients", "[autodiff][seeds]") {
  const int64_t B = 3, K = 4, H = 5, N = 2;
  SeedRun r = run_seed("mlp.expr", "y", {"x", "w1", "b1", "w2", "b2"},
                       {{"x", random_f32({B, K}, -1, 1, 46)}, {"w1", random_f32({K, H}, -1, 1, 47)},
                        {"b1", random_f32({H}, -0.5, 0.5, 48)}, {"w2", random_f32({H, N}, -1, 1, 49)},
                        {"b2", random_f32({N}, -1, 1, 50)}});
  auto at = [&](const char* name, int64_t i) { return r.inputs[name].get_f64(i); };
  std::vector<double> pre(B * H), hidden(B * H), dhidden(B * H, 0), dx(B * K, 0), dw1(K * H, 0), db1(H, 0),
      dw2(H * N, 0), db2(N, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      pre[b * H + h] = at("b1", h);
      for (int64_t k = 0; k < K; ++k) pre[b * H + h] += at("x", b * K + k) * at("w1", k * H + h);
      hidden[b * H + h] = std::max(pre[b * H + h], 0.0);
    }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t o = 0; o < N; ++o) {
      double d = at("dy", b * N + o);
      db2[o] += d;
      for (int64_t h = 0; h < H; ++h) {
        dw2[h * N + o] += hidden[b * H + h] * d;
        dhidden[b * H + h] += d * at("w2", h * N + o);
      }
    }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      double dpre = pre[b * H + h] > 0 ? dhidden[b * H + h] : 0;
      db1[h] += dpre;
      for (int64_t k = 0; k < K; ++k) {
        dw1[k * H + h] += at("x", b * K + k) * dpre;
        dx[b * K + k] += dpre * at("w1", k * H + h);
      }
    }
  check_close(r.got.at("grad_x"), dx, "grad_x");
  check_close(r.got.at("grad_w1"), dw1, "grad_w1");
  check_close(r.got.at("grad_b1"), db1, "grad_b1");
  check_close(r.got.at("grad_w2"), dw2, "grad_w2");
  check_close(r.got.at("grad_b2"), db2, "grad_b2");
}

// ---------------------------------------------------------------- fusion and backends

namespace {

const char* const kSoftmaxBackward =
    "input x: f32[N, M]\n"
    "input dy: f32[N, M]\n"
    "let e = exp(x - max(x, axis=1, keepdims=true))\n"
    "let y = e / sum(e, axis=1, keepdims=true)\n"
    "output dx = grad(y, x, cotangent=dy)\n";

const char* const kLayernormBackward =
    "input x: f32[N, D]\n"
    "input gamma: f32[D]\n"
    "input beta: f32[D]\n"
    "input dy: f32[N, D]\n"
    "let mu = mean(x, axis=-1, keepdims=true)\n"
    "let centered = x - mu\n"
    "let variance = mean(centered**2, axis=-1, keepdims=true)\n"
    "let y = centered * rsqrt(variance + 1e-5) * gamma + beta\n"
    "let (dx, dgamma, dbeta) = grad(y, [x, gamma, beta], cotangent=dy)\n"
    "output gx = dx\n"
    "output ggamma = dgamma\n"
    "output gbeta = dbeta\n";

// relu(x @ w + b) with a squared-error loss: forward (the loss) and backward.
const char* const kDenseTraining =
    "input x: f32[B, K]\n"
    "input w: f32[K, H]\n"
    "input b: f32[H]\n"
    "input t: f32[B, H]\n"
    "let y = relu(x @ w + b)\n"
    "let loss = sum((y - t)**2)\n"
    "let (dx, dw, db) = grad(loss, [x, w, b])\n"
    "output l = loss\n"
    "output gx = dx\n"
    "output gw = dw\n"
    "output gb = db\n";

size_t kernel_count(const ir::Graph& g) { return passes::run_pipeline(g).program.kernels.size(); }

}  // namespace

TEST_CASE("softmax backward fuses into one row-wise kernel", "[autodiff][fusion]") {
  passes::PipelineResult r = passes::run_pipeline(compile_source(kSoftmaxBackward));
  INFO(passes::explain_fusion(r.graph, r.partition));
  REQUIRE(r.program.kernels.size() == 1);
  CHECK(r.program.kernels[0].kind == ir::KernelKind::RowWise);
}

TEST_CASE("layernorm backward and the dense training step: kernel counts", "[autodiff][fusion]") {
  // Targets (issue 17): layernorm backward <= 2 kernels, dense forward+backward <= 5.
  ir::Graph layernorm = compile_source(kLayernormBackward);
  ir::Graph dense = compile_source(kDenseTraining);
  passes::PipelineResult r = passes::run_pipeline(layernorm);
  INFO(passes::explain_fusion(r.graph, r.partition));
  // The row-wise kernel computes mean, variance and dx, and stores the row statistics for the
  // column reductions of dgamma and dbeta (fused horizontally): 2 kernels.
  CHECK(r.program.kernels.size() == 2);
  passes::PipelineResult d = passes::run_pipeline(dense);
  INFO(passes::explain_fusion(d.graph, d.partition));
  // The forward matmul computes the relu gradient in its epilogue and stores the product for the
  // loss reduction; the bias gradient is a reduction; two gradient matmuls.
  CHECK(d.program.kernels.size() == 5);
  REQUIRE(d.program.kernels.size() == 5);
  int matmuls = 0;
  for (const ir::Kernel& k : d.program.kernels) matmuls += k.kind == ir::KernelKind::Matmul;
  CHECK(matmuls == 3);
  // Every kernel runs as machine code on the CPU (none left to the interpreter).
  CHECK(compile(dense).compiled_kernel_count() == 5);
  CHECK(compile(layernorm).compiled_kernel_count() == 2);
  // Without the loss output (backward only) the dense step makes 4: the forward matmul with the
  // relu-gradient epilogue, the bias-gradient reduction and the two gradient matmuls.
  ir::Graph backward_only = dense;
  backward_only.outputs.erase(backward_only.outputs.begin());
  CHECK(kernel_count(backward_only) == 4);
}

TEST_CASE("the benchmark's mlp_fwd_bwd graph: fuse grad of bench mlp_loss.expr", "[autodiff][fusion][cpu]") {
  // fuse_bench's mlp_fwd_bwd rows time this graph against three sgemm calls (bench/README.md).
  ir::Graph forward = testing::compile_example(std::filesystem::path(FUSE_SOURCE_DIR) / "bench" / "mlp_loss.expr");
  ir::Graph g = fuse::grad(forward, "loss", {"x", "w", "b"});
  passes::PipelineResult r = passes::run_pipeline(g);
  INFO(passes::explain_fusion(r.graph, r.partition));
  CHECK(r.program.kernels.size() == 5);
  runtime::Executable exe = compile(g);
  CHECK(exe.compiled_kernel_count() == 5);
  for (int64_t n : {1, 7, 1023}) {
    ir::SymbolBindings sizes = {{"M", n}, {"K", n == 1023 ? 9 : n}, {"N", n == 1023 ? 5 : n}};
    TensorMap inputs = testing::random_inputs(g, sizes, static_cast<uint64_t>(n), false);
    INFO(testing::sizes_str(sizes));
    CHECK(testing::compare_outputs(ir::interpret(g, inputs), exe.run(inputs), 1e-4, 1e-4) == "");
  }
}

TEST_CASE("backward graphs compiled for the CPU match the interpreter at odd sizes", "[autodiff][cpu]") {
  for (const char* source : {kSoftmaxBackward, kLayernormBackward, kDenseTraining}) {
    ir::Graph g = compile_source(source);
    runtime::Executable exe = compile(g);
    for (int64_t n : {1, 7, 1023}) {
      ir::SymbolBindings sizes = {{"N", n}, {"M", 9}, {"D", n == 1 ? 1 : 13}, {"B", n}, {"K", 5}, {"H", 7}};
      TensorMap inputs = testing::random_inputs(g, sizes, static_cast<uint64_t>(n), false);
      INFO(testing::sizes_str(sizes));
      CHECK(testing::compare_outputs(ir::interpret(g, inputs), exe.run(inputs), 1e-4, 1e-4) == "");
    }
  }
}

TEST_CASE("backward graphs on the CUDA simulator match the interpreter", "[autodiff][cuda][sim]") {
  setenv("FUSE_CUDA_SIM", "1", 1);
  for (const char* source : {kSoftmaxBackward, kLayernormBackward, kDenseTraining}) {
    ir::Graph g = compile_source(source);
    std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
    for (int64_t n : {1, 7, 130}) {
      ir::SymbolBindings sizes = {{"N", n}, {"M", 9}, {"D", 13}, {"B", n}, {"K", 5}, {"H", 7}};
      TensorMap inputs = testing::random_inputs(g, sizes, static_cast<uint64_t>(n), false);
      INFO(testing::sizes_str(sizes));
      CHECK(testing::compare_outputs(ir::interpret(g, inputs), exe->run_host(inputs), 1e-4, 1e-4) == "");
    }
  }
}

TEST_CASE("backward graphs' PTX assembles with ptxas", "[autodiff][cuda]") {
  for (const char* source : {kSoftmaxBackward, kLayernormBackward, kDenseTraining}) {
    ir::Graph g = compile_source(source);
    std::string ptx = emit(run_passes(g, Target::cuda(0, 80)), Stage::Ptx);
    CHECK(ptx.find(".entry") != std::string::npos);
    std::string errors = testing::ptxas_errors(ptx, "sm_80");
    INFO(errors);
    CHECK(errors.empty());
  }
}

TEST_CASE("forward+backward plans less memory than storing every value", "[autodiff][memory]") {
  // Cheap forward values are recomputed inside the backward kernels (the derivative bodies read
  // the forward operands) and fusion keeps them in registers: the planned peak is below the
  // unfused plan's, which stores every value.
  const std::pair<const char*, ir::SymbolBindings> cases[] = {
      {kLayernormBackward, {{"N", 1024}, {"D", 1024}}},
      {kDenseTraining, {{"B", 1024}, {"K", 1024}, {"H", 1024}}},
      {kSoftmaxBackward, {{"N", 1024}, {"M", 1024}}}};
  for (const auto& [source, sizes] : cases) {
    ir::Graph g = compile_source(source);
    passes::PipelineOptions unfused;
    unfused.fusion.enabled = false;
    int64_t fused_peak = ir::planned_peak_bytes(passes::run_pipeline(g).program, sizes);
    int64_t stored_peak = ir::planned_peak_bytes(passes::run_pipeline(g, unfused).program, sizes);
    CHECK(fused_peak < stored_peak);
  }
}
