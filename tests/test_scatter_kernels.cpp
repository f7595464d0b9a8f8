// Scatter kernels (issue 16, np-scatter): histogram, bincount and index_add compiled for the CPU
// (LoopForm::Scatter) with their elementwise producers fused in as a prologue. Each is checked
// against the interpreter for every dtype, odd sizes (1, 7, 1023, 100003), bin counts 1, 7, 256
// and 5000, values on bin edges, NaN, negative and repeated indices. Results do not depend on
// the thread count: CTest runs the [threads] cases under FUSE_NUM_THREADS=1 and 7
// (tests/CMakeLists.txt), and the weighted f64 sums are compared bit for bit with the chunked
// order the kernel documents (ir::scatter_chunks).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "frontends/api.h"
#include "frontends/compile.h"
#include "ir/dot.h"
#include "ir/interpreter.h"
#include "ir/kernel_forms.h"
#include "ir/verifier.h"
#include "passes/fusion.h"
#include "passes/pipeline.h"

using namespace fuse;
using ir::TensorMap;

namespace {

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

/// Every kernel holding a scatter runs as the CPU Scatter form (compiled, not interpreted).
void require_compiled_scatter(const runtime::Executable& exe) {
  int scatters = 0;
  for (const ir::Kernel& k : exe.program().kernels) {
    if (k.kind != ir::KernelKind::Scatter) continue;
    ++scatters;
    CHECK(k.schedule.form == ir::LoopForm::Scatter);
  }
  CHECK(scatters >= 1);
}

/// The CPU executable's outputs equal the interpreter's bit for bit, except outputs named in
/// `close` (f64 sums added in another order), which agree to a relative 1e-12.
void check_cpu(const Graph& g, const TensorMap& inputs, const std::vector<std::string>& close = {}) {
  REQUIRE(ir::verify(g.ir()).empty());
  TensorMap expected = ir::interpret(g.ir(), inputs);
  runtime::Executable exe = compile(g);
  require_compiled_scatter(exe);
  TensorMap actual = exe.run(inputs);
  for (const auto& [name, value] : expected) {
    INFO("output " << name);
    REQUIRE(actual.count(name));
    const ir::HostArray& got = actual.at(name);
    REQUIRE(got.dtype == value.dtype);
    REQUIRE(got.shape == value.shape);
    if (std::find(close.begin(), close.end(), name) == close.end()) {
      CHECK(got.bytes == value.bytes);
      continue;
    }
    for (int64_t k = 0; k < got.size(); ++k) {
      INFO("element " << k);
      CHECK(got.get_f64(k) == Approx(value.get_f64(k)).epsilon(1e-12).margin(1e-12));
    }
  }
}

}  // namespace

TEST_CASE("CPU histogram equals the interpreter: dtypes, sizes, bins, edges and NaN", "[scatter_kernels][cpu]") {
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    for (int64_t bins : {1, 7, 256, 5000}) {
      for (int64_t n : {1, 7, 1023, 100003}) {
        if (n == 100003 && bins != 7 && bins != 5000) continue;  // (the large size once per few bin counts)
        INFO(ir::dtype_name(t) << " bins = " << bins << " n = " << n);
        uint32_t seed = static_cast<uint32_t>(n * 7 + bins * 13 + static_cast<int>(t));
        Graph g;
        Tensor x = g.input("x", t, {n});
        g.output("h", histogram(x, bins, -3.0, 5.0));
        ir::HostArray xs = random_values(t, {n}, seed, -4, 6);
        // Every edge (the first, inner ones, the closed last one), a NaN and both sides.
        if (ir::is_float(t)) {
          for (int64_t k = 0; k <= std::min<int64_t>(bins, n - 1); ++k) xs.set_f64(k, -3.0 + 8.0 * static_cast<double>(k) / static_cast<double>(bins));
          if (n > bins + 1) xs.set_f64(bins + 1, std::nan(""));
        }
        check_cpu(g, {{"x", xs}});
      }
    }
  }
}

TEST_CASE("CPU bincount equals the interpreter: weights and index dtypes, sizes, lengths", "[scatter_kernels][cpu]") {
  for (DType it : {DType::I32, DType::I64}) {
    for (int64_t length : {1, 7, 256, 5000}) {
      for (int64_t n : {1, 7, 1023, 100003}) {
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
        check_cpu(g, inputs, {"sums_f64"});
      }
    }
  }
}

