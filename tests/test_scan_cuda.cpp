// CUDA scans across blocks (issue 16, np-cuda-scan): few long rows (fewer than kScanFewRows rows
// longer than kScanChunkLength elements) run as three launches: NAME scans each chunk and
// writes its total, NAME_carries scans each row's totals, NAME_finish rescans each chunk from
// its carry and stores (codegen/cuda/scan.cpp). Checked on the CUDA simulator with every check
// on against the interpreter within the rounding model (its scan bound holds for any grouping of
// the f64 additions or products); integers exactly; ptxas sm_80; the launch plan's grid rules
// and bundles.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "codegen/cuda_codegen.h"
#include "frontends/api.h"
#include "frontends/compile.h"
#include "ir/cuda_plan.h"
#include "ir/interpreter.h"
#include "ir/rounding_model.h"
#include "passes/fusion.h"
#include "passes/pipeline.h"
#include "runtime/bundle.h"
#include "runtime/cuda_executable.h"
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

const ir::DType kDTypes[] = {DType::F32, DType::F64, DType::I32, DType::I64};

// cumsum and cumprod along the last axis of [R, N] and along axis 0 of [N, R]; the running-mean
// shape (a prologue and an epilogue fused) for floats. Float products stay near 1 so that long
// rows neither overflow nor vanish; integer products wrap (exactly, in any grouping).
void scan_graph(Graph& g, DType t) {
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
    g.output("cols_twice", cumprod(y, 0) * 2);
  }
}

void check_sim(const Graph& g, const std::vector<ir::SymbolBindings>& sizes, uint64_t seed) {
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  for (const ir::SymbolBindings& s : sizes) {
    INFO(testing::sizes_str(s));
    ir::TensorMap inputs = testing::random_inputs(g.ir(), s, seed++, false);
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe->run_host(inputs)) == "");
  }
}

// The program and launch plan compiled for sm_80 (PTX, not simulator images).
runtime::CudaProgram cuda_program(const Graph& g) {
  passes::PipelineOptions options;
  options.target = ir::Target::cuda(0, 80);
  ir::Program program = passes::run_pipeline(g.ir(), options).program;
  codegen::CudaModule m = codegen::compile_cuda(program);
  return runtime::make_cuda_program(program, m.plan, m.ptx);
}

// The blocks launch `l` gets at these sizes (runtime/cuda_executable.cpp's rule).
int64_t grid_of(const ir::CudaLaunch& l, const ir::SymbolBindings& s) {
  int64_t work = ir::evaluate(l.work[0], s);
  int64_t blocks = work <= 0 ? 0 : (work - 1) / l.work_per_block[0] + 1;
  return std::clamp<int64_t>(blocks, 1, l.max_grid[0]);
}

}  // namespace

TEST_CASE("few long rows scan in chunks across blocks on the CUDA simulator", "[scan][cuda][sim]") {
  // 1, 7 and 1023: a thread per row or a block per row; 5000: two chunks (a partial tile in
  // each); 300007: 74 chunks; 3 x 9001 along both axes: three chunks per row, rows apart.
  std::vector<ir::SymbolBindings> sizes = {{{"R", 1}, {"N", 1}},    {{"R", 1}, {"N", 7}},      {{"R", 1}, {"N", 1023}},
                                           {{"R", 1}, {"N", 5000}}, {{"R", 1}, {"N", 300007}}, {{"R", 3}, {"N", 9001}}};
  for (DType t : kDTypes) {
    INFO(ir::dtype_name(t));
    Graph g;
    scan_graph(g, t);
    check_sim(g, sizes, 41);
  }
}

TEST_CASE("a cumsum of over a million elements runs on many blocks of the simulator", "[scan][cuda][sim]") {
  // 1,200,001 elements: 293 chunks; f32 summed in f64 and rounded once, i64 exact.
  for (DType t : {DType::F32, DType::I64}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor x = g.input("x", t, {sym("N")});
    g.output("s", cumsum(x));
    check_sim(g, {{{"N", 1200001}}}, 43);
  }
}

TEST_CASE("chunked CUDA scans cover their chunks with a grid of 2 blocks", "[scan][cuda][sim]") {
  // The simulator launches at most 2 blocks per axis: every launch walks its rows or (row,
  // chunk) pairs in grid-stride loops, and the carries still follow chunk order.
  setenv("FUSE_CUDA_SIM_MAX_GRID", "2", 1);
  for (DType t : {DType::F64, DType::I32}) {
    INFO(ir::dtype_name(t));
    Graph g;
    scan_graph(g, t);
    check_sim(g, {{{"R", 3}, {"N", 20000}}, {{"R", 1}, {"N", 5000}}}, 47);
  }
  unsetenv("FUSE_CUDA_SIM_MAX_GRID");
}

TEST_CASE("many long rows keep a block per row on the CUDA simulator", "[scan][cuda][sim]") {
  // 256 rows of 4097: rows enough to fill the GPU, so no chunks (and no carry pass).
  Graph g;
  Tensor x = g.input("x", DType::I64, {sym("R"), sym("N")});
  g.output("s", cumsum(x, 1) * 3);
  check_sim(g, {{{"R", 256}, {"N", 4097}}}, 53);
}

