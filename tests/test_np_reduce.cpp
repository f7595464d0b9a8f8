// argmax/argmin, cumsum/cumprod and clip (issue 16, value-index reductions and scans): the CPU
// backend and the CUDA simulator against the interpreter at every dtype and odd sizes (1, 7,
// 1023), the fusion claims as kernel counts, the PTX through ptxas, gradients against finite
// differences, and the errors. The NumPy semantics themselves: tests/golden/test_np_reduce.py.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "codegen/cpu_codegen.h"
#include "codegen/cuda_codegen.h"
#include "frontends/api.h"
#include "frontends/compile.h"
#include "frontends/expr/compile.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "passes/autodiff.h"
#include "passes/pipeline.h"
#include "tests/examples.h"
#include "tests/ptxas.h"
#include "tests/random_graph.h"

using namespace fuse;

namespace {

// The CUDA tests run on the simulator with every check on: set before the driver loads.
const bool kSimulator = [] {
  setenv("FUSE_CUDA_SIM", "1", 1);
  return setenv("FUSE_CUDA_SIM_CHECKS", "all", 1) == 0;
}();

const ir::DType kDTypes[] = {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool};

// Row counts 1, 7 and 1023 with a row length of 7 and 1023 (the sizes of the issue).
std::vector<ir::SymbolBindings> odd_sizes() {
  return {{{"N", 1}, {"M", 7}}, {{"N", 7}, {"M", 1}}, {{"N", 7}, {"M", 1023}}, {{"N", 1023}, {"M", 7}}};
}

// CPU against the interpreter (integers exactly; floats with the scans' rounding room).
void check_cpu(const Graph& g, double rtol = 1e-5, double atol = 1e-5) {
  runtime::Executable exe = compile(g);
  INFO(ir::print_program(exe.program()));
  int compiles = 0;
  for (const ir::Kernel& k : exe.program().kernels) compiles += codegen::cpu_compiles(k);
  CHECK(exe.compiled_kernel_count() == compiles);
  uint64_t seed = 3;
  for (const ir::SymbolBindings& s : odd_sizes()) {
    INFO("N=" << s.at("N") << " M=" << s.at("M"));
    ir::TensorMap inputs = testing::random_inputs(g.ir(), s, seed++);
    CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe.run(inputs), rtol, atol) == "");
  }
}

// The CUDA simulator against the interpreter.
void check_sim(const Graph& g, double rtol = 1e-5, double atol = 1e-5) {
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  uint64_t seed = 5;
  for (const ir::SymbolBindings& s : odd_sizes()) {
    INFO("N=" << s.at("N") << " M=" << s.at("M"));
    ir::TensorMap inputs = testing::random_inputs(g.ir(), s, seed++);
    CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe->run_host(inputs), rtol, atol) == "");
  }
}

// The CUDA module passes ptxas (skipped with a warning when there is none).
void check_ptxas(const Graph& g) {
  passes::PipelineOptions options;
  options.target = ir::Target::cuda(0, 80);
  codegen::CudaModule m = codegen::compile_cuda(passes::run_pipeline(g.ir(), options).program);
  std::string errors = testing::ptxas_errors(m.ptx, "sm_80");
  INFO(errors);
  CHECK(errors.empty());
}

size_t kernel_count(const Graph& g) { return passes::run_pipeline(g.ir()).program.kernels.size(); }

void arg_graph(Graph& g, DType t) {
  Tensor x = g.input("x", t, {sym("N"), sym("M")});
  g.output("row_max", argmax(x, 1));
  g.output("col_min", argmin(x, 0, true));
  g.output("flat_max", argmax(x));
  g.output("flat_min", argmin(x, Axes{-1, 0}, true));
  if (t != DType::Bool) g.output("of_expression", argmax(x * x - x, -1));
}

void scan_graph(Graph& g, DType t) {
  Tensor x = g.input("x", t, {sym("N"), sym("M")});
  g.output("rows", cumsum(x, 1));
  g.output("cols", cumsum(x, 0));
  g.output("flat", cumsum(x));
  if (t == DType::F32 || t == DType::F64) {
    g.output("prologue", cumsum(x * 0.5 + 1.0, -1));
    g.output("prod", cumprod(x * 0.01 + 1.0, 1));
  } else {
    g.output("prod", cumprod(x, 0));
  }
}

void clip_graph(Graph& g, DType t) {
  Tensor x = g.input("x", t, {sym("N"), sym("M")});
  Tensor lo = g.input("lo", t, {sym("M")});
  if (t == DType::Bool) {
    g.output("y", clip(x, lo, true));
  } else {
    g.output("y", clip(x, lo, 1));
    g.output("z", clip(x, -1, 0.5));
  }
}

}  // namespace

// ---------------------------------------------------------------- CPU

