// Elementwise kernels over broadcast or permuted operands: the row form (SIMD along the
// innermost dim) and the tiled form (transposes), including ranges split mid-row by the
// thread pool.
#include <catch2/catch.hpp>

#include <limits>

#include "codegen/cpu_codegen.h"
#include "frontends/compile.h"
#include "cpu_targets.h"
#include "ir/kernel_forms.h"
#include "ir/printer.h"
#include "random_graph.h"

using namespace fuse;

namespace {

void check(const Graph& g, const ir::SymbolBindings& sizes, const CompileOptions& options = {}) {
  ir::TensorMap inputs = testing::random_inputs(g.ir(), sizes, 5);
  runtime::Executable exe = compile(g, options);
  INFO(ir::print_program(exe.program()));
  CHECK(exe.compiled_kernel_count() == static_cast<int>(exe.program().kernels.size()));
  CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe.run(inputs), 2e-6, 1e-6) == "");
}

// Row counts x widths: single rows and columns, odd widths around the vector width, and
// [1001, 1023] whose million elements the thread pool splits in the middle of a row.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 1}, {7, 1}, {1, 7}, {7, 15}, {7, 17},
                                                          {3, 1023}, {1001, 1023}, {0, 5}, {5, 0}};

}  // namespace

TEST_CASE("broadcast rows and columns into a matrix", "[cpu][rows]") {
  for (auto [r, c] : kShapes) {
    INFO("R = " << r << ", C = " << c);
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
    Tensor row = g.input("row", DType::F32, {sym("C")});
    Tensor column = g.input("column", DType::F32, {sym("R"), 1});
    Tensor scale = g.input("scale", DType::F32);
    g.output("bias", x + row);
    g.output("outer", column * row);  // no operand shaped like the space
    g.output("mixed", exp(x - column) * scale + row);
    check(g, {{"R", r}, {"C", c}});
  }
}

TEST_CASE("broadcasts of every dtype and rank 3", "[cpu][rows]") {
  for (DType t : ir::kAllDTypes) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor x = g.input("x", t, {sym("A"), sym("B"), sym("C")});
    Tensor plane = g.input("plane", t, {sym("B"), sym("C")});
    Tensor middle = g.input("middle", t, {sym("A"), 1, sym("C")});
    if (t == DType::Bool) {
      g.output("y", logical_or(logical_and(x, plane), middle));
    } else {
      g.output("y", x * plane + middle);
      g.output("z", maximum(plane, middle));
    }
    check(g, {{"A", 3}, {"B", 5}, {"C", 37}});
    check(g, {{"A", 40}, {"B", 30}, {"C", 1001}});
  }
}

TEST_CASE("transposes and permutes run tiled", "[cpu][rows][transpose]") {
  for (auto [r, c] : kShapes) {
    INFO("R = " << r << ", C = " << c);
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
    Tensor y = g.input("y", DType::F32, {sym("C"), sym("R")});
    g.output("t", transpose(x));
    g.output("sum", x + transpose(y));  // one operand contiguous, one strided
    check(g, {{"R", r}, {"C", c}});
  }
  Graph g;
  Tensor t = g.input("t", DType::F64, {sym("A"), sym("B"), sym("C")});
  g.output("p102", permute(t, {1, 0, 2}));  // rows move, the innermost dim stays: row form
  g.output("p021", permute(t, {0, 2, 1}));  // the innermost dim moves: tiled
  g.output("p210", permute(t, {2, 1, 0}) * 2.0);
  check(g, {{"A", 3}, {"B", 17}, {"C", 33}});
  check(g, {{"A", 2}, {"B", 300}, {"C", 1001}});
}

