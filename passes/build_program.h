// Turns a partition of a graph into a Program: buffers for what crosses kernel boundaries,
// one kernel (a self-contained sub-graph) per group, and a launch order.
//
// Thread safety: a pure function; safe from any thread.
#pragma once

#include "ir/program.h"
#include "passes/fusion.h"

namespace fuse::passes {

/// Buffers: every graph input, every graph output, and every node read by a kernel that does
/// not compute it. An output that is a graph input directly gets a copy kernel.
/// Kernels are ordered so that each runs after the kernels writing the buffers it reads.
ir::Program build_program(const ir::Graph& g, const Partition& partition);

}  // namespace fuse::passes
