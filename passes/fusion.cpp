#include "passes/fusion.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace fuse::passes {

using ir::KernelKind;
using ir::Node;
using ir::NodeId;
using ir::OpKind;
using ir::Shape;

static bool is_generator(OpKind k) { return k == OpKind::Constant || k == OpKind::Arange || k == OpKind::Rand; }
static bool is_elementwise_like(const Node& n) {
  return n.kind == OpKind::Elementwise || ir::is_view(n.kind) || is_generator(n.kind) ||
         n.kind == OpKind::Pad || n.kind == OpKind::Concatenate;  // np-views: index maps
}

// take / take_along_axis (issue 16): indexed loads that fuse into their consumer's kernel.
static bool is_gather(OpKind k) { return k == OpKind::Take || k == OpKind::TakeAlongAxis; }

int node_cost(const Node& n) {
  if (n.kind == OpKind::Elementwise) return n.as<ir::ElementwiseAttrs>().body.cost();
  if (n.kind == OpKind::Rand) return 2;  // a few integer multiplies per element
  if (is_gather(n.kind)) return 1;        // a checked load: recomputed in each consumer's kernel
  if (is_elementwise_like(n)) return 0;
  return 1 << 20;  // reductions and matmuls are never recomputed
}

static bool same_elements(const Shape& a, const Shape& b) { return ir::num_elements(a) == ir::num_elements(b); }

static bool trailing_axes(const std::vector<int>& axes, int rank) {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - static_cast<int>(axes.size()) + static_cast<int>(i)) return false;
  return true;
}

namespace {

struct GroupState {
  FusionGroup group;
  std::set<NodeId> members;
  std::set<NodeId> expanded;  // members evaluated more often than they have elements
};

class Partitioner {
 public:
  Partitioner(const ir::Graph& g, const FusionOptions& options)
      : g_(g), options_(options), users_(g.nodes.size()), is_output_(g.nodes.size(), false),
        groups_of_(g.nodes.size()) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (NodeId in : g.nodes[i].inputs)
        if (std::find(users_[in].begin(), users_[in].end(), static_cast<NodeId>(i)) == users_[in].end())
          users_[in].push_back(static_cast<NodeId>(i));
    for (const ir::GraphOutput& o : g.outputs) is_output_[o.node] = true;
  }

  Partition run() {
    for (NodeId id = static_cast<NodeId>(g_.nodes.size()) - 1; id >= 0; --id) place(id);
    if (options_.enabled && options_.horizontal) fuse_horizontally();
    if (options_.enabled) fuse_matmul_epilogue_siblings();
    return finish();
  }

 private:
  const Node& node(NodeId id) const { return g_.node(id); }

  void place(NodeId id) {
    const Node& n = node(id);
    if (n.kind == OpKind::Input) return;
    std::set<int> consumer_groups;
    for (NodeId u : users_[id]) consumer_groups.insert(groups_of_[u].begin(), groups_of_[u].end());
    if (!options_.enabled) return new_group(id, "fusion is disabled");
    if (consumer_groups.empty()) return new_group(id, "");

    if (consumer_groups.size() == 1) {
      int gi = *consumer_groups.begin();
      FusionGroup updated = groups_[gi].group;
      std::string why = check_join(id, groups_[gi], updated);
      if (why.empty()) return join(id, gi, updated);
      return new_group(id, why);
    }
    // Consumers in several kernels: recompute in each when cheap, else materialize once.
    int cost = node_cost(n);
    if ((n.kind == OpKind::Reduce || n.kind == OpKind::Matmul) && export_from_consumer(id, consumer_groups)) return;
    if (cost > kCheapCost || n.kind == OpKind::Reduce || n.kind == OpKind::Matmul)
      return new_group(id, "has consumers in " + std::to_string(consumer_groups.size()) +
                               " kernels and cost " + std::to_string(cost) + " > " +
                               std::to_string(kCheapCost) + " is too high to recompute in each");
    if (is_output_[id]) return new_group(id, "is a graph output used by several kernels: computed once and stored");
    std::vector<FusionGroup> updates;
    for (int gi : consumer_groups) {
      updates.push_back(groups_[gi].group);
      std::string why = check_join(id, groups_[gi], updates.back());
      if (!why.empty()) return new_group(id, why);
    }
    size_t k = 0;
    for (int gi : consumer_groups) join(id, gi, updates[k++]);
  }

