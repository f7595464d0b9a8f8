// Fusion decisions, tinygrad-style: a catalog of graphs (tests/fusion_catalog.h) with the number
// of kernels each must become, positive and negative cases with their reasons. Every case also
// runs as a Program in the interpreter and must equal the unfused graph.
#include <catch2/catch.hpp>

#include <cmath>

#include "frontends/api.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "ir/program.h"
#include "passes/pipeline.h"
#include "tests/fusion_catalog.h"

using namespace fuse;
using ir::KernelKind;
using testing::Case;
using testing::catalog;
using testing::K;
using testing::M;
using testing::N;

namespace {

// Deterministic inputs for every input of `g`, symbols at odd sizes.
ir::TensorMap inputs_for(const ir::Graph& g) {
  ir::SymbolBindings sizes{{"N", 7}, {"M", 5}, {"K", 3}, {"R", 4}, {"C", 9}};
  ir::TensorMap inputs;
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<double>(state >> 8) / static_cast<double>(1u << 24);
  };
  for (ir::NodeId id : g.input_nodes()) {
    const ir::Node& n = g.node(id);
    HostArray a(n.dtype, ir::evaluate(n.shape, sizes));
    for (int64_t i = 0; i < a.size(); ++i) {
      if (ir::is_float(n.dtype)) a.set_f64(i, 0.25 + next());  // positive: sqrt/log/div stay finite
      else a.set_i64(i, static_cast<int64_t>(next() * 7) - 3);
    }
    inputs[n.as<ir::InputAttrs>().name] = std::move(a);
  }
  return inputs;
}

void check_same_results(const ir::Graph& g, const ir::Program& p) {
  ir::TensorMap inputs = inputs_for(g);
  ir::TensorMap expected = ir::interpret(g, inputs);
  ir::TensorMap actual = ir::interpret_program(p, inputs);
  REQUIRE(expected.size() == actual.size());
  for (const auto& [name, value] : expected) {
    const HostArray& other = actual.at(name);
    REQUIRE(other.shape == value.shape);
    REQUIRE(other.dtype == value.dtype);
    CHECK(other.bytes == value.bytes);  // the same interpreter: bit-identical
  }
}

}  // namespace

TEST_CASE("the fusion catalog: kernel counts and kinds", "[fusion]") {
  REQUIRE(catalog().size() >= 25);
  for (const Case& c : catalog()) {
    SECTION(c.name) {
      Graph g;
      c.build(g);
      passes::PipelineResult r = passes::run_pipeline(g.ir());
      INFO(c.name << "\n" << ir::print_program(r.program) << passes::explain_fusion(r.graph, r.partition));
      CHECK(r.program.kernels.size() == c.kernels);
      if (!c.kinds.empty()) {
        std::vector<KernelKind> kinds;
        for (int k : r.program.launch_order) kinds.push_back(r.program.kernels[k].kind);
        CHECK(kinds == c.kinds);
      }
      check_same_results(g.ir(), r.program);
    }
  }
}

TEST_CASE("without fusion every op is its own kernel", "[fusion]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {N});
  g.output("y", sqrt(x * x + 1.0) * 3.0);
  passes::PipelineOptions options;
  options.fusion.enabled = false;
  passes::PipelineResult r = passes::run_pipeline(g.ir(), options);
  CHECK(r.program.kernels.size() == 4);  // mul, add, sqrt, mul
  check_same_results(g.ir(), r.program);
  CHECK(passes::run_pipeline(g.ir()).program.kernels.size() == 1);
}

