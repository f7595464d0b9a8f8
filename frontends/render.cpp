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

// One Graphviz context for the process, made on first use and never freed: Graphviz caches
// text-size estimates in globals keyed by strings its context owns, so a freed context leaves
// them dangling for the next one (AddressSanitizer caught the use after free on a second render).
GVC_t* graphviz_context() {
  static GVC_t* context = gvContext();
  return context;
}
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
  GVC_t* gvc = graphviz_context();
  if (!gvc) fail("cannot create a context");
  std::unique_ptr<Agraph_t, GraphDeleter> graph(agmemread(dot.c_str()));
  if (!graph) fail("cannot parse the dot text");
  if (gvLayout(gvc, graph.get(), "dot") != 0) fail("layout failed");
  char* data = nullptr;
  unsigned int length = 0;
  int status = gvRenderData(gvc, graph.get(), format.c_str(), &data, &length);
  std::string image = status == 0 && data ? std::string(data, length) : "";
  gvFreeRenderData(data);
  gvFreeLayout(gvc, graph.get());
  if (status != 0) fail("cannot render " + format);
  return image;
}

}  // namespace fuse
