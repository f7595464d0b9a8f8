// The rounding model (ir/rounding_model.h) and the bound-aware comparison (runtime/compare.h):
// bounds of hand-computable cases, wrong results it must reject, uncertain decisions it must not
// check, and the random graphs whose rounding no fixed tolerance fitted, compiled for the CPU.
#include <catch2/catch.hpp>

#include <cmath>

#include "frontends/compile.h"
#include "ir/printer.h"
#include "ir/rounding_model.h"
#include "runtime/compare.h"
#include "tests/random_graph.h"

using namespace fuse;
using ir::DType;
using ir::HostArray;

namespace {

constexpr double kU32 = 0x1p-24;

double gamma(int64_t n, double u) { return n * u / (1 - n * u); }

ir::ValuesAndBounds run(const Graph& g, const ir::TensorMap& inputs) { return ir::interpret_with_bounds(g.ir(), inputs); }

}  // namespace

TEST_CASE("rounding model: a sum of n ones in f32 may be off by gamma(n) * n", "[rounding]") {
  for (int64_t n : {1, 7, 1000}) {
    INFO("n = " << n);
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("N")});
    g.output("s", sum(x));
    g.output("m", mean(x));
    ir::ValuesAndBounds r = run(g, {{"x", HostArray::from<float>({n}, std::vector<float>(n, 1.0f))}});
    CHECK(r.values.at("s").get_f64(0) == n);
    CHECK(r.bounds.at("s").get_f64(0) == Approx(gamma(n, kU32) * n).epsilon(1e-12));
    CHECK(r.bounds.at("m").get_f64(0) == Approx(gamma(n, kU32)).epsilon(1e-12));
  }
}

TEST_CASE("rounding model: a dot product carries gamma(K) * sum |a||b|, an f64 one gamma with 2^-53",
          "[rounding]") {
  for (DType t : {DType::F32, DType::F64}) {
    Graph g;
    Tensor a = g.input("a", t, {1, 4});
    Tensor b = g.input("b", t, {4, 1});
    g.output("y", matmul(a, b));
    ir::TensorMap inputs{{"a", HostArray::from<double>({1, 4}, {1, -2, 3, -4}).cast(t)},
                         {"b", HostArray::from<double>({4, 1}, {0.5, 0.25, -1, 2}).cast(t)}};
    ir::ValuesAndBounds r = run(g, inputs);
    CHECK(r.values.at("y").get_f64(0) == 0.5 - 0.5 - 3 - 8);
    double sum_abs = 0.5 + 0.5 + 3 + 8;
    CHECK(r.bounds.at("y").get_f64(0) == Approx(gamma(4, ir::unit_roundoff(t)) * sum_abs).epsilon(1e-12));
  }
}

TEST_CASE("rounding model: elementwise bounds, a float->int cast moves by at most its bound + 1", "[rounding]") {
  Graph g;
  Tensor a = g.input("a", DType::F32, {1, 3});
  Tensor b = g.input("b", DType::F32, {3, 1});
  Tensor y = matmul(a, b);  // 3 * 100 = 300, bound gamma(3) * 300
  g.output("y", y);
  g.output("i", cast(y, DType::I32));
  g.output("doubled", y + y);
  g.output("exact", a * 2.0);  // an IEEE op on exact operands: bound 0
  g.output("e", exp(a));       // f32 exp: 1 ulp of its own (ir/scalar_ops.def)
  ir::TensorMap inputs{{"a", HostArray::from<float>({1, 3}, {10, 10, 10})},
                       {"b", HostArray::from<float>({3, 1}, {10, 10, 10})}};
  ir::ValuesAndBounds r = run(g, inputs);
  double dy = gamma(3, kU32) * 300;
  CHECK(r.bounds.at("y").get_f64(0) == Approx(dy).epsilon(1e-12));
  CHECK(r.values.at("i").get_i64(0) == 300);
  // 300 + dy truncates to 300 and 300 - dy to 299: one step.
  CHECK(r.bounds.at("i").get_f64(0) == 1);
  double ulp600 = std::nextafter(600.0f, 1e9f) - 600.0f;
  CHECK(r.bounds.at("doubled").get_f64(0) == Approx(2 * dy + ulp600).epsilon(1e-9));
  CHECK(r.bounds.at("exact").get_f64(0) == 0);
  float e10 = std::exp(10.0f);
  CHECK(r.bounds.at("e").get_f64(0) == Approx(1 * (std::nextafter(e10, 1e30f) - e10)).epsilon(1e-12));
}

