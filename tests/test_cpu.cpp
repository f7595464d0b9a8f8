// The CPU backend against the reference interpreter: elementwise, views, generators, every
// dtype, odd sizes, and random graphs.
#include <catch2/catch.hpp>

#include "frontends/compile.h"
#include "ir/printer.h"
#include "random_graph.h"

using namespace fuse;

namespace {

ir::TensorMap inputs_of(const ir::Graph& g, const ir::SymbolBindings& sizes, uint64_t seed) {
  return testing::random_inputs(g, sizes, seed);
}

// Compiled results must equal the interpreter's: exactly for integers and bools; floats within
// a few ulps (polynomial transcendentals) plus an absolute floor for values near zero.
void check_against_interpreter(const Graph& g, const ir::SymbolBindings& sizes, double rtol = 2e-6,
                               double atol = 1e-6) {
  ir::TensorMap inputs = inputs_of(g.ir(), sizes, 7);
  ir::TensorMap expected = ir::interpret(g.ir(), inputs);
  runtime::Executable exe = compile(g);
  ir::TensorMap actual = exe.run(inputs);
  std::string mismatch = testing::compare_outputs(expected, actual, rtol, atol);
  INFO(ir::print_program(exe.program()));
  CHECK(mismatch == "");
}

}  // namespace

TEST_CASE("elementwise kernels on the CPU match the interpreter at odd sizes", "[cpu]") {
  for (int64_t n : {0, 1, 15, 17, 1023, 1000003}) {
    INFO("N = " << n);
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("N")});
    Tensor m = g.input("mean", DType::F32);
    Tensor s = g.input("sigma", DType::F32);
    Tensor z = (x - m) / s;
    g.output("pdf", exp(-0.5 * z * z) / (s * 2.5066282746));
    g.output("hypot", sqrt(x * x + s * s));
    check_against_interpreter(g, {{"N", n}});
  }
}

TEST_CASE("every dtype and op on the CPU", "[cpu]") {
  for (DType t : ir::kAllDTypes) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor a = g.input("a", t, {sym("N")});
    Tensor b = g.input("b", t, {sym("N")});
    if (t != DType::Bool) {
      g.output("sum", a + b);
      g.output("diff", a - b);
      g.output("prod", a * b);
      g.output("quot", a / b);
      g.output("floordiv", floordiv(a, b));
      g.output("mod", a % b);
      g.output("min", minimum(a, b));
      g.output("max", maximum(a, b));
      g.output("abs", abs(a));
      g.output("relu", relu(a));
      g.output("neg", -a);
      g.output("floor", floor(a));
      g.output("round", round(a));
    }
    g.output("lt", a < b);
    g.output("eq", equal(a, b));
    g.output("where", where(a < b, a, b));
    for (DType to : ir::kAllDTypes) g.output("to_" + std::string(ir::dtype_name(to)), cast(a, to));
    check_against_interpreter(g, {{"N", 1027}});
  }
}

TEST_CASE("views, broadcasts and generators on the CPU", "[cpu]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), sym("M")});
  Tensor v = g.input("v", DType::F32, {sym("M")});
  g.output("t", transpose(x));
  g.output("bias", x + v);
  g.output("r", reshape(x, {-1}) * 2.0);
  g.output("e", squeeze(expand_dims(v, 0), 0) + 1.0);
  g.output("a", cast(g.arange(sym("M")), DType::F32) * v);
  g.output("u", g.rand({sym("N"), sym("M")}, 42) + x);
  check_against_interpreter(g, {{"N", 33}, {"M", 17}});
}

TEST_CASE("transcendentals match the interpreter within a few ulps", "[cpu][accuracy]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  for (auto [name, fn] : std::vector<std::pair<std::string, Tensor (*)(Operand)>>{
           {"exp", exp}, {"log", log}, {"sin", sin}, {"cos", cos}, {"tanh", tanh}, {"sqrt", sqrt},
           {"sigmoid", sigmoid}, {"exp2", exp2}, {"log2", log2}, {"tan", tan}})
    g.output(name, fn(abs(x) + 0.5));
  check_against_interpreter(g, {{"N", 4099}}, 5e-6, 1e-6);
}

TEST_CASE("random graphs on the CPU match the interpreter", "[cpu][random]") {
  int count = 0, failures = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    testing::RandomCase c = testing::random_case(seed);
    ir::TensorMap expected = ir::interpret(c.graph, c.inputs);
    runtime::Executable exe = compile(c.graph);
    std::string mismatch = testing::compare_outputs(expected, exe.run(c.inputs), 1e-5, 1e-5);
    ++count;
    if (!mismatch.empty()) {
      ++failures;
      UNSCOPED_INFO("seed " << seed << ": " << mismatch << "\n" << ir::print_graph(c.graph));
    }
  }
  CHECK(failures == 0);
  CHECK(count == 300);
}