// issue 15: whole lanes x lanes tiles of a transpose are transposed in registers (vector.shuffle
// in the kernel's MLIR); rows and columns past the last whole tile, ranges the thread pool splits
// mid-row (CTest runs [transpose] at 1, 2 and 7 threads) and bool (1-byte) outputs go element by
// element. Shapes are the output's, rows x columns.
namespace {

const std::vector<std::pair<int64_t, int64_t>> kTileShapes = {{16, 16},  {1, 7},    {7, 1},      {17, 33}, {1023, 5},
                                                              {64, 48}, {48, 64}, {4096, 16}, {257, 1031}, {0, 16}};

// The kernel's MLIR, and checks that the program is one TiledRows kernel.
std::string one_tiled_kernel(const Graph& g, const CompileOptions& options = {}) {
  runtime::Executable exe = compile(g, options);
  REQUIRE(exe.program().kernels.size() == 1);
  CHECK(exe.program().kernels[0].schedule.form == ir::LoopForm::TiledRows);
  return codegen::emit_cpu_mlir(exe.program());
}

bool shuffles(const std::string& mlir) { return mlir.find("vector.shuffle") != std::string::npos; }

// `transpose(a) * 2.0 + y` into `g`: one operand transposed, y read along its rows. A strip would
// read one line from each of a thousand rows of y, so such tiles keep bands walked across.
void transpose_plus_rows(Graph& g, DType t) {
  Tensor a = g.input("a", t, {sym("M"), sym("N")});
  Tensor y = g.input("y", t, {sym("N"), sym("M")});
  g.output("z", transpose(a) * 2.0 + y);
}

// The host with 256-bit vectors (it runs AVX2 code too), streaming from 64 KiB moved.
CompileOptions avx2_streaming_from_64k() {
  CompileOptions options;
  options.pipeline.target = testing::streams_from_64k();
  options.pipeline.target.vector_bits = 256;
  return options;
}

// The 256-bit vectors, and the host's 512-bit ones where it has them (streaming from 64 KiB).
std::vector<CompileOptions> widths_this_host_runs() { return testing::vector_widths_this_host_runs(avx2_streaming_from_64k()); }

size_t count_streamed(const std::string& mlir) { return testing::count_occurrences(mlir, "nontemporal"); }

}  // namespace

TEST_CASE("transposes in registers across dtypes and odd sizes", "[cpu][rows][transpose]") {
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor x = g.input("x", t, {sym("M"), sym("N")});
    g.output("xt", transpose(x));
    CHECK(shuffles(one_tiled_kernel(g)) == (t != DType::Bool));  // bool takes the element path
    for (auto [n, m] : kTileShapes) {
      INFO("N = " << n << ", M = " << m);
      check(g, {{"N", n}, {"M", m}});
    }
  }
}

TEST_CASE("transposes in registers with an elementwise body", "[cpu][rows][transpose]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("M"), sym("N")});
  Tensor y = g.input("y", DType::F32, {sym("N"), sym("M")});
  Tensor row = g.input("row", DType::F32, {sym("M")});
  Tensor column = g.input("column", DType::F32, {sym("N"), 1});
  Tensor x64 = g.input("x64", DType::F64, {sym("M"), sym("N")});
  g.output("scaled", transpose(x) * 2.0 + y);       // one operand transposed, one along the rows
  g.output("biased", exp(transpose(x)) - row * column);  // broadcast rows and columns
  g.output("selected", where(transpose(x) > y, y, transpose(x) + 1.0));  // a bool computed after the shuffles
  g.output("mixed", cast(transpose(x64), DType::F32) + y);  // f64 lanes: 8 x 8 tiles of f32 outputs
  CHECK(shuffles(one_tiled_kernel(g)));
  for (auto [n, m] : kTileShapes) {
    INFO("N = " << n << ", M = " << m);
    check(g, {{"N", n}, {"M", m}});
  }
}

TEST_CASE("batched transposes of the last two axes in registers", "[cpu][rows][transpose]") {
  for (DType t : {DType::F32, DType::F64, DType::I32}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor x = g.input("x", t, {sym("B"), sym("M"), sym("N")});
    Tensor y = g.input("y", t, {sym("B"), sym("N"), sym("M")});
    g.output("z", permute(x, {0, 2, 1}) + y);
    CHECK(shuffles(one_tiled_kernel(g)));
    // Matrices whose rows are not whole tiles make tiles that would straddle two matrices.
    for (auto [n, m] : std::vector<std::pair<int64_t, int64_t>>{{16, 16}, {17, 33}, {64, 48}, {7, 300}, {300, 7}, {1, 7}}) {
      INFO("N = " << n << ", M = " << m);
      check(g, {{"B", 3}, {"N", n}, {"M", m}});
      check(g, {{"B", 40}, {"N", n}, {"M", m}});
    }
  }
}

