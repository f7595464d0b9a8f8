// The pass pipeline, in one readable sequence (Halide's Lower.cpp style): each stage's graph can
// be printed (`fusec --dump-after=PASS`).
//
// Thread safety: run_pipeline keeps its state per call (the after_pass callback runs on the
// caller's thread); any number may run at once.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/program.h"
#include "passes/fusion.h"
#include "passes/schedule.h"
#include "passes/simplify.h"

namespace fuse::passes {

struct PipelineOptions {
  /// Run the verifier after every pass and on the scheduled Program (cheap; on by default).
  bool verify_each_pass = true;
  /// Called after each pass with its name and its result, e.g. to dump it.
  std::function<void(const std::string& pass, const ir::Graph& after)> after_pass;
  /// Options of the simplify pass (e.g. fast_math).
  SimplifyOptions simplify;
  /// Fusion on/off (off: every op its own kernel, the unfused baseline).
  FusionOptions fusion;
  /// What the schedules are chosen for.
  ir::Target target = ir::Target::host();
};

struct PipelineResult {
  ir::Graph graph;        // after the graph passes (broadcasts explicit, simplified)
  Partition partition;    // the fusion decisions on `graph`
  ir::Program program;    // kernels, buffers, memory plan and schedules
};

/// The names of the graph passes, in order (what --dump-after accepts).
const std::vector<std::string>& pipeline_pass_names();

/// Verifies the input graph, then runs every pass in order: broadcast, simplify, fusion,
/// program construction, memory planning, scheduling. The fused plan's peak memory never exceeds
/// the unfused plan's: if it would, horizontal fusion is dropped, then fusion altogether.
PipelineResult run_pipeline(const ir::Graph& g, const PipelineOptions& options = {});

}  // namespace fuse::passes