TEST_CASE("rounding model: an integer cast of an f32 matmul is compared through its f32 value", "[rounding]") {
  // Large values: the f32 result has an ulp of 32, so an f32-accumulating backend may land a few
  // ulps away, and the cast with it.
  Graph g;
  Tensor a = g.input("a", DType::F32, {1, sym("K")});
  Tensor b = g.input("b", DType::F32, {sym("K"), 1});
  g.output("i", cast(matmul(a, b), DType::I32));
  int64_t k = 64;
  std::vector<float> av(k), bv(k);
  for (int64_t i = 0; i < k; ++i) av[i] = 1000.0f + static_cast<float>(i) * 0.37f, bv[i] = 5000.0f - static_cast<float>(i);
  ir::TensorMap inputs{{"a", HostArray::from<float>({1, k}, av)}, {"b", HostArray::from<float>({k, 1}, bv)}};
  ir::ValuesAndBounds r = run(g, inputs);
  int64_t e = r.values.at("i").get_i64(0);
  HostArray off_by_two_ulps = r.values.at("i");
  off_by_two_ulps.set_i64(0, e + 64);
  CHECK(runtime::compare_arrays(r.values.at("i"), off_by_two_ulps, r.bounds.at("i"), "i") == "");
  HostArray far_off = r.values.at("i");
  far_off.set_i64(0, e + static_cast<int64_t>(3 * r.bounds.at("i").get_f64(0)));
  CHECK_THAT(runtime::compare_arrays(r.values.at("i"), far_off, r.bounds.at("i"), "i"), Catch::Contains("flat index 0"));
}

TEST_CASE("rounding model: wrong results fail (an index shifted by one, an error of 1e-3)", "[rounding]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), sym("K")});
  Tensor w = g.input("w", DType::F32, {sym("K"), sym("M")});
  Tensor h = matmul(x, w);
  Tensor e = exp(h - max(h, -1, true));
  g.output("y", e / sum(e, -1, true));
  g.output("z", tanh(h) * 3.0);
  ir::SymbolBindings sizes{{"N", 9}, {"K", 33}, {"M", 17}};
  ir::TensorMap inputs = testing::random_inputs(g.ir(), sizes, 5, false);
  ir::ValuesAndBounds r = run(g, inputs);
  // What the CPU backend computes passes.
  CHECK(testing::compare_outputs(r, compile(g).run(inputs)) == "");
  for (const std::string name : {"y", "z"}) {
    INFO(name);
    const HostArray& want = r.values.at(name);
    HostArray shifted = want;  // element i holds element i + 1
    for (int64_t i = 0; i + 1 < want.size(); ++i) shifted.set_f64(i, want.get_f64(i + 1));
    CHECK_THAT(runtime::compare_arrays(want, shifted, r.bounds.at(name), name), Catch::Contains("differs"));
    HostArray scaled = want;
    for (int64_t i = 0; i < want.size(); ++i) scaled.set_f64(i, want.get_f64(i) * (1 + 1e-3));
    CHECK_THAT(runtime::compare_arrays(want, scaled, r.bounds.at(name), name), Catch::Contains("differs"));
    runtime::BoundedError worst = runtime::bounded_error(want, scaled, r.bounds.at(name));
    CHECK(worst.max_in_bounds > 1);
    CHECK(worst.max_rel == Approx(1e-3).epsilon(1e-3));
  }
}

