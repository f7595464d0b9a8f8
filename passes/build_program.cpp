#include "passes/build_program.h"

#include <algorithm>
#include <map>
#include <set>

namespace fuse::passes {

using ir::BufferId;
using ir::BufferRole;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

namespace {

struct ProgramBuilder {
  const ir::Graph& g;
  ir::Program program;
  std::map<NodeId, BufferId> buffer_of;  // materialized nodes and inputs

  BufferId add_buffer(std::string name, const Node& n, BufferRole role) {
    program.buffers.push_back({std::move(name), n.dtype, n.shape, role, -1});
    return static_cast<BufferId>(program.buffers.size()) - 1;
  }

  // A kernel computing `members` (sorted), reading and writing buffers.
  ir::Kernel make_kernel(const FusionGroup& group) {
    ir::Kernel k;
    k.kind = group.kind;
    k.source_nodes = group.nodes;
    k.space = group.space;
    k.axes = group.axes;
    std::set<NodeId> members(group.nodes.begin(), group.nodes.end());
    std::set<NodeId> reads;
    for (NodeId m : group.nodes)
      for (NodeId in : g.node(m).inputs)
        if (!members.count(in)) reads.insert(in);
    std::map<NodeId, NodeId> remap;
    for (NodeId r : reads) {
      BufferId b = buffer_of.at(r);
      const ir::Buffer& buf = program.buffers[b];
      remap[r] = ir::add_input(k.body, buf.name, buf.dtype, buf.shape, g.node(r).loc);
      k.inputs.push_back(b);
    }
    bool computes = false, permutes = false;
    for (NodeId m : group.nodes) {
      Node copy = g.node(m);
      for (NodeId& in : copy.inputs) in = remap.at(in);
      computes = computes || !ir::is_view(copy.kind);
      permutes = permutes || copy.kind == OpKind::Permute;
      remap[m] = k.body.add(std::move(copy));
    }
    for (NodeId m : group.nodes) {
      auto it = buffer_of.find(m);
      if (it == buffer_of.end()) continue;
      k.body.outputs.push_back({program.buffers[it->second].name, remap.at(m)});
      k.outputs.push_back(it->second);
    }
    if (k.kind == ir::KernelKind::Elementwise && !computes)
      k.kind = permutes ? ir::KernelKind::Transpose : ir::KernelKind::Copy;
    return k;
  }

  // An output that is a graph input directly: a copy kernel, so outputs never alias inputs.
  ir::Kernel make_copy_kernel(BufferId from, BufferId to) {
    ir::Kernel k;
    k.kind = ir::KernelKind::Copy;
    const ir::Buffer& src = program.buffers[from];
    NodeId in = ir::add_input(k.body, src.name, src.dtype, src.shape);
    k.body.outputs.push_back({program.buffers[to].name, in});
    k.inputs = {from};
    k.outputs = {to};
    k.space = src.shape;
    return k;
  }
};

// Kahn's algorithm over "reads a buffer written by"; ties keep the kernels' original order.
std::vector<int> launch_order(const std::vector<ir::Kernel>& kernels) {
  std::map<BufferId, int> writer;
  for (size_t i = 0; i < kernels.size(); ++i)
    for (BufferId b : kernels[i].outputs) writer[b] = static_cast<int>(i);
  std::vector<std::set<int>> deps(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i)
    for (BufferId b : kernels[i].inputs)
      if (writer.count(b) && writer[b] != static_cast<int>(i)) deps[i].insert(writer[b]);
  std::vector<int> order;
  std::vector<bool> done(kernels.size(), false);
  while (order.size() < kernels.size()) {
    bool progressed = false;
    for (size_t i = 0; i < kernels.size(); ++i) {
      if (done[i]) continue;
      if (std::all_of(deps[i].begin(), deps[i].end(), [&](int d) { return done[d]; })) {
        done[i] = true;
        order.push_back(static_cast<int>(i));
        progressed = true;
        break;
      }
    }
    if (!progressed) throw ir::Error("internal error: the kernels' dependencies form a cycle");
  }
  return order;
}

}  // namespace

ir::Program build_program(const ir::Graph& g, const Partition& partition) {
  ProgramBuilder b{g, {}, {}};
  // Which group computes each node, to find the nodes read across kernel boundaries.
  std::vector<std::set<int>> groups_of(g.nodes.size());
  for (size_t gi = 0; gi < partition.groups.size(); ++gi)
    for (NodeId m : partition.groups[gi].nodes) groups_of[m].insert(static_cast<int>(gi));

  for (NodeId id : g.input_nodes()) {
    BufferId buf = b.add_buffer(g.node(id).as<ir::InputAttrs>().name, g.node(id), BufferRole::Input);
    b.buffer_of[id] = buf;
    b.program.inputs.push_back({b.program.buffers[buf].name, buf});
  }
  std::vector<std::pair<BufferId, BufferId>> input_copies;
  for (const ir::GraphOutput& o : g.outputs) {
    const Node& n = g.node(o.node);
    if (n.kind == OpKind::Input) {
      BufferId buf = b.add_buffer(o.name, n, BufferRole::Output);
      input_copies.emplace_back(b.buffer_of.at(o.node), buf);
      b.program.outputs.push_back({o.name, buf});
      continue;
    }
    auto it = b.buffer_of.find(o.node);
    BufferId buf = it != b.buffer_of.end() ? it->second : b.add_buffer(o.name, n, BufferRole::Output);
    b.buffer_of[o.node] = buf;
    b.program.outputs.push_back({o.name, buf});
  }
  for (size_t gi = 0; gi < partition.groups.size(); ++gi)
    for (NodeId m : partition.groups[gi].nodes)
      for (NodeId in : g.node(m).inputs)
        if (!groups_of[in].count(static_cast<int>(gi)) && !b.buffer_of.count(in))
          b.buffer_of[in] = b.add_buffer("t" + std::to_string(in), g.node(in), BufferRole::Intermediate);

  std::vector<ir::Kernel> kernels;
  for (const FusionGroup& group : partition.groups) kernels.push_back(b.make_kernel(group));
  for (auto [from, to] : input_copies) kernels.push_back(b.make_copy_kernel(from, to));
  // Kernels that write nothing anyone reads (dead code the simplifier left) are dropped.
  std::erase_if(kernels, [](const ir::Kernel& k) { return k.outputs.empty(); });

  for (int i : launch_order(kernels)) {
    ir::Kernel& k = kernels[i];
    k.name = "k" + std::to_string(b.program.kernels.size()) + "_" + std::string(ir::kernel_kind_name(k.kind));
    b.program.launch_order.push_back(static_cast<int>(b.program.kernels.size()));
    b.program.kernels.push_back(std::move(k));
  }
  return b.program;
}

}  // namespace fuse::passes
