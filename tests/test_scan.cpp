// Scans that scale (issue 16, np-scan): the CPU's chunked form for few long rows (three calls:
// chunk folds, carries, chunks rescanned from their carries), the scan epilogue (elementwise
// consumers fused after the scan), and both on the CUDA simulator and through ptxas. Compiled
// results are checked against the interpreter within the rounding model (ir/rounding_model.h:
// its scan bound holds for any order of the additions or products, chunked or not); integers
// exactly. CTest also runs the [cpu] cases with FUSE_NUM_THREADS=1 (no chunks: rows in order), 2
// and 7 (tests/CMakeLists.txt); the chunks are fixed per row, so 2 and 7 compute the same bits.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include "codegen/cuda_codegen.h"
#include "frontends/api.h"
#include "frontends/compile.h"
#include "ir/dot.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "ir/rounding_model.h"
#include "passes/fusion.h"
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

size_t kernel_count(const Graph& g) { return passes::run_pipeline(g.ir()).program.kernels.size(); }

// Scans along the last axis and along axis 0 of [R, N] / [N, R], cumsum and cumprod, each with
// an elementwise epilogue, and the plain scan stored too. Float products stay near 1 so that long
// rows neither overflow nor vanish.
void long_scan_graph(Graph& g, DType t) {
  Tensor x = g.input("x", t, {sym("R"), sym("N")});
  Tensor y = g.input("y", t, {sym("N"), sym("R")});
  bool floating = t == DType::F32 || t == DType::F64;
  g.output("rows", cumsum(x, 1));
  g.output("cols", cumsum(y, 0));
  if (floating) {
    g.output("rows_mean", cumsum(x * 0.5 + 1.0, 1) / cast(g.arange(sym("N")) + 1, t));
    g.output("cols_prod", cumprod(y * 0.0001 + 1.0, 0) - 1.0);
  } else {
    g.output("rows_prod", cumprod(x, 1));
    g.output("cols_twice", cumsum(y, 0) * 2);
  }
}

// The CPU against the interpreter within the rounding model's bounds.
void check_cpu_bounded(const Graph& g, const std::vector<ir::SymbolBindings>& sizes, uint64_t seed) {
  runtime::Executable exe = compile(g);
  INFO(ir::print_program(exe.program()));
  CHECK(exe.compiled_kernel_count() == static_cast<int>(exe.program().kernels.size()));
  for (const ir::SymbolBindings& s : sizes) {
    INFO(testing::sizes_str(s));
    ir::TensorMap inputs = testing::random_inputs(g.ir(), s, seed++, false);
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe.run(inputs)) == "");
  }
}

// The CUDA simulator against the interpreter within the rounding model's bounds.
void check_sim_bounded(const Graph& g, const std::vector<ir::SymbolBindings>& sizes, uint64_t seed) {
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  for (const ir::SymbolBindings& s : sizes) {
    INFO(testing::sizes_str(s));
    ir::TensorMap inputs = testing::random_inputs(g.ir(), s, seed++, false);
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe->run_host(inputs)) == "");
  }
}

void check_ptxas(const Graph& g) {
  passes::PipelineOptions options;
  options.target = ir::Target::cuda(0, 80);
  codegen::CudaModule m = codegen::compile_cuda(passes::run_pipeline(g.ir(), options).program);
  std::string errors = testing::ptxas_errors(m.ptx, "sm_80");
  INFO(errors);
  CHECK(errors.empty());
}

}  // namespace

// ---------------------------------------------------------------- CPU, chunked

TEST_CASE("long scans on the CPU run chunked and match the interpreter at every dtype", "[scan][cpu]") {
  // One and three rows of 32768 (the shortest chunked row), 100003 and 300007 elements: chunked;
  // 1, 7, 1023 and 5000: a row per iteration; 20 rows: too many rows to chunk.
  std::vector<ir::SymbolBindings> sizes = {{{"R", 1}, {"N", 1}},      {{"R", 1}, {"N", 7}},
                                           {{"R", 3}, {"N", 1023}},   {{"R", 1}, {"N", 5000}},
                                           {{"R", 1}, {"N", 32768}},  {{"R", 3}, {"N", 100003}},
                                           {{"R", 1}, {"N", 300007}}, {{"R", 20}, {"N", 40000}}};
  for (DType t : kDTypes) {
    INFO(ir::dtype_name(t));
    Graph g;
    long_scan_graph(g, t);
    check_cpu_bounded(g, sizes, 17);
  }
}