  // A row reduction read by several kernels, one of them row-wise over its rows: computed in that
  // row-wise kernel and stored there for the others (a multi-output kernel), rather than in a
  // kernel of its own. Layernorm's backward: the row-wise kernel computing dx also computes the
  // mean and variance that the column reductions for dgamma and dbeta read. The consumer may also
  // be a reduction over the same rows that the result is broadcast back into, which it then makes
  // row-wise: cross-entropy's max, read by sum(exp(logits - max)) and by max + log(sum), is computed
  // with that sum (one pass over the logits, not two). Refused when the row-wise kernel depends on
  // one of the other consumers (a cycle).
  // Likewise a matmul read by several kernels joins an elementwise one as its epilogue and is
  // stored for the others (a dense layer's forward+backward: the relu gradient is the forward
  // matmul's epilogue while the loss reduction reads the stored product).
  bool export_from_consumer(NodeId id, const std::set<int>& consumer_groups) {
    const KernelKind wanted = node(id).kind == OpKind::Matmul ? KernelKind::Matmul : KernelKind::RowWise;
    for (int gi : consumer_groups) {
      KernelKind kind = groups_[gi].group.kind;
      if (wanted == KernelKind::Matmul ? kind != KernelKind::Elementwise
                                       : kind != KernelKind::RowWise && kind != KernelKind::Reduction)
        continue;
      FusionGroup updated = groups_[gi].group;
      if (!check_join(id, groups_[gi], updated).empty() || updated.kind != wanted) continue;
      bool cycle = std::any_of(consumer_groups.begin(), consumer_groups.end(),
                               [&](int other) { return other != gi && depends(gi, other); });
      if (cycle) continue;
      join(id, gi, updated);
      for (NodeId u : users_[id])
        reasons_[{id, u}] = "computed in another kernel that reads it too, and stored for this one";
      return true;
    }
    return false;
  }

  // Whether an edge from `from` to its user `u`, both reachable from `id` through members of
  // `gs` (u a member), satisfies `pred(node(u), from)`. Every edge is tested, not only the first
  // one into u: which operand of u the edge feeds can matter (gathered_from).
  template <class EdgePred>
  bool reaches_edge(NodeId id, const GroupState& gs, EdgePred pred) const {
    std::vector<NodeId> stack{id};
    std::set<NodeId> seen;
    while (!stack.empty()) {
      NodeId cur = stack.back();
      stack.pop_back();
      for (NodeId u : users_[cur]) {
        if (!gs.members.count(u)) continue;
        if (pred(node(u), cur)) return true;
        if (seen.insert(u).second) stack.push_back(u);
      }
    }
    return false;
  }

  // Whether a member of `gs` satisfying `pred` is reachable from `id` through members of `gs`.
  template <class Pred>
  bool reaches(NodeId id, const GroupState& gs, Pred pred) const {
    return reaches_edge(id, gs, [&](const Node& u, NodeId) { return pred(u); });
  }

  // Whether `id`'s value is broadcast back to `full` inside the group (a row-wise pattern).
  bool broadcast_back_downstream(NodeId id, const GroupState& gs, const Shape& full) const {
    return reaches(id, gs, [&](const Node& n) { return n.kind == OpKind::BroadcastTo && n.shape == full; });
  }

  // Whether every broadcast back to `full` downstream of `id` in the group puts the reduced
  // value at the row it was computed for: the operand's non-1 dims land on kept (not reduced)
  // axes. x + sum(x, 1) on a square x broadcasts the row sums along the rows (NumPy aligns
  // trailing dims), which a row-at-a-time kernel cannot compute.
  bool broadcast_back_aligned(NodeId id, const GroupState& gs, const Shape& full, const std::vector<int>& axes) const {
    return !reaches(id, gs, [&](const Node& n) {
      if (n.kind != OpKind::BroadcastTo || !(n.shape == full)) return false;
      const Shape& from = node(n.inputs[0]).shape;
      size_t offset = full.size() - from.size();
      for (size_t p = 0; p < from.size(); ++p)
        if (!(from[p] == ir::Dim(1)) && std::find(axes.begin(), axes.end(), static_cast<int>(p + offset)) != axes.end())
          return true;  // misaligned
      return false;
    });
  }

