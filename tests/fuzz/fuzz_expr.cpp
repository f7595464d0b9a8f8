// libFuzzer target for the .expr front end: any input must give a graph or diagnostics, never a
// crash, a hang or undefined behaviour; a graph it gives must pass the IR verifier.
// Built and run by tests/fuzz/run_fuzz.sh (not part of the CMake build).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "frontends/expr/compile.h"
#include "ir/printer.h"
#include "ir/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view source(reinterpret_cast<const char*>(data), size);
  fuse::expr::CompileResult r = fuse::expr::compile_expr(source, "fuzz.expr");
  if (r.errors.size() > 20 || r.graph.has_value() == !r.errors.empty()) __builtin_trap();
  fuse::expr::format_diagnostics(r.errors, source);
  if (r.graph) {
    if (!fuse::ir::verify(*r.graph).empty()) __builtin_trap();
    fuse::ir::print_graph(*r.graph);
  }
  return 0;
}
