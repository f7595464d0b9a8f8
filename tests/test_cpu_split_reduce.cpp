// Reductions to a single element run split over chunks (codegen's split reductions): every
// built-in kind and dtype, sizes around the chunk count, several reductions sharing a kernel.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <limits>

#include "codegen/cpu_codegen.h"
#include "cpu_targets.h"
#include "frontends/compile.h"
#include "ir/printer.h"
#include "random_graph.h"

using namespace fuse;

namespace {

void check(const Graph& g, const ir::SymbolBindings& sizes, double rtol) {
  ir::TensorMap inputs = testing::random_inputs(g.ir(), sizes, 11);
  runtime::Executable exe = compile(g);
  INFO(ir::print_program(exe.program()));
  CHECK(exe.compiled_kernel_count() == static_cast<int>(exe.program().kernels.size()));
  CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe.run(inputs), rtol, 1e-6) == "");
}

// `g`, over x[B, M, N] of `dt`, at sizes of 1 and odd ones, with periods N on both sides of 16.
void check_periods(const Graph& g, DType dt) {
  for (auto [nb, nm, nn] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {2, 3, 5}, {3, 7, 17}, {5, 1, 1023}, {2, 33, 16}, {4, 100, 300}}) {
    INFO(ir::dtype_name(dt) << " B = " << nb << ", M = " << nm << ", N = " << nn);
    check(g, {{"B", nb}, {"M", nm}, {"N", nn}}, dt == DType::F32 ? 1e-5 : 1e-9);
  }
}

}  // namespace

TEST_CASE("full reductions of every kind and dtype, split over chunks", "[cpu][reduce][split]") {
  // 0 and 1 leave most chunks empty; 63, 64, 65 straddle the chunk count (64); 2^20 + 3 has a
  // SIMD tail in every chunk.
  for (int64_t n : {0, 1, 7, 63, 64, 65, 1023, 1048579}) {
    for (DType t : ir::kAllDTypes) {
      INFO("N = " << n << ", " << ir::dtype_name(t));
      Graph g;
      Tensor x = g.input("x", t, {sym("N")});
      g.output("sum", sum(x));
      g.output("max", max(x));
      g.output("min", min(x));
      g.output("any", any(x));
      g.output("all", all(x));
      g.output("mean", mean(x));
      if (t != DType::Bool) g.output("prod", prod(x * 0.0 + 1.0));  // ones: a product that stays finite
      runtime::Executable exe = compile(g);
      // Independent reductions over the same elements: one kernel, the input read once.
      CHECK(exe.program().kernels.size() == 1);
      // Float sums are added in another order than the interpreter's (chunks, lanes): relative
      // error grows with the count, bounded here by ~n * 2^-53 in f64 accumulators.
      check(g, {{"N", n}}, 1e-6);
    }
  }
}

TEST_CASE("full reductions with prologues, epilogues, keepdims and rank > 1", "[cpu][reduce][split]") {
  for (int64_t r : {1, 5, 300}) {
    INFO("R = " << r);
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
    Tensor y = g.input("y", DType::F32, {sym("R"), sym("C")});
    g.output("norm", sqrt(sum(x * x)));
    g.output("dot", sum(x * y, {0, 1}, true));
    g.output("maxabs", max(abs(x - y)));
    g.output("count", sum(x > 0.5));
    check(g, {{"R", r}, {"C", 1023}}, 1e-6);
  }
  // A reduction over a leading axis whose other dims are 1: a single row too.
  Graph g;
  Tensor x = g.input("x", DType::F64, {sym("N"), 1});
  g.output("s", sum(x, 0, true));
  g.output("m", max(exp(x), 0));
  check(g, {{"N", 100003}}, 1e-9);
}

TEST_CASE("integer sums wrap like the interpreter's whatever the order", "[cpu][reduce][split]") {
  Graph g;
  Tensor x = g.input("x", DType::I32, {sym("N")});
  g.output("s", sum(x * 1000000));
  g.output("p", prod(x));
  check(g, {{"N", 1000003}}, 0);
}