TEST_CASE("transposes in registers on 256-bit vectors and large enough to stream", "[cpu][rows][transpose]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("M"), sym("N")});
  g.output("xt", transpose(x) * 3.0);
  CompileOptions avx2 = avx2_streaming_from_64k();  // 8 x 8 tiles of f32
  std::string mlir = one_tiled_kernel(g, avx2);
  CHECK(shuffles(mlir));
  CHECK(mlir.find("vector<16xf32>") == std::string::npos);
  for (auto [n, m] : kTileShapes) {
    INFO("N = " << n << ", M = " << m);
    check(g, {{"N", n}, {"M", m}}, avx2);
  }
  // Over streaming_bytes / 2 of output (64 KiB here; 4096 x 16 above streams too) with rows of
  // whole 64-byte lines: non-temporal stores, two 8 x 8 tiles across filling each line, in
  // strips walked down blocks of 1024 rows; 2051 rows: two blocks, a partial tile of rows at the
  // end, and thread ranges that start mid-row. Rows of 72 and 75 (not whole lines: nothing
  // streams) end in a lone tile, and then elements.
  CHECK(mlir.find("nontemporal") != std::string::npos);
  for (int64_t m : {64, 72, 75}) {
    INFO("M = " << m);
    check(g, {{"N", 2051}, {"M", m}}, avx2);
  }
}

TEST_CASE("AVX2 transposes stream whole lines only when no operand is read along rows", "[cpu][rows][transpose][streaming]") {
  CompileOptions avx2 = avx2_streaming_from_64k();
  for (DType t : {DType::F32, DType::F64}) {  // 8 x 8 and 4 x 4 tiles, two across a line
    INFO(ir::dtype_name(t));
    Graph transposed;
    Tensor x = transposed.input("x", t, {sym("M"), sym("N")});
    Tensor column = transposed.input("column", t, {sym("N"), 1});
    transposed.output("xt", transpose(x) * column);  // a column: constant along the rows
    CHECK(one_tiled_kernel(transposed, avx2).find("nontemporal") != std::string::npos);
    // 30 x 40: below the target's 64 KiB, ordinary stores; 1100 x 64 and 1030 x 48: streamed,
    // in two blocks of rows; 17 x 4100: rows that are not whole lines.
    for (auto [n, m] : std::vector<std::pair<int64_t, int64_t>>{{30, 40}, {1100, 64}, {1030, 48}, {17, 4100}}) {
      INFO("N = " << n << ", M = " << m);
      check(transposed, {{"N", n}, {"M", m}}, avx2);
    }
    // y read along its rows: bands and ordinary stores (32-byte halves of lines).
    Graph mixed;
    transpose_plus_rows(mixed, t);
    CHECK(one_tiled_kernel(mixed, avx2).find("nontemporal") == std::string::npos);
    check(mixed, {{"N", 257}, {"M", 1031}}, avx2);
  }
}

// 512-bit tiles (16 x 16 f32, 8 x 8 f64): a tile row is one whole line, one tile across. Where
// the output streams, strips of one tile of columns walk down blocks of 1024 rows a tile at a
// time, else bands of two tiles walk across (LLVM legalizes the 512-bit vectors on an AVX2 host,
// so this runs anywhere).
TEST_CASE("512-bit transposes walk strips down blocks of rows where their output streams", "[cpu][rows][transpose][streaming]") {
  CompileOptions wide;
  wide.pipeline.target = testing::streams_from_64k();
  wide.pipeline.target.vector_bits = 512;
  for (DType t : {DType::F32, DType::F64}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor x = g.input("x", t, {sym("M"), sym("N")});
    Tensor column = g.input("column", t, {sym("N"), 1});
    g.output("xt", transpose(x) * column);  // a column: constant along the rows
    std::string mlir = one_tiled_kernel(g, wide);
    CHECK(count_streamed(mlir) > 0);
    CHECK(mlir.find("arith.constant 1024 : i64") != std::string::npos);  // the strips' blocks of rows
    // Output rows x columns. 2051: two blocks and three rows of elements; 1077: a block, a
    // shorter one and five rows of elements; columns of 48 and 80 f32
    // (whole lines, not whole tiles for f64) and 1100 (not whole lines: bands, ordinary
    // stores); 40 x 24: below 64 KiB (bands). Thread ranges start mid-row.
    for (auto [n, m] : std::vector<std::pair<int64_t, int64_t>>{{2051, 64}, {1077, 48}, {1030, 80}, {300, 1100}, {40, 24}}) {
      INFO("N = " << n << ", M = " << m);
      check(g, {{"N", n}, {"M", m}}, wide);
    }
    // An operand read along its rows: bands only, as on AVX2.
    Graph mixed;
    transpose_plus_rows(mixed, t);
    CHECK(one_tiled_kernel(mixed, wide).find("arith.constant 1024 : i64") == std::string::npos);
    check(mixed, {{"N", 1100}, {"M", 64}}, wide);
    // Batches of matrices: the strips of each matrix start at its first row.
    Graph batched;
    Tensor b = batched.input("b", t, {sym("B"), sym("M"), sym("N")});
    batched.output("bt", permute(b, {0, 2, 1}));
    check(batched, {{"B", 3}, {"N", 1061}, {"M", 32}}, wide);
  }
}

