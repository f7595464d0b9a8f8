// Gather/scatter ops (issue 16): take, take_along_axis, index_add, bincount, histogram. The
// interpreter's semantics on hand-computed cases (NumPy's are in tests/golden/test_scatter.py),
// the CPU executable against the interpreter at sizes 1, 7 and 1023 for every dtype, run-time
// index errors (message, location, the caller's outputs left as they were), the kernel counts
// of the fusion rule (a scatter takes its elementwise producers; its result is stored), the CUDA
// target's clear refusal of scatters, and the gradients against finite differences.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "frontends/api.h"
#include "frontends/compile.h"
#include "ir/dot.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/autodiff.h"
#include "passes/pipeline.h"

using namespace fuse;
using ir::TensorMap;

namespace {

ir::HostArray random_values(DType dtype, ir::ConcreteShape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-4, 4);
  ir::HostArray a(dtype, std::move(shape));
  for (int64_t i = 0; i < a.size(); ++i) {
    if (ir::is_float(dtype)) a.set_f64(i, u(rng));
    else if (dtype == DType::Bool) a.set_i64(i, rng() & 1);
    else a.set_i64(i, static_cast<int64_t>(std::floor(u(rng))));
  }
  return a;
}

/// Indices in [-size, size) (negative ones count from the end).
ir::HostArray random_indices(DType dtype, ir::ConcreteShape shape, int64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> u(-size, size - 1);
  ir::HostArray a(dtype, std::move(shape));
  for (int64_t i = 0; i < a.size(); ++i) a.set_i64(i, u(rng));
  return a;
}

/// The CPU executable's outputs equal the interpreter's bit for bit, except outputs named in
/// `close`: f64 sums of the compiled bincount, added per chunk and then chunk by chunk (a fixed
/// order, but not the interpreter's), agree to a relative 1e-12.
void check_cpu(const Graph& g, const TensorMap& inputs, const std::string& close = "") {
  REQUIRE(ir::verify(g.ir()).empty());
  TensorMap expected = ir::interpret(g.ir(), inputs);
  runtime::Executable exe = compile(g);
  TensorMap actual = exe.run(inputs);
  for (const auto& [name, value] : expected) {
    INFO("output " << name);
    REQUIRE(actual.count(name));
    CHECK(actual.at(name).dtype == value.dtype);
    CHECK(actual.at(name).shape == value.shape);
    if (name != close) {
      CHECK(actual.at(name).bytes == value.bytes);
      continue;
    }
    for (int64_t k = 0; k < value.size(); ++k)
      CHECK(actual.at(name).get_f64(k) == Approx(value.get_f64(k)).epsilon(1e-12).margin(1e-12));
  }
}

const DType kValueTypes[] = {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool};

}  // namespace

TEST_CASE("take and take_along_axis on hand-computed cases", "[scatter][interp]") {
  Graph g;
  Tensor x = g.input("x", DType::I32, {2, 3});
  Tensor i = g.input("i", DType::I64, {4});
  Tensor j = g.input("j", DType::I32, {2, 1});
  g.output("rows", take(x, i, 1));
  g.output("along", take_along_axis(x, j, 1));
  ir::HostArray xs(DType::I32, {2, 3});
  for (int k = 0; k < 6; ++k) xs.set_i64(k, 10 * k);  // [[0, 10, 20], [30, 40, 50]]
  ir::HostArray is(DType::I64, {4}), js(DType::I32, {2, 1});
  int64_t iv[] = {2, -1, 0, 2};
  for (int k = 0; k < 4; ++k) is.set_i64(k, iv[k]);
  js.set_i64(0, -3);
  js.set_i64(1, 1);
  TensorMap out = ir::interpret(g.ir(), {{"x", xs}, {"i", is}, {"j", js}});
  const ir::HostArray& rows = out.at("rows");
  REQUIRE(rows.shape == ir::ConcreteShape{2, 4});
  int64_t want[] = {20, 20, 0, 20, 50, 50, 30, 50};
  for (int k = 0; k < 8; ++k) CHECK(rows.get_i64(k) == want[k]);
  const ir::HostArray& along = out.at("along");
  REQUIRE(along.shape == ir::ConcreteShape{2, 1});
  CHECK(along.get_i64(0) == 0);
  CHECK(along.get_i64(1) == 40);
}

