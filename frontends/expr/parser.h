// The .expr parser: tokens to syntax tree. Recovers at statement (line) granularity, so one
// run reports every independent syntax error.
#pragma once

#include <vector>

#include "frontends/expr/ast.h"
#include "frontends/expr/diagnostics.h"
#include "frontends/expr/lexer.h"

namespace fuse::expr {

/// Parses every statement. A statement with an error is reported to `diags` and kept as
/// StmtKind::Invalid (with the names it would have defined).
Program parse(const std::vector<Token>& tokens, Diagnostics& diags);

}  // namespace fuse::expr