TEST_CASE("kernels larger than the caches stream their output (non-temporal stores)", "[cpu][streaming]") {
  // Over the target's streaming_bytes moved (64 KiB here, 32 MiB by default): the aligned middle of each thread's range is written with streaming
  // stores, after scalar iterations up to a 64-byte boundary (outputs need not be aligned).
  for (DType t : {DType::F32, DType::F64, DType::Bool, DType::I32}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor x = g.input("x", t, {sym("N")});
    Tensor y = g.input("y", t, {sym("N")});
    if (t == DType::Bool) g.output("z", logical_or(x, logical_not(y)));
    else g.output("z", x * y + x);
    CompileOptions streaming;
    streaming.pipeline.target = testing::streams_from_64k();
    check(g, {{"N", 140'003}}, streaming);
  }
}

// With 256-bit vectors (AVX2) large outputs stream too: two 32-byte non-temporal stores per line
// from a vector boundary. The contiguous form (f32 and f64, a thread's range starting mid-line),
// rows plus a broadcast row (rows that are not whole lines: elements up to the first line one at
// a time), and a row-wise kernel's output (softmax). Runs on any x86-64 host with AVX2.
TEST_CASE("AVX2 kernels stream their output with 32-byte non-temporal stores", "[cpu][streaming][threads]") {
  CompileOptions avx2 = avx2_streaming_from_64k();
  auto streams = [&](const Graph& g) {
    runtime::Executable exe = compile(g, avx2);
    std::string mlir = codegen::emit_cpu_mlir(exe.program());
    return mlir.find("nontemporal") != std::string::npos;
  };
  for (DType t : {DType::F32, DType::F64}) {
    INFO(ir::dtype_name(t));
    Graph contiguous;
    Tensor x = contiguous.input("x", t, {sym("N")});
    Tensor y = contiguous.input("y", t, {sym("N")});
    contiguous.output("z", x * y + x);
    CHECK(streams(contiguous));
    check(contiguous, {{"N", 140'003}}, avx2);
    Graph rows;
    Tensor a = rows.input("a", t, {sym("N"), sym("M")});
    Tensor row = rows.input("row", t, {sym("M")});
    rows.output("c", a * 2.0 + row);
    CHECK(streams(rows));
    check(rows, {{"N", 131}, {"M", 1001}}, avx2);
  }
  Graph softmax;
  Tensor x = softmax.input("x", DType::F32, {sym("R"), sym("C")});
  Tensor e = exp(x - max(x, -1, true));
  softmax.output("softmax", e / sum(e, -1, true));
  CHECK(streams(softmax));
  check(softmax, {{"R", 11}, {"C", 4096}}, avx2);
}

// On AVX2, softmax's exp(x - max) goes to a scratch row of the task instead of the output's own
// row, and the output pass streams (codegen's row_stash_scratch), when the output is large (over
// the target's streaming_bytes moved: 64 KiB here), its rows are whole lines and a row's stash fits 256 KiB; else the
// own row, as on AVX-512. Results against the interpreter for each: rows of 4096 (scratch),
// rows just over 256 KiB (own row), of 4100 elements (not whole lines: own row) and short ones
// (1 to 1023), with an infinity, a NaN and a row of subnormal exp(x - max) lanes (the rerun with
// the fix-up).
TEST_CASE("softmax stashes exp in a scratch row and streams its output (AVX2 and AVX-512)", "[cpu][streaming][threads][stash]") {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CompileOptions avx2 = avx2_streaming_from_64k();
  CompileOptions avx512 = avx2;
  avx512.pipeline.target.vector_bits = 512;
  for (DType t : {DType::F32, DType::F64}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor x = g.input("x", t, {sym("R"), sym("C")});
    Tensor e = exp(x - max(x, 1, true));
    g.output("y", e / sum(e, 1, true));
    auto kernel_mlir = [&](const CompileOptions& options) {
      runtime::Executable exe = compile(g, options);
      REQUIRE(exe.program().kernels.size() == 1);
      return codegen::emit_cpu_mlir(exe.program());
    };
    std::string avx2_mlir = kernel_mlir(avx2);
    CHECK(avx2_mlir.find("fuse_cpu_scratch_acquire") != std::string::npos);
    // Streamed: the output pass's copy from the stash and its computed rest, and (the rows
    // riding, codegen/cpu/emitter.h RowRide) the copy inside the next row's exp pass and the
    // last row's after the rows.
    CHECK(count_streamed(avx2_mlir) == 4);
    std::string avx512_mlir = kernel_mlir(avx512);
    CHECK(avx512_mlir.find("fuse_cpu_scratch_acquire") != std::string::npos);
    CHECK(count_streamed(avx512_mlir) == 4);  // the exp pass takes one vector a step there too (vector_chains)
    // exp's constants from a table in memory in AVX2's f32 vectors only (exp_constant()).
    CHECK((avx2_mlir.find("fuse_exp_f32x8_constants") != std::string::npos) == (t == DType::F32));
    CHECK(avx512_mlir.find("fuse_exp_f32x8_constants") == std::string::npos);
    for (const CompileOptions& options : widths_this_host_runs()) {
      INFO("vector bits " << options.pipeline.target.vector_bits);
      runtime::Executable exe = compile(g, options);
      // Over 64 KiB moved (8 or 16 bytes an element) in 13 rows, 7 threads' ranges of rows; long
      // rows just over 256 KiB.
      int64_t rows = 13, long_row = t == DType::F32 ? 65'600 : 32'800;
      // Short and odd rows too: the exp pass takes one vector a step on AVX2 (vector_chains), so
      // rows of 9, 15 and 17 have a vector part and a scalar tail, 1 and 7 only the tail. Rows of
      // 4096 and 256 elements (f32: 1 KiB, kRideRowBytes) ride, of 240 (whole lines) only on
      // AVX-512 (ride_row_bytes), as do rows of 64, 32 and 16 f32 there; a row as large as a
      // scratch row (256 KiB) rides in two of them; tasks of one and two rows (R = 1, 2 and 7
      // threads) have only the last row's pass, or one ride. (Every shape here moves over 64 KiB
      // but the 13 rows of 1 to 17 elements and the rows of 1023.)
      int64_t largest_stash = t == DType::F32 ? 65'536 : 32'768;
      for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{rows, 4096},
                                                                  {5, long_row},
                                                                  {4, largest_stash},
                                                                  {rows, 4100},
                                                                  {40, 256},
                                                                  {40, 240},
                                                                  {300, 64},
                                                                  {600, 32},
                                                                  {1200, 16},
                                                                  {1, 16'384},
                                                                  {2, 8192},
                                                                  {rows, 1},
                                                                  {rows, 7},
                                                                  {rows, 9},
                                                                  {rows, 15},
                                                                  {rows, 17},
                                                                  {7, 1023}}) {
        INFO("R = " << r << ", C = " << c);
        ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"R", r}, {"C", c}}, 17);
        ir::HostArray& in = inputs["x"];
        if (r > 1) in.set_f64(c + c / 2, inf);  // row 1: inf - inf is NaN, as in the interpreter
        if (r > 2) in.set_f64(2 * c + c - 1, nan);
        for (int64_t i = 0; i < c && r > 3; ++i)  // row 3: subnormal exp
          in.set_f64(3 * c + i, i == c / 3 ? 95.0 : in.get_f64(3 * c + i));
        CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe.run(inputs), 1e-5, 0) == "");
      }
    }
  }
}