  static bool is_scatter(OpKind k) { return k == OpKind::IndexAdd || k == OpKind::Bincount || k == OpKind::Histogram; }

  // Whether `id` reaches an index_add's indices (its second operand) through members of `gs`.
  bool feeds_index_add_indices(NodeId id, const GroupState& gs) const {
    for (NodeId m : gs.members) {
      const Node& s = node(m);
      if (s.kind != OpKind::IndexAdd) continue;
      NodeId idx = s.inputs[1];
      if (idx == id) return true;
      if (gs.members.count(idx) && reaches(id, gs, [&](const Node& u) { return &u == &node(idx); })) return true;
    }
    return false;
  }

  // The name of the first gather (take, take_along_axis) reading `id` in the group.
  std::string gather_below(NodeId id, const GroupState& gs) const {
    std::string name = "take";
    reaches(id, gs, [&](const Node& m) {
      if (is_gather(m.kind)) name = std::string(ir::op_kind_name(m.kind));
      return is_gather(m.kind);
    });
    return name;
  }

  // np-gaps (issue 16): the name of the first member below `id` in the group that moves
  // elements across rows (a slice, permute, reshape, concatenate or pad: anything but what
  // ir::results_in_row_order lets follow a reduction or matmul); "" when there is none.
  std::string row_reordering_below(NodeId id, const GroupState& gs) const {
    std::string name;
    reaches(id, gs, [&](const Node& m) {
      bool keeps_rows = m.kind == OpKind::Elementwise || m.kind == OpKind::BroadcastTo ||
                        m.kind == OpKind::ExpandDims || m.kind == OpKind::Squeeze || m.kind == OpKind::Reduce ||
                        m.kind == OpKind::Matmul;  // (refused below: a reduction or matmul into a matmul)
      if (!keeps_rows) name = std::string(ir::op_kind_name(m.kind));
      return !keeps_rows;
    });
    return name;
  }

  // np-gaps (issue 16): whether a value computed from `id` in the group is the x operand of a
  // gather there, which reads it only at the positions its indices name.
  bool gathered_from(NodeId id, const GroupState& gs) const {
    return reaches_edge(id, gs, [](const Node& u, NodeId from) { return is_gather(u.kind) && u.inputs[0] == from; });
  }

  bool feeds_matmul(NodeId id, const GroupState& gs) const {
    return reaches(id, gs, [](const Node& n) { return n.kind == OpKind::Matmul; });
  }

  // Whether a reduction or matmul feeds `id` through elementwise ops and views only.
  bool computed_from_anchor(NodeId id) const {
    if (anchor_memo_.empty()) anchor_memo_.assign(g_.nodes.size(), -1);
    if (anchor_memo_[id] >= 0) return anchor_memo_[id];
    bool from = false;
    for (NodeId in : node(id).inputs) {
      const Node& n = node(in);
      if (n.kind == OpKind::Reduce || n.kind == OpKind::Matmul || (is_elementwise_like(n) && computed_from_anchor(in))) {
        from = true;
        break;
      }
    }
    anchor_memo_[id] = from;  // (a DAG: shared operands once)
    return from;
  }

  bool is_expanded(NodeId id, const GroupState& gs) const {
    for (NodeId u : users_[id]) {
      const Node& un = node(u);
      // A reduction or matmul consumes each operand element once per use, however its own
      // result is broadcast afterwards.
      if (!gs.members.count(u) || un.kind == OpKind::Reduce || un.kind == OpKind::Matmul) continue;
      if (gs.expanded.count(u)) return true;
      if (un.kind == OpKind::BroadcastTo && !same_elements(un.shape, node(id).shape)) return true;
    }
    return false;
  }

