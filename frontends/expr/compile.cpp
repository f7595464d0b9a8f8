#include "frontends/expr/compile.h"

#include "frontends/expr/diagnostics.h"
#include "frontends/expr/lexer.h"
#include "frontends/expr/lower.h"
#include "frontends/expr/parser.h"

namespace fuse::expr {

CompileResult compile_expr(std::string_view source, const std::string& filename) {
  Diagnostics diags(filename.empty() ? "<input>" : filename);
  CompileResult result;
  try {
    std::vector<Token> tokens = lex(source);
    Program program = parse(tokens, diags);
    ir::Graph graph = lower(program, diags);
    if (diags.empty()) result.graph = std::move(graph);
  } catch (const std::exception& e) {
    // Only resource exhaustion gets here; report it rather than let it escape.
    diags.error({1, 1}, std::string("internal compiler error: ") + e.what());
  }
  result.errors = diags.take();
  return result;
}

}  // namespace fuse::expr