TEST_CASE("split reductions and short rows prefetch their inputs 4 KiB ahead", "[cpu][reduce][split]") {
  // Performance, not semantics (a prefetch past the end of an input faults nowhere): the MLIR
  // shows the prefetch, one per 64-byte line of a step, at the element 4 KiB ahead, and the
  // results still match the interpreter with prefetches running past the ends of the inputs.
  auto prefetches = [](const Graph& g) {
    runtime::Executable exe = compile(g);
    std::string mlir = codegen::emit_cpu_mlir(exe.program());
    return std::make_pair(testing::count_occurrences(mlir, "llvm.intr.prefetch"),
                          mlir.find("arith.constant 1024 : i64") != std::string::npos);
  };
  Graph total;
  Tensor x = total.input("x", DType::F32, {sym("N")});
  total.output("sum", sum(x));
  auto [in_sum, ahead_in_sum] = prefetches(total);
  CHECK(in_sum >= 1);
  CHECK(ahead_in_sum);  // 4 KiB of f32
  for (int64_t n : {1, 1000, 1023, 1024, 1025, 70'001}) check(total, {{"N", n}}, 1e-6);

  Graph rows;
  Tensor r = rows.input("x", DType::F32, {sym("R"), sym("C")});
  Tensor mu = mean(r, 1, true);
  rows.output("y", (r - mu) / sqrt(mean((r - mu) * (r - mu), 1, true) + 1e-5));
  CHECK(prefetches(rows).first >= 1);
  for (auto [nr, nc] : std::vector<std::pair<int64_t, int64_t>>{{1, 64}, {17, 64}, {300, 7}, {5, 2000}})
    check(rows, {{"R", nr}, {"C", nc}}, 1e-5);
}

TEST_CASE("split reductions read each chunk as eight streams, every element once", "[cpu][reduce][split]") {
  // A chunk (N / 64 elements) is read as eight streams of whole vectors, one accumulator chain
  // each, then a scalar tail (kSplitStreams). Exact sums of small integers in f32 count every
  // element exactly once; one largest (or NaN) element, moved over every position of a chunk
  // and past it, is found wherever it lies: in any stream, at a stream's edges, in the tail.
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  g.output("sum", sum(x));
  g.output("max", max(x));
  g.output("min", min(x));
  for (const CompileOptions& options : testing::vector_widths_this_host_runs()) {
    INFO("vector bits " << options.pipeline.target.vector_bits);
    runtime::Executable exe = compile(g, options);
    // Chunks of 8 x 16 - 1, 8 x 16 (AVX-512's eight vectors exactly), 8 x 16 + 1, and more.
    for (int64_t n : {64 * 127, 64 * 128, 64 * 128 + 64, 64 * 129 + 5, 1'000'003}) {
      INFO("N = " << n);
      ir::HostArray in(DType::F32, {n});
      double total = 0;
      for (int64_t i = 0; i < n; ++i) {
        in.set_f64(i, static_cast<double>(i % 1000));
        total += static_cast<double>(i % 1000);
      }
      ir::TensorMap out = exe.run({{"x", in}});
      CHECK(out.at("sum").get_f64(0) == static_cast<double>(static_cast<float>(total)));
      // Chunk 1 and the start of chunk 2: every position of a chunk for the small sizes.
      int64_t chunk = n / 64, stride = n > 100'000 ? 997 : 1;
      for (int64_t at = chunk; at < std::min(n, 2 * chunk + 3); at += stride) {
        ir::HostArray probe = in;
        probe.set_f64(at, 5000.0);
        ir::TensorMap found = exe.run({{"x", probe}});
        if (found.at("max").get_f64(0) != 5000.0) FAIL_CHECK("the largest element at " << at << " was missed");
        probe.set_f64(at, std::numeric_limits<double>::quiet_NaN());
        found = exe.run({{"x", probe}});
        if (!std::isnan(found.at("min").get_f64(0))) FAIL_CHECK("the NaN at " << at << " was missed");
      }
    }
  }
}

TEST_CASE("full reductions of inputs broadcast along leading dims walk one period at a time", "[cpu][reduce][split]") {
  // sum((x[M, N] + b[N])**2): b repeats every N elements of the flattened space. Periods of at
  // most 256 elements (kMaxTiledPeriod) are read from a table of b tiled over about 1024
  // elements, built once per task, and the chunk walked 1024 elements at a time
  // (emit_split_with_tables); longer periods walk one period (row) at a time, b read as vectors
  // from its element 0 each time (emit_split_chunk).
  auto vector_loads = [](const Graph& g) {
    return testing::count_occurrences(codegen::emit_cpu_mlir(compile(g).program()), "-> vector<");
  };
  {
    Graph g;
    Tensor z = g.input("z", DType::F32, {sym("M"), sym("N")});
    Tensor b = g.input("b", DType::F32, {sym("N")});
    Tensor t = g.input("t", DType::F32, {sym("M"), sym("N")});
    Tensor d = relu(z + b) - t;
    g.output("loss", sum(d * d));
    runtime::Executable exe = compile(g);
    CHECK(exe.program().kernels.size() == 1);
    CHECK(vector_loads(g) >= 3);  // z, t and b in the period's vector loop (the flat walk: none)
    for (int64_t n : {1, 3, 15, 16, 17, 64, 1023})
      for (int64_t m : {1, 7, 300}) {
        INFO("M = " << m << ", N = " << n);
        check(g, {{"M", m}, {"N", n}}, 1e-6);
      }
  }
  // Several dtypes and kinds; two periodic inputs of different periods (c[N] repeats within
  // b[M, N]'s period: read from where the row starts in b's), one with a leading 1.
  for (DType dt : {DType::F32, DType::F64, DType::I32}) {
    Graph g;
    Tensor x = g.input("x", dt, {sym("B"), sym("M"), sym("N")});
    Tensor b = g.input("b", dt, {sym("M"), sym("N")});
    Tensor c = g.input("c", dt, {1, sym("N")});
    g.output("s", sum(x * b + c));
    g.output("mx", max(x - c));
    g.output("mn", min(b * x, {0, 1, 2}, true));
    if (dt != DType::I32) g.output("mean", mean(x + b));
    CHECK(compile(g).program().kernels.size() == 1);
    check_periods(g, dt);
  }
  // Static periods, long and short, read as vectors (through tables up to 256, kMaxTiledPeriod).
  for (int64_t n : {300, 20, 3}) {
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("M"), n});
    Tensor b = g.input("b", DType::F32, {n});
    g.output("s", sum(x * b));
    CHECK(vector_loads(g) >= 2);
    CHECK((testing::count_occurrences(codegen::emit_cpu_mlir(compile(g).program()), "@fuse_cpu_scratch_acquire") > 0) ==
          (n <= 256));
    for (int64_t m : {1, 9, 5000}) check(g, {{"M", m}}, 1e-6);
  }
  // Every element once, and b's every element found: exact sums of small integers, and one
  // largest (then NaN) element of b moved over every column, for periods on both sides of 16.
  for (int64_t n : {5, 16, 37, 255, 257, 1000}) {
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("M"), sym("N")});
    Tensor b = g.input("b", DType::F32, {sym("N")});
    g.output("sum", sum(x + b));
    g.output("max", max(x + b));
    runtime::Executable exe = compile(g);
    const int64_t m = 333;
    ir::HostArray xs(DType::F32, {m, n}), bs(DType::F32, {n});
    double total = 0;
    for (int64_t i = 0; i < m * n; ++i) {
      xs.set_f64(i, static_cast<double>(i % 7));
      total += static_cast<double>(i % 7);
    }
    for (int64_t j = 0; j < n; ++j) {
      bs.set_f64(j, static_cast<double>(j % 5));
      total += static_cast<double>(m * (j % 5));
    }
    INFO("N = " << n);
    CHECK(exe.run({{"x", xs}, {"b", bs}}).at("sum").get_f64(0) == total);
    for (int64_t j = 0; j < n; ++j) {
      ir::HostArray probe = bs;
      probe.set_f64(j, 5000.0);
      if (exe.run({{"x", xs}, {"b", probe}}).at("max").get_f64(0) != 5006.0) FAIL_CHECK("b's largest element at " << j << " was missed");
      probe.set_f64(j, std::numeric_limits<double>::quiet_NaN());
      if (!std::isnan(exe.run({{"x", xs}, {"b", probe}}).at("max").get_f64(0))) FAIL_CHECK("b's NaN at " << j << " was missed");
    }
  }
}