// Layernorm's output pass rides on the next row's moments pass (codegen/cpu/emitter.h RowRide,
// moments_ride_output) where the output streams: large, rows of whole lines, a row within a
// scratch row (256 KiB); elsewhere the plain rows. Against the interpreter: rows that ride
// (16 to 65536 f32, with the one-chain remainder of 48 and 80), rows too long for a scratch row,
// rows that are not whole lines (100, 1023) or have no whole vector (7), and tasks of one and
// two rows (R = 1, 2 and 7 threads).
TEST_CASE("layernorm's output pass rides on the next row's moments pass (AVX2 and AVX-512)", "[cpu][streaming][threads][stash]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
  Tensor gamma = g.input("gamma", DType::F32, {sym("C")});
  Tensor beta = g.input("beta", DType::F32, {sym("C")});
  Tensor mu = mean(x, 1, true);
  Tensor centered = x - mu;
  g.output("y", centered * rsqrt(mean(centered * centered, 1, true) + 1e-5f) * gamma + beta);
  for (const CompileOptions& options : widths_this_host_runs()) {
    INFO("vector bits " << options.pipeline.target.vector_bits);
    runtime::Executable exe = compile(g, options);
    REQUIRE(exe.program().kernels.size() == 1);
    std::string mlir = codegen::emit_cpu_mlir(exe.program());
    // A scratch row for the first row's ride, and streamed stores in: the riding moments
    // loops (two per step of two chains, one in the loop of one), the last row's pass after
    // the rows, and the plain rows' output pass (rows over a scratch row stream there too).
    CHECK(mlir.find("fuse_cpu_scratch_acquire") != std::string::npos);
    CHECK(count_streamed(mlir) == 5);
    for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{13, 4096},
                                                                {5, 65'600},
                                                                {4, 65'536},
                                                                {300, 64},
                                                                {600, 32},
                                                                {1200, 16},
                                                                {400, 48},
                                                                {300, 80},
                                                                {1, 16'384},
                                                                {2, 8192},
                                                                {200, 100},
                                                                {13, 7},
                                                                {20, 1023}}) {
      // Random rows; rows far from 0 (mean 1000, spread 0.01); constant rows and infinities and
      // a NaN in a few rows (the rides carry their NaN means and variances to the next row).
      for (int pattern = 0; pattern < 3; ++pattern) {
        INFO("R = " << r << ", C = " << c << ", pattern " << pattern);
        ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"R", r}, {"C", c}}, 29);
        ir::HostArray& in = inputs["x"];
        for (int64_t row = 0; row < r; ++row)
          for (int64_t i = 0; i < c; ++i) {
            int64_t at = row * c + i;
            if (pattern == 1) in.set_f64(at, 1000 + in.get_f64(at) * 1e-2);
            if (pattern == 2 && row % 3 == 0) in.set_f64(at, 3.25);
            if (pattern == 2 && row % 3 == 1 && i == c / 2) in.set_f64(at, row % 2 ? std::numeric_limits<double>::quiet_NaN()
                                                                                   : std::numeric_limits<double>::infinity());
          }
        CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe.run(inputs), 1e-5, 1e-6) == "");
      }
    }
  }
}

