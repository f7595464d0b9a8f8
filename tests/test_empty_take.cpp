// A take whose result is empty still checks every index (issue 16, np-gaps): the interpreter
// checks all of take's indices before it gathers, so a compiled kernel that loads no element of
// the take checks them in a loop of its own (KernelEmitterBase::check_indices_of_empty_takes),
// even when the kernel has no work at all. CPU and CUDA simulator: the interpreter's error (the
// op, the source line, the index, the size), the caller's outputs left as they were, and good
// indices run. take_along_axis checks the indices that reach an output element, in the
// interpreter and compiled alike. A take read by another take is stored first (fused, only the
// elements the outer one names would be checked).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>
#include <memory>

#include "frontends/api.h"
#include "frontends/compile.h"
#include "ir/interpreter.h"
#include "passes/pipeline.h"
#include "random_graph.h"
#include "runtime/cuda_executable.h"

using namespace fuse;
using ir::TensorMap;

namespace {

// The CUDA cases run on the simulator with every check on: set before the driver loads.
const bool kSimulator = [] {
  setenv("FUSE_CUDA_SIM", "1", 1);
  return setenv("FUSE_CUDA_SIM_CHECKS", "all", 1) == 0;
}();

ir::HostArray indices(std::vector<int64_t> values) {
  ir::HostArray a(DType::I64, {static_cast<int64_t>(values.size())});
  for (size_t k = 0; k < values.size(); ++k) a.set_i64(static_cast<int64_t>(k), values[k]);
  return a;
}

struct EmptyTake {
  const char* what;
  Graph g;
  int line = 0;  // the take's line
  int64_t scale = 1;  // the kernel reads i * scale
};

// x: f32[N, 3] taken along axis 1 by i: i64[M]; with N = 0 the take's result is empty. Each
// also outputs exp(z) (z: f32[4]) to see the caller's outputs left as they were.
std::vector<std::function<void(EmptyTake&)>> kCases = {
    [](EmptyTake& c) {
      c.what = "an elementwise kernel with no work";
      Tensor x = c.g.input("x", DType::F32, {sym("N"), 3}), i = c.g.input("i", DType::I64, {sym("M")});
      c.line = __LINE__ + 1;
      c.g.output("t", take(x, i, 1) + 1.0f);
    },
    [](EmptyTake& c) {
      c.what = "a reduction over the empty axis, its index computed in the kernel";
      Tensor x = c.g.input("x", DType::F32, {sym("N"), 3}), i = c.g.input("i", DType::I64, {sym("M")});
      c.line = __LINE__ + 1;
      c.g.output("t", sum(take(x, i + i, 1) * 2.0f, 0));
      c.scale = 2;
    },
    [](EmptyTake& c) {
      c.what = "concatenated with a non-empty operand";
      Tensor x = c.g.input("x", DType::F32, {sym("N"), 3}), i = c.g.input("i", DType::I64, {sym("M")});
      Tensor y = c.g.input("y", DType::F32, {2, sym("M")});
      c.line = __LINE__ + 1;
      c.g.output("t", concatenate({take(x, i, 1), y}, 0) - 1.0f);
    },
};

std::unique_ptr<EmptyTake> make_case(size_t k) {
  auto c = std::make_unique<EmptyTake>();  // (a Graph does not move)
  kCases[k](*c);
  Tensor z = c->g.input("z", DType::F32, {4});
  c->g.output("e", exp(z));
  return c;
}

TensorMap inputs_for(const Graph& g, int64_t n, std::vector<int64_t> i) {
  ir::SymbolBindings sizes{{"N", n}, {"M", static_cast<int64_t>(i.size())}};
  TensorMap inputs = testing::random_inputs(g.ir(), sizes, 7);
  inputs["i"] = indices(std::move(i));
  return inputs;
}

// The error for index i[...] = `bad`.
std::string error_text(const EmptyTake& c, int64_t bad) {
  return "test_empty_take.cpp:" + std::to_string(c.line) + ": error: take: index " + std::to_string(bad * c.scale) +
         " is out of range for axis 1 of size 3";
}

}  // namespace

TEST_CASE("a take with an empty result checks every index on the CPU", "[empty_take][cpu][errors]") {
  for (size_t k = 0; k < kCases.size(); ++k) {
    std::unique_ptr<EmptyTake> made = make_case(k);
    EmptyTake& c = *made;
    INFO(c.what);
    runtime::Executable exe = compile(c.g);
    CHECK(exe.compiled_kernel_count() == static_cast<int>(exe.program().kernels.size()));
    TensorMap bad = inputs_for(c.g, 0, {0, 3});
    CHECK_THROWS_WITH(ir::interpret(c.g.ir(), bad), Catch::EndsWith(error_text(c, 3)));
    TensorMap outputs = exe.run(inputs_for(c.g, 0, {0, 1}));
    outputs.at("e").set_f64(0, 42.0);
    CHECK_THROWS_WITH(exe.run(bad, outputs), Catch::EndsWith(error_text(c, 3)));
    CHECK(outputs.at("e").get_f64(0) == 42.0);
    // Good indices (negative ones too), empty and not: the interpreter's results.
    for (int64_t n : {0, 1, 7, 1023}) {
      INFO("N = " << n);
      TensorMap good = inputs_for(c.g, n, {0, 1, -1});
      CHECK(testing::compare_outputs(ir::interpret_with_bounds(c.g.ir(), good), exe.run(good)) == "");
    }
    // Out of range the other way, and no indices at all.
    TensorMap negative = inputs_for(c.g, 0, {-4});
    CHECK_THROWS_WITH(exe.run(negative), Catch::EndsWith(error_text(c, -4)));
    CHECK_NOTHROW(exe.run(inputs_for(c.g, 0, {})));
  }
}