// Row kernels reducing several trailing axes (each row [M, N] of x[B, M, N]) whose outputs are
// all reduced ones walk each row the same way: b[N] repeats every N elements of the row, read as
// vectors from its element 0 in each period (accumulate_walked()); d[B, 1, N] from where the
// row's kept index starts in it; w[M, N] spans the row (RowLocal as before). Short periods (under
// 16, known or at run time) keep the flat walk.
TEST_CASE("row reductions over several trailing axes walk inputs broadcast along the leading ones a period at a time",
          "[cpu][reduce]") {
  auto vector_loads = [](const Graph& g) {
    return testing::count_occurrences(codegen::emit_cpu_mlir(compile(g).program()), "-> vector<");
  };
  {
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("B"), sym("M"), sym("N")});
    Tensor b = g.input("b", DType::F32, {sym("N")});
    g.output("s", sum((x - b) * (x - b), {1, 2}));
    runtime::Executable exe = compile(g);
    CHECK(exe.program().kernels.size() == 1);
    CHECK(exe.program().kernels[0].schedule.form == ir::LoopForm::ReductionRows);
    CHECK(vector_loads(g) >= 2);  // x and b in the period's vector loop (the flat walk: none)
    for (int64_t n : {1, 3, 15, 16, 17, 64, 1023})
      for (int64_t m : {1, 7, 300}) {
        INFO("M = " << m << ", N = " << n);
        check(g, {{"B", 3}, {"M", m}, {"N", n}}, 1e-6);
      }
  }
  // Several dtypes and kinds; periodic inputs of different periods, one varying along the kept
  // dim; every output reduced over the same axes, one with its dims kept.
  for (DType dt : {DType::F32, DType::F64, DType::I32}) {
    Graph g;
    Tensor x = g.input("x", dt, {sym("B"), sym("M"), sym("N")});
    Tensor w = g.input("w", dt, {sym("M"), sym("N")});
    Tensor c = g.input("c", dt, {sym("N")});
    Tensor d = g.input("d", dt, {sym("B"), 1, sym("N")});
    g.output("s", sum(x * w + c, {1, 2}));
    g.output("mx", max(x - d, {1, 2}));
    g.output("mn", min(c * x, {1, 2}, true));
    if (dt != DType::I32) g.output("mean", mean(x + d, {1, 2}));
    CHECK(compile(g).program().kernels.size() == 1);
    check_periods(g, dt);
  }
  // Static periods: 20 walks periods, 3 stays flat (the reduction reading b stays scalar).
  for (int64_t n : {20, 3}) {
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("B"), sym("M"), n});
    Tensor b = g.input("b", DType::F32, {n});
    g.output("s", sum(x * b, {1, 2}));
    CHECK((vector_loads(g) >= 2) == (n == 20));
    for (int64_t m : {1, 9, 500}) check(g, {{"B", 3}, {"M", m}}, 1e-6);
  }
  {  // one varying along the kept dim too
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("B"), sym("M"), 20});
    Tensor d = g.input("d", DType::F32, {sym("B"), 1, 20});
    g.output("s", sum(x * d, {1, 2}));
    CHECK(vector_loads(g) >= 2);
    for (int64_t m : {1, 9, 500}) check(g, {{"B", 3}, {"M", m}}, 1e-6);
  }
  // Every element once, and b's every element found in every row: exact sums of small integers,
  // and one largest (then NaN) element of b moved over every column, for periods on both sides
  // of 16.
  for (int64_t n : {5, 16, 37, 1000}) {
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("B"), sym("M"), sym("N")});
    Tensor b = g.input("b", DType::F32, {sym("N")});
    g.output("sum", sum(x + b, {1, 2}));
    g.output("max", max(x + b, {1, 2}));
    runtime::Executable exe = compile(g);
    const int64_t rows = 3, m = 111;
    ir::HostArray xs(DType::F32, {rows, m, n}), bs(DType::F32, {n});
    std::vector<double> totals(rows, 0.0);
    for (int64_t i = 0; i < rows * m * n; ++i) {
      xs.set_f64(i, static_cast<double>(i % 7));
      totals[static_cast<size_t>(i / (m * n))] += static_cast<double>(i % 7);
    }
    for (int64_t j = 0; j < n; ++j) {
      bs.set_f64(j, static_cast<double>(j % 5));
      for (double& t : totals) t += static_cast<double>(m * (j % 5));
    }
    INFO("N = " << n);
    ir::TensorMap out = exe.run({{"x", xs}, {"b", bs}});
    for (int64_t r = 0; r < rows; ++r) CHECK(out.at("sum").get_f64(r) == totals[static_cast<size_t>(r)]);
    for (int64_t j = 0; j < n; ++j) {
      ir::HostArray probe = bs;
      probe.set_f64(j, 5000.0);
      ir::TensorMap found = exe.run({{"x", xs}, {"b", probe}});
      for (int64_t r = 0; r < rows; ++r)
        if (found.at("max").get_f64(r) != 5006.0) FAIL_CHECK("b's largest element at " << j << " was missed in row " << r);
      probe.set_f64(j, std::numeric_limits<double>::quiet_NaN());
      found = exe.run({{"x", xs}, {"b", probe}});
      for (int64_t r = 0; r < rows; ++r)
        if (!std::isnan(found.at("max").get_f64(r))) FAIL_CHECK("b's NaN at " << j << " was missed in row " << r);
    }
  }
}