  // "" when `id` may join the group (with `updated` its new kind/space), else the reason not.
  std::string check_join(NodeId id, const GroupState& gs, FusionGroup& updated) const {
    const Node& n = node(id);
    const FusionGroup& G = gs.group;
    Shape reduced_space = G.kind == KernelKind::Reduction || G.kind == KernelKind::RowWise
                              ? ir::reduced_shape(G.space, G.axes, false) : G.space;
    if (is_output_[id] && !(n.shape == G.space) && !same_elements(n.shape, reduced_space))
      return "is an output of shape " + ir::shape_str(n.shape) + ", outside the kernel's iteration space " +
             ir::shape_str(G.space);

    // Scans: elementwise producers of the scanned space fuse in as a prologue; (np-scan)
    // elementwise consumers in the same space fuse after it as an epilogue, each step reading
    // the prefix just computed, so only elementwise ops of the scan's shape may lie between the
    // scan and the kernel's outputs (a view would read another element's prefix).
    if (n.kind == OpKind::Scan) {
      if (G.kind == KernelKind::Scan) return "two scans do not fuse";
      if (G.kind != KernelKind::Elementwise)
        return "a scan's result is stored: only elementwise consumers fuse after it";
      if (!(G.space == n.shape)) return "its consumers run over another space " + ir::shape_str(G.space);
      if (reaches(id, gs, [&](const Node& m) { return m.kind != OpKind::Elementwise || !(m.shape == n.shape); }))
        return "its result is read through a view (an epilogue reads each prefix at its own element)";
      for (NodeId m : gs.members) {
        bool stored = is_output_[m] || std::any_of(users_[m].begin(), users_[m].end(),
                                                   [&](NodeId u) { return !gs.members.count(u); });
        if (stored && !(node(m).shape == n.shape))
          return "the kernel would store %" + std::to_string(m) + " of another shape " + ir::shape_str(node(m).shape);
      }
      updated = {KernelKind::Scan, {}, n.shape, {n.as<ir::ScanAttrs>().axis}};
      return "";
    }
    if (G.kind == KernelKind::Scan) {
      if (!is_elementwise_like(n)) return "only elementwise producers fuse into a scan";
      if (is_output_[id]) return "a scan kernel writes only its scan and its epilogue";
    }
    // Scatters (np-scatter): index_add, bincount and histogram anchor a Scatter kernel over their
    // input's elements; elementwise producers of its operands fuse in as a prologue; the result is
    // stored (an element of it is complete only once every input element was scattered).
    if (is_scatter(n.kind)) return "a scatter's result is stored: its consumers read it from memory";
    if (G.kind == KernelKind::Scatter) {
      if (!is_elementwise_like(n)) return "only elementwise producers fuse into a scatter";
      if (is_output_[id]) return "a scatter kernel writes only its scatter's result";
      int cost = node_cost(n);
      // index_add reads its indices once per output column: only cheap index producers join.
      if (cost > kCheapCost && feeds_index_add_indices(id, gs))
        return "cost " + std::to_string(cost) + " would be recomputed for every column of the index_add";
      if (cost > kCheapCost && is_expanded(id, gs))
        return "cost " + std::to_string(cost) + " would be recomputed across an expanding broadcast";
      return "";
    }
    // take / take_along_axis (issue 16) read their operand x at data-dependent positions: x's
    // producer must be recomputable anywhere (elementwise), so a reduction or matmul is stored.
    if ((n.kind == OpKind::Reduce || n.kind == OpKind::Matmul) &&
        reaches(id, gs, [](const Node& m) { return is_gather(m.kind); }))
      return "is read by a " + gather_below(id, gs) + " at data-dependent positions: computed once and stored";
    // np-gaps (issue 16): a reduction's or matmul's loop forms write each result at its own row,
    // so a view that moves results across rows reads them from memory in a kernel of its own
    // (fused, the kernel could run only element by element: interpreted on the CPU).
    if (n.kind == OpKind::Reduce || n.kind == OpKind::Matmul) {
      std::string view = row_reordering_below(id, gs);
      if (!view.empty())
        return "its result is read through a " + view + ", which moves elements across its rows: computed once and stored";
    }
    if (is_gather(n.kind)) {
      if (G.kind == KernelKind::Matmul) return "a matmul's operands are packed without indexed loads: stored first";
      // Every index must be checked, as the interpreter checks them: a kernel that reads only
      // part of the result (a slice of it) would skip some.
      if (reaches(id, gs, [](const Node& m) { return m.kind == OpKind::Slice; }))
        return "a slice of it reads only some of its indices (each must be checked): stored first";
      if (gathered_from(id, gs))
        return "another gather reads it at data-dependent positions, so only some of its indices (each must be "
               "checked): stored first";
      return "";
    }

    if (is_elementwise_like(n)) {
      int cost = node_cost(n);
      if (cost > kCheapCost && is_expanded(id, gs))
        return "cost " + std::to_string(cost) + " would be recomputed across an expanding broadcast";
      if (G.kind == KernelKind::Matmul && feeds_matmul(id, gs)) {
        // A view computes nothing: the packing reads the stored result through its index map
        // (`q @ k.T` with k a matmul result needs no kernel copying k.T).
        if (ir::is_view(n.kind) && !is_output_[id]) return "";
        if (computed_from_anchor(id))
          return "it follows a reduction or matmul, whose epilogue computes it once instead of per tile";
        if (cost > kCheapCost)
          return "as a matmul prologue its cost " + std::to_string(cost) + " would be recomputed for every tile";
        if (is_output_[id]) return "a matmul prologue cannot also be an output";
      }
      return "";
    }
    if (n.kind == OpKind::Reduce) {
      const auto& r = n.as<ir::ReduceAttrs>();
      const Shape& in = node(n.inputs[0]).shape;
      bool row_use = broadcast_back_downstream(id, gs, in);
      bool trailing = trailing_axes(r.axes, static_cast<int>(in.size()));
      if (G.kind == KernelKind::Matmul) return "a reduction does not fuse with a matmul";
      if (G.kind == KernelKind::Scan) return "a reduction does not fuse into a scan";
      if (row_use && !broadcast_back_aligned(id, gs, in, r.axes))
        return "its result is broadcast back along the reduced axes (each row would need other rows' results)";
      if (G.kind == KernelKind::Elementwise) {
        if (row_use) {
          if (!(G.space == in)) return "its result is broadcast into a different space " + ir::shape_str(G.space);
          if (!trailing) return "its result is broadcast back over non-trailing axes (no row-wise kernel)";
          updated = {KernelKind::RowWise, {}, in, r.axes};
          return "";
        }
        if (!same_elements(n.shape, G.space))
          return "its result " + ir::shape_str(n.shape) + " is broadcast to a larger space " + ir::shape_str(G.space);
        updated = {KernelKind::Reduction, {}, in, r.axes};
        return "";
      }
      // The group already reduces: only the same space and axes (softmax's max and sum).
      if (!(G.space == in) || G.axes != r.axes)
        return "reduces " + ir::shape_str(in) + " over other axes than the kernel's reduction of " +
               ir::shape_str(G.space);
      if (row_use) {
        if (!trailing) return "its result is broadcast back over non-trailing axes (no row-wise kernel)";
        updated.kind = KernelKind::RowWise;
      }
      return "";
    }
    if (n.kind == OpKind::Matmul) {
      if (G.kind == KernelKind::Matmul) return "two matmuls never fuse";
      if (G.kind != KernelKind::Elementwise) return "a matmul result does not fuse into a reduction";
      if (!(n.shape == G.space) || is_expanded(id, gs)) return "the matmul result is broadcast";
      updated = {KernelKind::Matmul, {}, n.shape, {}};
      return "";
    }
    return "is not fusible";
  }

