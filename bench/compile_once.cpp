// fuse_compile_once FILE.expr [--cached]: the child process of fuse_bench's cold-compile and
// disk-cache rows. Parses FILE, compiles it (fused, for this CPU) as the first compile of this
// fresh process, and prints the seconds the compile took (parsing not included). Without
// --cached the compile cache is bypassed; with it, the compile goes through the cache, whose
// directory the parent set (FUSE_CACHE_DIR) and filled.
//
// A program of its own, not fuse_bench itself: a process that compiles with fuse loads fuse and
// LLVM, not the peers' libraries (oneDNN, OpenBLAS, OpenMP), and this one links LLVM and MLIR
// statically as fusec does (codegen/CMakeLists.txt, FUSE_STATIC_LLVM).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "frontends/compile.h"
#include "frontends/expr/compile.h"

int main(int argc, char** argv) {
  using namespace fuse;
  if (argc < 2 || argc > 3 || (argc == 3 && std::string_view(argv[2]) != "--cached")) {
    std::fprintf(stderr, "usage: fuse_compile_once FILE.expr [--cached]\n");
    return 2;
  }
  bool cached = argc == 3;
  try {
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) throw ir::Error(std::string("cannot read '") + argv[1] + "'");
    std::ostringstream source;
    source << in.rdbuf();
    expr::CompileResult result = expr::compile_expr(source.str(), argv[1]);
    if (!result.graph) throw ir::Error(expr::format_diagnostics(result.errors, source.str()));
    CompileOptions options;
    options.use_cache = cached;
    auto start = std::chrono::steady_clock::now();
    runtime::Executable exe = compile(*result.graph, options);
    std::printf("%.9f\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuse_compile_once: %s\n", e.what());
    return 1;
  }
}
