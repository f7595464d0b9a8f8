// Pictures of graphs: dot text rendered to SVG or PNG in process by the Graphviz library.
//
// Thread safety: render_dot may be called from any thread; calls are serialized by a mutex, since
// Graphviz keeps global state.
#pragma once

#include <string>
#include <string_view>

namespace fuse {

/// True for the formats render_dot produces: "svg" and "png".
bool is_image_format(std::string_view format);

/// Lays out `dot` with Graphviz's dot engine and renders it. Throws ir::Error for another
/// format or text Graphviz rejects, with Graphviz's own message.
std::string render_dot(const std::string& dot, const std::string& format);

}  // namespace fuse