TEST_CASE("rounding model: uncertain comparisons are not checked, certain ones are", "[rounding]") {
  Graph g;
  Tensor a = g.input("a", DType::F32, {sym("K")});
  Tensor b = g.input("b", DType::F32, {sym("K")});
  Tensor s = sum(a * b);  // 1 + 2^-24 - 1: within the sum's bound gamma(3) * 2 of 0
  g.output("positive", s > 0.0);
  g.output("picked", where(s > 0.0, 10.0, 20.0));
  g.output("certain", s < 5.0);
  g.output("any", any(a * b > 0.5));
  ir::TensorMap inputs{{"a", HostArray::from<float>({3}, {1, 0x1p-24f, -1})}, {"b", HostArray::from<float>({3}, {1, 1, 1})}};
  ir::ValuesAndBounds r = run(g, inputs);
  CHECK(std::isinf(r.bounds.at("positive").get_f64(0)));
  CHECK(r.bounds.at("picked").get_f64(0) == 10);  // max(0, 0) + |10 - 20|
  CHECK(r.bounds.at("certain").get_f64(0) == 0);
  CHECK(r.bounds.at("any").get_f64(0) == 0);  // exact products: a certain 1 > 0.5
  HostArray flipped = r.values.at("positive");
  flipped.set_i64(0, !flipped.get_i64(0));
  CHECK(runtime::compare_arrays(r.values.at("positive"), flipped, r.bounds.at("positive"), "positive") == "");
  HostArray wrong = r.values.at("certain");
  wrong.set_i64(0, !wrong.get_i64(0));
  CHECK_THAT(runtime::compare_arrays(r.values.at("certain"), wrong, r.bounds.at("certain"), "certain"),
             Catch::Contains("flat index 0"));
  CHECK(runtime::bounded_error(r.values.at("positive"), flipped, r.bounds.at("positive")).unchecked == 1);
}

TEST_CASE("bound-aware comparison: NaN only to NaN, infinities only to themselves", "[rounding]") {
  HostArray e = HostArray::from<float>({3}, {1.0f, NAN, INFINITY});
  HostArray bounds = HostArray::from<double>({3}, {0.5, 0.5, 0.5});
  CHECK(runtime::compare_arrays(e, HostArray::from<float>({3}, {1.9f, NAN, INFINITY}), bounds, "y") == "");
  CHECK_THAT(runtime::compare_arrays(e, HostArray::from<float>({3}, {2.1f, NAN, INFINITY}), bounds, "y"),
             Catch::Contains("flat index 0"));
  CHECK_THAT(runtime::compare_arrays(e, HostArray::from<float>({3}, {1.0f, 0.0f, INFINITY}), bounds, "y"),
             Catch::Contains("flat index 1"));
  CHECK_THAT(runtime::compare_arrays(e, HostArray::from<float>({3}, {1.0f, NAN, -INFINITY}), bounds, "y"),
             Catch::Contains("flat index 2"));
  // A bound of 0 still allows kFinalUlps ulps of the expected value.
  HostArray zero = HostArray::from<double>({1}, {0});
  HostArray one = HostArray::from<float>({1}, {1.0f});
  CHECK(runtime::compare_arrays(one, HostArray::from<float>({1}, {1.0f + 0x1p-22f}), zero, "y") == "");
  CHECK_THAT(runtime::compare_arrays(one, HostArray::from<float>({1}, {1.0f + 0x1p-19f}), zero, "y"),
             Catch::Contains("differs"));
}

// Random graphs (tests/random_graph.h) whose rounding no fixed tolerance fitted, compiled for the
// CPU and compared under the model. 8890: a layernorm over 3 values of log2(sigmoid(...) + 0.5)
// whose variance is 1.5e-8; rsqrt(var + 1e-5) = 316 turns the 1-ulp differences of f32 log2
// (6e-8) into 3.7e-5. 95: an f32 matmul (accumulated in f32) whose result x goes through
// cos(0.78 x^4), whose derivative (up to 1e3) turns 1-ulp differences into 1e-4. 6256: an f32
// matmul cast to i32, off by 64 = 2 f32 ulps (-373454720 against -373454784). 9947: 3.7e-5
// relative.
TEST_CASE("rounding model: random graphs beyond any fixed tolerance pass on the CPU", "[rounding][cpu]") {
  for (uint64_t seed : {95, 6256, 8890, 9947}) {
    testing::RandomCase c = testing::random_case(seed);
    INFO(c.description << "\n" << ir::print_graph(c.graph));
    ir::ValuesAndBounds expected = ir::interpret_with_bounds(c.graph, c.inputs);
    CHECK(testing::compare_outputs(expected, compile(c.graph).run(c.inputs)) == "");
  }
}