TEST_CASE("the chunked scan's launch plan: grids mirror the kernels' choice, bundles carry it", "[scan][cuda][ptxas]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("R"), sym("N")});
  g.output("m", cumsum(x * 0.5 + 1.0, 1) / cast(g.arange(sym("N")) + 1, DType::F32));
  runtime::CudaProgram p = cuda_program(g);
  CHECK(testing::ptxas_errors(p.ptx, "sm_80") == "");
  REQUIRE(p.plan.launches.size() == 3);  // one kernel
  const std::string name = p.plan.launches[0].entry;
  CHECK(p.plan.launches[1].entry == name + "_carries");
  CHECK(p.plan.launches[2].entry == name + "_finish");
  const ir::CudaLaunch *scan = &p.plan.launches[0], *carries = &p.plan.launches[1], *finish = &p.plan.launches[2];
  auto grids = [&](int64_t r, int64_t n) {
    ir::SymbolBindings s{{"R", r}, {"N", n}};
    return std::vector<int64_t>{grid_of(*scan, s), grid_of(*carries, s), grid_of(*finish, s)};
  };
  CHECK(grids(1, 300007) == std::vector<int64_t>{74, 1, 74});       // 74 chunks of one row
  CHECK(grids(3, 9001) == std::vector<int64_t>{9, 3, 9});           // 3 chunks per row
  CHECK(grids(1, 4096) == std::vector<int64_t>{1, 1, 1});           // one block scans the row
  CHECK(grids(1000, 5000) == std::vector<int64_t>{1000, 1, 1});     // a block per row
  CHECK(grids(255, 1 << 20) == std::vector<int64_t>{8192, 255, 8192});  // 32 chunks per row (the scratch's 8192)
  CHECK(grids(0, 5000) == std::vector<int64_t>{1, 1, 1});
  // The chunk totals' scratch is the kernel's own, besides no error record (no index checks).
  CHECK(p.plan.scratch_bytes.size() == 1);
  CHECK(p.plan.error_scratch == -1);

  runtime::CudaProgram back = runtime::parse_bundle(
      [&](const std::string& file) -> std::optional<std::string> {
        if (file == "plan.json") return runtime::bundle_plan_json(p);
        if (file == "kernels.ptx") return p.ptx;
        return std::nullopt;
      },
      "memory");
  CHECK(back.plan.scratch_bytes == p.plan.scratch_bytes);
  REQUIRE(back.plan.launches.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(back.plan.launches[i].entry == p.plan.launches[i].entry);
    CHECK(back.plan.launches[i].work[0] == p.plan.launches[i].work[0]);
    CHECK(back.plan.launches[i].max_grid[0] == p.plan.launches[i].max_grid[0]);
    CHECK(back.plan.launches[i].args == p.plan.launches[i].args);
  }
}

TEST_CASE("explain-fusion says how a long scan runs on CUDA", "[scan][cuda][fusion]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  g.output("s", cumsum(x));
  passes::PipelineResult r = passes::run_pipeline(g.ir());
  CHECK(passes::explain_fusion(r.graph, r.partition).find("a block per chunk in three launches") != std::string::npos);
}

TEST_CASE("a bad take index beside a chunked CUDA scan is reported", "[scan][cuda][sim][gather]") {
  // cumsum(x) + take(y, i) over one row of 40000 (ten chunks). Fusion keeps the take out of
  // the scan's kernel today ("only elementwise producers fuse into a scan"), so the take is a
  // kernel of its own before the scan's three launches; the run still reports the bad index (in
  // the eighth chunk's range) with the take's line, and clears the record for the next run.
  Graph g;
  Tensor x = g.input("x", DType::F32, {1, sym("N")});
  Tensor y = g.input("y", DType::F32, {sym("K")});
  Tensor i = g.input("i", DType::I64, {1, sym("N")});
  int line = __LINE__ + 1;
  g.output("z", cumsum(x, 1) + take(y, i));
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  INFO(ir::print_cuda_plan(exe->program().plan));
  CHECK(exe->program().plan.error_scratch >= 0);
  ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"N", 40000}, {"K", 9}}, 3, false);
  for (int64_t k = 0; k < 40000; ++k) inputs.at("i").set_i64(k, k % 17 - 8);  // -8 .. 8: all in range
  CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe->run_host(inputs)) == "");
  inputs.at("i").set_i64(30000, 9);
  std::string want = "test_scan_cuda.cpp:" + std::to_string(line) + ": error: take: index 9 is out of range for axis 0 of size 9";
  CHECK_THROWS_WITH(ir::interpret(g.ir(), inputs), Catch::EndsWith(want));
  CHECK_THROWS_WITH(exe->run_host(inputs), Catch::EndsWith(want));
  inputs.at("i").set_i64(30000, -9);  // in range again: the record is cleared for the next run
  CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe->run_host(inputs)) == "");
}

TEST_CASE("a take before a chunked CUDA scan reports a bad index from its own kernel", "[scan][cuda][sim][gather]") {
  // cumsum(take(y, i) * 2): the take and the multiply are a kernel before the scan's three
  // launches; a bad index stops the run with the take's error.
  Graph g;
  Tensor y = g.input("y", DType::F64, {sym("K")});
  Tensor i = g.input("i", DType::I64, {1, sym("N")});
  int line = __LINE__ + 1;
  g.output("z", cumsum(take(y, i) * 2.0, 1) / 3.0);
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"N", 40000}, {"K", 9}}, 5, false);
  for (int64_t k = 0; k < 40000; ++k) inputs.at("i").set_i64(k, k % 17 - 8);
  CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe->run_host(inputs)) == "");
  inputs.at("i").set_i64(39999, -10);
  std::string want = "test_scan_cuda.cpp:" + std::to_string(line) + ": error: take: index -10 is out of range for axis 0 of size 9";
  CHECK_THROWS_WITH(exe->run_host(inputs), Catch::EndsWith(want));
}
