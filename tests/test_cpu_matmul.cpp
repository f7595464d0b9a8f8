// The blocked CPU matmul (packing, cache blocking, register-tiled micro-kernel, fused prologues
// and epilogues) against the reference interpreter: the benchmark shapes, odd and unit shapes,
// every blocking edge (with cache sizes shrunk so that small matrices cross every block
// boundary), batched and transposed operands, every dtype, and the kernel counts of fused layers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <string>
#include <tuple>

#include "codegen/cpu_codegen.h"
#include "frontends/compile.h"
#include "ir/kernel_forms.h"
#include "ir/printer.h"
#include "passes/pipeline.h"
#include "random_graph.h"
#include "runtime/thread_pool.h"

using namespace fuse;

namespace {

// f32 matmuls accumulate in f32 (as BLAS does; the interpreter sums in f64): a dot product of
// length K of values in [-1, 1) is off by about sqrt(K) ulps of its magnitude, at most K.
// atol grows with K; integers and f64 get the same bound, which they meet with room.
double matmul_atol(int64_t k) { return 4e-7 * static_cast<double>(std::max<int64_t>(k, 1)); }

CompileOptions with_target(const Target& t) {
  CompileOptions o;
  o.pipeline.target = t;
  return o;
}

// The host, with caches small enough that a few dozen rows and columns cross every block: kc,
// mc and nc of a couple of register tiles. kc is L1 / 2 / (mr x element size) with AVX-512's
// 6 x 64 f32 tiles (42, in whole vectors 32), L1 / (nr x element size) with AVX2's 6 x 16: 32
// elements either way (L1 at 4 KiB gave AVX2 hosts kc = 128 when it was 2 x L1, past the K of
// every shape but one in "matmul blocking edges").
Target tiny_caches() {
  Target t = Target::host();
  t.l1_bytes = 2 << 10;
  t.l2_bytes = 4 << 10;
  t.l3_bytes = 8 << 10;
  t.cores = 1;
  return t;
}

const ir::Kernel& only_matmul(const runtime::Executable& exe) {
  for (const ir::Kernel& k : exe.program().kernels)
    if (k.kind == ir::KernelKind::Matmul) return k;
  FAIL("no matmul kernel");
  throw;
}

// Whether the kernels were generated in the blocked form (it allocates its packing buffers),
// rather than the fallback of one dot product per element.
bool blocked(const runtime::Executable& exe) {
  return codegen::emit_cpu_mlir(exe.program()).find("@fuse_cpu_scratch_acquire") != std::string::npos;
}

void check(const Graph& g, runtime::Executable& exe, const std::vector<ir::SymbolBindings>& sizes, int64_t k_max) {
  INFO(ir::print_program(exe.program()));
  CHECK(exe.compiled_kernel_count() == static_cast<int>(exe.program().kernels.size()));
  CHECK(blocked(exe));
  for (const ir::SymbolBindings& s : sizes) {
    std::string at;
    for (const auto& [name, size] : s) at += " " + name + "=" + std::to_string(size);
    INFO("at" << at);
    ir::TensorMap inputs = testing::random_inputs(g.ir(), s, 11, /*special_values=*/false);
    CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe.run(inputs), 1e-5, matmul_atol(k_max)) == "");
  }
}

std::vector<ir::SymbolBindings> mkn(const std::vector<std::array<int64_t, 3>>& shapes) {
  std::vector<ir::SymbolBindings> sizes;
  for (auto [m, k, n] : shapes) sizes.push_back({{"M", m}, {"K", k}, {"N", n}});
  return sizes;
}

// tiny_caches() with an L3 of 1 MiB: nc takes many groups of four panels, where tiny_caches()
// gives one.
Target tiny_caches_large_l3() {
  Target t = tiny_caches();
  t.l3_bytes = 1 << 20;
  return t;
}

// Adds c = (a @ b) * 2 to g, a of M x K and b of K x N elements of type t. `packed_a`: as
// (a + a) @ b, whose A (a prologue) is packed on every target; a plain input A is read in place
// on AVX-512 (ir::matmul_reads_a_in_place), whose tasks never share packed B.
void add_doubled_matmul(Graph& g, DType t, bool packed_a = false) {
  Tensor a = g.input("a", t, {sym("M"), sym("K")});
  Tensor b = g.input("b", t, {sym("K"), sym("N")});
  g.output("c", packed_a ? matmul(a + a, b) : matmul(a, b) * 2);
}

// The tiny-cache host with 512-bit vectors: A read in place (compiled on any x86-64 host, run
// only on one with AVX-512).
Target tiny_caches_avx512() {
  Target t = tiny_caches();
  t.vector_bits = 512;
  return t;
}

}  // namespace

