// np-views (issue 16): basic indexing (Slice views), concatenate, stack and pad. Compiled code
// against the interpreter across dtypes and sizes 1, 7 and 1023 on the CPU and on the CUDA
// simulator (checks on), the fusion claims as kernel counts, PTX through ptxas, the run-time
// index checks, and the gradients against finite differences. The values against NumPy are
// tests/golden/test_views.py.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <random>

#include "codegen/cuda_codegen.h"
#include "frontends/api.h"
#include "frontends/compile.h"
#include "frontends/expr/compile.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "passes/autodiff.h"
#include "passes/pipeline.h"
#include "runtime/bundle.h"
#include "runtime/cuda_driver.h"
#include "runtime/cuda_executable.h"
#include "tests/examples.h"
#include "tests/ptxas.h"
#include "tests/random_graph.h"

using namespace fuse;
using Catch::Matchers::Contains;

namespace {

// The CUDA cases run on the simulator with every check on: set before the driver loads.
const bool kSimulator = [] {
  setenv("FUSE_CUDA_SIM", "1", 1);
  return setenv("FUSE_CUDA_SIM_CHECKS", "all", 1) == 0;
}();

ir::Graph expr_graph(const std::string& source) { return testing::compile_source(source, "views.expr"); }

std::string compile_error(const std::string& source) {
  expr::CompileResult r = expr::compile_expr(source, "views.expr");
  REQUIRE_FALSE(r.graph);
  return expr::format_diagnostics(r.errors, source);
}

size_t kernel_count(const ir::Graph& g) { return passes::run_pipeline(g).program.kernels.size(); }

// Programs over one input x of dtype DT and shape [N] or [N, M] (each a case of the tests below).
const std::vector<std::string> kPrograms = {
    "input x: DT[N]\noutput y = (x[:-2] + x[1:-1] + x[2:]) * x[::-1][1:-1]\n",
    "input x: DT[N]\noutput y = x[1::2] * x[1::2][::-1] + x[:N // 2][::-1]\n",
    "input x: DT[N]\noutput y = x[-1] + x[::-3] * x[0]\n",
    "input x: DT[N, M]\noutput y = x[None, ::-1, 1:] + x[0, None, None, -1]\n",
    "input x: DT[N, M]\noutput y = x[..., ::-2] * 2\n",
    "input x: DT[N]\noutput y = concatenate([x, x[::-1] * 2, x[1:]]) + 1\n",
    "input x: DT[N, M]\noutput y = concatenate([x, x * 3], axis=1) - 1\n",
    "input x: DT[N, M]\noutput y = stack([x, x + 1, x.T[:M, :N].T], axis=1)\n",
    "input x: DT[N]\noutput y = pad(x, [2, 3], value=7) * 2\n",
    "input x: DT[N, M]\noutput y = pad(x, [[1, 0], [2, 5]], mode=\"edge\") + 1\n",
    "input x: DT[N, M]\noutput y = pad(x, [[3, 2], [0, 4]], mode=\"reflect\") + 1\n",
    "input x: DT[N]\noutput y = sum(pad(x[1:], [1, 1], mode=\"edge\") * 2)\n",
};

std::string with_dtype(std::string source, const std::string& dtype) {
  for (size_t at = source.find("DT["); at != std::string::npos; at = source.find("DT[", at)) source.replace(at, 2, dtype);
  return source;
}

std::vector<ir::SymbolBindings> sizes_for(const ir::Graph& g) {
  std::vector<ir::SymbolBindings> sets;
  bool two = g.find_input("x")->shape.size() == 2;
  for (int64_t n : {1, 7, 1023}) {
    if (two) sets.push_back({{"N", n}, {"M", n == 1023 ? 5 : n}});
    else sets.push_back({{"N", n}});
    if (two && n == 1023) sets.push_back({{"N", 3}, {"M", 1023}});
  }
  return sets;
}

}  // namespace

TEST_CASE("the stencil is one kernel reading x in place", "[views][fusion]") {
  ir::Graph g = expr_graph("input x: f32[N]\noutput y = (x[:-2] + x[1:-1] + x[2:]) / 3\n");
  passes::PipelineResult r = passes::run_pipeline(g);
  REQUIRE(r.program.kernels.size() == 1);
  const ir::Kernel& k = r.program.kernels[0];
  REQUIRE(k.inputs.size() == 1);
  CHECK(r.program.buffers[k.inputs[0]].role == ir::BufferRole::Input);
  CHECK(ir::shape_str(g.node(g.outputs[0].node).shape) == "[max(N - 2, 0)]");
}