  void join(NodeId id, int gi, const FusionGroup& updated) {
    GroupState& gs = groups_[gi];
    bool expanded = is_expanded(id, gs);
    gs.group.kind = updated.kind;
    gs.group.space = updated.space;
    gs.group.axes = updated.axes;
    gs.members.insert(id);
    if (expanded) gs.expanded.insert(id);
    groups_of_[id].push_back(gi);
  }

  void new_group(NodeId id, const std::string& why) {
    const Node& n = node(id);
    GroupState gs;
    if (n.kind == OpKind::Reduce) {
      gs.group = {KernelKind::Reduction, {}, node(n.inputs[0]).shape, n.as<ir::ReduceAttrs>().axes};
    } else if (n.kind == OpKind::Matmul) {
      gs.group = {KernelKind::Matmul, {}, n.shape, {}};
    } else if (n.kind == OpKind::Scan) {
      gs.group = {KernelKind::Scan, {}, n.shape, {n.as<ir::ScanAttrs>().axis}};
    } else if (is_scatter(n.kind)) {
      gs.group = scatter_group(n);
    } else {
      gs.group = {KernelKind::Elementwise, {}, n.shape, {}};
    }
    gs.members.insert(id);
    groups_.push_back(std::move(gs));
    groups_of_[id].push_back(static_cast<int>(groups_.size()) - 1);
    for (NodeId u : users_[id]) reasons_[{id, u}] = why;
  }

