// The graph IR's text form (goldens), the verifier, dims and dtype promotion.
#include <catch2/catch.hpp>

#include "frontends/api.h"
#include "ir/printer.h"
#include "ir/verifier.h"

using namespace fuse;
using ir::DType;

TEST_CASE("dtype promotion follows bool < i32 < i64 < f32 < f64", "[ir][dtype]") {
  CHECK(ir::promote(DType::Bool, DType::I32) == DType::I32);
  CHECK(ir::promote(DType::I64, DType::F32) == DType::F32);
  CHECK(ir::promote(DType::F64, DType::I32) == DType::F64);
  for (DType t : ir::kAllDTypes) CHECK(ir::dtype_from_name(ir::dtype_name(t)) == t);
  CHECK_FALSE(ir::dtype_from_name("f16").has_value());
}

TEST_CASE("dims are monomials of symbols", "[ir][shape]") {
  Dim n = sym("N"), m = sym("M");
  CHECK((n * m) == (m * n));
  CHECK((Dim(2) * n).str() == "2*N");
  CHECK(ir::exact_divide(n * m * Dim(6), m * Dim(3)) == Dim(2) * n);
  CHECK_FALSE(ir::exact_divide(n, m).has_value());
  ir::SymbolBindings b;
  ir::bind_symbols({n, Dim(4)}, {7, 4}, b, "input 'x'");
  CHECK(b.at("N") == 7);
  CHECK(ir::evaluate(Dim(2) * n, b) == 14);
  CHECK_THROWS_WITH(ir::bind_symbols({n}, {8}, b, "input 'y'"),
                    "error: symbol 'N' is bound to 7 but input 'y' gives it size 8 (shape [8], declared [N])");
  CHECK_THROWS_WITH(ir::bind_symbols({n, Dim(4)}, {7, 5}, b, "input 'z'"),
                    "error: input 'z' has shape [7, 5] but [N, 4] was declared");
  CHECK_THROWS_WITH(ir::evaluate(m, b), Catch::Contains("symbol 'M' is not bound"));
}