TEST_CASE("matmul at the benchmark's square and odd shapes", "[cpu][matmul][large]") {
  // 2048^3 alone would take the interpreter several seconds (sanitizers: minutes); it is run on
  // a slice of rows instead, which the blocked kernel computes exactly like all the others.
  Graph g;
  Tensor a = g.input("a", DType::F32, {sym("M"), sym("K")});
  Tensor b = g.input("b", DType::F32, {sym("K"), sym("N")});
  g.output("c", matmul(a, b));
  runtime::Executable exe = compile(g);
  const ir::Kernel& k = only_matmul(exe);
  CHECK(k.schedule.cpu.mr > 0);
  CHECK(k.schedule.cpu.kc > 0);
  std::vector<std::array<int64_t, 3>> shapes{{256, 256, 256}, {1000, 1000, 1000}, {1023, 1023, 1023}, {2047, 513, 1001}};
  if (FUSE_SANITIZED) shapes = {{256, 256, 256}, {1023, 127, 513}};
  check(g, exe, mkn(shapes), 1023);

  // 2048^3: rows [0, 64) and the last 64 rows of the compiled product against the interpreter
  // on those rows of A.
  ir::SymbolBindings big{{"M", 2048}, {"K", 2048}, {"N", 2048}};
  if (FUSE_SANITIZED) big = {{"M", 300}, {"K", 700}, {"N", 300}};
  ir::TensorMap inputs = testing::random_inputs(g.ir(), big, 5, false);
  ir::HostArray c = exe.run(inputs).at("c");
  int64_t m = big["M"], kk = big["K"], n = big["N"];
  for (int64_t first : {int64_t{0}, m - 64}) {
    INFO("rows " << first << ".." << first + 64);
    ir::TensorMap slice{{"a", ir::HostArray(ir::DType::F32, {64, kk})}, {"b", inputs.at("b")}};
    std::copy_n(inputs.at("a").bytes.begin() + first * kk * 4, 64 * kk * 4, slice.at("a").bytes.begin());
    ir::HostArray expected = ir::interpret(g.ir(), slice).at("c");
    ir::HostArray got(ir::DType::F32, {64, n});
    std::copy_n(c.bytes.begin() + first * n * 4, 64 * n * 4, got.bytes.begin());
    CHECK(testing::compare_outputs({{"c", expected}}, {{"c", got}}, 1e-5, matmul_atol(kk)) == "");
  }
}

TEST_CASE("matmul with unit, empty and odd dims", "[cpu][matmul]") {
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor a = g.input("a", t, {sym("M"), sym("K")});
    Tensor b = g.input("b", t, {sym("K"), sym("N")});
    g.output("c", matmul(a, b));
    runtime::Executable exe = compile(g);
    check(g, exe,
          mkn({{1, 1, 1}, {1, 300, 1}, {1, 1, 300}, {300, 1, 1}, {7, 1, 33}, {1, 1023, 1}, {7, 7, 7}, {13, 31, 33},
               {0, 5, 5}, {5, 0, 5}, {5, 5, 0}, {100, 257, 47}}),
          1023);
  }
}

TEST_CASE("matmul blocking edges: every K, M and N block boundary", "[cpu][matmul]") {
  // With tiny caches kc, mc and nc are a tile or two: these shapes cross several blocks of
  // each, end in partial blocks and partial register tiles, and (K > kc) keep partial sums
  // between K blocks, in the output or, when no output has the matmul's dtype, a task-local
  // buffer.
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor a = g.input("a", t, {sym("M"), sym("K")});
    Tensor b = g.input("b", t, {sym("K"), sym("N")});
    Tensor c = matmul(a, b);
    g.output("c", c);
    g.output("positive", c > 0);
    Graph only_bool;
    {
      Tensor a2 = only_bool.input("a", t, {sym("M"), sym("K")});
      Tensor b2 = only_bool.input("b", t, {sym("K"), sym("N")});
      only_bool.output("positive", matmul(a2, b2) > 0);
    }
    auto sizes = mkn({{1, 1, 1}, {13, 100, 70}, {49, 33, 129}, {97, 257, 65}, {24, 64, 64}});
    runtime::Executable exe = compile(g, with_target(tiny_caches()));
    const ir::CpuSchedule& s = only_matmul(exe).schedule.cpu;
    INFO("mr=" << s.mr << " nr=" << s.nr << " kc=" << s.kc << " mc=" << s.mc << " nc=" << s.nc);
    CHECK(s.kc < 100);
    CHECK(s.mc < 49);
    CHECK(s.nc < 65);
    check(g, exe, sizes, 257);
    runtime::Executable bool_exe = compile(only_bool, with_target(tiny_caches()));
    check(only_bool, bool_exe, sizes, 257);
  }
}

