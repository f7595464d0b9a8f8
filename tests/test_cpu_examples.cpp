// Every example program (examples/*.expr) and every graph of the fusion catalog
// (tests/fusion_catalog.h), compiled for the CPU and compared with the reference interpreter at
// small odd sizes and with each shape symbol in turn at 1023, on random inputs (NaN, infinities
// and -0 included now and then). Integers and bools must be equal; floats within the tolerance of
// the ops on their path (docs/testing.md, "Tolerances of compiled code vs the interpreter"). Every
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

/// The shape symbols of the graph's inputs, sorted.
std::vector<std::string> input_symbols(const ir::Graph& g) {
  std::set<std::string> names;
  for (ir::NodeId id : g.input_nodes())
    for (const ir::Dim& d : g.node(id).shape) names.insert(d.symbols.begin(), d.symbols.end());
  return {names.begin(), names.end()};
}

/// The sizes every graph runs at: small odd ones (7, 17, 5, ... by symbol); every symbol at 9
/// (square shapes, where a value broadcast along the wrong axis still has the right shape); then
/// each symbol in turn at 1023 with the others small, so that long rows, many rows, long
/// reductions and long matmul dims each get their turn without the interpreter taking 1023^3 steps.
std::vector<ir::SymbolBindings> size_sets(const ir::Graph& g) {
  static const int64_t small[] = {7, 17, 5, 11, 3, 13, 9, 15};
  std::vector<std::string> symbols = input_symbols(g);
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

std::string sizes_str(const ir::SymbolBindings& sizes) {
  std::string s;
  for (const auto& [name, size] : sizes) s += (s.empty() ? "" : ", ") + name + "=" + std::to_string(size);
  return s.empty() ? "no symbols" : s;
}

// ---- Tolerances (docs/testing.md) ----

/// The largest error of f32 `op` in ulps: the bounds tests/test_cpu_accuracy.cpp holds it to on
/// normal values; 0 for ops computed exactly as the interpreter does (IEEE operations).
int f32_ulps(ir::ScalarOp op) {
  using ir::ScalarOp;
  switch (op) {
    case ScalarOp::Exp: case ScalarOp::Expm1: return 6;
    case ScalarOp::Erf: return 5;
    case ScalarOp::Tanh: return 4;
    case ScalarOp::Log2: case ScalarOp::Sigmoid: case ScalarOp::Log1p: case ScalarOp::Sinh: case ScalarOp::Cosh: return 2;
    case ScalarOp::Exp2: case ScalarOp::Log: case ScalarOp::Rsqrt: case ScalarOp::Sin: case ScalarOp::Cos:
    case ScalarOp::Tan: case ScalarOp::Pow: case ScalarOp::Acos: return 1;
    default: return 0;
  }
}

/// The same for f64 `op`: 0 but for log1p and expm1, computed with a correction term around libm.
int f64_ulps(ir::ScalarOp op) { return op == ir::ScalarOp::Log1p || op == ir::ScalarOp::Expm1 ? 2 : 0; }

struct Tolerance {
  double rtol = 0, atol = 0;
  std::string why;  // the op classes that set it
};

/// Magnitude of the values errors ride on in these tests: inputs within [-2, 2], exp of them
/// below 7.4; an absolute error floor for results that cancel (x - mean(x), exp(v) - exp(-v)).
constexpr double kMagnitude = 8;

/// The tolerance of output node `out` of `g`, from the op classes on its path (docs/testing.md):
/// - integers and bools, and floats computed by exact ops only (IEEE + - * / sqrt, abs, min,
///   max, floor, casts, compares, selects, views, f64 libm functions, max/min/custom reductions,
///   generators): bit-equal;
/// - each f32 transcendental adds its measured ulp bound (f32_ulps) to rtol, in f32 ulps (f64
///   log1p and expm1 theirs, f64_ulps, in f64 ulps);
/// - each float sum, mean, prod or matmul over L elements (f64 accumulators, summed in another
///   order; f32 matmuls accumulate in f32, about sqrt(L) ulps off, which the absolute floor
///   below covers) adds one ulp of its result's type plus L * 2^-52;
/// - atol = rtol * kMagnitude, times the longest sum, prod or matmul length on the path: the
///   errors of its L terms add up and may cancel the result away.
Tolerance tolerance_for(const ir::Graph& g, ir::NodeId out, const ir::SymbolBindings& sizes) {
  std::vector<bool> on_path(g.nodes.size(), false);
  on_path[out] = true;
  int ulps = 0, ulps_f64 = 0;
  double reductions = 0;  // in relative terms
  int64_t longest_sum = 1;
  std::string why;
  for (ir::NodeId id = out; id >= 0; --id) {
    if (!on_path[id]) continue;
    const ir::Node& n = g.node(id);
    for (ir::NodeId in : n.inputs) on_path[in] = true;
    int64_t length = 0;
    if (n.kind == ir::OpKind::Elementwise) {
      const ir::ScalarFn& body = n.as<ir::ElementwiseAttrs>().body;
      for (const ir::ScalarNode& s : body.nodes) {
        if (s.arity() > 0 && body.node(s.args[0]).dtype == DType::F32) ulps += f32_ulps(s.op);
        if (s.arity() > 0 && body.node(s.args[0]).dtype == DType::F64) ulps_f64 += f64_ulps(s.op);
      }
    } else if (n.kind == ir::OpKind::Reduce && ir::is_float(n.dtype)) {
      ir::ReduceKind kind = n.as<ir::ReduceAttrs>().kind;
      if (kind != ir::ReduceKind::Sum && kind != ir::ReduceKind::Mean && kind != ir::ReduceKind::Prod) continue;
      ir::ConcreteShape in = ir::evaluate(g.node(n.inputs[0]).shape, sizes);
      length = 1;
      for (int axis : n.as<ir::ReduceAttrs>().axes) length *= in[axis];
      if (kind != ir::ReduceKind::Mean) longest_sum = std::max(longest_sum, length);
    } else if (n.kind == ir::OpKind::Matmul && ir::is_float(n.dtype)) {
      length = ir::evaluate(g.node(n.inputs[0]).shape, sizes).back();
      longest_sum = std::max(longest_sum, length);
    }
    if (length > 0) {
      reductions += (n.dtype == DType::F32 ? 0x1p-23 : 0x1p-52) + static_cast<double>(length) * 0x1p-52;
      why += std::string(ir::op_kind_name(n.kind)) + " over " + std::to_string(length) + "; ";
    }
  }
  Tolerance t;
  t.rtol = ulps * 0x1p-23 + ulps_f64 * 0x1p-52 + reductions;
  t.atol = t.rtol * kMagnitude * static_cast<double>(longest_sum);
  if (ulps > 0) why = std::to_string(ulps) + " ulp of f32 transcendentals; " + why;
  t.why = why.empty() ? "exact ops only" : why;
  return t;
}

/// Runs `exe` against the interpreter on `g` at every size set, each with its own random inputs.
void check_against_interpreter(const ir::Graph& g, runtime::Executable& exe, const std::string& what) {
  uint64_t seed = 1;
  for (const ir::SymbolBindings& sizes : size_sets(g)) {
    INFO(what << " at " << sizes_str(sizes));
    ir::TensorMap inputs = testing::random_inputs(g, sizes, seed++);
    ir::TensorMap expected = ir::interpret(g, inputs);
    ir::TensorMap actual = exe.run(inputs);
    REQUIRE(actual.size() == expected.size());
    for (const ir::GraphOutput& o : g.outputs) {
      Tolerance t = tolerance_for(g, o.node, sizes);
      INFO("output " << o.name << ": rtol " << t.rtol << ", atol " << t.atol << " (" << t.why << ")");
      CHECK(testing::compare_outputs({{o.name, expected.at(o.name)}}, {{o.name, actual.at(o.name)}}, t.rtol, t.atol) ==
            "");
    }
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
  REQUIRE(files.size() >= 14);
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