TEST_CASE("reductions and row-wise kernels are compiled and match the interpreter", "[cpu][reduce]") {
  for (int64_t cols : {1, 7, 17, 1023}) {
    INFO("C = " << cols);
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
    Tensor e = exp(x - max(x, -1, true));
    g.output("softmax", e / sum(e, -1, true));
    Tensor xc = x - mean(x, -1, true);
    g.output("layernorm", xc * rsqrt(mean(xc * xc, -1, true) + 1e-5));
    Tensor m = max(x, -1, true);
    g.output("logsumexp", log(sum(exp(x - m), -1, true)) + m);
    g.output("colsum", sum(x, 0));
    g.output("total", sum(x * x));
    runtime::Executable exe = compile(g);
    CHECK(exe.compiled_kernel_count() == static_cast<int>(exe.program().kernels.size()));
    check_against_interpreter(g, {{"R", 5}, {"C", cols}}, 1e-5, 1e-6);
  }
}

TEST_CASE("every reduction kind, axis set and dtype on the CPU", "[cpu][reduce]") {
  const std::vector<std::vector<int64_t>> axis_sets = {{0}, {1}, {2}, {0, 2}, {1, 2}, {}};
  for (DType t : ir::kAllDTypes) {
    for (const auto& axes : axis_sets) {
      for (bool keepdims : {false, true}) {
        INFO(ir::dtype_name(t) << " axes " << axes.size() << " keepdims " << keepdims);
        Graph g;
        Tensor x = g.input("x", t, {3, sym("N"), 5});
        g.output("sum", sum(x, axes, keepdims));
        g.output("prod", prod(x, axes, keepdims));
        g.output("max", max(x, axes, keepdims));
        g.output("min", min(x, axes, keepdims));
        g.output("mean", mean(x, axes, keepdims));
        g.output("any", any(x, axes, keepdims));
        g.output("all", all(x, axes, keepdims));
        if (t != DType::Bool)
          g.output("custom", reduce([](Scalar a, Scalar v) { return maximum(a, abs(v)); }, x, 0.0, axes, keepdims));
        check_against_interpreter(g, {{"N", 4}}, 1e-5, 1e-6);
      }
    }
  }
}

TEST_CASE("matmul kernels with prologue and epilogue on the CPU", "[cpu][matmul]") {
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    for (auto [m, k, n] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {1, 7, 1}, {7, 1, 5}, {17, 33, 9}, {64, 31, 65}}) {
      INFO(ir::dtype_name(t) << " " << m << "x" << k << "x" << n);
      Graph g;
      Tensor x = g.input("x", t, {sym("M"), sym("K")});
      Tensor w = g.input("w", t, {sym("K"), sym("N")});
      Tensor b = g.input("b", t, {sym("N")});
      Tensor bx = g.input("bx", t, {3, sym("M"), sym("K")});
      g.output("mlp", relu(matmul(x * 2, w) + b));
      g.output("batched", matmul(bx, w));
      g.output("vector", matmul(x, sum(w, 1)));
      runtime::Executable exe = compile(g);
      CHECK(exe.compiled_kernel_count() == static_cast<int>(exe.program().kernels.size()));
      check_against_interpreter(g, {{"M", m}, {"K", k}, {"N", n}}, 1e-5, 1e-5);
    }
  }
}

TEST_CASE("outputs of another shape than the kernel's space", "[cpu]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), sym("M")});
  g.output("xt", transpose(x));
  g.output("flat", reshape(transpose(x), {-1}));
  check_against_interpreter(g, {{"N", 3}, {"M", 5}});
}

TEST_CASE("preallocated outputs are reused across runs", "[cpu]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  g.output("y", x * 2.0);
  runtime::Executable exe = compile(g);
  ir::TensorMap inputs{{"x", HostArray::from<float>({3}, {1, 2, 3})}};
  ir::TensorMap outputs;
  exe.run(inputs, outputs);
  const void* first = outputs.at("y").data();
  exe.run(inputs, outputs);
  CHECK(outputs.at("y").data() == first);
  CHECK(outputs.at("y").to_doubles() == std::vector<double>{2, 4, 6});
  inputs["x"] = HostArray::from<float>({4}, {1, 1, 1, 1});  // a new size: no recompilation
  exe.run(inputs, outputs);
  CHECK(outputs.at("y").to_doubles() == std::vector<double>{2, 2, 2, 2});
}