// Run again at 1, 2 and 7 threads (tests/CMakeLists.txt): with several tasks of at least mc rows
// each, a 2-D matmul's tasks share one packed copy of B, each group of panels packed by the task
// that claims it first (ir::SharedPackedB), and claim rows in chunks of whole tiles that shrink
// from mc as the rows run out (the last ones at most mc / 2: B then in blocks of nc_few_rows);
// on one thread the task packs B alone, block by block.
TEST_CASE("2-D blocked matmuls share packed B among tasks", "[cpu][matmul][threads]") {
  int threads = runtime::ThreadPool::global().num_threads();
  // Tiny caches: nc is one group of panels, so N = 200 crosses several column blocks; with a
  // large L3, one column block holds several groups. With L2 three times as large, mc is
  // several tiles, so that the chunks of rows shrink.
  Target large_l3 = tiny_caches_large_l3();
  Target larger_l2 = large_l3;
  larger_l2.l2_bytes = 12 << 10;
  {
    Graph g;
    add_doubled_matmul(g, DType::F32, /*packed_a=*/true);
    runtime::Executable exe = compile(g, with_target(larger_l2));
    const ir::Kernel& k = only_matmul(exe);
    ir::MatmulTiling t = ir::matmul_tiling(k.schedule.cpu);
    INFO("mr=" << t.mr << " mc=" << t.mc);
    REQUIRE(t.mc >= 4 * t.mr);
    REQUIRE_FALSE(ir::matmul_reads_a_in_place(k));
    ir::MatmulSplit shared = ir::matmul_split(k, 2 * t.mc, 70, 200, 2, int64_t{1} << 40);
    CHECK(shared.shared == 1);
    CHECK(shared.row_unit == t.mr);
    CHECK(shared.max_row_units == t.mc / t.mr);
    ir::MatmulSplit unshared = ir::matmul_split(k, 2 * t.mc, 70, 200, 2, 0);  // B too large to share
    CHECK(unshared.shared == 0);
    CHECK(unshared.row_unit == 0);
  }
  {
    // A in place: as many rows, by columns (two groups of panels), nothing shared; the kernel
    // has no code to share B.
    Graph g;
    add_doubled_matmul(g, DType::F32);
    Target in_place_target = larger_l2;
    in_place_target.vector_bits = 512;
    runtime::Executable exe = compile(g, with_target(in_place_target));
    const ir::Kernel& k = only_matmul(exe);
    REQUIRE(ir::matmul_reads_a_in_place(k));
    ir::MatmulTiling t = ir::matmul_tiling(k.schedule.cpu);
    ir::MatmulSplit split = ir::matmul_split(k, 2 * t.mc, 70, 2 * t.group_columns, 2, int64_t{1} << 40);
    CHECK(split.shared == 0);
    CHECK(split.row_unit == 0);
    CHECK(split.column_tasks == 2);
    CHECK(codegen::emit_cpu_mlir(exe.program()).find("@fuse_cpu_claim_panels") == std::string::npos);
    if (Target::host().vector_bits >= 512) check(g, exe, mkn({{400, 100, 200}, {401, 129, 129}, {400, 0, 20}}), 129);
  }
  for (const Target& target : {tiny_caches(), large_l3, larger_l2})
    for (DType t : {DType::F32, DType::F64, DType::I32}) {
      INFO(ir::dtype_name(t) << " on " << threads << " threads, L2 " << target.l2_bytes << ", L3 " << target.l3_bytes);
      Graph g;
      add_doubled_matmul(g, t, /*packed_a=*/true);
      runtime::Executable exe = compile(g, with_target(target));
      const ir::Kernel& k = only_matmul(exe);
      REQUIRE(ir::shares_packed_b(k));
      // Partial sums in a buffer of each chunk's rows (no output has the matmul's dtype).
      Graph only_bool;
      only_bool.output("positive", matmul(only_bool.input("a", t, {sym("M"), sym("K")}),
                                          only_bool.input("b", t, {sym("K"), sym("N")})) > 0);
      std::string mlir = codegen::emit_cpu_mlir(exe.program());
      CHECK(mlir.find("@fuse_cpu_claim_panels") != std::string::npos);
      CHECK(mlir.find("@fuse_cpu_wait_for_panels") != std::string::npos);
      ir::MatmulTiling tiling = ir::matmul_tiling(k.schedule.cpu);
      INFO("kc=" << tiling.kc << " mc=" << tiling.mc << " nc=" << tiling.nc << " group=" << tiling.group_columns);
      // Several K blocks (the last partial), partial groups, and enough rows for every task to
      // take at least mc: the shared path, whatever the thread count.
      CHECK(tiling.kc < 100);
      CHECK(400 / 7 >= tiling.mc);
      if (target.l3_bytes == large_l3.l3_bytes) CHECK(tiling.nc >= 200);
      else CHECK(tiling.nc < 200);
      if (target.l2_bytes == larger_l2.l2_bytes) CHECK(tiling.nc_few_rows < tiling.nc);
      auto sizes = mkn({{400, 100, 200}, {400, 100, 1}, {400, 33, 70}, {401, 129, 129}, {1, 100, 200}, {400, 0, 20}});
      check(g, exe, sizes, 129);
      runtime::Executable bool_exe = compile(only_bool, with_target(target));
      check(only_bool, bool_exe, sizes, 129);
    }
  // Batched matmuls pack each batch's B per task.
  Graph batched;
  Tensor a = batched.input("a", DType::F32, {2, sym("M"), sym("K")});
  Tensor b = batched.input("b", DType::F32, {2, sym("K"), sym("N")});
  batched.output("c", matmul(a, b));
  runtime::Executable exe = compile(batched, with_target(tiny_caches()));
  CHECK_FALSE(ir::shares_packed_b(only_matmul(exe)));
  CHECK(codegen::emit_cpu_mlir(exe.program()).find("@fuse_cpu_claim_panels") == std::string::npos);
  check(batched, exe, mkn({{200, 70, 90}}), 70);
}