TEST_CASE("rows whose output pass rides read the row before's inputs and reductions", "[cpu][streaming][threads][stash]") {
  // The output reads, besides the stash, the input itself, a per-row input, an input along the
  // row and the row's max: the pass that rides on the next row's exp pass must read all of them
  // at the row before (RowRide), and the last row's pass after the rows too.
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
  Tensor bias = g.input("bias", DType::F32, {sym("R"), 1});
  Tensor gamma = g.input("gamma", DType::F32, {sym("C")});
  Tensor m = max(x, 1, true);
  Tensor e = exp(x - m);
  g.output("y", e / sum(e, 1, true) * x * gamma + bias - m);
  for (const CompileOptions& options : widths_this_host_runs()) {
    INFO("vector bits " << options.pipeline.target.vector_bits);
    runtime::Executable exe = compile(g, options);
    REQUIRE(exe.program().kernels.size() == 1);
    // As softmax's: the kernel rides (a copy on each vector of the exp pass's step).
    CHECK(count_streamed(codegen::emit_cpu_mlir(exe.program())) == 4);
    // Each over 64 KiB moved (8 bytes an element), so that it streams and rides.
    for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{13, 4096}, {9, 1024}, {40, 256}, {1, 16'384}, {2, 8192}}) {
      INFO("R = " << r << ", C = " << c);
      ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"R", r}, {"C", c}}, 23);
      CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe.run(inputs), 1e-5, 0) == "");
    }
  }
}