TEST_CASE("explain-fusion names the rule at every kernel boundary", "[fusion]") {
  Graph g;
  Tensor a = g.input("a", DType::F32, {N, K});
  Tensor b = g.input("b", DType::F32, {K, M});
  Tensor c = g.input("c", DType::F32, {M, K});
  g.output("y", matmul(matmul(a, b), c));
  passes::PipelineResult r = passes::run_pipeline(g.ir());
  std::string text = passes::explain_fusion(r.graph, r.partition);
  CHECK_THAT(text, Catch::Contains("matmul -> %") && Catch::Contains("two matmuls never fuse"));

  Graph mlp;
  Tensor x = mlp.input("x", DType::F32, {N, K});
  Tensor w1 = mlp.input("w1", DType::F32, {K, M});
  Tensor w2 = mlp.input("w2", DType::F32, {M, K});
  mlp.output("y", matmul(relu(matmul(x, w1)), w2));
  r = passes::run_pipeline(mlp.ir());
  CHECK_THAT(passes::explain_fusion(r.graph, r.partition),
             Catch::Contains("relu -> %") && Catch::Contains("matmul: it follows a reduction or matmul"));
  REQUIRE(r.program.kernels.size() == 2);
  CHECK(r.program.kernels[0].body.nodes.size() == 4);  // x, w1, matmul, relu
}

TEST_CASE("memory planning reuses slots of dead intermediates", "[fusion][memory]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {N});
  // exp and tanh are expensive and each used twice: materialized, with lifetimes that end.
  Tensor t = x;
  for (int i = 0; i < 4; ++i) {
    Tensor e = exp(t) * tanh(t);
    t = sum(e, 0, true) + e;
  }
  g.output("y", t);
  passes::PipelineOptions options;
  options.fusion.enabled = false;
  passes::PipelineResult r = passes::run_pipeline(g.ir(), options);
  int intermediates = 0;
  for (const ir::Buffer& b : r.program.buffers) intermediates += b.role == ir::BufferRole::Intermediate;
  CHECK(r.program.num_slots < intermediates);
  check_same_results(g.ir(), r.program);
}

TEST_CASE("the Program prints as text and JSON", "[fusion][program]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
  Tensor e = exp(x - max(x, -1, true));
  g.output("y", e / sum(e, -1, true));
  passes::PipelineResult r = passes::run_pipeline(g.ir());
  std::string text = ir::print_program(r.program);
  CHECK_THAT(text, Catch::Contains("kernel k0_rowwise rowwise over [R, C] axes=[1] (x) -> (y)") && Catch::Contains("schedule: target=cpu form=reduction_rows grain=1"));
  std::string json = ir::program_to_json(r.program);
  CHECK_THAT(json, Catch::Contains("\"kernels\": [") && Catch::Contains("\"buffers\": [") &&
                       Catch::Contains("\"launch_order\": [\"k0_rowwise\"]") &&
                       Catch::Contains("\"shape\": [\"R\", \"C\"]"));
}

TEST_CASE("schedules follow the target", "[fusion][schedule]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {N, M});
  g.output("t", transpose(x));
  Tensor a = g.input("a", DType::F32, {N, K});
  Tensor b = g.input("b", DType::F32, {K, M});
  g.output("y", matmul(a, b));
  passes::PipelineOptions cpu;
  cpu.target.vector_bits = 256;
  passes::PipelineResult r = passes::run_pipeline(g.ir(), cpu);
  for (const ir::Kernel& k : r.program.kernels) {
    CHECK(k.schedule.cpu.vector_width == 8);
    if (k.kind == KernelKind::Matmul) {
      CHECK(k.schedule.cpu.nr == 16);
      CHECK(k.schedule.cpu.kc > 0);
      CHECK(k.schedule.cpu.mc % k.schedule.cpu.mr == 0);
    }
  }
  passes::PipelineOptions cuda;
  cuda.target = ir::Target::cuda(0, 80);
  r = passes::run_pipeline(g.ir(), cuda);
  for (const ir::Kernel& k : r.program.kernels) {
    CHECK(k.schedule.target == ir::TargetKind::Cuda);
    if (k.kind == KernelKind::Transpose) {
      CHECK(k.schedule.cuda.tile_rows == 32);
      CHECK(k.schedule.cuda.shared_cols == 33);
    }
    if (k.kind == KernelKind::Matmul) CHECK(k.schedule.cuda.tile_k == 8);
  }
}