TEST_CASE("chunked integer scans wrap exactly as the sequential interpreter", "[scan][cpu]") {
  // Values near the i32 and i64 limits: every carry overflows, and wrapping arithmetic is
  // associative, so chunks must agree with the interpreter bit for bit.
  for (DType t : {DType::I32, DType::I64}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor x = g.input("x", t, {sym("N")});
    g.output("s", cumsum(x));
    g.output("p", cumprod(x) + 1);
    runtime::Executable exe = compile(g);
    int64_t n = 200003;
    ir::HostArray a(t, {n});
    int64_t big = t == DType::I32 ? (int64_t{1} << 30) + 7 : (int64_t{1} << 62) + 7;
    for (int64_t i = 0; i < n; ++i) a.set_i64(i, i % 3 == 0 ? big : (i % 3 == 1 ? -3 : 5));
    ir::TensorMap in = {{"x", a}};
    CHECK(testing::compare_outputs(ir::interpret(g.ir(), in), exe.run(in), 0, 0) == "");
  }
}

TEST_CASE("a chunked f32 cumsum is summed in f64 and rounded once", "[scan][cpu]") {
  // 0.1f summed 300007 times: an f32 accumulator would drift by whole units; the f64 sum rounded
  // once matches the interpreter to the last bit but for f64 reassociation (far below f32's ulp).
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  g.output("y", cumsum(x));
  int64_t n = 300007;
  ir::TensorMap in = {{"x", ir::HostArray::from<double>({n}, std::vector<double>(n, 0.1)).cast(DType::F32)}};
  ir::TensorMap want = ir::interpret(g.ir(), in), got = compile(g).run(in);
  CHECK(testing::compare_outputs(want, got, 0, 1e-7) == "");
  CHECK(got.at("y").get_f64(n - 1) == Approx(0.1f * static_cast<double>(n)).epsilon(1e-7));
}

// ---------------------------------------------------------------- epilogue fusion

TEST_CASE("elementwise consumers of a scan fuse after it as its epilogue", "[scan][fusion]") {
  Graph after;
  Tensor w = after.input("w", DType::F32, {sym("N")});
  after.output("c", cumsum(w) * 2.0);
  CHECK(kernel_count(after) == 1);

  // The scan read elsewhere too: stored by the same kernel, beside its epilogue.
  Graph both;
  Tensor v = both.input("v", DType::F32, {sym("B"), sym("N")});
  Tensor s = cumsum(exp(v), 1);
  both.output("s", s);
  both.output("m", s / 3.0);
  passes::PipelineResult r = passes::run_pipeline(both.ir());
  REQUIRE(r.program.kernels.size() == 1);
  CHECK(r.program.kernels[0].kind == ir::KernelKind::Scan);
  CHECK(r.program.kernels[0].outputs.size() == 2);
  CHECK(passes::explain_fusion(r.graph, r.partition).find("its elementwise consumers as the epilogue") != std::string::npos);

  // Not an epilogue: a view of the scan (another element's prefix), a reduction of it, a second
  // scan, a consumer over a broadcast (larger) space.
  Graph view;
  Tensor a = view.input("a", DType::F32, {sym("N"), sym("M")});
  view.output("t", transpose(cumsum(a, 1)) + 1.0);
  CHECK(kernel_count(view) == 2);
  Graph reduced;
  Tensor b = reduced.input("b", DType::F32, {sym("N")});
  reduced.output("t", sum(cumsum(b)));
  CHECK(kernel_count(reduced) == 2);
  Graph twice;
  Tensor c = twice.input("c", DType::F32, {sym("N")});
  twice.output("t", cumsum(cumsum(c) * 2.0));
  passes::PipelineResult r2 = passes::run_pipeline(twice.ir());
  CHECK(r2.program.kernels.size() == 2);
  CHECK(passes::explain_fusion(r2.graph, r2.partition).find("two scans do not fuse") != std::string::npos);
  Graph wider;
  Tensor d = wider.input("d", DType::F32, {sym("N")});
  Tensor e = wider.input("e", DType::F32, {sym("M"), sym("N")});
  wider.output("t", cumsum(d) + e);
  CHECK(kernel_count(wider) == 2);
}