// Run again at 1, 2, 7 and 8 threads (tests/CMakeLists.txt): a 2-D matmul of fewer than mc rows
// a thread runs in a grid of column tasks (a whole number of groups of panels each) by chunks of
// their rows (ir::MatmulSplit): on 2 threads by columns where there are more columns than rows;
// a task of at most mc / 2 rows packs B in blocks of nc_few_rows columns.
TEST_CASE("2-D blocked matmuls of few rows split their columns among tasks", "[cpu][matmul][threads]") {
  int threads = runtime::ThreadPool::global().num_threads();
  Target large_l3 = tiny_caches_large_l3();
  {
    Graph g;
    add_doubled_matmul(g, DType::F32, /*packed_a=*/true);
    runtime::Executable exe = compile(g, with_target(tiny_caches()));
    const ir::Kernel& k = only_matmul(exe);
    ir::MatmulTiling t = ir::matmul_tiling(k.schedule.cpu);
    INFO("mc=" << t.mc << " group=" << t.group_columns);
    REQUIRE(t.mc == 12);
    REQUIRE(t.group_columns >= 64);
    auto split = [&](int64_t rows, int64_t columns, int threads, int64_t max_shared = int64_t{1} << 40) {
      ir::MatmulSplit s = ir::matmul_split(k, rows, 70, columns, threads, max_shared);
      return std::pair{s.column_tasks, s.shared};
    };
    CHECK(split(16, 4096, 1) == std::pair<int64_t, int64_t>{1, 0});   // one thread: one task
    CHECK(split(16, 4096, 2) == std::pair<int64_t, int64_t>{2, 0});   // 8 rows a thread < mc
    CHECK(split(16, 4096, 7) == std::pair<int64_t, int64_t>{7, 0});
    CHECK(split(1, 2 * t.group_columns, 7) == std::pair<int64_t, int64_t>{2, 0});  // two groups
    CHECK(split(1, t.group_columns, 7) == std::pair<int64_t, int64_t>{1, 0});      // one group
    CHECK(split(20, 10, 2) == std::pair<int64_t, int64_t>{1, 0});     // more rows than columns
    CHECK(split(24, 4096, 2) == std::pair<int64_t, int64_t>{1, 1});   // mc rows a thread: shared B
    CHECK(split(24, 4096, 2, 0) == std::pair<int64_t, int64_t>{1, 0});  // too large to share
    // More threads: a grid of column tasks by chunks of rows, packing less than either alone.
    for (auto [rows, columns, threads] : {std::tuple{int64_t{512}, 64 * t.group_columns, 64}, std::tuple{int64_t{90}, int64_t{256}, 8}}) {
      ir::MatmulSplit s = ir::matmul_split(k, rows, 70, columns, threads, int64_t{1} << 40);
      INFO(rows << " x " << columns << " on " << threads << " threads: " << s.column_tasks << " x " << s.row_tasks);
      CHECK(s.column_tasks > 1);
      CHECK(s.row_tasks > 1);
      CHECK(s.column_tasks * s.row_tasks <= threads);
      CHECK(s.shared == 0);
    }
    CHECK(ir::matmul_split(k, 16, 70, 4096, 2, 0).row_tasks == 1);
  }
  {
    // A in place: tasks of mc rows or more also split by columns (nothing shared); still by rows
    // where the columns make one group, or are fewer than the rows.
    Graph g;
    add_doubled_matmul(g, DType::F32);
    runtime::Executable exe = compile(g, with_target(tiny_caches_avx512()));
    const ir::Kernel& k = only_matmul(exe);
    REQUIRE(ir::matmul_reads_a_in_place(k));
    ir::MatmulTiling t = ir::matmul_tiling(k.schedule.cpu);
    auto split = [&](int64_t rows, int64_t columns, int threads) {
      ir::MatmulSplit s = ir::matmul_split(k, rows, 70, columns, threads, int64_t{1} << 40);
      return std::array<int64_t, 3>{s.column_tasks, s.row_tasks, s.shared};
    };
    CHECK(split(24, 4096, 2) == std::array<int64_t, 3>{2, 1, 0});
    CHECK(split(8 * t.mc, 2 * t.group_columns, 2) == std::array<int64_t, 3>{2, 1, 0});
    CHECK(split(8 * t.mc, t.group_columns, 2) == std::array<int64_t, 3>{1, 1, 0});
    CHECK(split(8 * t.mc, 3 * t.group_columns, 7) == std::array<int64_t, 3>{3, 2, 0});
    CHECK(split(20, 10, 2) == std::array<int64_t, 3>{1, 1, 0});
  }
  // The thread count here (1, 2, 7, 8): 90 x 256 takes a grid from 4 threads on (checked above for 8).
  if (threads >= 8) {
    Graph g;
    add_doubled_matmul(g, DType::F32);
    ir::MatmulSplit s = ir::matmul_split(only_matmul(compile(g, with_target(tiny_caches()))), 90, 70, 256, threads, 0);
    CHECK(s.row_tasks > 1);
  }
  for (const Target& target : {tiny_caches(), large_l3})
    for (DType t : {DType::F32, DType::F64, DType::I32}) {
      INFO(ir::dtype_name(t) << " on " << threads << " threads, L3 " << target.l3_bytes);
      Graph g;
      add_doubled_matmul(g, t);
      // Partial sums in a task-local buffer (no output has the matmul's dtype).
      Graph only_bool;
      only_bool.output("positive", matmul(only_bool.input("a", t, {sym("M"), sym("K")}),
                                          only_bool.input("b", t, {sym("K"), sym("N")})) > 0);
      runtime::Executable exe = compile(g, with_target(target));
      ir::MatmulTiling tiling = ir::matmul_tiling(only_matmul(exe).schedule.cpu);
      INFO("kc=" << tiling.kc << " nc=" << tiling.nc << " nc_few_rows=" << tiling.nc_few_rows);
      if (target.l3_bytes == large_l3.l3_bytes) CHECK(tiling.nc_few_rows < tiling.nc);
      // Rows: one, a few (nc_few_rows), a tile and a bit (past mc / 2); columns: one group, a
      // partial group, groups that do not divide among 2 or 7 tasks; K: several blocks.
      auto sizes = mkn({{1, 70, 1000}, {5, 70, 129}, {16, 33, 300}, {13, 100, 1023}, {7, 1, 200}, {3, 70, 1}, {90, 70, 256}});
      check(g, exe, sizes, 100);
      runtime::Executable bool_exe = compile(only_bool, with_target(target));
      check(only_bool, bool_exe, sizes, 100);
    }
}