  // A Scatter kernel's space is its scattered input's: x for histogram/bincount (every axis
  // scattered), values for index_add (its axis scattered, the other axes its output's columns).
  FusionGroup scatter_group(const Node& n) const {
    const Shape& space = node(n.inputs[n.kind == OpKind::IndexAdd ? 2 : 0]).shape;
    std::vector<int> axes;
    if (n.kind == OpKind::IndexAdd) axes.push_back(n.as<ir::GatherAttrs>().axis);
    else
      for (int a = 0; a < static_cast<int>(space.size()); ++a) axes.push_back(a);
    return {KernelKind::Scatter, {}, space, axes};
  }

  // The buffers (materialized nodes or graph inputs) a group reads.
  std::set<NodeId> external_reads(const GroupState& gs) const {
    std::set<NodeId> reads;
    for (NodeId m : gs.members)
      for (NodeId in : node(m).inputs)
        if (!gs.members.count(in)) reads.insert(in);
    return reads;
  }

  // Whether group `to` depends, directly or not, on group `from` through materialized buffers.
  bool depends(int to, int from) const {
    std::vector<int> stack{to};
    std::set<int> seen;
    while (!stack.empty()) {
      int cur = stack.back();
      stack.pop_back();
      if (cur == from) return true;
      if (!seen.insert(cur).second) continue;
      for (NodeId r : external_reads(groups_[cur]))
        for (int producer : groups_of_[r]) stack.push_back(producer);
    }
    return false;
  }

  void fuse_horizontally() {
    bool merged = true;
    while (merged) {
      merged = false;
      for (size_t a = 0; a < groups_.size() && !merged; ++a) {
        for (size_t b = a + 1; b < groups_.size() && !merged; ++b) {
          const FusionGroup &ga = groups_[a].group, &gb = groups_[b].group;
          if (groups_[a].members.empty() || groups_[b].members.empty()) continue;
          if (groups_[a].group.kind == KernelKind::Scatter) continue;  // one scatter per kernel
          if (ga.kind != gb.kind || ga.kind == KernelKind::Matmul || ga.kind == KernelKind::Scan || !(ga.space == gb.space) ||
              ga.axes != gb.axes)
            continue;
          std::set<NodeId> ra = external_reads(groups_[a]), rb = external_reads(groups_[b]);
          bool shared = std::any_of(ra.begin(), ra.end(), [&](NodeId r) { return rb.count(r) > 0; });
          if (!shared || depends(static_cast<int>(a), static_cast<int>(b)) ||
              depends(static_cast<int>(b), static_cast<int>(a)))
            continue;
          merge(static_cast<int>(a), static_cast<int>(b));
          merged = true;
        }
      }
    }
  }

  // Rule 3 with several consumers: an elementwise kernel over a matmul's space that reads the
  // product (or a value its epilogue computes) only at its own elements joins the matmul kernel as
  // a further epilogue, instead of re-reading the stored product: tanh(p + c) and p * p of one
  // p = a @ b make one kernel writing both. export_from_consumer already put the matmul into one
  // consumer's kernel; this takes the others.
  void fuse_matmul_epilogue_siblings() {
    bool merged = true;
    while (merged) {
      merged = false;
      for (size_t a = 0; a < groups_.size() && !merged; ++a) {
        if (groups_[a].members.empty() || groups_[a].group.kind != KernelKind::Matmul) continue;
        for (size_t b = 0; b < groups_.size() && !merged; ++b) {
          if (b == a || !joins_epilogue(static_cast<int>(a), static_cast<int>(b))) continue;
          merge(static_cast<int>(a), static_cast<int>(b));
          merged = true;
        }
      }
    }
  }