TEST_CASE("dims are integer expressions in canonical form", "[ir][shape]") {
  Dim n = sym("N"), m = sym("M");
  // Structural equality of the canonical form: equal expressions built differently compare equal.
  CHECK((n + 1) - 1 == n);
  CHECK((n - 2) + (m + 2) == m + n);
  CHECK((n + m) * (n - m) == n * n - m * m);
  CHECK(n - n == Dim(0));
  CHECK(Dim(3) * n - n == Dim(2) * n);
  CHECK(ir::floor_div(Dim(2) * n + 1, 2) == n);
  CHECK(ir::floor_div(Dim(4) * n + 6, 2) == Dim(2) * n + 3);
  CHECK(ir::floor_div(ir::floor_div(n, 2), 3) == ir::floor_div(n, 6));
  CHECK(ir::ceil_div(n, 2) == ir::floor_div(n + 1, 2));
  CHECK(ir::ceil_div(Dim(2) * n, 2) == n);
  CHECK(ir::floor_div(Dim(7), 2) == Dim(3));
  CHECK(ir::floor_div(Dim(-7), 2) == Dim(-4));
  CHECK(ir::ceil_div(Dim(7), 2) == Dim(4));
  CHECK(ir::dim_min(n, n + 1) == n);
  CHECK(ir::dim_max(n, n + 1) == n + 1);
  CHECK(ir::dim_max(Dim(3), Dim(5)) == Dim(5));
  CHECK(ir::dim_max(n - 2, 0) == ir::dim_max(Dim(0), n - 2));
  CHECK(ir::dim_max(ir::dim_max(n, m), 0) == ir::dim_max(n, ir::dim_max(Dim(0), m)));
  CHECK_FALSE(ir::dim_max(n, m) == ir::dim_min(n, m));
  CHECK_FALSE(ir::floor_div(n, 2) == ir::floor_div(n, 3));
  // Readable printing.
  CHECK((n - 2).str() == "N - 2");
  CHECK((Dim(3) - n).str() == "3 - N");
  CHECK((Dim(0) - n - 2).str() == "-N - 2");
  CHECK(ir::dim_max(n - 2, 0).str() == "max(N - 2, 0)");
  CHECK(ir::floor_div(n, 2).str() == "N // 2");
  CHECK(ir::ceil_div(n, 2).str() == "(N + 1) // 2");
  CHECK((Dim(2) * ir::floor_div(n, 2)).str() == "2*(N // 2)");
  CHECK((n * m * Dim(2)).str() == "2*M*N");
  CHECK(ir::dim_min(ir::floor_div(n, 2), 5).str() == "min(N // 2, 5)");
  // Queries.
  CHECK(n.as_symbol() == std::optional<std::string>("N"));
  CHECK_FALSE((Dim(2) * n).as_symbol().has_value());
  CHECK(ir::dim_max(n - m, ir::floor_div(m, 2)).symbol_names() == std::vector<std::string>{"M", "N"});
  CHECK((n - n + 4).constant() == std::optional<int64_t>(4));
  // Evaluation, floor division rounding towards -infinity like Python.
  ir::SymbolBindings b = {{"N", 7}, {"M", 3}};
  CHECK(ir::evaluate(n - 2, b) == 5);
  CHECK(ir::evaluate(ir::floor_div(n - 10, 2), b) == -2);
  CHECK(ir::evaluate(ir::ceil_div(n, 2), b) == 4);
  CHECK(ir::evaluate(ir::dim_max(m - n, 0), b) == 0);
  CHECK(ir::evaluate(ir::dim_min(n * m, n + m), b) == 10);
  CHECK(ir::exact_divide(Dim(2) * n + 4, 2) == n + 2);
  CHECK_FALSE(ir::exact_divide(n + 1, 2).has_value());
  CHECK(ir::exact_divide(Dim(0), n) == Dim(0));
  // A negative size is an error when a shape is evaluated; arithmetic overflow is an error too.
  CHECK_THROWS_WITH(ir::evaluate(ir::Shape{n - 9, 2}, b), "error: dim N - 9 of shape [N - 9, 2] is negative (-2) with N = 7");
  CHECK_THROWS_WITH(Dim(INT64_MAX) + 1, Catch::Contains("overflows 64 bits"));
  CHECK_THROWS_WITH(ir::evaluate(Dim(INT64_MAX / 2) * n, b), Catch::Contains("overflows 64 bits with N = 7"));
  CHECK_THROWS_WITH(ir::floor_div(n, 0), Catch::Contains("the divisor must be positive"));
  // Symbols bind only from plain-symbol dims; compound dims are checked against them.
  ir::SymbolBindings bound;
  ir::bind_symbols({n, n - 1}, {5, 4}, bound, "input 'x'");
  CHECK(bound.at("N") == 5);
  CHECK_THROWS_WITH(ir::bind_symbols({n, n - 1}, {5, 5}, bound, "input 'y'"),
                    "error: input 'y' has shape [5, 5] but [N, N - 1] was declared");
}

TEST_CASE("printer golden: gaussian pdf", "[ir][printer]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor m = g.input("mean", DType::F32);
  Tensor s = g.input("sigma", DType::F32);
  auto pdf = vectorize([](Scalar v, Scalar mu, Scalar sd) {
    Scalar z = (v - mu) / sd;
    return exp(-0.5 * z * z) / (sd * 2.5066282746);
  });
  g.output("y", pdf(x, m, s));
  CHECK(ir::print_graph(g.ir()) ==
        "graph {\n"
        "  %0 = input \"x\" : f32[N]\n"
        "  %1 = input \"mean\" : f32[]\n"
        "  %2 = input \"sigma\" : f32[]\n"
        "  %3 = elementwise(%0, %1, %2) (p0: f32, p1: f32, p2: f32) -> { let t0 = div(sub(p0, p1), p2); "
        "div(exp(mul(mul(-0.5:f32, t0), t0)), mul(p2, 2.50662827:f32)) }"
        " : f32[N]\n"
        "  output y = %3\n"
        "}\n");
}