// A period walk folds each period from the reduction's init and combines the partials; a user
// combiner that does not regroup (acc * 0.5 + v: the fuse_soak seed 8001357 graph, which came
// out 2.10 for 1.27) must walk flat, in order, as the interpreter folds. One that regroups
// (maximum(acc, abs(v)) from 0) keeps the walk.
TEST_CASE("user combiners that do not regroup fold in order over inputs broadcast along leading dims", "[cpu][reduce]") {
  auto vector_loads = [](const Graph& g) {
    return testing::count_occurrences(codegen::emit_cpu_mlir(compile(g).program()), "-> vector<");
  };
  for (bool keepdims : {true, false}) {
    Graph g;
    Tensor x = g.input("x", DType::F32, {7, sym("M"), 5});
    Tensor b = g.input("b", DType::F32, {sym("M"), 5});
    Tensor e = where(x > 0.5, b, x);
    g.output("halves", reduce([](Scalar acc, Scalar v) { return acc * 0.5 + v; }, e, 0.0, {0, 1, 2}, keepdims));
    g.output("rows", reduce([](Scalar acc, Scalar v) { return acc * 0.5 + v; }, x + b, 0.0, {1, 2}));
    for (int64_t m : {1, 4, 7, 300}) {
      INFO("keepdims " << keepdims << ", M = " << m);
      check(g, {{"M", m}}, 1e-6);
    }
  }
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("B"), sym("M"), sym("N")});
  Tensor b = g.input("b", DType::F32, {sym("N")});
  g.output("absmax", reduce([](Scalar acc, Scalar v) { return maximum(acc, abs(v)); }, x - b, 0.0, {1, 2}));
  g.output("s", sum((x - b) * (x - b), {1, 2}));
  CHECK(vector_loads(g) >= 2);  // the sum still walks periods with vectors
  check_periods(g, DType::F32);
}
