// Fusion decisions, tinygrad-style: a catalog of graphs with the number of kernels each must
// become, positive and negative cases with their reasons. Every case also runs as a Program in
// the interpreter and must equal the unfused graph.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "frontends/api.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "ir/program.h"
#include "passes/pipeline.h"

using namespace fuse;
using ir::KernelKind;

namespace {

const Dim N = sym("N"), M = sym("M"), K = sym("K");

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

struct Case {
  std::string name;
  std::function<void(Graph&)> build;
  size_t kernels;
  std::vector<KernelKind> kinds = {};  // when given, the kinds in launch order
};

const std::vector<Case>& catalog() {
  static const std::vector<Case> cases = {
      {"gaussian_pdf",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N});
         Tensor m = g.input("mean", DType::F32);
         Tensor s = g.input("sigma", DType::F32);
         Tensor z = (x - m) / s;
         g.output("y", exp(-0.5 * z * z) / (s * 2.5066282746));
       },
       1, {KernelKind::Elementwise}},
      {"hypot",
       [](Graph& g) {
         Tensor a = g.input("a", DType::F32, {N});
         Tensor b = g.input("b", DType::F32, {N});
         g.output("h", sqrt(a * a + b * b));
       },
       1},
      {"polar_distance",
       [](Graph& g) {
         Tensor r1 = g.input("r1", DType::F32, {N});
         Tensor t1 = g.input("t1", DType::F32, {N});
         Tensor r2 = g.input("r2", DType::F32, {N});
         Tensor t2 = g.input("t2", DType::F32, {N});
         auto polar = vectorize([](Scalar r, Scalar t) { return std::make_tuple(r * cos(t), r * sin(t)); });
         auto [x1, y1] = polar(r1, t1);
         auto [x2, y2] = polar(r2, t2);
         g.output("d", sqrt((x1 - x2) * (x1 - x2) + (y1 - y2) * (y1 - y2)));
       },
       1},
      {"hidden_layer",
       [](Graph& g) {
         Tensor grey = g.input("greyscales", DType::F32, {N});
         Tensor w = g.input("weights", DType::F32, {N});
         Tensor normalized = grey / 255.0;
         Tensor weighed = normalized * w;
         g.output("activated", exp(-weighed));
       },
       1},
      {"softmax_rows",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
         Tensor e = exp(x - max(x, -1, true));
         g.output("y", e / sum(e, -1, true));
       },
       1, {KernelKind::RowWise}},
      {"layernorm_rows",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
         Tensor gamma = g.input("gamma", DType::F32, {sym("C")});
         Tensor beta = g.input("beta", DType::F32, {sym("C")});
         Tensor xc = x - mean(x, -1, true);
         Tensor var = mean(xc * xc, -1, true);
         g.output("y", xc * rsqrt(var + 1e-5) * gamma + beta);
       },
       1, {KernelKind::RowWise}},
      {"logsumexp_rows",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
         Tensor m = max(x, -1, true);
         g.output("y", log(sum(exp(x - m), -1, true)) + m);
       },
       1, {KernelKind::RowWise}},
      {"softmax_without_keepdims",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
         Tensor e = exp(x - expand_dims(max(x, 1), 1));
         g.output("y", e / expand_dims(sum(e, 1), 1));
       },
       1, {KernelKind::RowWise}},
      {"mlp_layer",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, K});
         Tensor w = g.input("w", DType::F32, {K, M});
         Tensor b = g.input("b", DType::F32, {M});
         g.output("y", relu(matmul(x, w) + b));
       },
       1, {KernelKind::Matmul}},
      {"two_matmuls_never_fuse",
       [](Graph& g) {
         Tensor a = g.input("a", DType::F32, {N, K});
         Tensor b = g.input("b", DType::F32, {K, M});
         Tensor c = g.input("c", DType::F32, {M, K});
         g.output("y", matmul(matmul(a, b), c));
       },
       2, {KernelKind::Matmul, KernelKind::Matmul}},
      {"sum_and_max_read_x_once",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         g.output("s", sum(x));
         g.output("m", max(x));
       },
       1, {KernelKind::Reduction}},
      {"diamond",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N});
         Tensor y = exp(x);
         g.output("out", y * sin(y));
       },
       1},
      {"prologue_into_reduction",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         g.output("s", sum(x * x + 1.0, 1));
       },
       1, {KernelKind::Reduction}},
      {"reduction_epilogue",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         g.output("norm", sqrt(sum(x * x, 1)) * 2.0);
       },
       1, {KernelKind::Reduction}},
      {"mean_of_everything",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F64, {N, M, K});
         g.output("m", mean(abs(x)));
       },
       1},
      {"broadcast_elementwise_across_views",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         Tensor v = g.input("v", DType::F32, {N});
         g.output("y", transpose(x) * v + reshape(x, {M, N}));
       },
       1, {KernelKind::Elementwise}},
      {"transpose_alone",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         g.output("t", transpose(x));
       },
       1, {KernelKind::Transpose}},
      {"input_as_output_is_copied",
       [](Graph& g) {
         Tensor x = g.input("x", DType::I32, {N});
         g.output("same", x);
       },
       1, {KernelKind::Copy}},
      {"matmul_with_prologue",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, K});
         Tensor w = g.input("w", DType::F32, {K, M});
         g.output("y", matmul(x * 0.5, w));
       },
       1, {KernelKind::Matmul}},
      {"expensive_prologue_is_not_recomputed_per_tile",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, K});
         Tensor w = g.input("w", DType::F32, {K, M});
         g.output("y", matmul(exp(x) * sin(x), w));
       },
       2, {KernelKind::Elementwise, KernelKind::Matmul}},
      {"residual_add_epilogue",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, K});
         Tensor w = g.input("w", DType::F32, {K, K});
         g.output("y", matmul(x, w) * 0.5 + x);
       },
       1, {KernelKind::Matmul}},
      {"batched_matmul_with_bias",
       [](Graph& g) {
         Tensor a = g.input("a", DType::F32, {2, N, K});
         Tensor b = g.input("b", DType::F32, {K, M});
         g.output("y", matmul(a, b) + 1.0);
       },
       1, {KernelKind::Matmul}},
      {"reduction_over_leading_axis_broadcast_back_is_not_rowwise",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         g.output("y", x - mean(x, 0, true));
       },
       2, {KernelKind::Reduction, KernelKind::Elementwise}},
      {"reduce_of_reduce_is_two_kernels",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         g.output("y", max(sum(x, 1)));
       },
       2, {KernelKind::Reduction, KernelKind::Reduction}},
      {"expensive_shared_producer_is_materialized",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         Tensor e = exp(x) * tanh(x);
         g.output("a", sum(e, 1));
         g.output("b", max(e, 0));
       },
       3},
      {"cheap_shared_producer_is_recomputed",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         Tensor y = x * 2.0;
         g.output("a", sum(y, 1));
         g.output("b", max(y, 0));
       },
       2},
      {"expensive_producer_not_recomputed_across_broadcast",
       [](Graph& g) {
         Tensor v = g.input("v", DType::F32, {N});
         Tensor x = g.input("x", DType::F32, {M, N});
         g.output("y", x * (exp(v) * sin(v)));
       },
       2},
      {"intermediate_also_an_output",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N});
         Tensor y = exp(x);
         g.output("y", y);
         g.output("z", y + 1.0);
       },
       1},
      {"independent_outputs_different_spaces",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N});
         Tensor z = g.input("z", DType::F32, {M});
         g.output("a", x + 1.0);
         g.output("b", z + 1.0);
       },
       2},
      {"rand_monte_carlo_pi",
       [](Graph& g) {
         Tensor x = g.rand({1000}, 1);
         Tensor y = g.rand({1000}, 2);
         g.output("pi", 4.0 * mean(cast(x * x + y * y <= 1.0, DType::F32)));
       },
       1},
      {"two_layer_mlp_epilogues_stay_with_their_matmuls",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, K});
         Tensor w1 = g.input("w1", DType::F32, {K, M});
         Tensor b1 = g.input("b1", DType::F32, {M});
         Tensor w2 = g.input("w2", DType::F32, {M, K});
         g.output("y", matmul(relu(matmul(x, w1) + b1), w2));
       },
       2, {KernelKind::Matmul, KernelKind::Matmul}},
      {"matmul_result_reduced_is_two_kernels",
       [](Graph& g) {
         Tensor a = g.input("a", DType::F32, {N, K});
         Tensor b = g.input("b", DType::F32, {K, M});
         g.output("s", sum(matmul(a, b), 1));
       },
       2, {KernelKind::Matmul, KernelKind::Reduction}},
  };
  return cases;
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
  CHECK_THAT(text, Catch::Contains("kernel k0_rowwise rowwise over [R, C] axes=[1] (x) -> (y)") && Catch::Contains("schedule: target=cpu parallel_dims=1"));
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
  cuda.target = passes::TargetInfo::cuda(80);
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