TEST_CASE("batched matmul with broadcast batch dims", "[cpu][matmul]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {3, sym("M"), sym("K")});
  Tensor w = g.input("w", DType::F32, {sym("K"), sym("N")});
  Tensor wb = g.input("wb", DType::F32, {3, sym("K"), sym("N")});
  Tensor x1 = g.input("x1", DType::F32, {2, 1, sym("M"), sym("K")});
  Tensor w2 = g.input("w2", DType::F32, {1, 3, sym("K"), sym("N")});
  g.output("shared_w", matmul(x, w));
  g.output("batched", matmul(x, wb) * 2);
  g.output("outer_batches", matmul(x1, w2));
  runtime::Executable exe = compile(g, with_target(tiny_caches()));
  check(g, exe, mkn({{1, 1, 1}, {5, 3, 7}, {37, 70, 41}}), 70);
  runtime::Executable host = compile(g);
  check(g, host, mkn({{130, 300, 70}}), 300);
}

TEST_CASE("transposed operands are absorbed by the packing", "[cpu][matmul]") {
  // 4- and 8-byte types: a transposed B is packed in lanes x lanes register transposes (16 or 8
  // lanes on AVX-512), with K remainders element by element.
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor a = g.input("a", t, {sym("M"), sym("K")});
    Tensor at = g.input("at", t, {sym("K"), sym("M")});
    Tensor b = g.input("b", t, {sym("K"), sym("N")});
    Tensor bt = g.input("bt", t, {sym("N"), sym("K")});
    g.output("a_bt", matmul(a, transpose(bt)));
    g.output("at_b", matmul(transpose(at), b));
    g.output("at_bt", matmul(transpose(at), transpose(bt)));
    Tensor x = g.input("x", t, {2, sym("K"), sym("M")});
    g.output("batched_xt_b", matmul(permute(x, {0, 2, 1}), b));
    Tensor y = g.input("y", t, {2, sym("N"), sym("K")});
    g.output("batched_a_yt", matmul(a, permute(y, {0, 2, 1})));
    g.output("a_bt_prologue", matmul(a, transpose(bt + bt)));
    runtime::Executable exe = compile(g, with_target(tiny_caches()));
    // One kernel per matmul: no transposed copy materialized first.
    CHECK(exe.program().kernels.size() == 6);
    check(g, exe, mkn({{1, 1, 1}, {7, 33, 17}, {50, 100, 70}}), 100);
    runtime::Executable host = compile(g);
    check(g, host, mkn({{257, 300, 129}}), 300);

    // Views between matmuls (attention's q @ k.T, k a product): the second matmul's packing
    // reads the stored product through the transpose. Two sums of K products in a row: the
    // tolerance of a dot product of length K^2.
    Graph chain;
    Tensor ca = chain.input("a", t, {sym("M"), sym("K")});
    Tensor cbt = chain.input("bt", t, {sym("N"), sym("K")});
    Tensor ck = chain.input("k", t, {sym("K"), sym("K")});
    chain.output("a_pt", matmul(ca, transpose(matmul(cbt, ck))));
    runtime::Executable chained = compile(chain, with_target(tiny_caches()));
    CHECK(chained.program().kernels.size() == 2);
    check(chain, chained, mkn({{1, 1, 1}, {7, 33, 17}}), 33 * 33);
    runtime::Executable chained_host = compile(chain);
    check(chain, chained_host, mkn({{130, 150, 129}}), 150 * 150);
  }
}