TEST_CASE("index_add accumulates repeated indices; bincount and histogram count", "[scatter][interp]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {3});
  Tensor i = g.input("i", DType::I64, {4});
  Tensor v = g.input("v", DType::F32, {4});
  g.output("added", index_add(x, i, v));
  g.output("counts", bincount(i, 3));
  g.output("sums", bincount(i, 3, v));
  g.output("hist", histogram(v, 2, 0.0, 1.0));
  ir::HostArray xs(DType::F32, {3}), is(DType::I64, {4}), vs(DType::F32, {4});
  int64_t iv[] = {2, 0, 2, 2};
  double vv[] = {1.0, 0.5, 0.25, std::nan("")};
  for (int k = 0; k < 4; ++k) is.set_i64(k, iv[k]), vs.set_f64(k, vv[k]);
  vs.set_f64(3, 1.0);  // on the last edge: the last bin is closed
  TensorMap out = ir::interpret(g.ir(), {{"x", xs}, {"i", is}, {"v", vs}});
  CHECK(out.at("added").get_f64(0) == 0.5);
  CHECK(out.at("added").get_f64(1) == 0.0);
  CHECK(out.at("added").get_f64(2) == 2.25);
  CHECK(out.at("counts").dtype == DType::I64);
  CHECK(out.at("counts").get_i64(0) == 1);
  CHECK(out.at("counts").get_i64(1) == 0);
  CHECK(out.at("counts").get_i64(2) == 3);
  CHECK(out.at("sums").dtype == DType::F32);
  CHECK(out.at("sums").get_f64(2) == 2.25);
  CHECK(out.at("hist").get_i64(0) == 1);  // 0.25
  CHECK(out.at("hist").get_i64(1) == 3);  // 0.5, 1.0, 1.0
}

TEST_CASE("gather/scatter ops print, draw and verify", "[scatter][ir]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {ir::Dim::symbol("N")});
  Tensor i = g.input("i", DType::I64, {ir::Dim::symbol("M")});
  g.output("t", take(x, i));
  g.output("h", histogram(x, 4, -1.0, 1.0));
  g.output("b", bincount(i, ir::Dim::symbol("N")));
  CHECK(ir::verify(g.ir()).empty());
  std::string text = ir::print_graph(g.ir());
  CHECK(text.find("take(%0, %1) axis=0 : f32[M]") != std::string::npos);
  CHECK(text.find("histogram(%0) range=[") != std::string::npos);
  CHECK(text.find("bincount(%1) : i64[N]") != std::string::npos);
  std::string dot = ir::graph_to_dot(g.ir());
  CHECK(dot.find("histogram bins=[4]") != std::string::npos);
}

TEST_CASE("gather/scatter misuse is a clear error at construction", "[scatter][errors]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {3, 4});
  Tensor fi = g.input("fi", DType::F32, {2});
  Tensor i = g.input("i", DType::I64, {2});
  Tensor m = g.input("m", DType::I64, {2, 2});
  CHECK_THROWS_WITH(take(x, fi), Catch::Contains("take: indices must be i32 or i64, not f32[2]"));
  CHECK_THROWS_WITH(take(x, i, 2), Catch::Contains("take: axis 2 is out of range for shape [3, 4]"));
  CHECK_THROWS_WITH(take_along_axis(x, i, 0), Catch::Contains("must have the same rank"));
  CHECK_THROWS_WITH(take_along_axis(x, m, 0), Catch::Contains("do not broadcast (dim 1: 4 vs 2)"));
  CHECK_THROWS_WITH(index_add(x, m, x), Catch::Contains("index_add: indices must be 1-D"));
  CHECK_THROWS_WITH(index_add(x, i, x), Catch::Contains("index_add: values have shape [3, 4] but x [3, 4] with indices [2] along axis 0 needs [2, 4]"));
  CHECK_THROWS_WITH(bincount(x, 3), Catch::Contains("bincount: x must be a 1-D i32 or i64 tensor, not f32[3, 4]"));
  CHECK_THROWS_WITH(histogram(x, 0, 0.0, 1.0), Catch::Contains("bins must be a positive integer"));
  CHECK_THROWS_WITH(histogram(x, 2, 1.0, 0.0), Catch::Contains("the upper bound must not be below the lower"));
  CHECK_THROWS_WITH(histogram(x, 2, 0.0, INFINITY), Catch::Contains("must be finite"));
}

