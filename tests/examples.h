// The .expr programs of examples/, for the tests that run every one of them.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "frontends/expr/compile.h"

namespace fuse::testing {

/// examples/*.expr, sorted.
inline std::vector<std::filesystem::path> example_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(FUSE_SOURCE_DIR) / "examples"))
    if (entry.path().extension() == ".expr") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

/// The graph of an .expr file; a test failure with the diagnostics when it does not compile.
inline ir::Graph compile_example(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream source;
  source << in.rdbuf();
  expr::CompileResult r = expr::compile_expr(source.str(), path.string());
  INFO(expr::format_diagnostics(r.errors, source.str()));
  REQUIRE(r.graph);
  return std::move(*r.graph);
}

/// "N=7, M=5" (or "no symbols"): the sizes a case ran at, for INFO messages.
inline std::string sizes_str(const ir::SymbolBindings& sizes) {
  std::string s;
  for (const auto& [name, size] : sizes) s += (s.empty() ? "" : ", ") + name + "=" + std::to_string(size);
  return s.empty() ? "no symbols" : s;
}

/// The shape symbols of the graph's inputs, sorted.
inline std::vector<std::string> input_symbols(const ir::Graph& g) {
  std::set<std::string> names;
  for (ir::NodeId id : g.input_nodes())
    for (const ir::Dim& d : g.node(id).shape) for (const std::string& s : d.symbol_names()) names.insert(s);
  return {names.begin(), names.end()};
}

}  // namespace fuse::testing