TEST_CASE("argmax and argmin on the CPU match the interpreter at every dtype", "[np_reduce][cpu]") {
  for (DType t : kDTypes) {
    INFO(ir::dtype_name(t));
    {
      Graph g;
      arg_graph(g, t);
      check_cpu(g);
    }
  }
}

TEST_CASE("argmax and argmin pick the first NaN and the first of ties", "[np_reduce][cpu]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Graph g;
  Tensor x = g.input("x", DType::F32, {3, 4});
  g.output("mx", argmax(x, 1));
  g.output("mn", argmin(x, 1));
  ir::TensorMap in = {{"x", ir::HostArray::from<double>({3, 4}, {1, nan, 5, nan, 2, 2, 0, 0, 3, 1, 3, 1}).cast(DType::F32)}};
  ir::TensorMap want = ir::interpret(g.ir(), in);
  CHECK(want.at("mx").to_doubles() == std::vector<double>{1, 0, 0});
  CHECK(want.at("mn").to_doubles() == std::vector<double>{1, 2, 1});
  CHECK(testing::compare_outputs(want, compile(g).run(in), 0, 0) == "");
  CHECK(testing::compare_outputs(want, compile_cuda(g, Target::cuda_sim())->run_host(in), 0, 0) == "");
}

TEST_CASE("cumsum and cumprod on the CPU match the interpreter at every dtype", "[np_reduce][cpu]") {
  for (DType t : kDTypes) {
    INFO(ir::dtype_name(t));
    {
      Graph g;
      scan_graph(g, t);
      check_cpu(g);
    }
  }
}

TEST_CASE("a long 1-D cumsum on the CPU matches the interpreter", "[np_reduce][cpu]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  g.output("y", cumsum(x));
  runtime::Executable exe = compile(g);
  for (int64_t n : {1, 7, 1023, 100003}) {
    INFO("N=" << n);
    ir::TensorMap in = testing::random_inputs(g.ir(), {{"N", n}}, 11, false);
    CHECK(testing::compare_outputs(ir::interpret(g.ir(), in), exe.run(in), 1e-6, 1e-6) == "");
  }
}

TEST_CASE("clip on the CPU matches the interpreter at every dtype", "[np_reduce][cpu]") {
  for (DType t : kDTypes) {
    INFO(ir::dtype_name(t));
    {
      Graph g;
      clip_graph(g, t);
      check_cpu(g, 0, 0);
    }
  }
}

// ---------------------------------------------------------------- fusion

TEST_CASE("argmax fuses like a reduction and scans take elementwise prologues and epilogues", "[np_reduce][fusion]") {
  Graph a;
  Tensor x = a.input("x", DType::F32, {sym("N"), sym("M")});
  a.output("i", argmax(exp(x) * 2.0 - x, 1));
  CHECK(kernel_count(a) == 1);  // the producer chain is the reduction's prologue

  Graph rows;
  Tensor y = rows.input("y", DType::F32, {sym("N"), sym("M")});
  rows.output("m", fuse::max(y, 1));
  rows.output("i", argmax(y, 1));
  rows.output("s", sum(y, 1));
  CHECK(kernel_count(rows) == 1);  // reductions of the same rows share one kernel

  Graph scan;
  Tensor z = scan.input("z", DType::F32, {sym("N"), sym("M")});
  scan.output("c", cumsum(exp(z) * 0.5, 1));
  passes::PipelineResult r = passes::run_pipeline(scan.ir());
  REQUIRE(r.program.kernels.size() == 1);
  CHECK(r.program.kernels[0].kind == ir::KernelKind::Scan);
  CHECK(passes::explain_fusion(r.graph, r.partition).find("a scan along axis 1") != std::string::npos);

  Graph after;
  Tensor w = after.input("w", DType::F32, {sym("N")});
  after.output("c", cumsum(w) * 2.0);
  CHECK(kernel_count(after) == 1);  // np-scan: the consumer is the scan's epilogue (tests/test_scan.cpp)
}

// ---------------------------------------------------------------- CUDA

TEST_CASE("argmax, argmin, scans and clip compile to PTX that ptxas accepts", "[np_reduce][cuda]") {
  for (DType t : {DType::F32, DType::I64}) {
    INFO(ir::dtype_name(t));
    {
      Graph g;
      arg_graph(g, t);
      check_ptxas(g);
    }
    {
      Graph g;
      scan_graph(g, t);
      check_ptxas(g);
    }
    {
      Graph g;
      clip_graph(g, t);
      check_ptxas(g);
    }
  }
}

