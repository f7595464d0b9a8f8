// Tiling and scheduling: chooses, per kernel and target, the parallel dims, vector width, tiles
// and reduction strategy. Schedules are data in the Program; codegen follows them.
//
// Thread safety: mutates only the Program it is given; safe from any thread on distinct Programs.
#pragma once

#include "ir/program.h"
#include "ir/target.h"

namespace fuse::passes {

/// Gives every kernel its schedule for `target` (on a CPU, vector width and cache blocking follow
/// the target's vector bits, caches and cores).
void schedule_program(ir::Program& p, const ir::Target& target);

}  // namespace fuse::passes