TEST_CASE("a take with an empty result checks every index on the CUDA simulator", "[empty_take][cuda][sim][errors]") {
  for (size_t k = 0; k < kCases.size(); ++k) {
    std::unique_ptr<EmptyTake> made = make_case(k);
    EmptyTake& c = *made;
    INFO(c.what);
    std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(c.g, Target::cuda_sim());
    CHECK_THROWS_WITH(exe->run_host(inputs_for(c.g, 0, {0, 3})), Catch::EndsWith(error_text(c, 3)));
    CHECK_THROWS_WITH(exe->run_host(inputs_for(c.g, 0, {-4})), Catch::EndsWith(error_text(c, -4)));
    for (int64_t n : {0, 1, 7, 1023}) {
      INFO("N = " << n);
      TensorMap good = inputs_for(c.g, n, {0, 1, -1});
      CHECK(testing::compare_outputs(ir::interpret_with_bounds(c.g.ir(), good), exe->run_host(good)) == "");
    }
    CHECK_NOTHROW(exe->run_host(inputs_for(c.g, 0, {})));
  }
}

TEST_CASE("take_along_axis with an empty result checks only the indices it reads, everywhere", "[empty_take][errors]") {
  // NumPy 1.24 returns the empty result too (a DeprecationWarning says it may raise some day).
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), 3});
  Tensor j = g.input("j", DType::I64, {1, 1});
  g.output("t", take_along_axis(x, j, 1) * 2.0f);
  TensorMap inputs = testing::random_inputs(g.ir(), {{"N", 0}}, 3);
  inputs.at("j").set_i64(0, 5);
  CHECK(ir::interpret(g.ir(), inputs).at("t").shape == ir::ConcreteShape{0, 1});
  CHECK(compile(g).run(inputs).at("t").shape == ir::ConcreteShape{0, 1});
  CHECK(compile_cuda(g, Target::cuda_sim())->run_host(inputs).at("t").shape == ir::ConcreteShape{0, 1});
  inputs = testing::random_inputs(g.ir(), {{"N", 2}}, 3);
  inputs.at("j").set_i64(0, 5);
  CHECK_THROWS_WITH(compile(g).run(inputs), Catch::Contains("take_along_axis: index 5 is out of range"));
}

TEST_CASE("a take read by another take is stored first, so each of its indices is checked", "[empty_take][fusion][errors]") {
  // Fused, the outer take would load (and check) only the inner take's elements it names.
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor a = g.input("a", DType::I64, {sym("K")}), b = g.input("b", DType::I64, {sym("L")});
  int line = __LINE__ + 1;
  g.output("y", take(exp(take(x, a)), b) + 1.0f);
  CHECK(passes::run_pipeline(g.ir()).program.kernels.size() == 2);
  TensorMap inputs = testing::random_inputs(g.ir(), {{"N", 3}, {"K", 2}, {"L", 1}}, 5);
  inputs["a"] = indices({0, 7});
  inputs["b"] = indices({0});
  std::string want = "test_empty_take.cpp:" + std::to_string(line) + ": error: take: index 7 is out of range for axis 0 of size 3";
  CHECK_THROWS_WITH(ir::interpret(g.ir(), inputs), Catch::EndsWith(want));
  CHECK_THROWS_WITH(compile(g).run(inputs), Catch::EndsWith(want));
  CHECK_THROWS_WITH(compile_cuda(g, Target::cuda_sim())->run_host(inputs), Catch::EndsWith(want));
  inputs["a"] = indices({0, -1});
  ir::ValuesAndBounds expected = ir::interpret_with_bounds(g.ir(), inputs);
  CHECK(testing::compare_outputs(expected, compile(g).run(inputs)) == "");
  CHECK(testing::compare_outputs(expected, compile_cuda(g, Target::cuda_sim())->run_host(inputs)) == "");
}

TEST_CASE("kernels with takes and no work at all run on every loop form", "[empty_take][cpu][sim]") {
  // N = 0: each kernel below has no work; the CPU still calls it once to check its empty takes.
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), 3}), w = g.input("w", DType::F32, {3, sym("M")});
  Tensor b = g.input("b", DType::F32, {5}), i = g.input("i", DType::I64, {sym("M")});
  Tensor j = g.input("j", DType::I64, {2});
  g.output("epilogue", matmul(x, w) + take(b, i));      // a matmul with a take in its epilogue
  Tensor t = take(x, j, 1);
  g.output("rows", exp(t - max(t, {1}, true)));          // a row-wise kernel
  g.output("columns", sum(take(x, j, 1) * 2.0f, 0));     // a reduction over the empty axis
  g.output("transposed", transpose(take(x, j, 1)) + 1.0f);
  for (int64_t n : {0, 1, 7}) {
    INFO("N = " << n);
    TensorMap inputs = testing::random_inputs(g.ir(), {{"N", n}, {"M", 4}}, 9);
    inputs["i"] = indices({0, -1, 4, 2});
    inputs["j"] = indices({2, -3});
    ir::ValuesAndBounds expected = ir::interpret_with_bounds(g.ir(), inputs);
    CHECK(testing::compare_outputs(expected, compile(g).run(inputs)) == "");
    CHECK(testing::compare_outputs(expected, compile_cuda(g, Target::cuda_sim())->run_host(inputs)) == "");
    inputs["j"] = indices({2, 3});
    CHECK_THROWS_WITH(compile(g).run(inputs), Catch::Contains("take: index 3 is out of range for axis 1 of size 3"));
  }
}
