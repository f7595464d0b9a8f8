// Every example program (examples/*.expr) and every graph of the fusion catalog
// (tests/fusion_catalog.h), compiled for the CPU and compared with the reference interpreter at
// small odd sizes and with each shape symbol in turn at 1023, on random inputs (NaN, infinities
// and -0 included now and then). Every element within the error bound of the rounding model
// (ir/rounding_model.h; docs/testing.md, "Tolerances of compiled code vs the interpreter"). Every
// kernel must run as machine code unless codegen::cpu_compiles says the backend leaves it to the
// interpreter.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "codegen/cpu_codegen.h"
#include "frontends/compile.h"
#include "frontends/expr/compile.h"
#include "ir/printer.h"
#include "tests/examples.h"
#include "tests/fusion_catalog.h"
#include "tests/random_graph.h"

using namespace fuse;

namespace {

/// The sizes every graph runs at: small odd ones (7, 17, 5, ... by symbol); every symbol at 9
/// (square shapes, where a value broadcast along the wrong axis still has the right shape); then
/// each symbol in turn at 1023 with the others small, so that long rows, many rows, long
/// reductions and long matmul dims each get their turn without the interpreter taking 1023^3 steps.
std::vector<ir::SymbolBindings> size_sets(const ir::Graph& g) {
  static const int64_t small[] = {7, 17, 5, 11, 3, 13, 9, 15};
  std::vector<std::string> symbols = testing::input_symbols(g);
  ir::SymbolBindings base;
  for (size_t i = 0; i < symbols.size(); ++i) base[symbols[i]] = small[i % std::size(small)];
  std::vector<ir::SymbolBindings> sets = {base};
  if (symbols.size() > 1) {
    ir::SymbolBindings square = base;
    for (auto& [name, size] : square) size = 9;
    sets.push_back(square);
  }
  for (const std::string& s : symbols) {
    ir::SymbolBindings large = base;
    large[s] = 1023;
    sets.push_back(large);
  }
  return sets;
}

using testing::sizes_str;

/// Runs `exe` against the interpreter on `g` at every size set, each with its own random inputs.
void check_against_interpreter(const ir::Graph& g, runtime::Executable& exe, const std::string& what) {
  uint64_t seed = 1;
  for (const ir::SymbolBindings& sizes : size_sets(g)) {
    INFO(what << " at " << sizes_str(sizes));
    ir::TensorMap inputs = testing::random_inputs(g, sizes, seed++);
    testing::make_indices_valid(g, inputs, sizes, seed);
    ir::ValuesAndBounds expected = ir::interpret_with_bounds(g, inputs);
    CHECK(testing::compare_outputs(expected, exe.run(inputs)) == "");
  }
}

/// The kernels the backend leaves to the interpreter, by name ("" when none).
std::string interpreted_kernels(const ir::Program& p) {
  std::string names;
  for (const ir::Kernel& k : p.kernels)
    if (!codegen::cpu_compiles(k)) names += (names.empty() ? "" : ", ") + k.name;
  return names;
}

/// Compiles `g`, checks that every kernel the backend compiles is machine code, and compares it
/// with the interpreter.
void check_graph(const ir::Graph& g, const std::string& what) {
  runtime::Executable exe = compile(g);
  const ir::Program& p = exe.program();
  INFO(what << "\n" << ir::print_program(p));
  int compiles = 0;
  for (const ir::Kernel& k : p.kernels) compiles += codegen::cpu_compiles(k);
  CHECK(exe.compiled_kernel_count() == compiles);
  std::string interpreted = interpreted_kernels(p);
  if (!interpreted.empty()) WARN(what << ": interpreter fallback for " << interpreted);
  check_against_interpreter(g, exe, what);
}

}  // namespace

TEST_CASE("every example compiled for the CPU matches the interpreter", "[cpu][examples]") {
  std::vector<std::filesystem::path> files = testing::example_files();
  REQUIRE(files.size() >= 17);
  for (const std::filesystem::path& file : files) {
    SECTION(file.filename().string()) {
      check_graph(testing::compile_example(file), file.filename().string());
    }
  }
}

TEST_CASE("every graph of the fusion catalog compiled for the CPU matches the interpreter", "[cpu][examples]") {
  REQUIRE(testing::catalog().size() >= 25);
  for (const testing::Case& c : testing::catalog()) {
    SECTION(c.name) {
      Graph g;
      c.build(g);
      check_graph(g.ir(), c.name);
    }
  }
}