TEST_CASE("slices, pad, concatenate and stack fuse into their readers", "[views][fusion]") {
  CHECK(kernel_count(expr_graph("input x: f32[N]\ninput y: f32[N]\noutput z = x[::-1] * y\n")) == 1);
  CHECK(kernel_count(expr_graph("input x: f32[N]\noutput z = pad(x * 2, [1, 1], mode=\"reflect\") + 1\n")) == 1);
  CHECK(kernel_count(expr_graph("input a: f32[N]\ninput b: f32[M]\noutput z = exp(concatenate([a * 2, b]))\n")) == 1);
  CHECK(kernel_count(expr_graph("input a: f32[N]\noutput z = stack([a, -a], axis=1) * 2\n")) == 1);
  CHECK(kernel_count(expr_graph("input x: f32[N, M]\noutput z = sum(x[1:, ::2], axis=1)\n")) == 1);
  CHECK(kernel_count(expr_graph("input x: f32[N]\noutput z = sum(pad(x, [2, 2], value=1))\n")) == 1);
}

TEST_CASE("views on the CPU match the interpreter across dtypes and sizes", "[views][cpu]") {
  for (const std::string& program : kPrograms)
    for (const char* dtype : {"f32", "f64", "i32", "i64"}) {
      ir::Graph g = expr_graph(with_dtype(program, dtype));
      runtime::Executable exe = compile(g);
      uint64_t seed = 1;
      for (const ir::SymbolBindings& sizes : sizes_for(g)) {
        INFO(with_dtype(program, dtype) << " at N=" << sizes.at("N"));
        ir::TensorMap inputs = testing::random_inputs(g, sizes, seed++);
        ir::ValuesAndBounds expected;
        try {
          expected = ir::interpret_with_bounds(g, inputs);
        } catch (const ir::Error& e) {
          CHECK_THROWS_WITH(exe.run(inputs), Contains("out of range") || Contains("cannot extend"));  // sizes it rejects
          continue;
        }
        CHECK(testing::compare_outputs(expected, exe.run(inputs)) == "");
      }
    }
}

TEST_CASE("bool views on the CPU match the interpreter", "[views][cpu]") {
  ir::Graph g = expr_graph(
      "input x: bool[N]\noutput y = concatenate([x[::-1], pad(x, [1, 2], value=true), pad(x, 1, mode=\"edge\")])\n");
  runtime::Executable exe = compile(g);
  for (int64_t n : {1, 7, 1023}) {
    ir::TensorMap inputs = testing::random_inputs(g, {{"N", n}}, 3);
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g, inputs), exe.run(inputs)) == "");
  }
}

TEST_CASE("an integer index out of range of a symbolic size fails before anything runs", "[views][errors]") {
  ir::Graph g = expr_graph("input x: f32[N]\noutput y = x * 2\noutput z = x[5] + x\n");
  runtime::Executable exe = compile(g);
  ir::TensorMap ok = testing::random_inputs(g, {{"N", 6}}, 1);
  CHECK_NOTHROW(exe.run(ok));
  ir::TensorMap small = testing::random_inputs(g, {{"N", 5}}, 1);
  CHECK_THROWS_WITH(exe.run(small), Contains("views.expr:3:") && Contains("index 5 is out of range for axis 0 of size N (N = 5)"));
  CHECK_THROWS_WITH(ir::interpret(g, small), Contains("index 5 is out of range"));
  ir::Graph neg = expr_graph("input x: f32[N]\noutput y = x[-3]\n");
  CHECK_THROWS_WITH(compile(neg).run(testing::random_inputs(neg, {{"N", 2}}, 1)), Contains("(N = 2)"));
  CHECK_NOTHROW(compile(neg).run(testing::random_inputs(neg, {{"N", 3}}, 1)));
}