TEST_CASE("fused prologues and epilogues around the blocked matmul", "[cpu][matmul]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("M"), sym("K")});
  Tensor w = g.input("w", DType::F32, {sym("K"), sym("N")});
  Tensor bias = g.input("bias", DType::F32, {sym("N")});
  Tensor row_scale = g.input("row_scale", DType::F32, {sym("M"), 1});
  Tensor residual = g.input("residual", DType::F32, {sym("M"), sym("N")});
  g.output("mlp", relu(matmul(x, w) + bias));
  g.output("scaled", matmul(x * 0.5, exp(w)) * row_scale + residual);
  g.output("gelu_ish", sigmoid(matmul(x, w) * 1.702) * matmul(x, w));
  runtime::Executable exe = compile(g, with_target(tiny_caches()));
  check(g, exe, mkn({{1, 1, 1}, {7, 100, 33}, {49, 70, 129}}), 100);
  runtime::Executable host = compile(g);
  check(g, host, mkn({{300, 257, 200}}), 257);
}

// An epilogue with a transcendental (GELU's tanh) runs in a loop over the tile's rows from a
// buffer instead of once per accumulator (emit_matmul_blocked): whole and edge tiles, several K
// blocks (tiny caches), batches, a second output storing the product, f32 and f64.
TEST_CASE("a costly epilogue runs per tile row at every edge", "[cpu][matmul]") {
  for (DType t : {DType::F32, DType::F64}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor x = g.input("x", t, {2, sym("M"), sym("K")});
    Tensor w = g.input("w", t, {sym("K"), sym("N")});
    Tensor bias = g.input("bias", t, {sym("N")});
    Tensor p = matmul(x, w) + bias;
    g.output("gelu", 0.5 * p * (1.0 + tanh(0.7978845608 * (p + 0.044715 * p * p * p))));
    g.output("biased", p);
    runtime::Executable exe = compile(g, with_target(tiny_caches()));
    CHECK(exe.program().kernels.size() == 1);
    check(g, exe, mkn({{1, 1, 1}, {7, 100, 33}, {13, 40, 47}}), 100);
    runtime::Executable host = compile(g);
    check(g, host, mkn({{130, 70, 129}}), 70);
  }
}

