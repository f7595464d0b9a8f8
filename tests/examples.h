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

/// The graph of .expr `source` (named `file` in diagnostics); a test failure with the
/// diagnostics when it does not compile.
inline ir::Graph compile_source(const std::string& source, const std::string& file) {
  expr::CompileResult r = expr::compile_expr(source, file);
  INFO(expr::format_diagnostics(r.errors, source));
  REQUIRE(r.graph);
  return std::move(*r.graph);
}

/// The graph of an .expr file, as compile_source.
inline ir::Graph compile_example(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream source;
  source << in.rdbuf();
  return compile_source(source.str(), path.string());
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

/// Redraws the integer inputs that gather/scatter ops read as indices (directly or through
/// views) into their valid range: [-size, size) for take, take_along_axis and index_add, [0, K)
/// for bincount. Random test inputs are otherwise small integers of either sign or extremes,
/// which would make every run a run-time index error.
inline void make_indices_valid(const ir::Graph& g, ir::TensorMap& inputs, const ir::SymbolBindings& sizes,
                               uint64_t seed) {
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (const ir::Node& n : g.nodes) {
    if (!ir::is_gather_scatter(n.kind) || n.kind == ir::OpKind::Histogram) continue;
    ir::NodeId idx = n.kind == ir::OpKind::Bincount ? n.inputs[0] : n.inputs[1];
    while (ir::is_view(g.node(idx).kind)) idx = g.node(idx).inputs[0];
    if (g.node(idx).kind != ir::OpKind::Input) continue;
    int64_t low = 0, high = 0;
    if (n.kind == ir::OpKind::Bincount) {
      high = ir::evaluate(n.shape, sizes)[0];
    } else {
      int axis = n.as<ir::GatherAttrs>().axis;
      high = ir::evaluate(g.node(n.inputs[0]).shape, sizes)[axis];
      low = -high;
    }
    if (high <= 0) continue;
    ir::HostArray& a = inputs.at(g.node(idx).as<ir::InputAttrs>().name);
    for (int64_t i = 0; i < a.size(); ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      a.set_i64(i, low + static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(high - low)));
    }
  }
}

}  // namespace fuse::testing