TEST_CASE("CPU index_add equals the interpreter: dtypes, axes, negative and repeated indices", "[scatter_kernels][cpu]") {
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    for (DType it : {DType::I32, DType::I64}) {
      for (int64_t n : {1, 7, 1023}) {
        INFO(ir::dtype_name(t) << " indices " << ir::dtype_name(it) << " n = " << n);
        uint32_t seed = static_cast<uint32_t>(n * 5 + static_cast<int>(t) * 11 + static_cast<int>(it));
        int64_t m = 2 * n + 3;  // more indices than rows: repeats
        Graph g;
        Tensor x = g.input("x", t, {n, 3});
        Tensor i = g.input("i", it, {m});
        Tensor v = g.input("v", t, {m, 3});
        Tensor j = g.input("j", it, {5});
        Tensor w = g.input("w", t, {n, 5});
        g.output("rows", index_add(x, i, v, 0));
        g.output("cols", index_add(x, j, w, 1));
        check_cpu(g, {{"x", random_values(t, {n, 3}, seed)},
                      {"i", random_ints(it, {m}, -n, n, seed + 1)},
                      {"v", random_values(t, {m, 3}, seed + 2)},
                      {"j", random_ints(it, {5}, -3, 3, seed + 3)},
                      {"w", random_values(t, {n, 5}, seed + 4)}});
      }
    }
  }
  SECTION("a large 1-D index_add") {
    Graph g;
    Tensor x = g.input("x", DType::F32, {1023});
    Tensor i = g.input("i", DType::I64, {100003});
    Tensor v = g.input("v", DType::F32, {100003});
    g.output("y", index_add(x, i, v));
    check_cpu(g, {{"x", random_values(DType::F32, {1023}, 1)},
                  {"i", random_ints(DType::I64, {100003}, -1023, 1023, 2)},
                  {"v", random_values(DType::F32, {100003}, 3)}});
  }
}

TEST_CASE("elementwise producers fuse into scatters as a prologue: one kernel each", "[scatter_kernels][fusion]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {ir::Dim::symbol("N")});
  Tensor i = g.input("i", DType::I64, {ir::Dim::symbol("N")});
  Tensor w = g.input("w", DType::F32, {ir::Dim::symbol("N")});
  Tensor r = g.input("r", DType::F32, {ir::Dim::symbol("R"), 4});
  Tensor v = g.input("v", DType::F32, {ir::Dim::symbol("N"), 4});
  SECTION("histogram(x * 2 + 1)") { g.output("y", histogram(x * 2.0f + 1.0f, 16, -4.0, 4.0)); }
  SECTION("bincount(i, weights=w * w)") { g.output("y", bincount(i, 9, w * w)); }
  SECTION("index_add(exp(r), i, v * 2)") { g.output("y", index_add(exp(r), i, v * 2.0f)); }
  passes::PipelineResult p = passes::run_pipeline(g.ir());
  REQUIRE(p.program.kernels.size() == 1);
  CHECK(p.program.kernels[0].kind == ir::KernelKind::Scatter);
  std::string why = passes::explain_fusion(p.graph, p.partition);
  CHECK(why.find("a scatter (") != std::string::npos);
  CHECK(ir::program_to_dot(p.program, "t").find("(scatter)") != std::string::npos);
  // And the fused kernel computes what the interpreter does.
  TensorMap inputs = {{"x", random_values(DType::F32, {1023}, 1)},
                      {"i", random_ints(DType::I64, {1023}, 0, 9, 2)},
                      {"w", random_values(DType::F32, {1023}, 3)},
                      {"r", random_values(DType::F32, {9, 4}, 4)},
                      {"v", random_values(DType::F32, {1023, 4}, 5)}};
  check_cpu(g, inputs);
}

TEST_CASE("a scatter's result is stored; its consumers are other kernels", "[scatter_kernels][fusion]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {ir::Dim::symbol("N")});
  g.output("y", cast(histogram(exp(x), 8, 0.0, 4.0), DType::F32) / 2.0f);
  passes::PipelineResult p = passes::run_pipeline(g.ir());
  REQUIRE(p.program.kernels.size() == 2);
  bool explained = false;
  for (const passes::FusionBoundary& b : p.partition.boundaries)
    explained = explained || b.reason.find("a scatter's result is stored") != std::string::npos;
  CHECK(explained);
  check_cpu(g, {{"x", random_values(DType::F32, {1023}, 6, -3, 2)}});
}