// Several elementwise consumers of one product, each in a kernel of its own before, join the
// matmul's epilogue (passes/fusion.cpp, fuse_matmul_epilogue_siblings): one kernel writes every
// output, on the blocked CPU form (whole and edge tiles, several K blocks), the per-element
// fallback (integers) and the CUDA simulator.
TEST_CASE("elementwise consumers of one matmul in several kernels share its epilogue", "[cpu][matmul][fusion][sim]") {
  for (DType t : {DType::F32, DType::F64, DType::I32}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor x = g.input("x", t, {sym("M"), sym("K")});
    Tensor w = g.input("w", t, {sym("K"), sym("N")});
    Tensor bias = g.input("bias", t, {sym("N")});
    Tensor row = g.input("row", t, {sym("M"), 1});
    Tensor p = matmul(x, w);
    g.output("biased", p + bias);
    g.output("squared", p * p - row);
    if (ir::is_float(t)) g.output("activated", tanh(p + bias) * 0.5);
    REQUIRE(passes::run_pipeline(g.ir()).program.kernels.size() == 1);
    runtime::Executable exe = compile(g, with_target(tiny_caches()));
    REQUIRE(exe.program().kernels.size() == 1);
    CHECK(exe.program().kernels[0].body.outputs.size() == (ir::is_float(t) ? 3u : 2u));
    check(g, exe, mkn({{1, 1, 1}, {7, 100, 33}, {13, 40, 47}}), 100);
    runtime::Executable host = compile(g);
    check(g, host, mkn({{130, 70, 129}}), 70);
    ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"M", 7}, {"K", 33}, {"N", 17}}, 3, false);
    INFO("on the CUDA simulator");
    CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), compile_cuda(g, Target::cuda_sim())->run_host(inputs),
                                   1e-5, matmul_atol(33)) == "");
  }
}

// Consumers that stay out of the epilogue: one reading the product through a transpose (another
// tile's element), one over another space (a column sum), and one that also reads that column
// sum (it would run both before and after the reduction's kernel).
TEST_CASE("consumers that cannot run on the product's tile keep kernels of their own", "[cpu][matmul][fusion]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), sym("N")});
  Tensor w = g.input("w", DType::F32, {sym("N"), sym("N")});
  Tensor p = matmul(x, w);
  g.output("relu", relu(p));
  g.output("flipped", transpose(p) * 2.0);
  REQUIRE(passes::run_pipeline(g.ir()).program.kernels.size() == 2);

  Graph cycle;
  Tensor cx = cycle.input("x", DType::F32, {sym("M"), sym("K")});
  Tensor cw = cycle.input("w", DType::F32, {sym("K"), sym("N")});
  Tensor cp = matmul(cx, cw);
  Tensor column_sums = sum(cp, {0});
  cycle.output("scaled", relu(cp));
  cycle.output("centered", cp - column_sums);
  runtime::Executable exe = compile(cycle);
  CHECK(exe.program().kernels.size() == 3);  // the matmul with relu, the column sums, the centering
  check(cycle, exe, mkn({{1, 1, 1}, {33, 40, 17}}), 40);
}

TEST_CASE("a fused MLP layer is one kernel", "[cpu][matmul][fusion]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("M"), sym("K")});
  Tensor w = g.input("w", DType::F32, {sym("K"), sym("N")});
  Tensor bias = g.input("bias", DType::F32, {sym("N")});
  g.output("y", relu(matmul(x, w) + bias));
  runtime::Executable exe = compile(g);
  REQUIRE(exe.program().kernels.size() == 1);
  CHECK(exe.program().kernels[0].kind == ir::KernelKind::Matmul);
  check(g, exe, mkn({{64, 128, 96}}), 128);

  Graph two;
  Tensor x2 = two.input("x", DType::F32, {sym("M"), sym("K")});
  Tensor w1 = two.input("w1", DType::F32, {sym("K"), sym("K")});
  Tensor w2 = two.input("w2", DType::F32, {sym("K"), sym("N")});
  two.output("y", matmul(relu(matmul(x2, w1)), w2));
  runtime::Executable exe2 = compile(two);
  CHECK(exe2.program().kernels.size() == 2);  // two matmuls never fuse; relu rides on the first
  check(two, exe2, mkn({{33, 40, 17}}), 40 * 40);
}

TEST_CASE("the matmul generator retargets to 256-bit vectors (AVX2: 8 f32 lanes, 6 x 16 tiles)", "[cpu][matmul]") {
  Target avx2 = Target::host();
  avx2.vector_bits = 256;  // runs on any x86-64 host with AVX2 (this one too, if it has AVX-512)
  avx2.l1_bytes = 32 << 10;
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("M"), sym("K")});
  Tensor w = g.input("w", DType::F32, {sym("K"), sym("N")});
  Tensor bias = g.input("bias", DType::F32, {sym("N")});
  g.output("y", relu(matmul(x, w) + bias));
  runtime::Executable exe = compile(g, with_target(avx2));
  const ir::CpuSchedule& s = only_matmul(exe).schedule.cpu;
  CHECK(s.vector_width == 8);
  CHECK(s.mr == 6);
  CHECK(s.nr == 16);
  // The 6 x 16 tile's kc x nr panel of B fills L1 once (kc = 1024, twice L1, ran 2048^3 9% slower
  // on a Zen 3), and A is packed.
  CHECK(s.kc == 512);
  CHECK_FALSE(s.a_in_place);
  // AVX-512's 6 x 64 tile reads A in place, its six rows of kc in half of L1: 32 KiB / 2 / 24
  // bytes, 682, in whole vectors 672.
  Target avx512 = avx2;
  avx512.vector_bits = 512;
  runtime::Executable wide_exe = compile(g, with_target(avx512));
  const ir::CpuSchedule& wide = only_matmul(wide_exe).schedule.cpu;
  CHECK(wide.mr == 6);
  CHECK(wide.nr == 64);
  CHECK(wide.kc == 672);
  CHECK(wide.a_in_place);
  std::string mlir = codegen::emit_cpu_mlir(exe.program());
  CHECK(mlir.find("vector.fma") != std::string::npos);
  CHECK(mlir.find("vector<8xf32>") != std::string::npos);
  CHECK(mlir.find("vector<16xf32>") == std::string::npos);
  check(g, exe, mkn({{1, 1, 1}, {13, 70, 33}, {100, 300, 129}}), 300);
}

