// Elementwise kernels over broadcast or permuted operands: the row form (SIMD along the
// innermost dim) and the tiled form (transposes), including ranges split mid-row by the
// thread pool.
#include <catch2/catch.hpp>

#include "frontends/compile.h"
#include "ir/printer.h"
#include "random_graph.h"

using namespace fuse;

namespace {

void check(const Graph& g, const ir::SymbolBindings& sizes) {
  ir::TensorMap inputs = testing::random_inputs(g.ir(), sizes, 5);
  runtime::Executable exe = compile(g);
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

TEST_CASE("kernels larger than the caches stream their output (non-temporal stores)", "[cpu][streaming]") {
  // Over 32 MB moved: the aligned middle of each thread's range is written with streaming
  // stores, after scalar iterations up to a 64-byte boundary (outputs need not be aligned).
  for (DType t : {DType::F32, DType::F64, DType::Bool, DType::I32}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor x = g.input("x", t, {sym("N")});
    Tensor y = g.input("y", t, {sym("N")});
    if (t == DType::Bool) g.output("z", logical_or(x, logical_not(y)));
    else g.output("z", x * y + x);
    check(g, {{"N", 4'000'003}});
  }
}
