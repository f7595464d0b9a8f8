// Scatter kernels on CUDA (issue 16, codegen/cuda/scatter.cpp): histogram, bincount and
// index_add run on the CUDA simulator with every check on (races, bounds) against the
// interpreter: integer results exactly, float atomics (weighted bincount, float index_add)
// within the rounding model's bounds (the atomics' order varies between runs). Sizes 1, 7, 1023,
// 100003; B = 1, 7, 256 (shared-memory bins) and 5000 (global atomics); NaN and out-of-range
// histogram values, repeated and negative indices; the run-time error on the simulator; ptxas.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "codegen/cuda_codegen.h"
#include "frontends/api.h"
#include "frontends/compile.h"
#include "ir/interpreter.h"
#include "ir/rounding_model.h"
#include "passes/pipeline.h"
#include "examples.h"
#include "ptxas.h"
#include "random_graph.h"

using namespace fuse;
using ir::TensorMap;

namespace {

const bool kSimulator = [] {
  setenv("FUSE_CUDA_SIM", "1", 1);
  return setenv("FUSE_CUDA_SIM_CHECKS", "all", 1) == 0;
}();

ir::HostArray random_values(DType dtype, ir::ConcreteShape shape, uint32_t seed, double lo = -4, double hi = 4) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  ir::HostArray a(dtype, std::move(shape));
  for (int64_t i = 0; i < a.size(); ++i) {
    if (ir::is_float(dtype)) a.set_f64(i, u(rng));
    else a.set_i64(i, static_cast<int64_t>(std::floor(u(rng))));
  }
  return a;
}

ir::HostArray random_ints(DType dtype, ir::ConcreteShape shape, int64_t lo, int64_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> u(lo, hi - 1);
  ir::HostArray a(dtype, std::move(shape));
  for (int64_t i = 0; i < a.size(); ++i) a.set_i64(i, u(rng));
  return a;
}

/// The simulator's outputs against the interpreter's (integers exact, floats within the
/// rounding model's bounds).
void check_sim(const Graph& g, const TensorMap& inputs) {
  REQUIRE(kSimulator);
  ir::ValuesAndBounds expected = ir::interpret_with_bounds(g.ir(), inputs);
  CHECK(testing::compare_outputs(expected, compile_cuda(g, Target::cuda_sim())->run_host(inputs)) == "");
}

}  // namespace

TEST_CASE("CUDA histogram equals the interpreter over dtypes and sizes and bins and edges and NaN", "[scatter_cuda][sim]") {
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    for (int64_t bins : {1, 7, 256, 5000}) {
      for (int64_t n : {1, 7, 1023, 100003}) {
        if (n == 100003 && (bins == 1 || bins == 256 || t == DType::I32)) continue;  // (the simulator is slow)
        INFO(ir::dtype_name(t) << " bins = " << bins << " n = " << n);
        uint32_t seed = static_cast<uint32_t>(n * 7 + bins * 13 + static_cast<int>(t));
        Graph g;
        Tensor x = g.input("x", t, {n});
        g.output("h", histogram(x * 1, bins, -3.0, 5.0));  // (x * 1: a prologue)
        ir::HostArray xs = random_values(t, {n}, seed, -4, 6);
        if (ir::is_float(t)) {
          for (int64_t k = 0; k <= std::min<int64_t>(bins, n - 1); ++k)
            xs.set_f64(k, -3.0 + 8.0 * static_cast<double>(k) / static_cast<double>(bins));
          if (n > bins + 1) xs.set_f64(bins + 1, std::nan(""));
        }
        check_sim(g, {{"x", xs}});
      }
    }
  }
}

TEST_CASE("CUDA bincount equals the interpreter unweighted and weighted over lengths", "[scatter_cuda][sim]") {
  for (DType it : {DType::I32, DType::I64}) {
    for (int64_t length : {1, 7, 256, 5000}) {
      for (int64_t n : {1, 7, 1023, 100003}) {
        if (n == 100003 && (length == 1 || length == 256 || it == DType::I32)) continue;
        INFO(ir::dtype_name(it) << " length = " << length << " n = " << n);
        uint32_t seed = static_cast<uint32_t>(n * 3 + length * 17 + static_cast<int>(it));
        Graph g;
        Tensor x = g.input("x", it, {n});
        g.output("counts", bincount(x, length));
        TensorMap inputs = {{"x", random_ints(it, {n}, 0, length, seed)}};
        for (DType w : {DType::F32, DType::F64, DType::I32, DType::I64}) {
          std::string name = "w_" + std::string(ir::dtype_name(w));
          g.output("sums_" + std::string(ir::dtype_name(w)), bincount(x, length, g.input(name, w, {n})));
          inputs[name] = random_values(w, {n}, seed + static_cast<uint32_t>(w));
        }
        check_sim(g, inputs);
      }
    }
  }
}

