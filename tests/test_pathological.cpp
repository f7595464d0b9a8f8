// Graphs built to find exponential or unbounded work in the compiler: long chains of diamonds
// (every node read twice), through elementwise kernels, a matmul's epilogue and a row-wise
// kernel, and a graph of 100,000 nodes. Each must compile and match the interpreter; the
// watchdog (tests/watchdog.h) turns exponential time into a failure naming the case. The times
// printed are for the record (no test asserts a time).
#include <catch2/catch.hpp>

#include <chrono>
#include <iostream>
#include <string>

#include "frontends/compile.h"
#include "random_graph.h"
#include "watchdog.h"

using namespace fuse;

namespace {

// depth diamonds: y = a(y) + b(y), each half reading y (2^depth paths from input to output).
Tensor diamonds(Tensor y, int depth) {
  for (int i = 0; i < depth; ++i) {
    Tensor a = y * 0.5f;
    Tensor b = tanh(y);
    y = a + b;
  }
  return y;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void compile_and_check(const std::string& what, const Graph& g, const ir::SymbolBindings& sizes, double tolerance) {
  testing::Watchdog watchdog;
  watchdog.arm(what);
  auto start = std::chrono::steady_clock::now();
  runtime::Executable exe = compile(g);
  double compile_seconds = seconds_since(start);
  ir::TensorMap inputs = testing::random_inputs(g.ir(), sizes, 21, false);
  CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe.run(inputs), tolerance, tolerance) == "");
  watchdog.disarm();
  std::cout << what << ": " << g.ir().nodes.size() << " nodes, " << exe.program().kernels.size() << " kernels, compiled in "
            << compile_seconds << " s" << std::endl;
}

}  // namespace

TEST_CASE("a 60-deep chain of diamonds compiles: elementwise, matmul epilogue, row-wise", "[passes][pathological]") {
  {
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("N")});
    g.output("y", diamonds(x, 60));
    compile_and_check("60 diamonds, elementwise", g, {{"N", 1001}}, 1e-4);
  }
  {
    Graph g;
    Tensor a = g.input("a", DType::F32, {sym("M"), sym("K")});
    Tensor b = g.input("b", DType::F32, {sym("K"), sym("N")});
    g.output("y", diamonds(matmul(a, b), 60));
    compile_and_check("60 diamonds after a matmul", g, {{"M", 13}, {"K", 7}, {"N", 33}}, 1e-4);
  }
  {
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("N"), sym("D")});
    Tensor y = diamonds(x, 60);
    g.output("y", y - max(y, 1, true));
    compile_and_check("60 diamonds into a row-wise kernel", g, {{"N", 5}, {"D", 77}}, 1e-4);
  }
}

TEST_CASE("a graph of 100,000 nodes compiles", "[passes][pathological]") {
  // 10,000 outputs, each a chain of ten elementwise ops on one of the inputs and a constant.
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor y = g.input("y", DType::F32, {sym("N")});
  for (int o = 0; o < 10000; ++o) {
    Tensor t = o % 2 ? x : y;
    for (int i = 0; i < 9; ++i) t = t * (1.0f + 1e-4f * static_cast<float>(i + o % 7)) + 0.25f;
    g.output("out" + std::to_string(o), t);
  }
  compile_and_check("100,000 nodes", g, {{"N", 3}}, 1e-5);
}

TEST_CASE("shape products past 64 bits and inputs whose dims disagree are clear errors", "[passes][pathological]") {
  SECTION("a static shape whose element count overflows") {
    auto build_and_compile = [] {
      Graph g;
      Tensor x = g.input("x", DType::F32, {Dim(int64_t{1} << 32), Dim(int64_t{1} << 32)});
      g.output("y", x * 2.0f);
      compile(g);
    };
    CHECK_THROWS_WITH(build_and_compile(), Catch::Contains("overflows 64 bits"));
  }
  SECTION("symbols bound at run time whose product overflows") {
    // Zero-sized inputs bind N = 2^40 without memory; the output [N, N, Z] has 2^80 * 0 elements.
    Dim N = sym("N"), Z = sym("Z");
    Graph g;
    Tensor a = g.input("a", DType::F32, {N, Z});
    g.output("y", broadcast_to(expand_dims(a, 0), {N, N, Z}));
    runtime::Executable exe = compile(g);
    ir::TensorMap inputs;
    inputs.emplace("a", HostArray(DType::F32, {int64_t{1} << 40, 0}));
    CHECK_THROWS_WITH(exe.run(inputs), Catch::Contains("overflows 64 bits"));
  }
  SECTION("two inputs that give one symbol different sizes") {
    Dim N = sym("N");
    Graph g;
    Tensor a = g.input("a", DType::F32, {N}), b = g.input("b", DType::F32, {N});
    g.output("y", a + b);
    runtime::Executable exe = compile(g);
    ir::TensorMap inputs;
    inputs.emplace("a", HostArray(DType::F32, {5}));
    inputs.emplace("b", HostArray(DType::F32, {7}));
    CHECK_THROWS_WITH(exe.run(inputs), Catch::Contains("'b'") && Catch::Contains("N"));
  }
}