// Row kernels over short rows (up to 1.75 vectors, not one), of a length known when compiling (a literal, or
// a short symbolic length the runtime specializes to from its second run), run `lanes` rows at
// a time across lanes (codegen/cpu/lane_rows.cpp): element j of the rows gathered (rows of 4 or
// more) or shuffled out of their vectors, reductions folded over j in the interpreter's order,
// full-space outputs shuffled back (streamed when large), reduced-space ones a vector of rows.
// Against the interpreter: softmax (a full-space output), logsumexp (a reduced one), layernorm
// (gamma and beta read along the rows) and a kernel of per-row and scalar operands, NaN-sticky
// max and min, means, products and integer sums; rows of 1 to 1.75 vectors, task ranges that start and end
// off a multiple of the lanes (7 threads, [threads]) and fewer rows than the lanes; f32, f64,
// i32, i64; AVX2's and AVX-512's vectors.
TEST_CASE("short rows run across lanes", "[cpu][rows][threads][lanes]") {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  enum Variant { Softmax, LogSumExp, LayerNorm, PerRow };
  struct Case {
    DType t;
    Variant variant;
  };
  for (auto [t, variant] : std::vector<Case>{{DType::F32, Softmax},
                                             {DType::F64, Softmax},
                                             {DType::F32, LogSumExp},
                                             {DType::F32, LayerNorm},
                                             {DType::F64, LayerNorm},
                                             {DType::F32, PerRow},
                                             {DType::F64, PerRow},
                                             {DType::I32, PerRow},
                                             {DType::I64, PerRow}}) {
    bool floating = t == DType::F32 || t == DType::F64;
    auto build = [&, t = t, variant = variant](Graph& g, ir::Dim columns) {
      Tensor x = g.input("x", t, {sym("R"), columns});
      if (variant == Softmax) {
        Tensor e = exp(x - max(x, 1, true));
        g.output("y", e / sum(e, 1, true));
      } else if (variant == LogSumExp) {
        Tensor m = max(x, 1);
        g.output("y", m + log(sum(exp(x - expand_dims(m, 1)), 1)) * g.input("scale", t));
      } else if (variant == LayerNorm) {
        Tensor centered = x - mean(x, 1, true);
        Tensor variance = mean(centered * centered, 1, true);
        g.output("y", centered * rsqrt(variance + 1e-5) * g.input("gamma", t, {columns}) + g.input("beta", t, {columns}));
      } else {
        Tensor r = g.input("r", t, {sym("R"), 1});
        Tensor s = g.input("s", t);
        g.output("z", (x - r) * s + max(x, 1, true));
        g.output("low", min(x * s, 1));
        g.output("total", sum(x, 1) + prod(x - r, 1));
        if (floating) g.output("average", mean(x, 1, true) / r);
      }
    };
    for (const CompileOptions& options : widths_this_host_runs()) {
      int lanes = options.pipeline.target.vector_bits / 8 / static_cast<int>(ir::dtype_size(t));
      for (int64_t c : {1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 24}) {
        if (c > lanes + lanes * 3 / 4) continue;  // (CpuKernelEmitter::lane_rows_length)
        INFO(ir::dtype_name(t) << ", variant " << variant << ", " << options.pipeline.target.vector_bits << "-bit vectors, C = " << c);
        Graph literal, symbolic;
        build(literal, c);
        build(symbolic, sym("C"));
        runtime::Executable exe = compile(literal, options);
        runtime::Executable specializing = compile(symbolic, options);
        INFO(ir::print_program(exe.program()));
        // (The per-row variant is two kernels, its full-space output a row-wise one, but over
        // rows of one element.)
        CHECK(exe.program().kernels.size() == (variant == PerRow && c > 1 ? 2u : 1u));
        for (const ir::Kernel& k : exe.program().kernels) CHECK(ir::rows_across_lanes(k));
        std::string mlir = codegen::emit_cpu_mlir(exe.program());
        // Rows of 4 or more gather element j (CpuKernelEmitter::kMinGatheredLaneRow), shorter
        // ones shuffle it out of their vectors, rows of one vector transpose their vectors (or
        // go row by row: lane_rows_length).
        CHECK((mlir.find("llvm.intr.masked.gather") != std::string::npos) == (c >= 4 && c != lanes));
        if (c < 4 && c > 1) CHECK(mlir.find("vector.shuffle") != std::string::npos);
        // R: fewer rows than the lanes, a multiple of them, one more, and 7 threads' ranges
        // starting and ending off a multiple of the lanes (the rows before the first group and
        // after the last run one at a time).
        for (int64_t r : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{17}, int64_t{1023}, int64_t{5001}}) {
          INFO("R = " << r);
          ir::TensorMap inputs = testing::random_inputs(literal.ir(), {{"R", r}}, 23);
          if (floating && r > 3 && variant != LayerNorm) {
            ir::HostArray& in = inputs["x"];
            in.set_f64(1 * c + c / 2, inf);  // row 1: inf - inf is NaN, as in the interpreter
            in.set_f64(2 * c + c - 1, nan);  // row 2: the max and min stick at NaN
            in.set_f64(3 * c, -inf);
          }
          ir::TensorMap expected = ir::interpret(literal.ir(), inputs);
          CHECK(testing::compare_outputs(expected, exe.run(inputs), 1e-5, 1e-6) == "");
          ir::TensorMap symbolic_inputs = inputs;  // (the same arrays, C symbolic)
          for (int run = 0; run < 2; ++run)  // the second run takes the code specialized to C
            CHECK(testing::compare_outputs(expected, specializing.run(symbolic_inputs), 1e-5, 1e-6) == "");
        }
        CHECK(specializing.specialization_count() == 1);
      }
    }
  }
}