TEST_CASE("CUDA index_add equals the interpreter over dtypes and axes with negative and repeated indices", "[scatter_cuda][sim]") {
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    for (int64_t n : {1, 7, 1023}) {
      INFO(ir::dtype_name(t) << " n = " << n);
      uint32_t seed = static_cast<uint32_t>(n * 5 + static_cast<int>(t) * 11);
      int64_t m = 2 * n + 3;  // more indices than rows: repeats
      Graph g;
      Tensor x = g.input("x", t, {n, 3});
      Tensor i = g.input("i", DType::I64, {m});
      Tensor v = g.input("v", t, {m, 3});
      Tensor j = g.input("j", DType::I32, {5});
      Tensor w = g.input("w", t, {n, 5});
      g.output("rows", index_add(x, i, v, 0));
      g.output("columns", index_add(x * 2, j, w, 1));
      check_sim(g, {{"x", random_values(t, {n, 3}, seed)},
                    {"i", random_ints(DType::I64, {m}, -n, n, seed + 1)},
                    {"v", random_values(t, {m, 3}, seed + 2)},
                    {"j", random_ints(DType::I32, {5}, -3, 3, seed + 3)},
                    {"w", random_values(t, {n, 5}, seed + 4)}});
    }
  }
}

TEST_CASE("CUDA bad bincount value and index_add index: the interpreter's error", "[scatter_cuda][sim][errors]") {
  {
    Graph g;
    Tensor x = g.input("x", DType::I64, {1023});
    g.output("counts", bincount(x, 7));
    ir::HostArray xs = random_ints(DType::I64, {1023}, 0, 7, 1);
    xs.set_i64(500, 7);
    std::string want;
    try {
      ir::interpret(g.ir(), {{"x", xs}});
    } catch (const ir::Error& e) {
      want = e.what();
    }
    REQUIRE(!want.empty());
    CHECK_THROWS_WITH(compile_cuda(g, Target::cuda_sim())->run_host({{"x", xs}}), want);
  }
  {
    Graph g;
    Tensor x = g.input("x", DType::F32, {5, 2});
    Tensor i = g.input("i", DType::I32, {300});
    g.output("y", index_add(x, i, g.input("v", DType::F32, {300, 2}), 0));
    ir::HostArray is = random_ints(DType::I32, {300}, -5, 5, 2);
    is.set_i64(123, -6);
    TensorMap inputs = {{"x", random_values(DType::F32, {5, 2}, 3)}, {"i", is}, {"v", random_values(DType::F32, {300, 2}, 4)}};
    std::string want;
    try {
      ir::interpret(g.ir(), inputs);
    } catch (const ir::Error& e) {
      want = e.what();
    }
    REQUIRE(!want.empty());
    CHECK_THROWS_WITH(compile_cuda(g, Target::cuda_sim())->run_host(inputs), want);
  }
}

TEST_CASE("CUDA scatter kernels assemble with ptxas", "[scatter_cuda][ptxas]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {ir::Dim::symbol("N")});
  Tensor c = g.input("c", DType::I32, {ir::Dim::symbol("N")});
  Tensor i = g.input("i", DType::I64, {ir::Dim::symbol("M")});
  g.output("h", histogram(x, 64, -1.0, 1.0));
  g.output("big", histogram(x, 9000, -1.0, 1.0));
  g.output("counts", bincount(c, 100, exp(x)));
  g.output("added", index_add(g.input("y", DType::F64, {4, 3}), i, g.input("v", DType::F64, {ir::Dim::symbol("M"), 3}), 0));
  passes::PipelineOptions options;
  options.target = ir::Target::cuda(0, 80);
  ir::Program program = passes::run_pipeline(g.ir(), options).program;
  codegen::CudaOptions cuda;
  cuda.sm = 80;
  codegen::CudaModule m = codegen::compile_cuda(program, cuda);
  CHECK(testing::ptxas_errors(m.ptx, "sm_80") == "");
  CHECK(m.ptx.find("atom.shared") != std::string::npos);
  CHECK(m.ptx.find("atom.global") != std::string::npos);
}

TEST_CASE("CUDA scatter kernels with symbolic sizes serve every size from one executable", "[scatter_cuda][sim]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {ir::Dim::symbol("N")});
  Tensor c = g.input("c", DType::I32, {ir::Dim::symbol("N")});
  Tensor i = g.input("i", DType::I64, {ir::Dim::symbol("M")});
  g.output("h", histogram(x * 2, 16, -4.0, 4.0));
  g.output("counts", bincount(c, 300, exp(x)));
  g.output("added", index_add(g.input("y", DType::F64, {4, 3}), i, g.input("v", DType::F64, {ir::Dim::symbol("M"), 3}), 0));
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  for (int64_t n : {1, 7, 1023}) {
    INFO("n = " << n);
    uint32_t seed = static_cast<uint32_t>(n);
    TensorMap inputs = {{"x", random_values(DType::F32, {n}, seed)},
                        {"c", random_ints(DType::I32, {n}, 0, 300, seed + 1)},
                        {"i", random_ints(DType::I64, {n}, -4, 4, seed + 2)},
                        {"y", random_values(DType::F64, {4, 3}, seed + 3)},
                        {"v", random_values(DType::F64, {n, 3}, seed + 4)}};
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe->run_host(inputs)) == "");
  }
}
