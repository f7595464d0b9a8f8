#include "ir/kernel_forms.h"

#include <algorithm>
#include <cmath>

namespace fuse::ir {

namespace {

enum class Walk { Descend, Stop, Fail };

// Visits each node on the outputs' paths once (the outputs shaped like the space): `visit`
// says whether to go on to its inputs, stop there, or fail. False where it failed or an output
// is shaped unlike the space.
template <class Visit>
bool walk_from_outputs(const Kernel& k, Visit visit) {
  std::vector<bool> seen(k.body.nodes.size(), false);
  std::vector<NodeId> stack;
  for (const GraphOutput& o : k.body.outputs) {
    if (!(k.body.node(o.node).shape == k.space)) return false;
    stack.push_back(o.node);
  }
  while (!stack.empty()) {
    NodeId id = stack.back();
    stack.pop_back();
    if (seen[id]) continue;
    seen[id] = true;
    Walk w = visit(id);
    if (w == Walk::Fail) return false;
    if (w == Walk::Descend)
      for (NodeId in : k.body.node(id).inputs) stack.push_back(in);
  }
  return true;
}

// A node of a contiguous kernel: an input, constant or elementwise op shaped like the space
// (its inputs next), or a broadcast of a single element.
Walk contiguous_step(const Kernel& k, NodeId id) {
  const Node& n = k.body.node(id);
  if (n.kind == OpKind::BroadcastTo && num_elements(k.body.node(n.inputs[0]).shape) == Dim(1)) return Walk::Stop;
  bool plain = n.kind == OpKind::Input || n.kind == OpKind::Constant || n.kind == OpKind::Elementwise;
  return plain && n.shape == k.space ? Walk::Descend : Walk::Fail;
}

}  // namespace

bool elementwise_contiguous(const Kernel& k) {
  return walk_from_outputs(k, [&](NodeId id) { return contiguous_step(k, id); });
}

int periodic_broadcast_axis(const Kernel& k, NodeId id) {
  const Node& n = k.body.node(id);
  if (n.kind != OpKind::BroadcastTo || !(n.shape == k.space)) return -1;
  const Shape& from = k.body.node(n.inputs[0]).shape;
  int rank = static_cast<int>(k.space.size());
  int offset = rank - static_cast<int>(from.size());
  if (offset < 0) return -1;
  // The first axis from which the operand keeps every dim (or the space's dim is 1 anyway).
  int first = rank;
  while (first > 0) {
    int in_axis = first - 1 - offset;
    bool kept = in_axis >= 0 && from[in_axis] == k.space[first - 1];
    if (!kept && !(k.space[first - 1] == Dim(1))) break;
    --first;
  }
  // Every axis before it broadcast; at least one kept (else a single element).
  for (int a = 0; a < first; ++a) {
    int in_axis = a - offset;
    if (in_axis >= 0 && !(from[in_axis] == Dim(1))) return -1;
  }
  return first < rank && num_elements(from) != Dim(1) ? first : -1;
}

NodeId row_ordered_input(const Graph& body, NodeId id) {
  const Node& n = body.node(id);
  if (n.kind == OpKind::Input) return id;
  bool keeps_order = n.kind == OpKind::ExpandDims || n.kind == OpKind::Squeeze || n.kind == OpKind::Reshape;
  return keeps_order ? row_ordered_input(body, n.inputs[0]) : -1;
}

bool picks_along_rows(const Kernel& k, NodeId id) {
  const Node& n = k.body.node(id);
  if (n.kind != OpKind::TakeAlongAxis || !(n.shape == k.space) || k.space.empty() || !(k.space.back() == Dim(1)))
    return false;
  int rank = static_cast<int>(k.space.size());
  if (n.as<GatherAttrs>().axis != rank - 1) return false;
  const Node& x = k.body.node(n.inputs[0]);
  if (x.kind != OpKind::Input || static_cast<int>(x.shape.size()) != rank) return false;
  for (int d = 0; d + 1 < rank; ++d)
    if (!(x.shape[d] == k.space[d])) return false;
  NodeId indices = row_ordered_input(k.body, n.inputs[1]);
  return indices >= 0 && num_elements(k.body.node(indices).shape) == num_elements(k.space);
}

int per_row_broadcast_axis(const Kernel& k, NodeId id) {
  const Node& n = k.body.node(id);
  if (n.kind != OpKind::BroadcastTo || !(n.shape == k.space)) return -1;
  const Node& in = k.body.node(n.inputs[0]);
  if (row_ordered_input(k.body, n.inputs[0]) < 0 || in.shape.size() != k.space.size()) return -1;
  int rank = static_cast<int>(k.space.size());
  // The last axis the input keeps; every axis after it 1 in the input, every one up to it kept.
  int a = rank;
  while (a > 0 && in.shape[a - 1] == Dim(1)) --a;
  if (a == 0 || a == rank) return -1;  // a single element, or no broadcast
  for (int d = 0; d < a; ++d)
    if (!(in.shape[d] == k.space[d])) return -1;
  return a;
}

FlatBroadcasts flat_broadcasts(const Kernel& k) {
  FlatBroadcasts found;
  bool flat = walk_from_outputs(k, [&](NodeId id) {
    if (int a = periodic_broadcast_axis(k, id); a >= 0) {
      found.periodic_axis = found.periodic_axis < 0 ? a : std::min(found.periodic_axis, a);
      return Walk::Stop;
    }
    if (int a = per_row_broadcast_axis(k, id); a >= 0) {
      if (found.per_row_axis >= 0 && found.per_row_axis != a) return Walk::Fail;
      found.per_row_axis = a;
      return Walk::Stop;
    }
    return contiguous_step(k, id);
  });
  return flat ? found : FlatBroadcasts{};
}

bool results_in_row_order(const Kernel& k) {
  if (k.kind != KernelKind::Reduction && k.kind != KernelKind::RowWise && k.kind != KernelKind::Matmul) return true;
  std::vector<bool> after_reduce(k.body.nodes.size(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(k.body.nodes.size()); ++id) {
    const Node& n = k.body.node(id);
    bool downstream = false;
    for (NodeId in : n.inputs) {
      OpKind kind = k.body.node(in).kind;
      downstream = downstream || after_reduce[in] || kind == OpKind::Reduce || kind == OpKind::Matmul;
    }
    after_reduce[id] = downstream;
    bool allowed = n.kind == OpKind::Elementwise || n.kind == OpKind::BroadcastTo || n.kind == OpKind::ExpandDims ||
                   n.kind == OpKind::Squeeze || n.kind == OpKind::Reduce;
    if (downstream && !allowed) return false;
  }
  return true;
}

bool reduces_to_one_element(const Kernel& k, bool user_combiners) {
  if (k.kind != KernelKind::Reduction) return false;
  if (!(num_elements(kept_dims(k)) == Dim(1))) return false;
  for (const GraphOutput& o : k.body.outputs)
    if (!(num_elements(k.body.node(o.node).shape) == Dim(1))) return false;
  // No reduction may read another's result (they share one pass over the elements).
  std::vector<bool> after_reduce(k.body.nodes.size(), false);
  bool any = false;
  for (NodeId id = 0; id < static_cast<NodeId>(k.body.nodes.size()); ++id) {
    const Node& n = k.body.node(id);
    bool downstream = false;
    for (NodeId in : n.inputs) downstream = downstream || after_reduce[in];
    if (n.kind == OpKind::Reduce) {
      if (downstream || (!user_combiners && n.as<ReduceAttrs>().kind == ReduceKind::Custom)) return false;
      any = true;
      downstream = true;
    }
    after_reduce[id] = downstream;
  }
  return any;
}

int transpose_inner_axis(const Kernel& k) {
  const Node& out = k.body.node(k.body.outputs[0].node);
  int rank = static_cast<int>(out.shape.size());
  if (rank < 2 || !(num_elements(out.shape) == num_elements(k.space))) return -1;
  for (int d = 0; d < rank - 1; ++d) {
    NodeId id = k.body.outputs[0].node;
    int axis = d;
    while (axis >= 0) {
      const Node& n = k.body.node(id);
      if (n.kind == OpKind::Input || n.kind == OpKind::Constant) {
        if (axis + 1 == static_cast<int>(n.shape.size())) return d;
        break;
      }
      if (n.kind == OpKind::Elementwise && n.inputs.size() == 1) {
        id = n.inputs[0];
        continue;
      }
      // Only permutes, expand_dims and squeezes carry the axis through (a broadcast or reshape
      // on the way is not a plain transpose).
      bool carries = n.kind == OpKind::Permute || n.kind == OpKind::ExpandDims || n.kind == OpKind::Squeeze;
      axis = carries ? view_operand_axis(k.body, n, axis) : -1;
      if (axis >= 0) id = n.inputs[0];
    }
  }
  return -1;
}

std::vector<NodeId> reduce_nodes(const Kernel& k) {
  std::vector<NodeId> ids;
  for (NodeId id = 0; id < static_cast<NodeId>(k.body.nodes.size()); ++id)
    if (k.body.node(id).kind == OpKind::Reduce) ids.push_back(id);
  return ids;
}

Shape kept_dims(const Kernel& k) {
  Shape kept;
  for (size_t d = 0; d < k.space.size(); ++d)
    if (std::find(k.axes.begin(), k.axes.end(), static_cast<int>(d)) == k.axes.end()) kept.push_back(k.space[d]);
  return kept;
}

Shape reduced_dims(const Kernel& k) {
  Shape reduced;
  for (int a : k.axes) reduced.push_back(k.space[a]);
  return reduced;
}

bool trailing_axes(const Kernel& k) {
  for (size_t i = 0; i < k.axes.size(); ++i)
    if (k.axes[i] != static_cast<int>(k.space.size() - k.axes.size() + i)) return false;
  return !k.axes.empty();
}

bool has_arg_reduction(const Kernel& k) {
  for (NodeId id : reduce_nodes(k)) {
    ReduceKind r = k.body.node(id).as<ReduceAttrs>().kind;
    if (r == ReduceKind::ArgMax || r == ReduceKind::ArgMin) return true;
  }
  return false;
}

namespace {
Shape without_ones(const Shape& s) {
  Shape out;
  for (const Dim& d : s)
    if (!(d == Dim(1))) out.push_back(d);
  return out;
}

bool loads_as_vectors(DType t) { return t != DType::Bool; }  // (bool arrays are bytes)
}  // namespace

std::vector<LaneRead> lane_reads(const Kernel& k) {
  std::vector<LaneRead> read(k.body.nodes.size(), LaneRead::Unsupported);
  Shape kept = kept_dims(k);
  int rank = static_cast<int>(k.space.size()), kept_rank = static_cast<int>(kept.size());
  // Element r of a shape laid out as the rows are is row r (row-major, the dims of 1 aside).
  auto as_rows = [&](const Shape& s) { return without_ones(s) == without_ones(kept); };
  auto all_inputs = [&](const Node& n, std::initializer_list<LaneRead> allowed) {
    for (NodeId in : n.inputs)
      if (std::find(allowed.begin(), allowed.end(), read[in]) == allowed.end()) return false;
    return true;
  };
  for (NodeId id = 0; id < static_cast<NodeId>(k.body.nodes.size()); ++id) {
    const Node& n = k.body.node(id);
    bool space = n.shape == k.space;
    LaneRead r = LaneRead::Unsupported;
    switch (n.kind) {
      case OpKind::Input:
      case OpKind::Constant:
        if (loads_as_vectors(n.dtype)) r = space ? LaneRead::Full : as_rows(n.shape) ? LaneRead::Row : r;
        break;
      case OpKind::Reduce: {
        const ReduceAttrs& a = n.as<ReduceAttrs>();
        bool arg = a.kind == ReduceKind::ArgMax || a.kind == ReduceKind::ArgMin;
        if (!arg && a.axes == k.axes && read[n.inputs[0]] != LaneRead::Unsupported) r = LaneRead::Row;
        break;
      }
      case OpKind::Elementwise:
        if (space && all_inputs(n, {LaneRead::Full, LaneRead::Row, LaneRead::Column, LaneRead::Uniform})) r = LaneRead::Full;
        else if (!space && as_rows(n.shape) && all_inputs(n, {LaneRead::Row, LaneRead::Uniform})) r = LaneRead::Row;
        break;
      case OpKind::BroadcastTo: {
        const Node& from_node = k.body.node(n.inputs[0]);
        const Shape& from = from_node.shape;
        bool leaf = from_node.kind == OpKind::Input || from_node.kind == OpKind::Constant;
        if (!space) {  // a single element broadcast over the rows (m[R] + s)
          if (as_rows(n.shape) && leaf && num_elements(from) == Dim(1)) r = LaneRead::Uniform;
          break;
        }
        int offset = rank - static_cast<int>(from.size());
        auto dim_of = [&](int p) { return p < offset ? Dim(1) : from[p - offset]; };
        bool kept_all_one = true, kept_all_full = true, reduced_all_one = true, reduced_all_full = true;
        for (int p = 0; p < rank; ++p) {
          bool one = dim_of(p) == Dim(1), full = p >= offset && dim_of(p) == k.space[p];
          if (p < kept_rank) {
            kept_all_one = kept_all_one && one;
            kept_all_full = kept_all_full && (full || (one && k.space[p] == Dim(1)));
          } else {
            reduced_all_one = reduced_all_one && one;
            reduced_all_full = reduced_all_full && full;
          }
        }
        if (kept_all_one && reduced_all_one) r = leaf ? LaneRead::Uniform : r;
        else if (reduced_all_one && kept_all_full && read[n.inputs[0]] == LaneRead::Row) r = LaneRead::Row;
        else if (kept_all_one && reduced_all_full && leaf) r = LaneRead::Column;
        break;
      }
      case OpKind::ExpandDims:
      case OpKind::Squeeze:
      case OpKind::Reshape:
        if (as_rows(n.shape) && read[n.inputs[0]] == LaneRead::Row) r = LaneRead::Row;  // (space too for rows of 1)
        break;
      default: break;
    }
    read[id] = r;
  }
  return read;
}

bool rows_across_lanes(const Kernel& k) {
  if (k.schedule.form != LoopForm::ReductionRows || !trailing_axes(k) || has_arg_reduction(k)) return false;
  std::vector<LaneRead> read = lane_reads(k);
  Shape kept = kept_dims(k);
  for (const GraphOutput& o : k.body.outputs) {
    const Node& n = k.body.node(o.node);
    if (read[o.node] == LaneRead::Unsupported || !loads_as_vectors(n.dtype)) return false;
    // A reduced-space output is stored a vector of rows at a time: element r is row r.
    if (!(n.shape == k.space) && !(read[o.node] == LaneRead::Row && without_ones(n.shape) == without_ones(kept))) return false;
  }
  return true;
}

NodeId matmul_node(const Kernel& k) {
  for (NodeId id = 0; id < static_cast<NodeId>(k.body.nodes.size()); ++id)
    if (k.body.node(id).kind == OpKind::Matmul) return id;
  return -1;
}

int64_t elementwise_cost(const Kernel& k) {
  int64_t cost = 0;
  for (const Node& n : k.body.nodes)
    if (n.kind == OpKind::Elementwise) cost += n.as<ElementwiseAttrs>().body.cost();
  return cost;
}

bool returns_nan_for_nan(const ScalarFn& f, int param) {
  std::vector<char> nan(f.nodes.size(), 0);
  for (size_t i = 0; i < f.nodes.size(); ++i) {
    const ScalarNode& n = f.nodes[i];
    switch (n.op) {
      case ScalarOp::Param: nan[i] = n.param == param; break;
      case ScalarOp::Cast:  // between float types only (an integer has no NaN)
        nan[i] = is_float(n.dtype) && is_float(f.node(n.args[0]).dtype) && nan[n.args[0]];
        break;
      case ScalarOp::Neg: case ScalarOp::Abs: case ScalarOp::Exp: case ScalarOp::Exp2: case ScalarOp::Log:
      case ScalarOp::Log2: case ScalarOp::Sqrt: case ScalarOp::Rsqrt: case ScalarOp::Sin: case ScalarOp::Cos:
      case ScalarOp::Tan: case ScalarOp::Tanh: case ScalarOp::Log1p: case ScalarOp::Expm1: case ScalarOp::Sinh:
      case ScalarOp::Cosh: case ScalarOp::Add: case ScalarOp::Sub: case ScalarOp::Mul: case ScalarOp::Div:
        nan[i] = is_float(n.dtype) && std::any_of(n.args, n.args + n.arity(), [&](ScalarId a) { return nan[a] != 0; });
        break;
      default: break;  // a comparison, select, pow(NaN, 0) = 1, maximum, ...: a NaN may vanish
    }
  }
  return std::all_of(f.results.begin(), f.results.end(), [&](ScalarId r) { return nan[r] != 0; });
}

bool nan_reaches_outputs_anyway(const Kernel& k, NodeId reduce) {
  const Node& r = k.body.node(reduce);
  ReduceKind kind = r.as<ReduceAttrs>().kind;
  if ((kind != ReduceKind::Max && kind != ReduceKind::Min) || !is_float(r.dtype)) return false;
  size_t count = k.body.nodes.size();
  // Nodes that are NaN at an element wherever the max's input is NaN at that element.
  NodeId source = r.inputs[0];
  std::vector<char> carries(count, 0);
  carries[source] = 1;
  for (NodeId id = source + 1; id < static_cast<NodeId>(count); ++id) {
    const Node& n = k.body.node(id);
    if (n.kind != OpKind::Elementwise || !(n.shape == k.body.node(source).shape) || !is_float(n.dtype)) continue;
    const ScalarFn& body = n.as<ElementwiseAttrs>().body;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (carries[n.inputs[i]] && k.body.node(n.inputs[i]).shape == n.shape && returns_nan_for_nan(body, static_cast<int>(i)))
        carries[id] = 1;
  }
  // Nodes NaN wherever such a sum of the same row is NaN: the sums, then what reads them.
  std::vector<char> forced(count, 0);
  for (NodeId id = 0; id < static_cast<NodeId>(count); ++id) {
    const Node& n = k.body.node(id);
    if (n.kind == OpKind::Reduce) {
      const ReduceAttrs& a = n.as<ReduceAttrs>();
      forced[id] = (a.kind == ReduceKind::Sum || a.kind == ReduceKind::Mean || a.kind == ReduceKind::Prod) &&
                   is_float(n.dtype) && a.axes == r.as<ReduceAttrs>().axes && carries[n.inputs[0]];
    } else if (n.kind == OpKind::BroadcastTo || n.kind == OpKind::ExpandDims || n.kind == OpKind::Squeeze ||
               n.kind == OpKind::Reshape) {
      forced[id] = forced[n.inputs[0]];
    } else if (n.kind == OpKind::Elementwise && is_float(n.dtype)) {
      const ScalarFn& body = n.as<ElementwiseAttrs>().body;
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (forced[n.inputs[i]] && returns_nan_for_nan(body, static_cast<int>(i))) forced[id] = 1;
    }
  }
  // Every output that reads the max must be forced.
  std::vector<char> reads(count, 0);
  reads[reduce] = 1;
  for (NodeId id = reduce + 1; id < static_cast<NodeId>(count); ++id)
    for (NodeId in : k.body.node(id).inputs) reads[id] = reads[id] || reads[in];
  bool any = false;
  for (const GraphOutput& o : k.body.outputs) {
    if (!reads[o.node]) continue;
    if (!forced[o.node]) return false;
    any = true;
  }
  return any;
}

// ---- blocked matmuls on the CPU ----
MatmulTiling matmul_tiling(const CpuSchedule& s) {
  MatmulTiling t;
  t.lanes = std::max(1, s.vector_width);
  t.mr = std::max(1, s.mr);
  t.nr = (std::max(1, s.nr) + t.lanes - 1) / t.lanes * t.lanes;
  t.kc = (std::max<int64_t>(1, s.kc) + t.lanes - 1) / t.lanes * t.lanes;
  t.mc = std::max<int64_t>(t.mr, s.mc / t.mr * t.mr);
  // Eight vectors of columns a claim (whole panels): 64 f32 columns with AVX2 (four 6 x 16
  // panels), 128 with AVX-512 (two 6 x 64 panels), so that B's rows are read a few lines at a
  // time; a thousand columns make 8 to 16 groups to share out.
  t.group_columns = std::max(t.nr, (8 * t.lanes + t.nr - 1) / t.nr * t.nr);
  t.nc = std::max(t.group_columns, s.nc / t.group_columns * t.group_columns);
  t.nc_few_rows = std::min(t.nc, std::max(t.group_columns, t.mc / t.group_columns * t.group_columns));
  return t;
}

bool shares_packed_b(const Kernel& k) { return k.schedule.form == LoopForm::BlockedMatmul && k.space.size() == 2; }

bool matmul_reads_a_in_place(const Kernel& k) {
  if (k.schedule.form != LoopForm::BlockedMatmul || !k.schedule.cpu.a_in_place) return false;
  const Node& mm = k.body.node(matmul_node(k));
  const Node& a = k.body.node(mm.inputs[0]);
  if ((a.kind != OpKind::Input && a.kind != OpKind::Constant) || a.dtype != mm.dtype || a.shape.size() != k.space.size())
    return false;
  for (size_t d = 0; d + 1 < k.space.size(); ++d)
    if (!(a.shape[d] == k.space[d])) return false;
  return true;
}

MatmulSplit matmul_split(const Kernel& k, int64_t rows, int64_t depth, int64_t columns, int threads,
                         int64_t max_shared_bytes) {
  MatmulSplit split;
  if (threads < 2) return split;
  MatmulTiling t = matmul_tiling(k.schedule.cpu);
  // With A in place a column task reads its rows of A where they lie instead of packing them, and
  // tasks that share B wait for each other's panels: on the 2-vCPU Intel Xeon, 512 to 2048 x 2048
  // x 2048 and 1024^3 ran 2-15% faster by columns than by rows sharing B (bench/README.md,
  // twenty-fifth session).
  bool a_in_place = matmul_reads_a_in_place(k);
  if (!a_in_place && rows / threads >= t.mc) {
    split.shared = shared_packed_b(k, depth, columns).bytes <= max_shared_bytes ? 1 : 0;
    // The tasks claim rows in chunks that shrink as they run out: on the 2-vCPU Intel Xeon one
    // vCPU often ran the same rows 10-50% slower than the other for seconds at a time, and with
    // one chunk a thread the faster waited (12 alternations of 1024^3: 86-90% of the two
    // threads' time busy, 95-98% claimed in chunks; bench/README.md).
    if (split.shared) {
      split.row_unit = t.mr;
      split.max_row_units = t.mc / t.mr;
    }
    return split;
  }
  // Fewer than mc rows a thread, or A in place: a grid of C column tasks (whole groups of panels)
  // by R = T / C chunks of rows, C x R <= T tasks. A task packs its columns of B (K N / C) and its
  // rows of A (K M / R; none in place) and multiplies them; C is the one whose task does least, packing an element
  // counted as 8 multiply-adds (a lane of an FMA against a load and a store of data that comes
  // from beyond L2), ties to fewer column tasks. On 2 threads that is by columns where there are
  // more columns than rows (16 x 4096 x 4096 on the 2-vCPU Intel Xeon: 12.4-14.2 ms by rows,
  // 7.0-7.6 by columns; bench/README.md); with more threads a grid packs less than either:
  // 2048^3 on 64 threads, 8 x 8 tasks pack an eighth of B and of A each, by rows all of B each.
  int64_t groups = (std::max<int64_t>(0, columns) + t.group_columns - 1) / t.group_columns;
  auto task_work = [&](int64_t c) {
    int64_t r = threads / c;
    double task_rows = static_cast<double>((std::max<int64_t>(rows, 0) + r - 1) / r);
    double task_columns = static_cast<double>((groups + c - 1) / c * t.group_columns);
    return task_rows * task_columns / 8 + (a_in_place ? 0 : task_rows) + task_columns;
  };
  double least = task_work(1);
  for (int64_t c = 2; c <= std::min<int64_t>(threads, groups); ++c)
    if (double work = task_work(c); work < least) {
      least = work;
      split.column_tasks = c;
    }
  if (split.column_tasks > 1) split.row_tasks = threads / split.column_tasks;
  return split;
}

SharedPackedB shared_packed_b(const Kernel& k, int64_t depth, int64_t columns) {
  MatmulTiling t = matmul_tiling(k.schedule.cpu);
  int64_t elem = static_cast<int64_t>(dtype_size(k.body.node(matmul_node(k)).dtype));
  SharedPackedB b;
  b.k_blocks = std::max<int64_t>(1, (depth + t.kc - 1) / t.kc);  // one block even when K = 0
  b.groups = (std::max<int64_t>(0, columns) + t.group_columns - 1) / t.group_columns;
  b.flags_bytes = (b.k_blocks * b.groups * 4 + 63) / 64 * 64;
  int64_t padded_columns = (std::max<int64_t>(0, columns) + t.nr - 1) / t.nr * t.nr;
  b.bytes = b.flags_bytes + (b.k_blocks * t.kc * padded_columns + t.lanes) * elem;
  return b;
}

// ---- scatter kernels (issue 16, np-scatter) ----
NodeId scatter_node(const Kernel& k) {
  for (NodeId id = 0; id < static_cast<NodeId>(k.body.nodes.size()); ++id) {
    OpKind kind = k.body.node(id).kind;
    if (kind == OpKind::IndexAdd || kind == OpKind::Bincount || kind == OpKind::Histogram) return id;
  }
  return -1;
}

Dim scatter_bins(const Kernel& k) {
  NodeId id = scatter_node(k);
  if (id < 0 || k.body.node(id).kind == OpKind::IndexAdd) return 0;
  return k.body.node(id).shape.at(0);
}

static bool few_column_tasks(const Kernel& k, int64_t columns) {
  int64_t grain = std::max<int64_t>(1, k.schedule.cpu.grain);
  return (columns + grain - 1) / grain < kMinColumnTasks;
}

bool column_reduction_splits(const Kernel& k, int64_t rows, int64_t columns) {
  return few_column_tasks(k, columns) && rows >= kColumnSplitChunks && rows * columns >= (int64_t{1} << 16);
}

bool column_reduction_may_split(const Kernel& k) {
  if (k.schedule.form != LoopForm::ColumnReduction) return false;
  // A user combiner folds elements into an accumulator; two chunks' accumulators need not fold.
  for (NodeId id : reduce_nodes(k))
    if (k.body.node(id).as<ReduceAttrs>().kind == ReduceKind::Custom) return false;
  std::optional<int64_t> rows = num_elements(reduced_dims(k)).constant(), columns = num_elements(kept_dims(k)).constant();
  if (rows && columns) return column_reduction_splits(k, *rows, *columns);
  if (columns) return few_column_tasks(k, *columns);
  return !rows || *rows >= kColumnSplitChunks;
}

int64_t scatter_chunks(int64_t bins) {
  return std::clamp<int64_t>((int64_t{1} << 22) / std::max<int64_t>(bins, 1), 1, 64);
}

int view_operand_axis(const Graph& body, const Node& n, int axis) {
  if (axis < 0) return -1;
  const Shape& from = body.node(n.inputs[0]).shape;
  switch (n.kind) {
    case OpKind::BroadcastTo: {
      int in_axis = axis - static_cast<int>(n.shape.size() - from.size());
      return in_axis >= 0 && !(from[in_axis] == Dim(1)) ? in_axis : -1;
    }
    case OpKind::Permute: return n.as<PermuteAttrs>().perm[axis];
    case OpKind::ExpandDims: {
      int a = n.as<ExpandDimsAttrs>().axis;
      return axis == a ? -1 : axis > a ? axis - 1 : axis;
    }
    case OpKind::Squeeze: {
      const std::vector<int>& axes = n.as<SqueezeAttrs>().axes;
      int seen = -1;
      for (int d = 0; d < static_cast<int>(from.size()); ++d)
        if (std::find(axes.begin(), axes.end(), d) == axes.end() && ++seen == axis) return d;
      return -1;
    }
    case OpKind::Reshape: return static_cast<int>(from.size()) - 1;
    case OpKind::Slice: return axis;  // np-views: each axis maps to itself
    default: return -1;
  }
}

InnerAccess KernelAccess::inner(NodeId id, int axis) const {
  if (axis < 0) return InnerAccess::Constant;
  auto key = std::make_pair(id, axis);
  auto it = inner_memo_.find(key);
  if (it != inner_memo_.end()) return it->second;
  return inner_memo_[key] = inner_uncached(id, axis);
}

InnerAccess KernelAccess::inner_uncached(NodeId id, int axis) const {
  const Node& n = k_.body.node(id);
  const Shape& from = n.inputs.empty() ? n.shape : k_.body.node(n.inputs[0]).shape;
  switch (n.kind) {
    case OpKind::Input:
    case OpKind::Constant:
      return axis + 1 == static_cast<int>(n.shape.size()) ? InnerAccess::Unit : InnerAccess::Strided;
    case OpKind::Elementwise: {
      InnerAccess worst = InnerAccess::Constant;
      for (NodeId in : n.inputs) worst = std::max(worst, inner(in, axis));
      return worst;
    }
    case OpKind::BroadcastTo:
    case OpKind::Permute:
    case OpKind::ExpandDims: return inner(n.inputs[0], view_operand_axis(k_.body, n, axis));
    case OpKind::Squeeze: {
      int in_axis = view_operand_axis(k_.body, n, axis);
      return in_axis < 0 ? InnerAccess::Unsupported : inner(n.inputs[0], in_axis);
    }
    case OpKind::Reshape:
      // Only a reshape that keeps the innermost dim keeps a row a row.
      if (axis + 1 == static_cast<int>(n.shape.size()) && !from.empty() && from.back() == n.shape.back())
        return inner(n.inputs[0], static_cast<int>(from.size()) - 1);
      return InnerAccess::Unsupported;
    case OpKind::Matmul: return axis + 1 == static_cast<int>(n.shape.size()) ? InnerAccess::Unit : InnerAccess::Unsupported;
    case OpKind::Slice: {
      // np-views: a step of 1 keeps unit stride (offset by the start); other steps are strides.
      InnerAccess operand = inner(n.inputs[0], axis);
      if (operand == InnerAccess::Constant || n.as<SliceAttrs>().steps[axis] == 1) return operand;
      return std::max(operand, InnerAccess::Strided);
    }
    // np-views: Pad and Concatenate branch per element (Unsupported: element by element).
    default: return InnerAccess::Unsupported;
  }
}

InnerAccess KernelAccess::kernel_inner() const {
  if (k_.space.empty()) return InnerAccess::Unsupported;  // np-views: a 1-D space is one row (x[1:] + x[:-1])
  InnerAccess worst = InnerAccess::Constant;
  for (const GraphOutput& o : k_.body.outputs) {
    if (!(k_.body.node(o.node).shape == k_.space)) return InnerAccess::Unsupported;
    worst = std::max(worst, inner(o.node, static_cast<int>(k_.space.size()) - 1));
  }
  return worst;
}

bool KernelAccess::depends_on(NodeId id, NodeId source) const {
  auto it = computed_from_memo_.find(source);
  if (it == computed_from_memo_.end()) it = computed_from_memo_.emplace(source, computed_from(k_.body, source)).first;
  return it->second[id];
}

bool KernelAccess::strip_safe(NodeId id, int axis, NodeId mm) const {
  auto key = std::make_tuple(id, axis, mm);
  auto it = strip_safe_memo_.find(key);
  if (it != strip_safe_memo_.end()) return it->second;
  return strip_safe_memo_[key] = strip_safe_uncached(id, axis, mm);
}

bool KernelAccess::strip_safe_uncached(NodeId id, int axis, NodeId mm) const {
  if (!depends_on(id, mm)) return true;
  if (id == mm) return axis + 1 == static_cast<int>(k_.body.node(mm).shape.size());
  if (axis < 0) return false;
  const Node& n = k_.body.node(id);
  if (n.kind == OpKind::Elementwise) {
    for (NodeId in : n.inputs)
      if (!strip_safe(in, axis, mm)) return false;
    return true;
  }
  bool view = n.kind == OpKind::BroadcastTo || n.kind == OpKind::Permute || n.kind == OpKind::ExpandDims ||
              n.kind == OpKind::Squeeze || n.kind == OpKind::Reshape;
  return view && strip_safe(n.inputs[0], view_operand_axis(k_.body, n, axis), mm);
}

bool KernelAccess::epilogue_on_column_vectors() const {
  NodeId mm = matmul_node(k_);
  int c_axis = static_cast<int>(k_.space.size()) - 1;
  for (const GraphOutput& o : k_.body.outputs)
    if (!(k_.body.node(o.node).shape == k_.space) || inner(o.node, c_axis) > InnerAccess::Unit || !strip_safe(o.node, c_axis, mm))
      return false;
  return true;
}

bool KernelAccess::column_reduction() const {
  if (k_.kind != KernelKind::Reduction || reduces_to_one_element(k_) || k_.space.size() < 2) return false;
  for (size_t i = 0; i < k_.axes.size(); ++i)
    if (k_.axes[i] != static_cast<int>(i)) return false;
  if (k_.axes.empty() || k_.axes.size() >= k_.space.size()) return false;
  int last = static_cast<int>(k_.space.size()) - 1;
  std::vector<NodeId> reduces = reduce_nodes(k_);
  std::vector<bool> from_reduces(k_.body.nodes.size(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id) {
    const Node& n = k_.body.node(id);
    if (n.kind == OpKind::Reduce) {
      if (n.as<ReduceAttrs>().kind == ReduceKind::Custom || inner(n.inputs[0], last) > InnerAccess::Unit ||
          !(k_.body.node(n.inputs[0]).shape == k_.space))
        return false;
      for (NodeId other : reduces)
        if (other != id && depends_on(id, other)) return false;
      from_reduces[id] = true;
    } else if (n.kind == OpKind::Elementwise) {
      bool all = !n.inputs.empty();
      for (NodeId in : n.inputs) all = all && from_reduces[in];
      from_reduces[id] = all;
    }
  }
  Dim kept = num_elements(kept_dims(k_));
  for (const GraphOutput& o : k_.body.outputs)
    if (!from_reduces[o.node] || !(num_elements(k_.body.node(o.node).shape) == kept)) return false;
  return true;
}

bool combiner_regroups(const ReduceAttrs& r, DType t) {
  auto fn = [&](ScalarValue acc, ScalarValue x) { return evaluate_scalar_fn(r.combiner, {acc, x})[0]; };
  auto same = [&](ScalarValue a, ScalarValue b) {
    if (!is_float(t)) return a.i == b.i;
    if (std::isnan(a.f) || std::isnan(b.f)) return std::isnan(a.f) && std::isnan(b.f);
    return std::abs(a.f - b.f) <= 1e-9 * std::max({1.0, std::abs(a.f), std::abs(b.f)});
  };
  std::vector<ScalarValue> samples;
  if (t == DType::Bool) {
    samples = {ScalarValue::of_int(0, t), ScalarValue::of_int(1, t)};
  } else {
    for (double v : {-3.5, -1.0, -0.25, 0.0, 0.5, 1.0, 2.0, 7.25})
      samples.push_back(is_float(t) ? ScalarValue::of(v, t) : ScalarValue::of_int(static_cast<int64_t>(v * 2), t));
  }
  try {
    for (ScalarValue a : samples)
      for (ScalarValue x : samples) {
        if (!same(fn(a, fn(r.identity, x)), fn(a, x))) return false;
        for (ScalarValue y : samples)
          if (!same(fn(a, fn(fn(r.identity, x), y)), fn(fn(a, x), y))) return false;
      }
  } catch (const Error&) {
    return false;  // a combiner the evaluator refuses is folded in order
  }
  return true;
}

}  // namespace fuse::ir