TEST_CASE("argmax, argmin, scans and clip run on the CUDA simulator", "[np_reduce][cuda][sim]") {
  REQUIRE(kSimulator);
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::Bool}) {
    INFO(ir::dtype_name(t));
    {
      Graph g;
      arg_graph(g, t);
      check_sim(g);
    }
    {
      Graph g;
      scan_graph(g, t);
      check_sim(g);
    }
    {
      Graph g;
      clip_graph(g, t);
      check_sim(g, 0, 0);
    }
  }
}

// ---------------------------------------------------------------- autodiff

namespace {

double weighted_sum(const ir::Graph& g, const ir::TensorMap& inputs, const ir::HostArray& dy) {
  ir::HostArray y = ir::interpret(g, inputs).at("y");
  double s = 0;
  for (int64_t i = 0; i < y.size(); ++i) s += y.get_f64(i) * dy.get_f64(i);
  return s;
}

// The VJP of output "y" with respect to "x" against central finite differences of sum(y * dy).
void check_vjp(const Graph& g, const ir::HostArray& x) {
  ir::TensorMap inputs = {{"x", x}};
  ir::HostArray y = ir::interpret(g.ir(), inputs).at("y");
  ir::HostArray dy(DType::F64, y.shape);
  for (int64_t i = 0; i < dy.size(); ++i) dy.set_f64(i, std::sin(1.0 + 0.7 * static_cast<double>(i)));
  ir::Graph with_dy = g.ir();
  ir::add_input(with_dy, "dy", DType::F64, g.ir().node(g.ir().outputs[0].node).shape);
  ir::Graph gg = passes::grad(with_dy, "y", {"x"}, {.cotangent = "dy"});
  ir::TensorMap all = inputs;
  all["dy"] = dy;
  ir::HostArray grad = ir::interpret(gg, all).at("grad_x");
  const double h = 1e-6;
  for (int64_t i = 0; i < x.size(); ++i) {
    ir::TensorMap plus = inputs, minus = inputs;
    plus["x"].set_f64(i, x.get_f64(i) + h);
    minus["x"].set_f64(i, x.get_f64(i) - h);
    double fd = (weighted_sum(g.ir(), plus, dy) - weighted_sum(g.ir(), minus, dy)) / (2 * h);
    INFO("d/dx[" << i << "]");
    CHECK(grad.get_f64(i) == Approx(fd).epsilon(1e-5).margin(1e-6));
  }
}

ir::HostArray sample_x() {
  return ir::HostArray::from<double>({2, 3, 4}, {0.5,  -1.25, 0.75, 1.5,  -0.6, 0.9,  1.1,  -1.3, 0.7, 0.8,  -0.55, 1.2,
                                                 -0.65, 1.35,  0.95, -1.1, 0.6,  -0.7, 1.45, 0.85, -1, 1.05, 0.52,  -0.9});
}

}  // namespace

TEST_CASE("grad of cumsum, cumprod and clip matches finite differences", "[np_reduce][autodiff]") {
  for (int axis : {0, 1, -1}) {
    INFO("axis " << axis);
    Graph s;
    s.output("y", cumsum(s.input("x", DType::F64, {2, 3, 4}), axis) * 1.5);
    check_vjp(s, sample_x());
    Graph p;
    p.output("y", cumprod(p.input("x", DType::F64, {2, 3, 4}), axis));
    check_vjp(p, sample_x());
  }
  Graph flat;
  flat.output("y", cumsum(flat.input("x", DType::F64, {2, 3, 4})));
  check_vjp(flat, sample_x());
  Graph c;
  c.output("y", clip(c.input("x", DType::F64, {2, 3, 4}), -1.0, 1.0) * 2.0);
  check_vjp(c, sample_x());  // no element sits on a bound
}

TEST_CASE("argmax carries no gradient", "[np_reduce][autodiff]") {
  Graph g;
  Tensor x = g.input("x", DType::F64, {2, 3});
  g.output("y", sum(x * cast(argmax(x, 1, true), DType::F64)));
  ir::HostArray xs = ir::HostArray::from<double>({2, 3}, {1, 3, 2, 5, 4, 6});
  // d/dx sum(x * argmax) treats the index as a constant: the gradient is the index itself.
  CHECK(ir::interpret(passes::grad(g.ir(), "y", {"x"}), {{"x", xs}}).at("grad_x").to_doubles() ==
        std::vector<double>{1, 1, 1, 2, 2, 2});
}

// ---------------------------------------------------------------- errors

