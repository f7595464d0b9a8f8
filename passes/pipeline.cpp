// The passes in the order they run: Graph -> Program. frontends/compile.cpp takes the Program on
// through code generation to something that runs.
#include "passes/pipeline.h"

#include "ir/verifier.h"
#include "passes/broadcast.h"
#include "passes/build_program.h"
#include "passes/memory_plan.h"

namespace fuse::passes {

const std::vector<std::string>& pipeline_pass_names() {
  static const std::vector<std::string> names = {"broadcast", "simplify"};
  return names;
}

PipelineResult run_pipeline(const ir::Graph& g, const PipelineOptions& options) {
  ir::verify_or_throw(g, "before the passes");
  auto finish_pass = [&](const std::string& name, const ir::Graph& after, ir::VerifyOptions verify) {
    if (options.verify_each_pass) ir::verify_or_throw(after, "after " + name, verify);
    if (options.after_pass) options.after_pass(name, after);
  };

  PipelineResult result;
  result.graph = make_broadcasts_explicit(g);
  finish_pass("broadcast", result.graph, {.explicit_broadcasts = true});
  result.graph = simplify(result.graph, options.simplify);
  finish_pass("simplify", result.graph, {.explicit_broadcasts = true});

  auto plan = [&](const FusionOptions& fusion) {
    Partition partition = partition_graph(result.graph, fusion);
    ir::Program program = build_program(result.graph, partition);
    plan_memory(program);
    return std::make_pair(std::move(partition), std::move(program));
  };
  auto fused = plan(options.fusion);
  if (options.fusion.enabled) {
    // Peak memory is compared with every symbol at a representative size.
    ir::SymbolBindings sizes;
    for (const ir::Node& n : result.graph.nodes)
      for (const ir::Dim& d : n.shape)
        for (const std::string& s : d.symbol_names()) sizes[s] = 1000;
    int64_t unfused_peak = ir::planned_peak_bytes(plan({.enabled = false}).second, sizes);
    if (ir::planned_peak_bytes(fused.second, sizes) > unfused_peak)
      fused = plan({.enabled = true, .horizontal = false});
    if (ir::planned_peak_bytes(fused.second, sizes) > unfused_peak) fused = plan({.enabled = false});
  }
  result.partition = std::move(fused.first);
  result.program = std::move(fused.second);
  schedule_program(result.program, options.target);
  if (options.verify_each_pass) ir::verify_or_throw(result.program, "after scheduling");
  return result;
}

}  // namespace fuse::passes
