// The C++ builder API: typing, tracing of user scalar functions, and errors with the caller's line.
#include <catch2/catch.hpp>

#include "frontends/api.h"
#include "ir/printer.h"

using namespace fuse;

static const ir::ScalarFn& body(const Tensor& t) { return t.node().as<ir::ElementwiseAttrs>().body; }

TEST_CASE("weak literals keep the tensor's dtype", "[api][types]") {
  Graph g;
  Tensor f = g.input("f", DType::F32, {4});
  Tensor d = g.input("d", DType::F64, {4});
  Tensor i = g.input("i", DType::I32, {4});
  Tensor l = g.input("l", DType::I64, {4});
  Tensor b = g.input("b", DType::Bool, {4});
  CHECK((f * 2.0).dtype() == DType::F32);
  CHECK((d * 2.0).dtype() == DType::F64);
  CHECK((i + 1).dtype() == DType::I32);
  CHECK((l + 1).dtype() == DType::I64);
  CHECK((i * 2.5).dtype() == DType::F32);
  CHECK((b + 1).dtype() == DType::I32);
  CHECK((i / i).dtype() == DType::F32);
  CHECK((d / i).dtype() == DType::F64);
  CHECK(floordiv(i, i).dtype() == DType::I32);
  CHECK((i < 3).dtype() == DType::Bool);
  CHECK((i + l).dtype() == DType::I64);
  CHECK((l + f).dtype() == DType::F32);
  CHECK((f + d).dtype() == DType::F64);
  CHECK(exp(i).dtype() == DType::F32);
  CHECK(abs(b).dtype() == DType::I32);
  CHECK(sum(b).dtype() == DType::I32);
  CHECK(mean(i).dtype() == DType::F32);
  CHECK(any(f).dtype() == DType::Bool);
  CHECK(max(i).dtype() == DType::I32);
  // Integer literals beyond i32 are i64, and never wrap silently into an i32.
  CHECK((l + 10000000000).dtype() == DType::I64);
  CHECK((b + 10000000000).dtype() == DType::I64);
  CHECK_THROWS_WITH(i + 10000000000, Catch::Contains("integer literal 10000000000 does not fit i32"));
  // The literal folds into the op's body: one node, no constant.
  Tensor y = f * 2.0;
  CHECK(y.node().inputs.size() == 1);
  CHECK(ir::to_string(body(y)) == "(p0: f32) -> mul(p0, 2.0:f32)");
}

TEST_CASE("literal-only subexpressions fold exactly", "[api][types]") {
  Graph g;
  Tensor d = g.input("d", DType::F64, {});
  auto f = vectorize([](Scalar x) { return x * (Scalar(1.0) / 3.0); });
  Tensor y = f(d);
  const ir::ScalarFn& fn = body(y);
  REQUIRE(fn.nodes.size() == 3);
  CHECK(fn.nodes[1].op == ir::ScalarOp::Literal);
  CHECK(fn.nodes[1].dtype == DType::F64);
  CHECK(fn.nodes[1].value.f == 1.0 / 3.0);  // not rounded through f32
}

TEST_CASE("the named ops of ir/scalar_ops.def are free functions on tensors and traced scalars", "[api][ops]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {4});
  Tensor i = g.input("i", DType::I32, {4});
  for (Tensor t : {log1p(x), expm1(x), erf(x), asin(x), acos(x), atan(x), sinh(x), cosh(x), atan2(x, 2.0), sign(x)})
    CHECK(t.dtype() == DType::F32);
  CHECK(ir::to_string(body(atan2(x, 2.0))) == "(p0: f32) -> atan2(p0, 2.0:f32)");
  CHECK(sign(i).dtype() == DType::I32);
  CHECK(asin(i).dtype() == DType::F32);
  for (Tensor t : {isnan(x), isinf(x), isfinite(i)}) CHECK(t.dtype() == DType::Bool);
  auto f = vectorize([](Scalar a, Scalar b) { return where(isfinite(a), atan2(sinh(a), cosh(b)), sign(b)); });
  CHECK(ir::to_string(body(f(x, x))) == "(p0: f32, p1: f32) -> select(isfinite(p0), atan2(sinh(p0), cosh(p1)), sign(p1))");
}

TEST_CASE("vectorize traces a lambda into one elementwise node", "[api][trace]") {
  Graph g;
  Tensor a = g.input("a", DType::F32, {sym("N")});
  Tensor b = g.input("b", DType::F32, {sym("N")});
  auto hypot = vectorize([](Scalar x, Scalar y) { return sqrt(x * x + y * y); });
  Tensor h = hypot(a, b);
  CHECK(h.node().kind == ir::OpKind::Elementwise);
  CHECK(h.node().inputs.size() == 2);
  CHECK(ir::to_string(body(h)) == "(p0: f32, p1: f32) -> sqrt(add(mul(p0, p0), mul(p1, p1)))");
  // Hash-consing: the same subexpression is built once.
  auto sq = vectorize([](Scalar x) { return (x + 1.0) * (x + 1.0); });
  CHECK(ir::to_string(body(sq(a))) == "(p0: f32) -> { let t0 = add(p0, 1.0:f32); mul(t0, t0) }");
}