TEST_CASE("the running mean example is two kernels, a scan with its division each", "[scan][fusion][examples]") {
  namespace fs = std::filesystem;
  ir::Graph g = testing::compile_example(fs::path(FUSE_SOURCE_DIR) / "examples" / "running_mean.expr");
  ir::Program p = passes::run_pipeline(g).program;
  REQUIRE(p.kernels.size() == 2);  // was 4: a scan and a division per output
  for (const ir::Kernel& k : p.kernels) {
    CHECK(k.kind == ir::KernelKind::Scan);
    CHECK(k.outputs.size() == 1);  // the prefix sums are not stored: only the division reads them
  }
  std::string dot = ir::program_to_dot(p);
  size_t clusters = 0;
  for (size_t at = dot.find("subgraph cluster_k"); at != std::string::npos; at = dot.find("subgraph cluster_k", at + 1))
    ++clusters;
  CHECK(clusters == 2);
}

TEST_CASE("scan epilogues on the CPU match the interpreter", "[scan][cpu]") {
  namespace fs = std::filesystem;
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("B"), sym("N")});
  Tensor s = cumsum(x, 1);
  g.output("s", s);
  g.output("m", s / cast(g.arange(sym("N")) + 1, DType::F32));
  g.output("z", maximum(s, 0.0) * 2.0 - x);
  check_cpu_bounded(g, {{{"B", 1}, {"N", 1}}, {{"B", 7}, {"N", 7}}, {{"B", 1}, {"N", 1023}}, {{"B", 2}, {"N", 300007}}}, 23);
}

// ---------------------------------------------------------------- CUDA

TEST_CASE("scan epilogues compile to PTX that ptxas accepts", "[scan][cuda]") {
  for (DType t : kDTypes) {
    INFO(ir::dtype_name(t));
    Graph g;
    long_scan_graph(g, t);
    check_ptxas(g);
  }
}

TEST_CASE("scan epilogues run on the CUDA simulator", "[scan][cuda][sim]") {
  std::vector<ir::SymbolBindings> sizes = {{{"R", 1}, {"N", 1}}, {{"R", 7}, {"N", 7}}, {{"R", 3}, {"N", 1023}}};
  for (DType t : kDTypes) {
    INFO(ir::dtype_name(t));
    Graph g;
    long_scan_graph(g, t);
    check_sim_bounded(g, sizes, 29);
  }
}

TEST_CASE("long rows take a block each on the CUDA simulator", "[scan][cuda][sim]") {
  // Rows of 256 and more elements are block scans (warp shuffles, a carry from tile to tile);
  // 1023 (above) leaves a partial tile. 5000 and 300007 are few long rows: chunks on many blocks
  // with a carry pass (np-cuda-scan; tests/test_scan_cuda.cpp has that form's cases).
  std::vector<ir::SymbolBindings> sizes = {{{"R", 1}, {"N", 256}}, {{"R", 2}, {"N", 5000}}, {{"R", 1}, {"N", 300007}}};
  for (DType t : kDTypes) {
    INFO(ir::dtype_name(t));
    Graph g;
    long_scan_graph(g, t);
    check_sim_bounded(g, sizes, 31);
  }
}

TEST_CASE("a take beside a long chunked scan reports a bad index and leaves the outputs alone", "[scan][cpu][gather]") {
  // cumsum(x) + take(y, i) with a row of 40000 elements (the chunked scan form). The take is not
  // fused into the scan (fusion keeps takes out of scan kernels); this checks that the program
  // as a whole reports the bad index like the interpreter and hands back no partial output.
  Graph g;
  Tensor x = g.input("x", DType::F32, {1, sym("N")});
  Tensor y = g.input("y", DType::F32, {sym("K")});
  Tensor i = g.input("i", DType::I64, {1, sym("N")});
  int line = __LINE__ + 1;
  g.output("z", cumsum(x, 1) + take(y, i));
  runtime::Executable exe = compile(g);
  INFO(ir::print_program(exe.program()));
  ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"N", 40000}, {"K", 9}}, 3, false);
  for (int64_t k = 0; k < 40000; ++k) inputs.at("i").set_i64(k, k % 17 - 8);  // -8 .. 8: all in range
  CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe.run(inputs)) == "");
  inputs.at("i").set_i64(30000, 9);
  std::string want = "test_scan.cpp:" + std::to_string(line) + ": error: take: index 9 is out of range for axis 0 of size 9";
  CHECK_THROWS_WITH(ir::interpret(g.ir(), inputs), Catch::EndsWith(want));
  ir::TensorMap outputs{{"z", ir::HostArray(DType::F32, {1, 40000})}};
  outputs.at("z").set_f64(0, 42.0);
  CHECK_THROWS_WITH(exe.run(inputs, outputs), Catch::EndsWith(want));
  CHECK(outputs.at("z").get_f64(0) == 42.0);
}