  // Whether elementwise group `b` can run in matmul group `a`'s epilogue (see above).
  bool joins_epilogue(int a, int b) const {
    const GroupState &A = groups_[a], &B = groups_[b];
    const Shape& space = A.group.space;
    if (B.members.empty() || B.group.kind != KernelKind::Elementwise || !(B.group.space == space)) return false;
    // The epilogue's values: the product and what the matmul kernel computes from it (not its
    // prologues, which run on operand tiles).
    NodeId mm = -1;
    for (NodeId m : A.members)
      if (node(m).kind == OpKind::Matmul) mm = m;
    if (mm < 0) return false;
    std::set<NodeId> epilogue{mm};
    for (NodeId m : A.members)  // (ascending ids: topological)
      if (std::any_of(node(m).inputs.begin(), node(m).inputs.end(), [&](NodeId in) { return epilogue.count(in) > 0; }))
        epilogue.insert(m);
    bool reads_epilogue = false;
    for (NodeId r : external_reads(B)) {
      if (!A.members.count(r)) continue;
      if (!epilogue.count(r)) return false;  // a prologue value is not on C's tile
      reads_epilogue = true;
      // Read at its own element: by elementwise ops of C's shape, with nothing below moving
      // elements across rows (a tile holds only its own rows and columns).
      for (NodeId u : users_[r])
        if (B.members.count(u) && (node(u).kind != OpKind::Elementwise || !(node(u).shape == space))) return false;
      if (!row_reordering_below(r, B).empty()) return false;
    }
    if (!reads_epilogue) return false;
    // What b stores, the matmul kernel stores at C's elements (any other shape would take it off
    // its blocked form: schedule.cpp).
    for (NodeId m : B.members) {
      bool stored = is_output_[m] || std::any_of(users_[m].begin(), users_[m].end(), [&](NodeId u) {
                      return !B.members.count(u) && !A.members.count(u);
                    });
      if (stored && !(node(m).shape == space)) return false;
    }
    // No cycle through a third kernel: one that reads a or b and that a or b reads.
    if (depends(a, b)) return false;
    for (size_t c = 0; c < groups_.size(); ++c) {
      int ci = static_cast<int>(c);
      if (ci == a || ci == b || groups_[c].members.empty()) continue;
      if ((depends(ci, a) || depends(ci, b)) && (depends(a, ci) || depends(b, ci))) return false;
    }
    return true;
  }

  void merge(int into, int from) {
    for (NodeId m : groups_[from].members) {
      groups_[into].members.insert(m);
      auto& gs = groups_of_[m];
      gs.erase(std::remove(gs.begin(), gs.end(), from), gs.end());
      if (std::find(gs.begin(), gs.end(), into) == gs.end()) gs.push_back(into);
    }
    groups_[into].expanded.insert(groups_[from].expanded.begin(), groups_[from].expanded.end());
    groups_[from].members.clear();
  }

  Partition finish() {
    Partition p;
    std::vector<GroupState*> live;
    for (GroupState& gs : groups_)
      if (!gs.members.empty()) live.push_back(&gs);
    std::sort(live.begin(), live.end(),
              [](const GroupState* a, const GroupState* b) { return *a->members.begin() < *b->members.begin(); });
    for (GroupState* gs : live) {
      FusionGroup group = gs->group;
      group.nodes.assign(gs->members.begin(), gs->members.end());
      for (NodeId m : group.nodes)
        for (NodeId in : node(m).inputs) {
          if (gs->members.count(in) || node(in).kind == OpKind::Input) continue;
          auto it = reasons_.find({in, m});
          p.boundaries.push_back({in, m, it != reasons_.end() && !it->second.empty() ? it->second : "materialized"});
        }
      p.groups.push_back(std::move(group));
    }
    std::sort(p.boundaries.begin(), p.boundaries.end(), [](const FusionBoundary& a, const FusionBoundary& b) {
      return std::tie(a.producer, a.consumer) < std::tie(b.producer, b.consumer);
    });
    p.boundaries.erase(std::unique(p.boundaries.begin(), p.boundaries.end(),
                                   [](const FusionBoundary& a, const FusionBoundary& b) {
                                     return a.producer == b.producer && a.consumer == b.consumer;
                                   }),
                       p.boundaries.end());
    return p;
  }