TEST_CASE("a function returning two values gives two tensors", "[api][trace]") {
  Graph g;
  Tensor r = g.input("r", DType::F32, {8});
  Tensor t = g.input("t", DType::F32, {8});
  auto polar_to_cartesian = vectorize([](Scalar rho, Scalar theta) {
    return std::make_tuple(rho * cos(theta), rho * sin(theta));
  });
  auto [x, y] = polar_to_cartesian(r, t);
  CHECK(x.shape() == Shape{8});
  CHECK(ir::to_string(body(x)) == "(p0: f32, p1: f32) -> mul(p0, cos(p1))");
  CHECK(ir::to_string(body(y)) == "(p0: f32, p1: f32) -> mul(p0, sin(p1))");
}

TEST_CASE("map and zip with literal operands", "[api][trace]") {
  Graph g;
  Tensor x = g.input("x", DType::I32, {3});
  Tensor y = map([](Scalar v) { return v * v + 1; }, x);
  CHECK(y.dtype() == DType::I32);
  Tensor z = zip([](Scalar a, Scalar b) { return maximum(a, b); }, x, 0);
  CHECK(z.node().inputs.size() == 1);
  CHECK(ir::to_string(body(z)) == "(p0: i32) -> maximum(p0, 0:i32)");
}

TEST_CASE("custom reductions trace their combiner", "[api][reduce]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {4, 5});
  Tensor m = reduce([](Scalar acc, Scalar v) { return maximum(acc, abs(v)); }, x, 0.0, 1);
  CHECK(m.shape() == Shape{4});
  const auto& attrs = m.node().as<ir::ReduceAttrs>();
  CHECK(attrs.kind == ir::ReduceKind::Custom);
  CHECK(ir::to_string(attrs.combiner) == "(p0: f32, p1: f32) -> maximum(p0, abs(p1))");
}

TEST_CASE("reductions, views and their shapes", "[api][views]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {2, sym("N"), 4});
  CHECK(sum(x, {0, -1}).shape() == Shape{sym("N")});
  CHECK(sum(x, 1, true).shape() == Shape{2, 1, 4});
  CHECK(sum(x).shape() == Shape{});
  CHECK(transpose(x).shape() == Shape{4, sym("N"), 2});
  CHECK(permute(x, {1, 0, 2}).shape() == Shape{sym("N"), 2, 4});
  CHECK(reshape(x, {-1, 4}).shape() == Shape{Dim(2) * sym("N"), 4});
  CHECK(reshape(x, {2, -1}).shape() == Shape{2, Dim(4) * sym("N")});
  CHECK(expand_dims(x, -1).shape() == Shape{2, sym("N"), 4, 1});
  CHECK(squeeze(expand_dims(x, 0)).shape() == Shape{2, sym("N"), 4});
  CHECK(broadcast_to(g.input("b", DType::F32, {4}), {3, 4}).shape() == Shape{3, 4});
  CHECK(g.arange(sym("N")).shape() == Shape{sym("N")});
  CHECK(g.rand({3, 3}, 7).dtype() == DType::F32);
}

TEST_CASE("misuse throws with the op, the shapes and the caller's file:line", "[api][errors]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {3, 4});
  auto at_line = [](int line) { return Catch::Contains("test_api.cpp:" + std::to_string(line)); };
  int line = __LINE__ + 1;
  CHECK_THROWS_WITH(sum(x, 2), at_line(line) && Catch::Contains("sum: axis 2 is out of range for shape [3, 4]"));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(reshape(x, {5, -1}), at_line(line) && Catch::Contains("reshape: cannot infer the -1 dim of [5, -1] from shape [3, 4]"));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(reshape(x, {5, 2}), at_line(line) && Catch::Contains("cannot reshape [3, 4] (12 elements) to [5, 2] (10 elements)"));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(permute(x, {0}), at_line(line) && Catch::Contains("permute: permutation [0] has 1 axes but the operand has shape [3, 4]"));
  CHECK_THROWS_WITH(permute(x, {0, 0}), Catch::Contains("axis 0 is repeated"));
  CHECK_THROWS_WITH(squeeze(x, 0), Catch::Contains("squeeze: axis 0 of shape [3, 4] has size 3, not 1"));
  CHECK_THROWS_WITH(broadcast_to(x, {4, 4}), Catch::Contains("broadcast_to: cannot broadcast shape [3, 4] to [4, 4]"));
  CHECK_THROWS_WITH(expand_dims(x, 5), Catch::Contains("expand_dims: axis 5 is out of range"));
  CHECK_THROWS_WITH(g.input("x", DType::F32), Catch::Contains("'x' is already an input"));
  Tensor b = g.input("b", DType::Bool, {3, 4});
  CHECK_THROWS_WITH(-b, Catch::Contains("neg: 'neg' is not defined for bool"));
  Graph other;
  Tensor y = other.input("y", DType::F32, {3, 4});
  CHECK_THROWS_WITH(x + y, Catch::Contains("operands belong to different graphs"));
  g.output("out", x);
  CHECK_THROWS_WITH(g.output("out", x), Catch::Contains("'out' is already an output"));
}