TEST_CASE("CPU take, take_along_axis and index_add equal the interpreter at sizes 1, 7, 1023", "[scatter][cpu]") {
  for (DType t : kValueTypes) {
    for (int64_t n : {1, 7, 1023}) {
      INFO(ir::dtype_name(t) << " n = " << n);
      uint32_t seed = static_cast<uint32_t>(n * 31 + static_cast<int>(t));
      Graph g;
      Tensor x = g.input("x", t, {n, 3});
      Tensor i = g.input("i", DType::I64, {5});
      Tensor j = g.input("j", DType::I32, {n, 2});
      g.output("rows", take(x, i, 0));
      g.output("cols", take(x, j, 1));
      g.output("along", take_along_axis(x, j, 1));
      TensorMap inputs = {{"x", random_values(t, {n, 3}, seed)},
                          {"i", random_indices(DType::I64, {5}, n, seed + 1)},
                          {"j", random_indices(DType::I32, {n, 2}, 3, seed + 2)}};
      if (t != DType::Bool) {
        Tensor k = g.input("k", DType::I64, {2 * n + 1});
        Tensor v = g.input("v", t, {2 * n + 1, 3});
        g.output("added", index_add(x, k, v, 0));
        inputs["k"] = random_indices(DType::I64, {2 * n + 1}, n, seed + 3);
        inputs["v"] = random_values(t, {2 * n + 1, 3}, seed + 4);
      }
      check_cpu(g, inputs);
    }
  }
}

TEST_CASE("CPU bincount and histogram equal the interpreter at sizes 1, 7, 1023", "[scatter][cpu]") {
  for (int64_t n : {1, 7, 1023}) {
    for (DType w : {DType::F32, DType::F64, DType::I32, DType::I64}) {
      INFO(ir::dtype_name(w) << " n = " << n);
      uint32_t seed = static_cast<uint32_t>(n + 100 * static_cast<int>(w));
      Graph g;
      Tensor x = g.input("x", DType::I32, {n});
      Tensor v = g.input("v", w, {n});
      g.output("counts", bincount(x, 9));
      g.output("sums", bincount(x, 9, v));
      g.output("hist", histogram(v * 2, 7, -3.0, 3.0));
      ir::HostArray xs(DType::I32, {n});
      std::mt19937 rng(seed);
      for (int64_t k = 0; k < n; ++k) xs.set_i64(k, rng() % 9);
      check_cpu(g, {{"x", xs}, {"v", random_values(w, {n}, seed + 1)}}, w == DType::F64 ? "sums" : "");
    }
  }
}