TEST_CASE("misused indexing and views give clear compile errors", "[views][errors]") {
  CHECK_THAT(compile_error("input x: f32[4]\noutput y = x[4]\n"),
             Contains("views.expr:2:13: error:") && Contains("index 4 is out of range for axis 0 of size 4"));
  CHECK_THAT(compile_error("input x: f32[N]\noutput y = x[1, 2]\n"), Contains("too many indices"));
  CHECK_THAT(compile_error("input x: f32[N]\noutput y = x[::0]\n"), Contains("slice step cannot be zero"));
  CHECK_THAT(compile_error("input x: f32[N]\noutput y = x[x]\n"), Contains("not a tensor"));
  CHECK_THAT(compile_error("input x: f32[N]\noutput y = x[]\n"), Contains("empty index"));
  CHECK_THAT(compile_error("input x: f32[N]\noutput y = x[1.5]\n"), Contains("must be an integer"));
  CHECK_THAT(compile_error("input x: f32[N]\noutput y = pad(x, 1, mode=\"wrap\")\n"), Contains("\"wrap\""));
  CHECK_THAT(compile_error("input x: f32[N]\noutput y = pad(x, 1, mode=edge)\n"), Contains("'mode' must be"));
  CHECK_THAT(compile_error("input x: f32[0]\noutput y = pad(x, 1, mode=\"edge\")\n"), Contains("cannot extend axis 0"));
  CHECK_THAT(compile_error("input x: f32[N]\noutput y = pad(x, [[1, 2], [3, 4]])\n"), Contains("2 (before, after) pairs"));
  CHECK_THAT(compile_error("input a: f32[N]\ninput b: i32[N]\noutput y = concatenate([a, b])\n"), Contains("dtypes f32 and i32"));
  CHECK_THAT(compile_error("input a: f32[N]\noutput y = concatenate(a)\n"), Contains("list of arrays"));
  CHECK_THAT(compile_error("input x: f32[N]\noutput y = x[\"a\"]\n"), Contains("string"));
  CHECK_THAT(compile_error("input x: f32[N]\nfn f(v) = v[0]\noutput y = f(x)\n"), Contains("fn bodies are scalar"));
}

TEST_CASE("the C++ API indexes, pads, concatenates and stacks", "[views][api]") {
  Graph g;
  Dim n = sym("N");
  Tensor x = g.input("x", DType::F64, {n});
  Tensor inner = index(x, {slice(1, -1)});
  Tensor rev = index(x, {slice({}, {}, -1), new_axis});
  g.output("a", inner + index(x, {slice(2)}) + index(x, {slice({}, -2)}));
  g.output("b", concatenate({index(rev, {ellipsis, 0}), pad(x, {{1, 2}}, ir::PadMode::Edge)}));
  g.output("c", stack({x, x * 2}, -1));
  g.output("d", index(x, {slice({}, floor_div(n, 2))}));
  runtime::Executable exe = compile(g);
  for (int64_t size : {1, 7, 1023}) {
    ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"N", size}}, 5);
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe.run(inputs)) == "");
  }
}

TEST_CASE("views compile to PTX that ptxas accepts and run on the CUDA simulator", "[views][cuda][sim]") {
  for (const std::string& program : kPrograms)
    for (const char* dtype : {"f32", "i64"}) {
      std::string source = with_dtype(program, dtype);
      INFO(source);
      ir::Graph g = expr_graph(source);
      passes::PipelineOptions options;
      options.target = ir::Target::cuda(0, 80);
      codegen::CudaModule m = codegen::compile_cuda(passes::run_pipeline(g, options).program);
      CHECK(testing::ptxas_errors(m.ptx, "sm_80") == "");
      std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
      uint64_t seed = 1;
      for (const ir::SymbolBindings& sizes : sizes_for(g)) {
        INFO("N=" << sizes.at("N"));
        ir::TensorMap inputs = testing::random_inputs(g, sizes, seed++);
        ir::ValuesAndBounds expected;
        try {
          expected = ir::interpret_with_bounds(g, inputs);
        } catch (const ir::Error&) {
          CHECK_THROWS_WITH(exe->run_host(inputs), Contains("out of range") || Contains("cannot extend"));
          continue;
        }
        CHECK(testing::compare_outputs(expected, exe->run_host(inputs)) == "");
      }
    }
}

namespace {

ir::HostArray random_f64(ir::ConcreteShape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  ir::HostArray a(DType::F64, std::move(shape));
  for (int64_t i = 0; i < a.size(); ++i) a.set_f64(i, u(rng));
  return a;
}

// sum(y * dy) against central differences, element by element of x.
void check_grad(const std::string& source, const ir::ConcreteShape& shape) {
  INFO(source);
  ir::Graph g = expr_graph(source);
  ir::TensorMap inputs{{"x", random_f64(shape, 1)}};
  ir::HostArray y = ir::interpret(g, inputs).at("y");
  ir::HostArray dy = random_f64(y.shape, 2);
  ir::Graph with_dy = g;
  ir::add_input(with_dy, "dy", DType::F64, g.node(g.outputs[0].node).shape);
  ir::Graph gg = passes::grad(with_dy, "y", {"x"}, {.cotangent = "dy"});
  ir::TensorMap all = inputs;
  all["dy"] = dy;
  ir::HostArray grad = ir::interpret(gg, all).at("grad_x");
  REQUIRE(grad.shape == shape);
  auto weighted = [&](const ir::TensorMap& in) {
    ir::HostArray v = ir::interpret(g, in).at("y");
    double s = 0;
    for (int64_t i = 0; i < v.size(); ++i) s += v.get_f64(i) * dy.get_f64(i);
    return s;
  };
  const double h = 1e-6;
  for (int64_t i = 0; i < grad.size(); ++i) {
    ir::TensorMap plus = inputs, minus = inputs;
    plus["x"].set_f64(i, inputs.at("x").get_f64(i) + h);
    minus["x"].set_f64(i, inputs.at("x").get_f64(i) - h);
    INFO("d/dx[" << i << "]");
    CHECK(grad.get_f64(i) == Approx((weighted(plus) - weighted(minus)) / (2 * h)).margin(1e-6));
  }
}

}  // namespace