  const ir::Graph& g_;
  FusionOptions options_;
  std::vector<std::vector<NodeId>> users_;
  std::vector<bool> is_output_;
  std::vector<std::vector<int>> groups_of_;
  std::vector<GroupState> groups_;
  std::map<std::pair<NodeId, NodeId>, std::string> reasons_;
  mutable std::vector<signed char> anchor_memo_;  // computed_from_anchor: -1 unknown, else 0/1
};

}  // namespace

Partition partition_graph(const ir::Graph& g, const FusionOptions& options) {
  return Partitioner(g, options).run();
}

static std::string short_label(const Node& n) {
  if (n.kind == OpKind::Reduce) return "reduce." + std::string(ir::reduce_kind_name(n.as<ir::ReduceAttrs>().kind));
  if (n.kind == OpKind::Scan) return "scan." + std::string(ir::reduce_kind_name(n.as<ir::ScanAttrs>().kind));
  if (n.kind == OpKind::Elementwise) {
    const ir::ScalarFn& body = n.as<ir::ElementwiseAttrs>().body;
    return std::string(ir::scalar_op_name(body.node(body.results[0]).op));
  }
  return std::string(ir::op_kind_name(n.kind));
}

// How a Scatter kernel runs (docs/language.md): on the CPU, and on CUDA (atomics).
static std::string scatter_explanation(const ir::Graph& g, const FusionGroup& group) {
  for (NodeId id : group.nodes) {
    const Node& n = g.node(id);
    if (n.kind == OpKind::IndexAdd)
      return "  a scatter (index_add along axis " + std::to_string(n.as<ir::GatherAttrs>().axis) +
             "): the result starts as a copy of x, then each column of it (every index but the axis) adds its "
             "values in index order on one CPU thread (CUDA: a copy, then one global atomic add per value); "
             "elementwise producers of x, the indices and the values run as its prologue\n";
    if (n.kind == OpKind::Bincount || n.kind == OpKind::Histogram)
      return "  a scatter (" + std::string(ir::op_kind_name(n.kind)) + " into " + ir::shape_str(n.shape) +
             " bins): chunks of the input counted into private bins, added up in chunk order on the CPU (CUDA: "
             "per-block shared-memory bins, then global atomics); "
             "elementwise producers of its operands run as its prologue\n";
  }
  return "";
}

std::string explain_fusion(const ir::Graph& g, const Partition& p) {
  std::string s;
  for (size_t i = 0; i < p.groups.size(); ++i) {
    const FusionGroup& group = p.groups[i];
    s += "kernel " + std::to_string(i) + " (" + std::string(ir::kernel_kind_name(group.kind)) + " over " +
         ir::shape_str(group.space) + "):";
    for (NodeId id : group.nodes) s += " %" + std::to_string(id);
    s += "\n";
    // The CUDA numbers are codegen/cuda/emitter.h's kScanFewRows and kScanChunkLength.
    if (group.kind == KernelKind::Scan)
      s += "  a scan along axis " + std::to_string(group.axes.at(0)) +
           ": each row along that axis is folded in order from its first element, rows in parallel "
           "(CPU: few long rows in chunks; CUDA: a thread per short row, a block per long row, and with fewer than 256 rows "
           "longer than 4096 elements a block per chunk in three launches: chunk totals, a scan of each row's totals, "
           "each chunk rescanned from its carry); its elementwise producers run as the prologue of each step, "
           "its elementwise consumers as the epilogue\n";
    if (group.kind == KernelKind::Scatter) s += scatter_explanation(g, group);
    // issue 16: gathers are loads of this kernel, not kernels of their own.
    for (NodeId id : group.nodes)
      if (is_gather(g.node(id).kind))
        s += "  %" + std::to_string(id) + " " + std::string(ir::op_kind_name(g.node(id).kind)) +
             ": an indexed load here: the index is read at each output position and checked at run time "
             "(negative counts from the end, out of range is an error), then x is read where it points\n";
  }
  if (p.boundaries.empty()) s += "no edge crosses a kernel boundary\n";
  for (const FusionBoundary& b : p.boundaries)
    s += "%" + std::to_string(b.producer) + " " + short_label(g.node(b.producer)) + " -> %" +
         std::to_string(b.consumer) + " " + short_label(g.node(b.consumer)) + ": " + b.reason + "\n";
  return s;
}

}  // namespace fuse::passes