TEST_CASE("a bad index is a run-time error naming the op, its line, the index and the size", "[scatter][errors]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {ir::Dim::symbol("N")});
  Tensor i = g.input("i", DType::I64, {ir::Dim::symbol("M")});
  Tensor y = exp(x);
  g.output("y", y);  // written by the first kernel, before take fails
  int line = __LINE__ + 1;
  g.output("t", take(x, i) + 1.0f);
  ir::HostArray xs(DType::F32, {5}), is(DType::I64, {3});
  is.set_i64(1, -6);
  std::string want = "take: index -6 is out of range for axis 0 of size 5";
  SECTION("the interpreter") {
    CHECK_THROWS_WITH(ir::interpret(g.ir(), {{"x", xs}, {"i", is}}), Catch::Contains(want));
  }
  SECTION("the CPU executable leaves the caller's outputs as they were") {
    runtime::Executable exe = compile(g);
    TensorMap outputs;
    outputs["y"] = ir::HostArray(DType::F32, {5});
    outputs["y"].set_f64(0, 42.0);
    try {
      exe.run({{"x", xs}, {"i", is}}, outputs);
      FAIL("no error");
    } catch (const ir::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(want));
      CHECK_THAT(e.what(), Catch::Contains("test_scatter.cpp:" + std::to_string(line)));
    }
    CHECK(outputs.size() == 1);
    CHECK(outputs.at("y").get_f64(0) == 42.0);
    is.set_i64(1, -5);
    exe.run({{"x", xs}, {"i", is}}, outputs);  // a good run afterwards hands everything over
    CHECK(outputs.at("y").get_f64(0) == 1.0);
    CHECK(outputs.count("t"));
  }
  SECTION("bincount values") {
    Graph h;
    Tensor v = h.input("v", DType::I64, {3});
    h.output("c", bincount(v, 4));
    ir::HostArray vs(DType::I64, {3});
    vs.set_i64(2, 4);
    CHECK_THROWS_WITH(compile(h).run({{"v", vs}}), Catch::Contains("bincount: value 4 is out of range for minlength 4"));
  }
}

TEST_CASE("a scatter takes its elementwise producers and stores its result, and says why", "[scatter][fusion]") {
  // take / take_along_axis fuse as indexed loads: tests/test_gather.cpp; scatter kernels in
  // detail: tests/test_scatter_kernels.cpp.
  Graph g;
  Tensor x = g.input("x", DType::F32, {ir::Dim::symbol("N")});
  Tensor i = g.input("i", DType::I64, {ir::Dim::symbol("M")});
  Tensor v = g.input("v", DType::F32, {ir::Dim::symbol("M")});
  g.output("y", exp(index_add(x * 2.0f, i, v)) + 1.0f);
  passes::PipelineResult r = passes::run_pipeline(g.ir());
  CHECK(r.program.kernels.size() == 2);  // index_add with x * 2 as its prologue, exp + 1
  bool explained = false;
  for (const passes::FusionBoundary& b : r.partition.boundaries)
    explained = explained || b.reason.find("a scatter's result is stored") != std::string::npos;
  CHECK(explained);
  for (const ir::Kernel& k : r.program.kernels) {
    bool has_scatter = false;
    for (const ir::Node& n : k.body.nodes) has_scatter = has_scatter || n.kind == ir::OpKind::IndexAdd;
    if (has_scatter) CHECK(k.schedule.form == ir::LoopForm::Scatter);
  }
}

TEST_CASE("the CUDA target compiles scatter kernels as atomics launches", "[scatter][cuda]") {
  // (simulator runs against the interpreter: tests/test_scatter_cuda.cpp)
  Graph g;
  Tensor i = g.input("i", DType::I64, {3});
  g.output("t", bincount(i, 8));
  g.output("u", index_add(g.input("x", DType::F32, {4}), i, g.input("v", DType::F32, {3}), 0));
  runtime::CudaProgram p = compile_cuda_program(g.ir(), Target::cuda_sim());
  std::vector<std::string> entries;
  for (const ir::CudaLaunch& l : p.plan.launches) entries.push_back(l.entry);
  CHECK(entries.size() == 4);  // bincount: zero, count; index_add: copy, add
  CHECK(std::count_if(entries.begin(), entries.end(), [](const std::string& e) { return e.ends_with("_zero"); }) == 1);
  CHECK(std::count_if(entries.begin(), entries.end(), [](const std::string& e) { return e.ends_with("_copy"); }) == 1);
  CHECK(p.plan.error_scratch >= 0);
}

