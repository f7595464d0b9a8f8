// The .expr language front end: source text in, ir::Graph or diagnostics out.
// The language is described in docs/language.md.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/error.h"
#include "ir/graph.h"

namespace fuse::expr {

struct Diagnostic {
  ir::SourceLoc loc;
  std::string message;
};

struct CompileResult {
  std::optional<ir::Graph> graph;  // set when there were no errors
  std::vector<Diagnostic> errors;  // all independent errors, at most 20
};

/// Lexes, parses, checks and lowers a .expr program.
CompileResult compile_expr(std::string_view source, const std::string& filename);

/// "file:line:col: error: message\n<the source line>\n<spaces>^\n" for each diagnostic.
std::string format_diagnostics(const std::vector<Diagnostic>& errors, std::string_view source);

}  // namespace fuse::expr