TEST_CASE("grad of slices, concatenate, stack and pad matches finite differences", "[views][autodiff]") {
  for (int64_t n : {1, 2, 7, 10}) {
    ir::ConcreteShape s{n};
    check_grad("input x: f64[N]\noutput y = x[1:-1] * x[2:] + x[:-2]\n", s);
    check_grad("input x: f64[N]\noutput y = x[::-1] * x\n", s);
    check_grad("input x: f64[N]\noutput y = x[::3] * 2\n", s);
    check_grad("input x: f64[N]\noutput y = x[-1::-2] * 2\n", s);
    check_grad("input x: f64[N]\noutput y = x[-2::-3] * x[-2::-3]\n", s);
    check_grad("input x: f64[N]\noutput y = x[5:] + 1\n", s);
    check_grad("input x: f64[N]\noutput y = concatenate([x * x, x[1:], x]) * 3\n", s);
    check_grad("input x: f64[N]\noutput y = stack([x, x * x], axis=1)\n", s);
    check_grad("input x: f64[N]\noutput y = pad(x * x, [2, 3], value=4)\n", s);
    check_grad("input x: f64[N]\noutput y = pad(x * x, [3, 1], mode=\"edge\")\n", s);
  }
  check_grad("input x: f64[N]\noutput y = x[0] * x[-1]\n", {4});
  check_grad("input x: f64[5]\noutput y = pad(x * x, [7, 2], mode=\"reflect\")\n", {5});
  check_grad("input x: f64[3, 4]\noutput y = pad(x, [[1, 2], [3, 0]], mode=\"reflect\") * pad(x, [[2, 1], [2, 1]], mode=\"edge\")\n",
             {3, 4});
  check_grad("input x: f64[N, M]\noutput y = x[None, 1:, ::-2] * 2\n", {3, 5});
}

TEST_CASE("a CUDA bundle keeps the run-time index checks", "[views][cuda][bundle]") {
  ir::Graph g = expr_graph("input x: f32[N]\noutput y = x[-4] * x\n");
  passes::PipelineOptions options;
  options.target = ir::Target::cuda(0, 80);
  ir::Program program = passes::run_pipeline(g, options).program;
  codegen::CudaModule m = codegen::compile_cuda(program);
  runtime::CudaProgram p = runtime::make_cuda_program(program, m.plan, m.ptx);
  REQUIRE(p.size_checks.size() == 1);
  std::string dir = std::string(FUSE_BINARY_DIR) + "/test_views_bundle";
  runtime::write_bundle(dir, p);
  runtime::CudaProgram back = runtime::read_bundle(dir);
  CHECK(back.size_checks == p.size_checks);
  CHECK_THROWS_WITH(runtime::bind_cuda_inputs(back, {{"x", {DType::F32, {3}}}}),
                    Contains("views.expr:2:") && Contains("index -4 is out of range for axis 0 of size N (N = 3)"));
  CHECK_NOTHROW(runtime::bind_cuda_inputs(back, {{"x", {DType::F32, {4}}}}));
}

TEST_CASE("a slice of a slice folds into one slice", "[views][simplify]") {
  ir::Graph g = expr_graph("input x: f32[N]\noutput y = x[::-1][1:][::2] * 2\n");
  passes::PipelineResult r = passes::run_pipeline(g);
  REQUIRE(r.program.kernels.size() == 1);
  int slices = 0;
  for (const ir::Node& n : r.program.kernels[0].body.nodes) slices += n.kind == ir::OpKind::Slice;
  CHECK(slices == 1);
  runtime::Executable exe = compile(g);
  for (int64_t n : {1, 2, 7, 1023}) {
    ir::TensorMap inputs = testing::random_inputs(g, {{"N", n}}, 9);
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g, inputs), exe.run(inputs)) == "");
  }
}