namespace {

double weighted_sum(const ir::Graph& g, const TensorMap& inputs, const ir::HostArray& dy) {
  ir::HostArray y = ir::interpret(g, inputs).at("y");
  double s = 0;
  for (int64_t k = 0; k < y.size(); ++k) s += y.get_f64(k) * dy.get_f64(k);
  return s;
}

/// The VJP of output "y" w.r.t. each of `wrt` against central finite differences (f64).
void check_vjp(const ir::Graph& g, const TensorMap& inputs, const std::vector<std::string>& wrt) {
  ir::HostArray y = ir::interpret(g, inputs).at("y");
  ir::HostArray dy = random_values(DType::F64, y.shape, 99);
  ir::Graph with_dy = g;
  ir::add_input(with_dy, "dy", DType::F64, with_dy.node(with_dy.outputs[0].node).shape);
  ir::Graph gg = passes::grad(with_dy, "y", wrt, {.cotangent = "dy"});
  TensorMap all = inputs;
  all["dy"] = dy;
  TensorMap got = ir::interpret(gg, all);
  const double h = 1e-6;
  for (const std::string& name : wrt) {
    const ir::HostArray& grad = got.at("grad_" + name);
    REQUIRE(grad.shape == inputs.at(name).shape);
    for (int64_t k = 0; k < grad.size(); ++k) {
      TensorMap plus = inputs, minus = inputs;
      plus[name].set_f64(k, inputs.at(name).get_f64(k) + h);
      minus[name].set_f64(k, inputs.at(name).get_f64(k) - h);
      double fd = (weighted_sum(g, plus, dy) - weighted_sum(g, minus, dy)) / (2 * h);
      INFO("d/d" << name << "[" << k << "]");
      CHECK(grad.get_f64(k) == Approx(fd).epsilon(1e-6).margin(1e-6));
    }
  }
}

}  // namespace

TEST_CASE("gradients of take, take_along_axis and index_add match finite differences", "[scatter][autodiff]") {
  SECTION("take: repeated and negative indices accumulate") {
    Graph g;
    Tensor x = g.input("x", DType::F64, {4, 3});
    Tensor i = g.input("i", DType::I64, {2, 3});
    g.output("y", take(x, i, 0) * take(x, i, 0));
    ir::HostArray is(DType::I64, {2, 3});
    int64_t iv[] = {0, 3, -1, 1, 1, 0};
    for (int k = 0; k < 6; ++k) is.set_i64(k, iv[k]);
    check_vjp(g.ir(), {{"x", random_values(DType::F64, {4, 3}, 1)}, {"i", is}}, {"x"});
  }
  SECTION("take_along_axis, broadcasting x") {
    Graph g;
    Tensor x = g.input("x", DType::F64, {1, 5});
    Tensor i = g.input("i", DType::I32, {3, 4});
    g.output("y", sin(take_along_axis(x, i, 1)));
    check_vjp(g.ir(), {{"x", random_values(DType::F64, {1, 5}, 2)}, {"i", random_indices(DType::I32, {3, 4}, 5, 3)}}, {"x"});
  }
  SECTION("index_add: x and values") {
    Graph g;
    Tensor x = g.input("x", DType::F64, {3, 2});
    Tensor i = g.input("i", DType::I64, {4});
    Tensor v = g.input("v", DType::F64, {4, 2});
    g.output("y", sin(index_add(x, i, v * v, 0)));  // sin: bounded, so finite differences stay exact enough
    ir::HostArray is(DType::I64, {4});
    int64_t iv[] = {2, -1, 0, 2};
    for (int k = 0; k < 4; ++k) is.set_i64(k, iv[k]);
    check_vjp(g.ir(), {{"x", random_values(DType::F64, {3, 2}, 4)}, {"i", is}, {"v", random_values(DType::F64, {4, 2}, 5)}},
              {"x", "v"});
  }
  SECTION("bincount is not differentiable") {
    Graph g;
    Tensor i = g.input("i", DType::I64, {4});
    Tensor w = g.input("w", DType::F64, {4});
    g.output("y", bincount(i, 3, w));
    CHECK_THROWS_WITH(passes::grad(g.ir(), "y", {"w"}), Catch::Contains("grad: bincount is not differentiable"));
  }
}