TEST_CASE("printer golden: softmax over rows", "[ir][printer]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
  Tensor e = exp(x - max(x, -1, true));
  g.output("y", e / sum(e, -1, true));
  CHECK(ir::print_graph(g.ir()) ==
        "graph {\n"
        "  %0 = input \"x\" : f32[R, C]\n"
        "  %1 = reduce.max(%0) axes=[1] keepdims=true : f32[R, 1]\n"
        "  %2 = elementwise(%0, %1) (p0: f32, p1: f32) -> sub(p0, p1) : f32[R, C]\n"
        "  %3 = elementwise(%2) (p0: f32) -> exp(p0) : f32[R, C]\n"
        "  %4 = reduce.sum(%3) axes=[1] keepdims=true : f32[R, 1]\n"
        "  %5 = elementwise(%3, %4) (p0: f32, p1: f32) -> div(p0, p1) : f32[R, C]\n"
        "  output y = %5\n"
        "}\n");
}

TEST_CASE("printer golden: views and matmul", "[ir][printer]") {
  Graph g;
  Tensor a = g.input("a", DType::F64, {3, 4});
  Tensor b = g.input("b", DType::I32, {4});
  g.output("t", permute(a, {1, 0}));
  g.output("m", matmul(a, b));
  g.output("e", squeeze(expand_dims(b, 0), 0));
  CHECK(ir::print_graph(g.ir()) ==
        "graph {\n"
        "  %0 = input \"a\" : f64[3, 4]\n"
        "  %1 = input \"b\" : i32[4]\n"
        "  %2 = permute(%0) perm=[1, 0] : f64[4, 3]\n"
        "  %3 = matmul(%0, %1) : f64[3]\n"
        "  %4 = expand_dims(%1) axis=0 : i32[1, 4]\n"
        "  %5 = squeeze(%4) axes=[0] : i32[4]\n"
        "  output t = %2\n"
        "  output m = %3\n"
        "  output e = %5\n"
        "}\n");
}

TEST_CASE("the verifier accepts built graphs and rejects broken ones", "[ir][verifier]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {3, 4});
  Tensor y = sum(exp(x) * 2.0, 1);
  g.output("y", y);
  REQUIRE(ir::verify(g.ir()).empty());

  auto broken = [&](auto&& mutate) {
    ir::Graph copy = g.ir();
    mutate(copy);
    return ir::verify(copy);
  };
  auto contains = [](const std::vector<std::string>& problems, const std::string& what) {
    for (const std::string& p : problems)
      if (p.find(what) != std::string::npos) return true;
    return false;
  };
  CHECK(contains(broken([](ir::Graph& c) { c.nodes[1].inputs[0] = 5; }), "does not precede"));
  CHECK(contains(broken([](ir::Graph& c) { c.nodes[1].dtype = DType::F64; }), "dtype f64 should be f32"));
  CHECK(contains(broken([](ir::Graph& c) { c.nodes[3].shape = {4}; }), "shape [4] should be [3]"));
  CHECK(contains(broken([](ir::Graph& c) { c.nodes[3].attrs = ir::NoAttrs{}; }), "attributes do not match"));
  CHECK(contains(broken([](ir::Graph& c) { c.nodes[2].inputs.push_back(0); }), "parameter count"));
  CHECK(contains(broken([](ir::Graph& c) { c.outputs.push_back({"y", 0}); }), "duplicate output"));
  CHECK(contains(broken([](ir::Graph& c) { c.outputs[0].node = 42; }), "missing node"));
  CHECK(contains(broken([](ir::Graph& c) { std::get<ir::ReduceAttrs>(c.nodes[3].attrs).axes = {1, 1}; }),
                 "sorted, distinct"));
  CHECK(contains(broken([](ir::Graph& c) { c.nodes.push_back(c.nodes[0]); }), "duplicate input name"));
  CHECK(contains(broken([](ir::Graph& c) {
                   std::get<ir::ElementwiseAttrs>(c.nodes[1].attrs).body.nodes[1].args[0] = 3;
                 }),
                 "does not precede its user"));
  CHECK_THROWS_WITH(ir::verify_or_throw(ir::Graph{{g.ir().nodes[1]}, {}}, "after test"),
                    Catch::StartsWith("error: invalid graph after test:"));
}
