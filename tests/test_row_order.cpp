// Views after a reduction or matmul (issue 16, np-gaps): a slice, transpose, reshape,
// concatenate, pad or take that reads a reduction's or matmul's result moves elements across its
// rows, which the row loop forms cannot write. Fusion stores the result first and the view runs
// in an elementwise kernel, so no kernel falls back to the interpreter (CPU) or to one element
// per thread (CUDA). Kernel counts and forms, and compiled results against the interpreter on
// the CPU and the CUDA simulator (checks on) for f32/f64/i32/i64 at sizes 1, 7 and 1023.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>

#include "frontends/compile.h"
#include "frontends/expr/compile.h"
#include "ir/interpreter.h"
#include "passes/build_program.h"
#include "passes/fusion.h"
#include "passes/memory_plan.h"
#include "passes/pipeline.h"
#include "passes/schedule.h"
#include "runtime/cuda_executable.h"
#include "tests/examples.h"
#include "tests/random_graph.h"

using namespace fuse;
using Catch::Matchers::Contains;

namespace {

// The CUDA cases run on the simulator with every check on: set before the driver loads.
const bool kSimulator = [] {
  setenv("FUSE_CUDA_SIM", "1", 1);
  return setenv("FUSE_CUDA_SIM_CHECKS", "all", 1) == 0;
}();

ir::Graph expr_graph(const std::string& source) { return testing::compile_source(source, "row_order.expr"); }

// Each a reduction or matmul read through a view that reorders its rows (x of dtype DT);
// under the earlier rule each was one kernel the CPU interpreted.
const std::vector<std::string> kPrograms = {
    // slices of a reduction
    "input x: DT[N, M]\noutput y = sum(x, 1)[::-1] * 2\n",
    "input x: DT[N, M]\nlet s = sum(x, 1)\noutput y = s[1:] - s[:-1]\n",
    // transpose and reshape of a reduction, and of a row-wise kernel's result
    "input x: DT[N, M, K]\noutput y = sum(x, 2).T + 1\n",
    "input x: DT[N, M, K]\noutput y = reshape(max(x, 2), [N * M]) + 1\n",
    "input x: DT[N, M]\ninput z: DT[M, N]\noutput y = (x - max(x, 1, keepdims=true)).T * z\n",
    // concatenate, pad and take of a reduction
    "input x: DT[N, M]\ninput e: DT[0]\noutput y = concatenate([min(x, 1), e]) * 2\n",
    "input x: DT[N, M]\noutput y = pad(sum(x, 1), [1, 0], mode=\"edge\")[:-1] + 1\n",
    "input x: DT[N, M]\ninput i: i64[N]\noutput y = take(sum(x, 1), i) + 1\n",
    // the same of a matmul
    "input x: DT[N, K]\ninput w: DT[K, M]\noutput y = (x @ w).T * 2\n",
    "input x: DT[N, K]\ninput w: DT[K, M]\noutput y = (x @ w)[::-1, ::-1] * 2\n",
    "input x: DT[N, K]\ninput w: DT[K, M]\ninput e: DT[0, M]\noutput y = concatenate([x @ w, e]) + 1\n",
    "input x: DT[N, K]\ninput w: DT[K, M]\noutput y = pad(x @ w, [[0, 0], [0, 1]])[:, 1:] + 1\n",
    "input x: DT[N, K]\ninput w: DT[K, M]\ninput i: i32[N]\noutput y = take(x @ w, i) * 2\n",
};

std::string with_dtype(std::string source, const std::string& dtype) {
  for (size_t at = source.find("DT["); at != std::string::npos; at = source.find("DT[", at)) source.replace(at, 2, dtype);
  return source;
}

// N at 1, 7 and 1023; the other dims small but not 1 (and 1023 once for M).
std::vector<ir::SymbolBindings> sizes() {
  return {{{"N", 1}, {"M", 1}, {"K", 1}},
          {{"N", 7}, {"M", 3}, {"K", 5}},
          {{"N", 1023}, {"M", 4}, {"K", 3}},
          {{"N", 2}, {"M", 1023}, {"K", 2}}};
}

// A compiled program's outputs for its inputs.
using RunFn = std::function<ir::TensorMap(const ir::TensorMap&)>;

// Every program of kPrograms at every numeric dtype and size: what `compile_program` makes of it
// against the interpreter; a random take index out of range fails with the interpreter's error.
template <class Compile>
void check_programs(Compile compile_program) {
  for (const std::string& program : kPrograms)
    for (const char* dtype : {"f32", "f64", "i32", "i64"}) {
      ir::Graph g = expr_graph(with_dtype(program, dtype));
      RunFn run = compile_program(g);
      uint64_t seed = 1;
      for (const ir::SymbolBindings& s : sizes()) {
        INFO(with_dtype(program, dtype) << " at N=" << s.at("N") << " M=" << s.at("M"));
        ir::TensorMap inputs = testing::random_inputs(g, s, seed++);
        ir::ValuesAndBounds expected;
        try {
          expected = ir::interpret_with_bounds(g, inputs);
        } catch (const ir::Error&) {
          CHECK_THROWS_WITH(run(inputs), Contains("out of range"));
          continue;
        }
        CHECK(testing::compare_outputs(expected, run(inputs)) == "");
      }
    }
}

ir::Program program_for(const ir::Graph& g, bool cuda) {
  passes::PipelineOptions options;
  if (cuda) options.target = ir::Target::cuda(0, 80);
  return passes::run_pipeline(g, options).program;
}

}  // namespace

