// Lowering of a parsed .expr program into an ir::Graph: name resolution, static arguments
// (axes, shapes, seeds), fn tracing into ScalarFns, and the checks that need them.
#pragma once

#include "frontends/expr/ast.h"
#include "frontends/expr/diagnostics.h"
#include "ir/graph.h"

namespace fuse::expr {

/// Builds the graph of every statement that is correct; reports the others to `diags` (one
/// error per statement; statements depending on a failed one fail quietly). The graph is
/// only meaningful when `diags` stays empty.
ir::Graph lower(const Program& program, Diagnostics& diags);

}  // namespace fuse::expr