// Which row kernels may run across lanes (ir::rows_across_lanes): not argmax, not a gather, not
// an operand broadcast along some rows only, not a bool output.
TEST_CASE("rows across lanes take reductions, per-row and per-column operands, not argmax or gathers", "[cpu][rows][lanes]") {
  auto across = [](const Graph& g) {
    runtime::Executable exe = compile(g);
    REQUIRE(exe.program().kernels.size() == 1);
    return ir::rows_across_lanes(exe.program().kernels[0]);
  };
  {
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("R"), 3});
    g.output("y", x * g.input("w", DType::F32, {3}) - max(x, 1, true) + g.input("s", DType::F32));
    CHECK(across(g));
  }
  {
    Graph g;  // a user combiner
    Tensor x = g.input("x", DType::F32, {sym("R"), 5});
    g.output("y", reduce([](Scalar a, Scalar v) { return maximum(a, abs(v)); }, x, 0.0, 1));
    CHECK(across(g));
  }
  {
    Graph g;
    g.output("y", argmax(g.input("x", DType::F32, {sym("R"), 3}), 1));
    CHECK_FALSE(across(g));
  }
  {
    Graph g;  // a bool output
    g.output("y", any(g.input("x", DType::F32, {sym("R"), 3}) > 0.0, 1));
    CHECK_FALSE(across(g));
  }
  {
    Graph g;  // broadcast along the first axis only: not one value per row
    Tensor x = g.input("x", DType::F32, {sym("A"), sym("B"), 3});
    g.output("y", sum(x * g.input("q", DType::F32, {sym("B"), 1}), 2));
    CHECK_FALSE(across(g));
  }
  {
    Graph g;  // rows of two axes, per-row operands of both
    Tensor x = g.input("x", DType::F32, {sym("A"), sym("B"), 2, 3});
    Tensor rows = g.input("r", DType::F32, {sym("A"), sym("B"), 1, 1});
    Tensor e = exp(x - rows);
    g.output("y", e / sum(e, {2, 3}, true));
    CHECK(across(g));
  }
}

// Row kernels over rows shorter than a vector that do not run across lanes (a bool output):
// their few elements a row go one at a time where the length is known when compiling and the
// work is cheap (LLVM vectorizes that loop across rows), as a masked vector per row where the
// work is costly (an exp each). CpuKernelEmitter::min_masked_tail.
TEST_CASE("short rows that cannot run across lanes take a masked vector only where costly", "[cpu][rows][lanes]") {
  for (bool costly : {false, true}) {
    INFO((costly ? "costly" : "cheap"));
    Graph g;
    Tensor x = g.input("x", DType::F32, {sym("R"), 3});
    g.output("y", any(x > 0.5, 1));
    g.output("total", sum(costly ? exp(x) : x * x, 1));
    runtime::Executable exe = compile(g);
    REQUIRE(exe.program().kernels.size() == 1);
    CHECK_FALSE(ir::rows_across_lanes(exe.program().kernels[0]));
    std::string mlir = codegen::emit_cpu_mlir(exe.program());
    CHECK((mlir.find("llvm.intr.masked.load") != std::string::npos) == costly);
    for (int64_t r : {1, 7, 1001}) {
      ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"R", r}}, 29);
      CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe.run(inputs), 1e-6, 1e-7) == "");
    }
  }
}