// What the first K loop of a blocked micro-kernel holds (a whole tile's): the scf.for whose
// results are the tile's accumulator vectors and, with A read in place, its pointers into A
// (`results` in all), up to its scf.yield (its body has no nested regions). -1s: no such loop.
struct KLoop {
  int prefetches = -1, broadcasts = -1, opaque_pointers = -1;
};
static KLoop first_k_loop(const std::string& mlir, int results) {
  size_t at = mlir.find(":" + std::to_string(results) + " = scf.for");
  if (at == std::string::npos) return {};
  size_t end = mlir.find("scf.yield", at);
  auto count = [&](const std::string& what) {
    int n = 0;
    for (size_t p = mlir.find(what, at); p < end; p = mlir.find(what, p + 1)) ++n;
    return n;
  };
  return {count("llvm.intr.prefetch"), count("vector.broadcast"), count("llvm.inline_asm")};
}

// Each step of K reads a row of the packed B panel (nr elements: four lines with AVX-512's f32
// tile, one with AVX2's) and prefetches that row's lines kPackedBPrefetchBytes ahead; a whole
// tile's loop takes four steps an iteration (an mr-row broadcast of A each). With AVX-512, A is
// read where it lies, from one pointer per three rows that the loop carries (an empty asm hides
// each step from LLVM's strength reduction); with AVX2, and wherever A is not a row-major input
// (here A's transpose), from packed A.
TEST_CASE("the micro-kernel's K loop steps four at a time and prefetches packed B ahead", "[cpu][matmul]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("M"), sym("K")});
  Tensor w = g.input("w", DType::F32, {sym("K"), sym("N")});
  g.output("y", matmul(x, w));
  Target avx2 = Target::host();
  avx2.vector_bits = 256;
  Target avx512 = Target::host();
  avx512.vector_bits = 512;
  runtime::Executable narrow = compile(g, with_target(avx2));
  runtime::Executable wide = compile(g, with_target(avx512));
  REQUIRE(only_matmul(narrow).schedule.form == ir::LoopForm::BlockedMatmul);
  KLoop narrow_loop = first_k_loop(codegen::emit_cpu_mlir(narrow.program()), 6 * 2);
  CHECK(narrow_loop.prefetches == 4 * 1);
  CHECK(narrow_loop.broadcasts == 4 * 6);
  CHECK(narrow_loop.opaque_pointers == 0);
  KLoop wide_loop = first_k_loop(codegen::emit_cpu_mlir(wide.program()), 6 * 4 + 2);
  CHECK(wide_loop.prefetches == 4 * 4);
  CHECK(wide_loop.broadcasts == 4 * 6);
  CHECK(wide_loop.opaque_pointers == 2);
  Graph transposed;
  Tensor xt = transposed.input("xt", DType::F32, {sym("K"), sym("M")});
  transposed.output("y", matmul(permute(xt, {1, 0}), transposed.input("w", DType::F32, {sym("K"), sym("N")})));
  runtime::Executable wide_packed = compile(transposed, with_target(avx512));
  CHECK(blocked(wide_packed));
  KLoop packed_loop = first_k_loop(codegen::emit_cpu_mlir(wide_packed.program()), 6 * 4);
  CHECK(packed_loop.broadcasts == 4 * 6);
  CHECK(packed_loop.opaque_pointers == 0);
  // Depths that are not a multiple of four (3, 5, 7; the last K block of 770 and 1023) take the
  // edge tiles' loop for whole tiles too.
  auto shapes = mkn({{1, 1, 1}, {24, 3, 64}, {25, 5, 65}, {12, 7, 32}, {13, 1023, 33}, {100, 301, 129}, {36, 770, 96}});
  if (Target::host().vector_bits >= 512) {
    check(g, wide, shapes, 1023);
    check(transposed, wide_packed, shapes, 1023);
  }
  check(g, narrow, shapes, 1023);
}