TEST_CASE("a view after a reduction or matmul runs in a kernel of its own, in compiled forms", "[row_order][fusion]") {
  for (const std::string& program : kPrograms) {
    ir::Graph g = expr_graph(with_dtype(program, "f32"));
    for (bool cuda : {false, true}) {
      INFO(program << (cuda ? "CUDA" : "CPU"));
      ir::Program p = program_for(g, cuda);
      CHECK(p.kernels.size() == 2);
      for (const ir::Kernel& k : p.kernels) {
        INFO(k.name);
        CHECK(k.schedule.form != ir::LoopForm::Interpreted);
        CHECK(k.schedule.form != ir::LoopForm::PerElement);
      }
    }
  }
}

TEST_CASE("the fusion explanation says why a reduction read through a view is stored", "[row_order][fusion]") {
  ir::Graph g = expr_graph("input x: f32[N, M, K]\noutput y = sum(x, 2).T + 1\n");
  passes::PipelineResult r = passes::run_pipeline(g);
  CHECK_THAT(passes::explain_fusion(r.graph, r.partition), Contains("read through a permute, which moves elements across its rows"));
}

TEST_CASE("views after reductions and matmuls on the CPU match the interpreter", "[row_order][cpu]") {
  check_programs([](const ir::Graph& g) -> RunFn {
    auto exe = std::make_shared<runtime::Executable>(compile(g));
    return [exe](const ir::TensorMap& inputs) { return exe->run(inputs); };
  });
}

TEST_CASE("views after reductions and matmuls on the CUDA simulator match the interpreter", "[row_order][cuda][sim]") {
  check_programs([](const ir::Graph& g) -> RunFn {
    std::shared_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
    return [exe](const ir::TensorMap& inputs) { return exe->run_host(inputs); };
  });
}

TEST_CASE("the interpreted fallback still runs a reordering kernel made by hand", "[row_order][cpu]") {
  // The pipeline no longer makes one: each reduction fused by hand with the views reading it.
  ir::Graph g = expr_graph("input x: f64[N, M, K]\noutput y = sum(x, 2).T + 1\noutput z = reshape(max(x, 1), [N * K])\n");
  Compilation c = run_passes(g, Target::cpu());
  passes::Partition by_hand;
  const ir::Graph& graph = c.result.graph;
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(graph.nodes.size()); ++id) {
    const ir::Node& n = graph.node(id);
    if (n.kind != ir::OpKind::Reduce) continue;
    passes::FusionGroup group{ir::KernelKind::Reduction, {id}, graph.node(n.inputs[0]).shape, n.as<ir::ReduceAttrs>().axes};
    std::vector<ir::NodeId> readers{id};
    for (ir::NodeId u = id + 1; u < static_cast<ir::NodeId>(graph.nodes.size()); ++u)
      for (ir::NodeId in : graph.node(u).inputs)
        if (std::find(readers.begin(), readers.end(), in) != readers.end() && graph.node(in).kind != ir::OpKind::Input) {
          readers.push_back(u);
          group.nodes.push_back(u);
          break;
        }
    by_hand.groups.push_back(group);
  }
  c.result.program = passes::build_program(graph, by_hand);
  passes::plan_memory(c.result.program);
  passes::schedule_program(c.result.program, c.target);
  REQUIRE(c.result.program.kernels.size() == 2);
  for (const ir::Kernel& k : c.result.program.kernels) CHECK(k.schedule.form == ir::LoopForm::Interpreted);
  runtime::Executable exe = load_cpu(std::move(c));
  for (const ir::SymbolBindings& s : sizes()) {
    ir::TensorMap inputs = testing::random_inputs(g, s, 4);
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g, inputs), exe.run(inputs)) == "");
  }
}