TEST_CASE("misused argmax and scans give clear errors", "[np_reduce][errors]") {
  using Catch::Matchers::Contains;
  Graph g;
  Tensor empty = g.input("e", DType::F32, {0, 3});
  Tensor x = g.input("x", DType::F32, {2, 3});
  CHECK_THROWS_WITH(argmax(empty, 0), Contains("argmax: attempt to get argmax of an empty sequence"));
  CHECK_THROWS_WITH(cumsum(x, 2), Contains("cumsum: axis 2 is out of range for shape [2, 3]"));
  CHECK_THROWS_WITH(argmin(x, 5), Contains("argmin: axis 5 is out of range"));
  // A symbolic dim that is 0 at run time: the interpreter (and every backend's check) says so.
  Graph s;
  s.output("i", argmax(s.input("x", DType::F32, {sym("N")})));
  CHECK_THROWS_WITH(ir::interpret(s.ir(), {{"x", ir::HostArray(DType::F32, {0})}}), Contains("empty sequence"));
}

TEST_CASE("argmax over an axis that is empty only at run time fails in every backend", "[np_reduce][errors]") {
  using Catch::Matchers::Contains;
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), sym("M")});
  g.output("i", argmax(x, 1));
  g.output("j", argmin(x, 0, /*keepdims=*/true));
  runtime::Executable cpu = compile(g);
  std::unique_ptr<runtime::CudaExecutable> sim = compile_cuda(g, Target::cuda_sim());
  ir::TensorMap empty_rows{{"x", ir::HostArray(DType::F32, {3, 0})}};
  const char* message = "argmax: attempt to get argmax of an empty sequence";
  CHECK_THROWS_WITH(ir::interpret(g.ir(), empty_rows), Contains(message));
  CHECK_THROWS_WITH(cpu.run(empty_rows), Contains(message));
  CHECK_THROWS_WITH(sim->run_host(empty_rows), Contains(message));
  // argmin over axis 0 of [0, M]: the same error once M > 0.
  ir::TensorMap no_rows{{"x", ir::HostArray(DType::F32, {0, 4})}};
  CHECK_THROWS_WITH(cpu.run(no_rows), Contains("argmin: attempt to get argmin of an empty sequence"));
  // NumPy allows it when the result is empty as well: [0, 0] gives two empty results.
  Graph h;
  h.output("i", argmax(h.input("x", DType::F32, {sym("N"), sym("M")}), 1));
  ir::TensorMap both_empty{{"x", ir::HostArray(DType::F32, {0, 0})}};
  ir::TensorMap result = compile(h).run(both_empty);
  CHECK(result.at("i").shape == std::vector<int64_t>{0});
  CHECK(testing::compare_outputs(ir::interpret(h.ir(), both_empty), result, 0, 0) == "");
}

TEST_CASE("misused argmax, scans and clip in .expr give file:line:col errors", "[np_reduce][errors]") {
  const std::string source =
      "input x: f32[N, M]\n"
      "output a = cumsum(x, axis=[0, 1])\n"
      "output b = argmax(x, axis=4)\n"
      "output c = clip(x, 0.0)\n";
  expr::CompileResult r = expr::compile_expr(source, "bad.expr");
  std::string text = expr::format_diagnostics(r.errors, source);
  INFO(text);
  CHECK_FALSE(r.graph);
  CHECK(text.find("bad.expr:2:27: error: 'axis' must be an integer") != std::string::npos);
  CHECK(text.find("bad.expr:3:12: error: argmax: axis 4 is out of range for shape [N, M] (rank 2)") != std::string::npos);
  CHECK(text.find("bad.expr:4:") != std::string::npos);
  CHECK(text.find("^") != std::string::npos);
}

TEST_CASE("the running mean and attention examples fuse as documented", "[np_reduce][fusion][examples]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(FUSE_SOURCE_DIR) / "examples";
  // attention: the masked scores and their softmax are one row-wise kernel, with q @ k.T and the
  // product with v the two matmuls (two matmuls never fuse).
  ir::Program attention = passes::run_pipeline(testing::compile_example(dir / "attention.expr")).program;
  CHECK(attention.kernels.size() == 3);
  // transformer_block (issue 15): 11 kernels, one per matmul (8), the two layernorms and the
  // softmax as row-wise kernels; k.T is read by the scores' packing, not copied by a kernel.
  ir::Program transformer = passes::run_pipeline(testing::compile_example(dir / "transformer_block.expr")).program;
  CHECK(transformer.kernels.size() == 11);
  int matmuls = 0, rowwise = 0;
  for (const ir::Kernel& k : transformer.kernels) {
    matmuls += k.kind == ir::KernelKind::Matmul;
    rowwise += k.kind == ir::KernelKind::RowWise;
  }
  CHECK(matmuls == 8);
  CHECK(rowwise == 3);
  // running_mean: a scan with its division as its epilogue per output (np-scan; 4 kernels before).
  ir::Program running = passes::run_pipeline(testing::compile_example(dir / "running_mean.expr")).program;
  CHECK(running.kernels.size() == 2);
  int scans = 0;
  for (const ir::Kernel& k : running.kernels) scans += k.kind == ir::KernelKind::Scan;
  CHECK(scans == 2);
}
