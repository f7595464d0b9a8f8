#include "frontends/render.h"

#include <graphviz/gvc.h>

#include <memory>
#include <mutex>

#include "ir/error.h"

namespace fuse {

namespace {

// Graphviz keeps global state (its error callback, plugin lists): one rendering at a time.
std::mutex graphviz_mutex;
// Graphviz reports problems through a global callback; this collects them for the Error.
std::string graphviz_messages;
int collect_message(char* message) {
  graphviz_messages += message;
  return 0;
}

struct ContextDeleter {
  void operator()(GVC_t* gvc) const { gvFreeContext(gvc); }
};
struct GraphDeleter {
  void operator()(Agraph_t* g) const { agclose(g); }
};

[[noreturn]] void fail(const std::string& what) {
  std::string details = graphviz_messages;
  while (!details.empty() && details.back() == '\n') details.pop_back();
  throw ir::Error("graphviz: " + what + (details.empty() ? "" : ": " + details));
}

}  // namespace

bool is_image_format(std::string_view format) { return format == "svg" || format == "png"; }

std::string render_dot(const std::string& dot, const std::string& format) {
  if (!is_image_format(format))
    throw ir::Error("cannot render to '" + format + "': the formats are svg and png");
  std::lock_guard<std::mutex> lock(graphviz_mutex);
  graphviz_messages.clear();
  agseterrf(collect_message);
  std::unique_ptr<GVC_t, ContextDeleter> gvc(gvContext());
  if (!gvc) fail("cannot create a context");
  std::unique_ptr<Agraph_t, GraphDeleter> graph(agmemread(dot.c_str()));
  if (!graph) fail("cannot parse the dot text");
  if (gvLayout(gvc.get(), graph.get(), "dot") != 0) fail("layout failed");
  char* data = nullptr;
  unsigned int length = 0;
  int status = gvRenderData(gvc.get(), graph.get(), format.c_str(), &data, &length);
  std::string image = status == 0 && data ? std::string(data, length) : "";
  gvFreeRenderData(data);
  gvFreeLayout(gvc.get(), graph.get());
  if (status != 0) fail("cannot render " + format);
  return image;
}

}  // namespace fuse