TEST_CASE("scatter results do not depend on the thread count", "[scatter_kernels][threads]") {
  // Run by CTest under FUSE_NUM_THREADS=1 and 7: integer counts equal the interpreter's, and f64
  // weighted sums equal the documented order (per chunk in index order, then chunks in order).
  const int64_t n = 100003, length = 300;
  Graph g;
  Tensor x = g.input("x", DType::I64, {n});
  Tensor w = g.input("w", DType::F64, {n});
  g.output("counts", bincount(x, length));
  g.output("sums", bincount(x, length, w));
  g.output("hist", histogram(w, 33, -2.0, 2.0));
  TensorMap inputs = {{"x", random_ints(DType::I64, {n}, 0, length, 7)}, {"w", random_values(DType::F64, {n}, 8)}};
  TensorMap want = ir::interpret(g.ir(), inputs);
  int64_t chunks = ir::scatter_chunks(length);
  std::vector<double> sums(length, 0.0);
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<double> part(length, 0.0);
    for (int64_t e = c * n / chunks; e < (c + 1) * n / chunks; ++e) part[inputs["x"].get_i64(e)] += inputs["w"].get_f64(e);
    for (int64_t b = 0; b < length; ++b) sums[b] += part[b];
  }
  runtime::Executable exe = compile(g);
  require_compiled_scatter(exe);
  TensorMap got = exe.run(inputs);
  CHECK(got.at("counts").bytes == want.at("counts").bytes);
  CHECK(got.at("hist").bytes == want.at("hist").bytes);
  for (int64_t b = 0; b < length; ++b) {
    INFO("bin " << b);
    CHECK(got.at("sums").get_f64(b) == sums[b]);
  }
}

TEST_CASE("compiled bincount and index_add report bad indices and leave the caller's outputs", "[scatter_kernels][errors]") {
  Graph g;
  Tensor i = g.input("i", DType::I64, {ir::Dim::symbol("N")});
  Tensor x = g.input("x", DType::F32, {4, 2});
  Tensor v = g.input("v", DType::F32, {ir::Dim::symbol("N"), 2});
  g.output("y", exp(x));  // computed by an earlier kernel
  g.output("c", bincount(i + 1, 5));  // the prologue's value is the one checked
  g.output("a", index_add(x, i, v * 2.0f));
  runtime::Executable exe = compile(g);
  require_compiled_scatter(exe);
  ir::HostArray is(DType::I64, {7}), vs = random_values(DType::F32, {7, 2}, 9);
  int64_t good[] = {0, 3, -1, 2, 2, 1, 0};  // i + 1 in [0, 5) and i in [-4, 4)
  for (int k = 0; k < 7; ++k) is.set_i64(k, good[k]);
  TensorMap inputs = {{"i", is}, {"x", random_values(DType::F32, {4, 2}, 10)}, {"v", vs}};
  TensorMap outputs = exe.run(inputs);
  TensorMap before = outputs;
  auto fails_with = [&](int64_t bad_at, int64_t bad, const std::string& want) {
    TensorMap bad_inputs = inputs;
    bad_inputs["i"].set_i64(bad_at, bad);
    CHECK_THROWS_WITH(ir::interpret(g.ir(), bad_inputs), Catch::Contains(want));
    try {
      exe.run(bad_inputs, outputs);
      FAIL("no error");
    } catch (const ir::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(want));
      CHECK_THAT(e.what(), Catch::Contains("test_scatter_kernels.cpp:"));
    }
    for (const auto& [name, value] : before) CHECK(outputs.at(name).bytes == value.bytes);
  };
  SECTION("a bincount value of the prologue out of range") {
    // i = 4 gives the value 5 (i + 1) for bincount, and a bad row 4 for index_add after it.
    fails_with(3, 4, "bincount: value 5 is out of range for minlength 5 (values must be in [0, 5))");
  }
  SECTION("a negative bincount value") {
    fails_with(5, -2, "bincount: value -1 is out of range for minlength 5");
  }
  SECTION("an index_add index out of range") {
    // (In g every index index_add refuses, bincount refuses first: index_add on its own here.)
    Graph h;
    Tensor hi = h.input("i", DType::I32, {3});
    Tensor hx = h.input("x", DType::I64, {2, 4});
    h.output("a", index_add(hx, hi, h.input("v", DType::I64, {2, 3}), 1));
    runtime::Executable hexe = compile(h);
    require_compiled_scatter(hexe);
    ir::HostArray his(DType::I32, {3});
    his.set_i64(0, 1);
    his.set_i64(1, -5);
    his.set_i64(2, 9);
    TensorMap hin = {{"i", his}, {"x", random_values(DType::I64, {2, 4}, 11)}, {"v", random_values(DType::I64, {2, 3}, 12)}};
    std::string want = "index_add: index -5 is out of range for axis 1 of size 4";  // the first bad one
    CHECK_THROWS_WITH(ir::interpret(h.ir(), hin), Catch::Contains(want));
    TensorMap kept = {{"a", ir::HostArray(DType::I64, {2, 4})}};
    kept["a"].set_i64(3, 42);
    CHECK_THROWS_WITH(hexe.run(hin, kept), Catch::Contains(want));
    CHECK(kept.at("a").get_i64(3) == 42);
  }
}
