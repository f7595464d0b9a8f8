// CPU reductions: ReductionRows (also row-wise kernels), ColumnReduction and SplitReduction.
#include "codegen/cpu/emitter.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

#include "mlir/Dialect/Math/IR/Math.h"

namespace fuse::codegen {

using ir::DType;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

// The second function of a split reduction: combines the chunks' accumulators, in chunk order,
// and writes the outputs (a single element each).
void CpuKernelEmitter::emit_split_finish(mlir::func::FuncOp func) {
  enter(func);
  ir::Dim row_length = ir::num_elements(reduced_dims());
  int q = 0;
  for (NodeId id : reduce_nodes()) {
    auto chunks = b_.create<mlir::scf::ForOp>(loc_, i64(0), i64(kSplitChunks), i64(1),
                                              mlir::ValueRange{accumulator_identity(id, 1)});
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(chunks.getBody());
      mlir::Value partial = load_partial(id, q, chunks.getInductionVar());
      b_.create<mlir::scf::YieldOp>(loc_, combine(id, chunks.getRegionIterArgs()[0], partial));
    }
    reduced_[id] = finish(id, chunks.getResult(0), row_length);
    ++q;
  }
  clear_caches();
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    const Node& n = k_.body.node(k_.body.outputs[o].node);
    store(output_slot_[o], n.dtype, i64(0), general_value(k_.body.outputs[o].node, delinearize(i64(0), n.shape)), 1);
  }
  b_.create<mlir::func::ReturnOp>(loc_);
}

mlir::Value CpuKernelEmitter::partial_address(int q, mlir::Value chunk) {
  mlir::Value index = add(i64(static_cast<int64_t>(q) * kSplitChunks), chunk);
  return b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), i64_type(), base_[slot_count_], mlir::ValueRange{index});
}

void CpuKernelEmitter::store_partial(NodeId id, int q, mlir::Value chunk, mlir::Value acc) {
  if (accumulator_type(id) == DType::Bool) acc = b_.create<mlir::arith::ExtUIOp>(loc_, b_.getI8Type(), acc);
  b_.create<mlir::LLVM::StoreOp>(loc_, acc, partial_address(q, chunk), 8);
}

mlir::Value CpuKernelEmitter::load_partial(NodeId id, int q, mlir::Value chunk) {
  DType t = accumulator_type(id);
  mlir::Value v = b_.create<mlir::LLVM::LoadOp>(loc_, memory_type(t), partial_address(q, chunk), 8);
  return t == DType::Bool ? cmpi(mlir::arith::CmpIPredicate::ne, v, zero_i8(1)) : v;
}

void CpuKernelEmitter::emit_split_chunk(mlir::Value chunk) {
  ir::Dim row_length = ir::num_elements(reduced_dims());
  mlir::Value length = dim(row_length);
  mlir::Value from = div(mul(chunk, length), i64(kSplitChunks));
  mlir::Value to = div(mul(add(chunk, i64(1)), length), i64(kSplitChunks));
  int lanes = std::max(1, k_.schedule.cpu.vector_width);
  std::vector<NodeId> ids = reduce_nodes();
  std::vector<mlir::Value> kept(kept_dims().size(), i64(0));  // every kept dim has size 1
  prefetch_ahead_ = true;
  auto flat = [&] {
    split_streams_ = true;
    std::vector<mlir::Value> r = accumulate(ids, kept, i64(0), from, to, lanes);
    split_streams_ = false;
    return r;
  };
  // No streams in the walk by periods: a period of a bias is a few KiB, and the next period's
  // lines are the prefetches' ahead.
  std::vector<mlir::Value> accs = accumulate_walked(ids, kept, i64(0), from, to, lanes, flat);
  prefetch_ahead_ = false;
  for (size_t q = 0; q < ids.size(); ++q) store_partial(ids[q], static_cast<int>(q), chunk, accs[q]);
}

bool CpuKernelEmitter::combiners_regroup() {
  for (const Node& n : k_.body.nodes)
    if (n.kind == OpKind::Reduce && n.as<ir::ReduceAttrs>().kind == ir::ReduceKind::Custom &&
        !ir::combiner_regroups(n.as<ir::ReduceAttrs>(), n.dtype))
      return false;
  return true;
}

mlir::Value CpuKernelEmitter::fold_ordered_lanes(NodeId id, mlir::Value lanes) {
  bool max = k_.body.node(id).as<ir::ReduceAttrs>().kind == ir::ReduceKind::Max;
  return b_.create<mlir::vector::ReductionOp>(
      loc_, max ? mlir::vector::CombiningKind::MAXNUMF : mlir::vector::CombiningKind::MINNUMF, lanes,
      mlir::arith::FastMathFlags::nnan);
}

int CpuKernelEmitter::split_table_axis() {
  // (Each segment folds from the reduction's init: combiners_regroup().)
  if (k_.schedule.cpu.vector_width < 2 || !ir::trailing_axes(k_) || !combiners_regroup()) return -1;
  int rank = static_cast<int>(k_.space.size()), found = rank;
  for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id) {
    int axis = period_axis(id);
    if (axis > 0 && axis < rank) found = std::min(found, axis);
  }
  return found < rank ? found : -1;
}

void CpuKernelEmitter::emit_split_with_tables(mlir::Value begin, mlir::Value end) {
  auto chunks = [&] { loop(begin, end, 1, [&](mlir::Value chunk) { emit_split_chunk(chunk); }); };
  int axis = split_table_axis();
  if (axis < 0) return chunks();
  int rank = static_cast<int>(k_.space.size());
  ir::Shape trailing(k_.space.begin() + axis, k_.space.end());
  if (std::optional<int64_t> known = known_size(ir::num_elements(trailing)); known && *known > kMaxTiledPeriod)
    return chunks();
  mlir::Value period = dim(ir::num_elements(trailing));
  mlir::Value short_period = b_.create<mlir::arith::AndIOp>(
      loc_, cmpi(mlir::arith::CmpIPredicate::sgt, period, i64(0)),
      cmpi(mlir::arith::CmpIPredicate::sle, period, i64(kMaxTiledPeriod)));
  auto branch = b_.create<mlir::scf::IfOp>(loc_, short_period, /*withElseRegion=*/true);
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(&branch.getThenRegion().front());
  mlir::Value length = mul(period, div(add(period, i64(kTiledSegment - 1)), period));  // L
  size_t first_scratch = scratch_slot_.size();
  for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id) {
    int own = period_axis(id);
    if (own > 0 && own < rank) walk_table_[id] = period_table(id, axis, length);  // (own periods divide P)
  }
  walk_table_length_ = length;
  period_walk_axis_ = rank - 1;  // every periodic input RowLocal within a segment
  row_access_memo_.clear();
  chunks();
  period_walk_axis_.reset();
  row_access_memo_.clear();
  walk_table_.clear();
  walk_table_length_ = {};
  release_scratch_from(first_scratch);
  b_.setInsertionPointToStart(&branch.getElseRegion().front());
  chunks();
}

// Elements [from, to) of the row (a split chunk's, or a row kernel's), walked one period
// [r P, r P + P) of the trailing dims from period_walk_axis() at a time, clipped to [from, to),
// each folded apart and combined in order (a periodic input's index restarts at each); `flat`
// where there is no such axis, or where the period, known at run time only, is under
// kMinSplitPeriod (periods of 1-8 elements, each folded apart, took 1.3-2.5x as long as the
// flat walk: 1M f32, two threads).
std::vector<mlir::Value> CpuKernelEmitter::accumulate_walked(const std::vector<NodeId>& ids,
                                                             const std::vector<mlir::Value>& kept, mlir::Value row_base,
                                                             mlir::Value from, mlir::Value to, int lanes,
                                                             const std::function<std::vector<mlir::Value>()>& flat) {
  // Segments of `period` elements; the inputs of longer periods (own axis < shift_below) read
  // from where the segment starts in theirs.
  auto by_periods = [&](mlir::Value period, int shift_below) {
    mlir::Value first = div(from, period), last = div(add(to, sub(period, i64(1))), period);
    std::vector<mlir::Value> init;
    for (NodeId id : ids) init.push_back(accumulator_identity(id, 1));
    auto segments = b_.create<mlir::scf::ForOp>(loc_, first, last, i64(1), init);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(segments.getBody());
    clear_caches();
    segment_base_ = mul(segments.getInductionVar(), period);
    // Where this period starts in each longer one: the offset of its operand's element.
    for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id) {
      int own = period_axis(id);
      if (own < 0 || own >= shift_below || row_access(id) != RowAccess::RowLocal) continue;
      mlir::Value own_period = dim(ir::num_elements(ir::Shape(k_.space.begin() + own, k_.space.end())));
      segment_shift_[id] = b_.create<mlir::arith::RemUIOp>(loc_, segment_base_, max_i64(own_period, i64(1)));
    }
    mlir::Value lo = max_i64(from, segment_base_), hi = min_i64(to, add(segment_base_, period));
    std::vector<mlir::Value> part = accumulate(ids, kept, row_base, lo, hi, lanes);
    segment_base_ = {};
    segment_shift_.clear();
    std::vector<mlir::Value> next;
    for (size_t q = 0; q < ids.size(); ++q) next.push_back(combine(ids[q], segments.getRegionIterArgs()[q], part[q]));
    b_.create<mlir::scf::YieldOp>(loc_, next);
    clear_caches();
    return std::vector<mlir::Value>(segments.getResults().begin(), segments.getResults().end());
  };
  // emit_split_with_tables(): segments of L, every periodic input from its table (no shifts).
  if (walk_table_length_) return by_periods(walk_table_length_, -1);
  int axis = period_walk_axis();
  if (axis < 0) return flat();
  ir::Dim period_dim = ir::num_elements(ir::Shape(k_.space.begin() + axis, k_.space.end()));
  mlir::Value period = max_i64(dim(period_dim), i64(1));
  if (period_dim.constant()) return by_periods(period, axis);  // (at least kMinSplitPeriod: period_walk_axis())
  mlir::Value long_period = cmpi(mlir::arith::CmpIPredicate::sge, period, i64(kMinSplitPeriod));
  return if_yielding(long_period, [&](int k) {
    if (k == 0) return by_periods(period, axis);
    // The flat walk reads the periodic inputs through their indices, as before.
    period_walk_axis_ = -1;
    row_access_memo_.clear();
    std::vector<mlir::Value> r = flat();
    period_walk_axis_ = axis;
    row_access_memo_.clear();
    return r;
  }, "the walks by periods and flat differ");
}

// Reductions in groups that read the row once each: a group ends where a reduction needs an
// earlier one's result (softmax's sum needs its max). argmax/argmin fold apart, in order, in
// `arg_groups` (the same index as their group): their (value, index) pair is no SIMD accumulator.
std::vector<std::vector<NodeId>> CpuKernelEmitter::row_groups(const std::set<NodeId>& in_moments,
                                                              std::vector<std::vector<NodeId>>& arg_groups) {
  std::vector<std::vector<NodeId>> groups(1);
  for (NodeId id : reduce_nodes()) {
    if (in_moments.count(id)) continue;
    for (NodeId earlier : groups.back())
      if (access_.depends_on(id, earlier)) {
        groups.emplace_back();
        break;
      }
    groups.back().push_back(id);
  }
  arg_groups.assign(groups.size(), {});
  for (size_t g = 0; g < groups.size(); ++g) {
    auto args = std::stable_partition(groups[g].begin(), groups[g].end(), [&](NodeId id) {
      ir::ReduceKind r = k_.body.node(id).as<ir::ReduceAttrs>().kind;
      return r != ir::ReduceKind::ArgMax && r != ir::ReduceKind::ArgMin;
    });
    arg_groups[g].assign(args, groups[g].end());
    groups[g].erase(args, groups[g].end());
  }
  return groups;
}

CpuKernelEmitter::RowPlan CpuKernelEmitter::row_plan() {
  int lanes = std::max(1, k_.schedule.cpu.vector_width);
  RowPlan plan;
  // Layernorm's mean and variance first, in one pass of their own (row_moments()).
  if (lanes > 1) plan.moments = row_moments(reduce_nodes());
  std::set<NodeId> in_moments;
  for (const RowMoments& m : plan.moments) in_moments.insert({m.mean, m.variance});
  plan.groups = row_groups(in_moments, plan.arg_groups);
  if (!plan.groups.back().empty()) plan.stash = row_stash(plan.groups.back(), lanes);
  return plan;
}

// A row: every reduction in order (a later one may use an earlier one's result, as softmax's
// sum uses its max), then the outputs: reduced-space ones once, full-space ones over the row.
std::vector<mlir::Value> CpuKernelEmitter::emit_reduction_row(mlir::Value row, const RowPlan& plan, RowRide* ride) {
  std::vector<mlir::Value> kept = delinearize(row, kept_dims());
  ir::Dim row_length = ir::num_elements(reduced_dims());
  int lanes = std::max(1, k_.schedule.cpu.vector_width);
  mlir::Value row_base = mul(row, dim(row_length));
  mlir::Value vector_end = mul(div(dim(row_length), i64(lanes)), i64(lanes));
  // Rows of a length known here (short rows specialized to it) of fewer than 8 vectors divide
  // by a row's reduction directly: the reciprocal's own division lengthened each row's chain
  // (softmax of rows of 64 f32 in cache, one thread: 0.104-0.108 -> 0.117-0.120 ms with it;
  // rows of 256 gained, 0.43-0.46 -> 0.35-0.37).
  std::optional<int64_t> known_length = known_size(row_length);
  scalar_.allow_reciprocal_division(!known_length || *known_length >= 8 * lanes);
  struct AllowAgain {
    ScalarLowering& scalar;
    ~AllowAgain() { scalar.allow_reciprocal_division(true); }
  } allow_again{scalar_};
  const std::vector<std::vector<NodeId>>& groups = plan.groups;
  // The pass that prefetches the next row's inputs (prefetch_next_row_): the last one over them,
  // when the row is read more than once; none in the last row (its next is past the inputs).
  // Short rows prefetch kPrefetchAheadBytes ahead (of f32), not one row: a row of 64 f32 is
  // four lines, too close to arrive in time (the last rows' prefetches then land past the
  // inputs, as a split reduction's do: a prefetch never faults). On the Intel Xeon, layernorm
  // of 2M x 64 f32 (in DRAM, `fusec run --bench=10`, alternated) took 53-54 ms against 69-76,
  // 512K x 256 42-53 against 56-70; softmax of 2M x 64 80-101 against 89-102.
  size_t passes = plan.moments.size() + (full_space_outputs() > 0 ? 1 : 0);
  for (const std::vector<NodeId>& group : groups) passes += group.empty() ? 0 : 1;
  mlir::Value next_row;
  if (passes > 1 && lanes > 1 && ir::trailing_axes(k_)) {
    mlir::Value more = cmpi(mlir::arith::CmpIPredicate::slt, add(row, i64(1)), dim(ir::num_elements(kept_dims())));
    next_row = select(more, max_i64(dim(row_length), i64(kPrefetchAheadBytes / 4)), i64(0));
    // A row of 8 to 64 KiB is prefetched into L2 (prefetcht1), others into L1: a prefetcht0
    // from memory holds one of the core's few line-fill buffers for the whole trip, which a row
    // ahead is more than needed. The prefetch not taken reads this row's line again (in L1:
    // nothing to fetch), so that the choice costs a select per row, not a branch per line. On
    // the Intel Xeon, two threads, inputs of 512 MiB (alternated): softmax of rows of 4096 f32
    // 31.1-31.3 -> 28.3-29.2 ms, layernorm 30.3-31.5 -> 29.3-30.0, of 16384 31.5-32.5 ->
    // 30.5-31.1; but rows of 1024 took 7% longer (2.9-3.0 -> 3.1-3.3 ms, 64 MiB), rows of 24576
    // the same, and layernorm's rows of 32768 and 65536 25-35% longer.
    mlir::Value far = b_.create<mlir::arith::AndIOp>(
        loc_, cmpi(mlir::arith::CmpIPredicate::sge, next_row, i64(kPrefetchToL2Bytes / 4)),
        cmpi(mlir::arith::CmpIPredicate::sle, next_row, i64(kPrefetchToL2MaxBytes / 4)));
    next_row_in_l2_ = select(far, next_row, i64(0));
    next_row = select(far, i64(0), next_row);
  }
  // Riding on the moments pass (layernorm): the row before's output pass goes with this row's
  // moments pass, which then prefetches the next row (the output pass no longer reads the row).
  bool moments_ride = ride && ride->stash_node < 0;
  if (moments_ride) {
    DType t = k_.body.node(k_.body.outputs[ride->output].node).dtype;
    mlir::Value later = cmpi(mlir::arith::CmpIPredicate::sgt, row, ride->first_row);
    mlir::Value previous = select(later, sub(row, i64(1)), row);
    ride->kept = delinearize(previous, kept_dims());
    ride->row_base = mul(previous, dim(row_length));
    // The first row's pass rides on nothing: it writes a scratch row, never read.
    mlir::Value output_row = element_address(output_slot_[ride->output], t, ride->row_base);
    base_.push_back(select(later, output_row, base_[stash_scratch_row(*ride, row)]));
    ride->output_slot = static_cast<int>(base_.size()) - 1;
    prefetch_next_row_ = next_row;
  }
  for (const RowMoments& m : plan.moments) emit_row_moments(m, kept, row_base, row_length, lanes, moments_ride ? ride : nullptr);
  prefetch_next_row_ = {};
  RowStash stash = plan.stash;  // (a copy: this row's stash slot is set below)
  // Whether the stash goes to the task's scratch row and the output streams (null: never).
  mlir::Value stash_streams;
  if (stash.node >= 0) {
    DType t = k_.body.node(stash.node).dtype;
    mlir::Value own_row = element_address(output_slot_[stash.output], t, row_base);
    mlir::Value stash_row = own_row;
    if (ride) {
      stash_streams = ride->stash_streams;
      stash_row = select(stash_streams, base_[stash_scratch_row(*ride, row)], own_row);
      // The row before, whose output pass rides on this row's stash pass (the first row's
      // rides on nothing: it reads and writes the other scratch row, never read after).
      mlir::Value later = cmpi(mlir::arith::CmpIPredicate::sgt, row, ride->first_row);
      mlir::Value before = sub(row, i64(1));
      mlir::Value previous = select(later, before, row);
      ride->kept = delinearize(previous, kept_dims());
      ride->row_base = mul(previous, dim(row_length));
      ride->stash_slot = stash_scratch_row(*ride, before);
      mlir::Value output_row = element_address(output_slot_[stash.output], t, ride->row_base);
      base_.push_back(select(later, output_row, base_[ride->stash_slot]));
      ride->output_slot = static_cast<int>(base_.size()) - 1;
    } else if (row_scratch_ >= 0) {
      stash_streams = stash_in_scratch(stash.output);
      stash_row = select(stash_streams, base_[row_scratch_], own_row);
    }
    base_.push_back(stash_row);
    stash.slot = static_cast<int>(base_.size()) - 1;
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    for (NodeId id : plan.arg_groups[g])
      reduced_[id] = fold_arg(id, i64(0), dim(row_length), i64(1), [&](mlir::Value j) {
        return general_value(k_.body.node(id).inputs[0], full_index(kept, delinearize(j, reduced_dims())));
      }).second;
    if (groups[g].empty()) continue;
    if (g == 0 && ride && !ride->ahead.empty()) {
      for (NodeId id : groups[g]) reduced_[id] = ride->ahead.at(id);
      continue;
    }
    bool last = g + 1 == groups.size();
    if (last && stash.node >= 0) prefetch_next_row_ = next_row;
    bool stashes = last && stash.node >= 0;
    auto whole_row = [&] {
      return accumulate(groups[g], kept, row_base, i64(0), dim(row_length), lanes, stashes ? &stash : nullptr,
                        stashes ? ride : nullptr);
    };
    // (A stash reads full-space values: period_walk_axis() never walks such a kernel.)
    std::vector<mlir::Value> accs =
        stashes ? whole_row() : accumulate_walked(groups[g], kept, row_base, i64(0), dim(row_length), lanes, whole_row);
    prefetch_next_row_ = {};
    for (size_t q = 0; q < groups[g].size(); ++q) reduced_[groups[g][q]] = finish(groups[g][q], accs[q], row_length);
  }
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    const Node& n = k_.body.node(k_.body.outputs[o].node);
    NodeId out = k_.body.outputs[o].node;
    if (n.shape == k_.space) {
      // SIMD over the row where its values allow, then scalar for the rest (the tail).
      mlir::Value scalar_from = i64(0);
      if (row_access(out) == RowAccess::Contiguous && ir::trailing_axes(k_)) {
        // A large kernel with one output of the space writes its rows with non-temporal stores
        // when every row starts on a 64-byte line (an ordinary store first reads the line it
        // overwrites: a third more memory traffic); the part the stash filled is in cache.
        mlir::Value streaming;  // (null: never)
        if (full_space_outputs() == 1 && streams_whole_lines(static_cast<int64_t>(ir::dtype_size(n.dtype)) * lanes))
          streaming = streams_rows(output_slot_[o], n.dtype, bytes_moved_per_element(n.dtype), dim(row_length));
        mlir::Value computed_from = i64(0);
        if (stash.node >= 0 && static_cast<int>(o) == stash.output) {
          // The stashed value read back from the stash row (still in cache), not recomputed.
          mlir::OpBuilder::InsertionGuard guard(b_);
          if (ride) {  // riding, this part goes with the next row's stash pass (or follows the rows)
            mlir::Value stays = b_.create<mlir::arith::XOrIOp>(loc_, ride->streams, constant(DType::Bool, 0, 1, 1));
            b_.setInsertionPointToStart(&b_.create<mlir::scf::IfOp>(loc_, stays, /*withElseRegion=*/false).getThenRegion().front());
          }
          loop_streaming_or_not(stash_streams, i64(0), stash.end, lanes, [&](mlir::Value j, bool streams) {
            row_cache_[stash.node] = load(stash.slot, n.dtype, j, lanes);
            store(output_slot_[o], n.dtype, add(row_base, j), row_value(out, kept, row_base, j, lanes), lanes, streams);
          });
          computed_from = stash.end;
        }
        if (stash.node < 0) prefetch_next_row_ = next_row;
        // (The moments ride's whole vectors go with the next row's moments pass.)
        if (!(moments_ride && static_cast<int>(o) == ride->output))
          loop_streaming_or_not(streaming, computed_from, vector_end, lanes, [&](mlir::Value j, bool streams) {
            prefetch_inputs(row_base, j);
            store(output_slot_[o], n.dtype, add(row_base, j), row_value(out, kept, row_base, j, lanes), lanes, streams);
          });
        prefetch_next_row_ = {};
        // The rest of the row (fewer than a vector), from min_masked_tail() elements on, as a
        // vector under a lane mask (accumulate_masked()); else one element at a time, below.
        if (min_masked_tail() == std::numeric_limits<int64_t>::max()) {
          scalar_from = vector_end;
        } else {
          mlir::Value masked_tail = cmpi(mlir::arith::CmpIPredicate::sge, sub(dim(row_length), vector_end), i64(min_masked_tail()));
          auto masked = b_.create<mlir::scf::IfOp>(loc_, masked_tail, /*withElseRegion=*/false);
          mlir::OpBuilder::InsertionGuard guard(b_);
          b_.setInsertionPointToStart(&masked.getThenRegion().front());
          clear_caches();
          mask_ = lanes_below(sub(dim(row_length), vector_end), lanes);
          store(output_slot_[o], n.dtype, add(row_base, vector_end), row_value(out, kept, row_base, vector_end, lanes), lanes);
          mask_ = {};
          clear_caches();
          b_.setInsertionPointAfter(masked);
          scalar_from = select(masked_tail, dim(row_length), vector_end);
        }
      }
      loop(scalar_from, dim(row_length), 1, [&](mlir::Value j) {
        std::vector<mlir::Value> full = full_index(kept, delinearize(j, reduced_dims()));
        store(output_slot_[o], n.dtype, linearize(full, k_.space), general_value(out, full), 1);
      });
      continue;
    }
    if (!(ir::num_elements(n.shape) == ir::num_elements(kept_dims()))) {
      // Laid out like the space in another shape (a generator's output, never downstream of
      // the reduction): element by element at its row-major position.
      loop(i64(0), dim(row_length), 1, [&](mlir::Value j) {
        mlir::Value linear = linearize(full_index(kept, delinearize(j, reduced_dims())), k_.space);
        store(output_slot_[o], n.dtype, linear, general_value(out, delinearize(linear, n.shape)), 1);
      });
      continue;
    }
    // A reduced-space output: element `row` (cpu_compiles() keeps rows in order up to here).
    store(output_slot_[o], n.dtype, row, general_value(out, delinearize(row, n.shape)), 1);
  }
  std::vector<mlir::Value> carried;
  if (ride)
    for (NodeId id : ride->carried) carried.push_back(reduced_.at(id));
  return carried;
}

// Pairs (mean, variance) of row reductions that one pass can compute together: `variance` is
// reduce.mean of `d * d` where d = x - broadcast(mean) and `mean` is reduce.mean(x) over the
// same axes, x f32 and row-vectorizable, and x reads no reduction (so both can come first).
std::vector<CpuKernelEmitter::RowMoments> CpuKernelEmitter::row_moments(const std::vector<NodeId>& reductions) {
  std::vector<RowMoments> found;
  if (!ir::trailing_axes(k_)) return found;
  auto is_reduction = [&](NodeId id) { return std::find(reductions.begin(), reductions.end(), id) != reductions.end(); };
  // The node whose square `id` is (mul(p, p) of one input, or of two inputs that are the same node), else -1.
  auto squared = [&](NodeId id) -> NodeId {
    const Node& n = k_.body.node(id);
    if (n.kind != OpKind::Elementwise) return -1;
    const ir::ScalarFn& f = n.as<ir::ElementwiseAttrs>().body;
    const ir::ScalarNode& r = f.node(f.results[0]);
    if (r.op != ir::ScalarOp::Mul) return -1;
    const ir::ScalarNode& a = f.node(r.args[0]);
    const ir::ScalarNode& b = f.node(r.args[1]);
    if (a.op != ir::ScalarOp::Param || b.op != ir::ScalarOp::Param) return -1;
    NodeId in = n.inputs[a.param];
    return n.inputs[b.param] == in ? in : -1;
  };
  std::set<NodeId> used;
  for (NodeId v : reductions) {
    const Node& vn = k_.body.node(v);
    const ir::ReduceAttrs& vr = vn.as<ir::ReduceAttrs>();
    if (vr.kind != ir::ReduceKind::Mean || vn.dtype != DType::F32) continue;
    NodeId sq = vn.inputs[0];
    NodeId dev = squared(sq);
    if (dev < 0 || k_.body.node(sq).dtype != DType::F32) continue;
    const Node& d = k_.body.node(dev);
    if (d.kind != OpKind::Elementwise || d.inputs.size() != 2 || d.dtype != DType::F32) continue;
    const ir::ScalarFn& f = d.as<ir::ElementwiseAttrs>().body;
    const ir::ScalarNode& r = f.node(f.results[0]);
    if (r.op != ir::ScalarOp::Sub || f.node(r.args[0]).op != ir::ScalarOp::Param || f.node(r.args[1]).op != ir::ScalarOp::Param)
      continue;
    NodeId x = d.inputs[f.node(r.args[0]).param], broadcast = d.inputs[f.node(r.args[1]).param];
    const Node& bn = k_.body.node(broadcast);
    if (bn.kind != OpKind::BroadcastTo || row_access(broadcast) != RowAccess::PerRow) continue;
    NodeId m = bn.inputs[0];
    const Node& mn = k_.body.node(m);
    if (mn.kind != OpKind::Reduce || !is_reduction(m) || used.count(m) || mn.dtype != DType::F32) continue;
    const ir::ReduceAttrs& mr = mn.as<ir::ReduceAttrs>();
    if (mr.kind != ir::ReduceKind::Mean || mr.axes != vr.axes || mn.inputs[0] != x || k_.body.node(x).dtype != DType::F32) continue;
    if (!row_vectorizable(m)) continue;
    bool reads_reduction = false;
    for (NodeId other : reductions) reads_reduction = reads_reduction || access_.depends_on(x, other);
    if (reads_reduction) continue;
    used.insert(m);
    found.push_back({m, v});
  }
  return found;
}

// The mean and variance of one row in one pass: with K the row's first element (0 when it is
// not finite, so that infinities and NaN reach the mean as they do in a plain sum), the f64 sums
// S1 = sum(x - K) and S2 = sum((x - K)^2) give mean = K + S1 / n, and the mean square deviation
// from a (the mean rounded to f32, which the graph's `x - mean` subtracts) is
// S2 / n - c (2 S1 / n - c) with c = a - K. Accuracy: x - K and its square are exact in f64 for
// f32 x; the cancellation in the last step loses at most log2(n) bits, since the shift K is an
// element of the row ((mean - K)^2 <= n var), which leaves over 30 of f64's 53 bits for
// rows up to 2^20, so the variance is within an ulp or so of f32 of the exact one. The graph's
// own two-pass form rounds each x - mean and its square to f32 (1.5 ulps), so the two differ
// by about that much, not more. A negative result of rounding (a constant row) is taken as 0.
void CpuKernelEmitter::emit_row_moments(const RowMoments& moments, const std::vector<mlir::Value>& kept, mlir::Value row_base,
                                        ir::Dim row_length, int lanes, const RowRide* ride) {
  using mlir::arith::CmpFPredicate;
  NodeId x = k_.body.node(moments.mean).inputs[0];
  mlir::Type f64 = b_.getF64Type();
  mlir::Value n = dim(row_length);
  auto x_at = [&](mlir::Value j) {  // one element, as f64
    clear_caches();
    mlir::Value v = general_value(x, full_index(kept, delinearize(j, reduced_dims())));
    clear_caches();
    return cast(v, DType::F32, DType::F64, 1);
  };
  auto first = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange{f64}, cmpi(mlir::arith::CmpIPredicate::sgt, n, i64(0)),
                                          /*withElseRegion=*/true);
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&first.getThenRegion().front());
    mlir::Value v = x_at(i64(0));
    mlir::Value infinity = constant(DType::F64, std::numeric_limits<double>::infinity(), 0, 1);
    mlir::Value finite = cmpf(CmpFPredicate::OLT, b_.create<mlir::math::AbsFOp>(loc_, v), infinity);
    b_.create<mlir::scf::YieldOp>(loc_, select(finite, v, constant(DType::F64, 0, 0, 1)));
    b_.setInsertionPointToStart(&first.getElseRegion().front());
    b_.create<mlir::scf::YieldOp>(loc_, constant(DType::F64, 0, 0, 1));
  }
  mlir::Value shift = first.getResult(0);
  int chains = std::max(1, k_.schedule.cpu.accumulators);
  // S1 and S2 over [from, to) in steps of `loop_chains` vectors: the chains of S1, then those of
  // S2, summed.
  auto sums = [&](mlir::Value from, mlir::Value to, int loop_chains, const RowRide* riding) {
    std::vector<mlir::Value> init(2 * loop_chains, constant(DType::F64, 0, 0, lanes));
    auto vector_loop = b_.create<mlir::scf::ForOp>(loc_, from, to, i64(static_cast<int64_t>(loop_chains) * lanes), init);
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(vector_loop.getBody());
      auto args = vector_loop.getRegionIterArgs();
      mlir::Value shift_lanes = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(f64, lanes), shift);
      std::vector<mlir::Value> next(init.size());
      for (int c = 0; c < loop_chains; ++c) {
        clear_caches();
        mlir::Value j = add(vector_loop.getInductionVar(), i64(static_cast<int64_t>(c) * lanes));
        mlir::Value wide = cast(row_value(x, kept, row_base, j, lanes), DType::F32, DType::F64, lanes);
        mlir::Value d = b_.create<mlir::arith::SubFOp>(loc_, wide, shift_lanes);
        next[c] = b_.create<mlir::arith::AddFOp>(loc_, args[c], d);
        next[loop_chains + c] = b_.create<mlir::math::FmaOp>(loc_, d, d, args[loop_chains + c]);
        if (riding) {
          prefetch_inputs(row_base, j);
          ride_step(*riding, j, lanes);
        }
      }
      b_.create<mlir::scf::YieldOp>(loc_, next);
      clear_caches();
    }
    mlir::Value s1 = vector_loop.getResult(0), s2 = vector_loop.getResult(loop_chains);
    for (int c = 1; c < loop_chains; ++c) {
      s1 = b_.create<mlir::arith::AddFOp>(loc_, s1, vector_loop.getResult(c));
      s2 = b_.create<mlir::arith::AddFOp>(loc_, s2, vector_loop.getResult(loop_chains + c));
    }
    return std::pair{s1, s2};
  };
  // Every whole vector: in steps of `chains` vectors, then the whole vectors left in a loop of
  // one chain (as accumulate()'s; layernorm over rows of 16 f32 took 8.2 ms for 33.6 MB with
  // them in the scalar tail). With `ride`, the row before's output pass goes with each of them
  // (the moments ride is emitted only where the output streams: emit()).
  mlir::Value vector_end = whole_steps_end(i64(0), n, static_cast<int64_t>(chains) * lanes);
  auto [s1, s2] = sums(i64(0), vector_end, chains, ride);
  if (chains > 1) {
    mlir::Value vectors_end = whole_steps_end(vector_end, n, lanes);
    auto [r1, r2] = sums(vector_end, vectors_end, 1, ride);
    s1 = b_.create<mlir::arith::AddFOp>(loc_, s1, r1);
    s2 = b_.create<mlir::arith::AddFOp>(loc_, s2, r2);
    vector_end = vectors_end;
  }
  // As a tree, as fold_lanes() does.
  s1 = b_.create<mlir::vector::ReductionOp>(loc_, mlir::vector::CombiningKind::ADD, s1, mlir::arith::FastMathFlags::reassoc);
  s2 = b_.create<mlir::vector::ReductionOp>(loc_, mlir::vector::CombiningKind::ADD, s2, mlir::arith::FastMathFlags::reassoc);
  auto tail = b_.create<mlir::scf::ForOp>(loc_, vector_end, n, i64(1), mlir::ValueRange{s1, s2});
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(tail.getBody());
    mlir::Value d = b_.create<mlir::arith::SubFOp>(loc_, x_at(tail.getInductionVar()), shift);
    mlir::Value t1 = b_.create<mlir::arith::AddFOp>(loc_, tail.getRegionIterArgs()[0], d);
    mlir::Value t2 = b_.create<mlir::math::FmaOp>(loc_, d, d, tail.getRegionIterArgs()[1]);
    b_.create<mlir::scf::YieldOp>(loc_, mlir::ValueRange{t1, t2});
  }
  s1 = tail.getResult(0);
  s2 = tail.getResult(1);
  // Divisions by the row length as products with its reciprocal (computed off the row's chain,
  // once per kernel after LLVM hoists it): a vdivsd is 13 cycles of latency where a vmulsd is 3,
  // on a chain that bounds short rows (perf: layernorm 4096 x 64 waits on it). In f64 the two
  // differ by at most an ulp of f64, far below the f32 results' rounding.
  mlir::Value count = b_.create<mlir::arith::SIToFPOp>(loc_, f64, n);
  mlir::Value reciprocal = b_.create<mlir::arith::DivFOp>(loc_, constant(DType::F64, 1, 1, 1), count);
  mlir::Value s1_mean = b_.create<mlir::arith::MulFOp>(loc_, s1, reciprocal);
  mlir::Value mean = cast(b_.create<mlir::arith::AddFOp>(loc_, shift, s1_mean), DType::F64, DType::F32, 1);
  mlir::Value c = b_.create<mlir::arith::SubFOp>(loc_, cast(mean, DType::F32, DType::F64, 1), shift);
  mlir::Value twice = b_.create<mlir::arith::SubFOp>(loc_, b_.create<mlir::arith::AddFOp>(loc_, s1_mean, s1_mean), c);
  mlir::Value variance = b_.create<mlir::arith::SubFOp>(loc_, b_.create<mlir::arith::MulFOp>(loc_, s2, reciprocal),
                                                         b_.create<mlir::arith::MulFOp>(loc_, c, twice));
  mlir::Value zero = constant(DType::F64, 0, 0, 1);
  variance = select(cmpf(CmpFPredicate::OLT, variance, zero), zero, variance);
  reduced_[moments.mean] = mean;
  reduced_[moments.variance] = cast(variance, DType::F64, DType::F32, 1);
}

// Whether `id`'s value at an element reads `source` at that element: a path of inputs from
// `id` to `source` that passes through no reduction (each node visited once).
bool CpuKernelEmitter::reads_elementwise(NodeId id, NodeId source) {
  std::vector<NodeId> pending{id};
  std::set<NodeId> seen{id};
  while (!pending.empty()) {
    NodeId at = pending.back();
    pending.pop_back();
    if (at == source) return true;
    const Node& n = k_.body.node(at);
    if (n.kind == OpKind::Reduce) continue;
    for (NodeId in : n.inputs)
      if (seen.insert(in).second) pending.push_back(in);
  }
  return false;
}

// The stash of a row kernel whose only full-space output reads, element by element, the input
// of a SIMD reduction in the last pass over the row (softmax's exp(x - max), read by
// e / sum(e)): that pass also stores the value into a stash row, where the output loop reads
// it back from cache instead of computing it again (one exp per element, not two). The stash
// row is the output's own row, written with ordinary stores: its lines are then read for
// ownership during the exp pass, where that overlaps the computation, and the output pass
// rewrites them in cache. (A scratch row with a streamed output pass was slower: that pass
// only writes memory, with nothing to overlap, 7.0-7.6 ms against 5.4-5.6 for softmax
// 4096 x 4096 on the 2-vCPU EPYC, Zen 4 with AVX-512. With the rows riding, RowRide, it is
// faster on Zen 3 (AVX2) and on the Intel Xeon (AVX-512), and taken: row_stash_scratch().)
CpuKernelEmitter::RowStash CpuKernelEmitter::row_stash(const std::vector<NodeId>& last_group, int lanes) {
  RowStash stash;
  if (lanes < 2 || !ir::trailing_axes(k_)) return stash;
  int output = -1;
  for (size_t o = 0; o < k_.body.outputs.size(); ++o)
    if (k_.body.node(k_.body.outputs[o].node).shape == k_.space) {
      if (output >= 0) return stash;
      output = static_cast<int>(o);
    }
  if (output < 0) return stash;
  NodeId out = k_.body.outputs[output].node;
  if (row_access(out) != RowAccess::Contiguous) return stash;
  for (NodeId id : last_group) {
    NodeId source = k_.body.node(id).inputs[0];
    const Node& s = k_.body.node(source);
    if (row_vectorizable(id) && s.kind == OpKind::Elementwise && s.dtype == k_.body.node(out).dtype && source != out &&
        reads_elementwise(out, source)) {
      stash.node = source;
      stash.output = output;
      return stash;
    }
  }
  return stash;
}

// The task's scratch row for row_stash() on AVX2 (32-byte vectors; two when the rows ride,
// RowRide): there the stash goes to a row of scratch (one per thread, kept between runs) instead
// of the output's own row, and the
// output pass streams, when the output is large, its rows are whole lines and a row's stash fits
// kRowStashBytes (else the own row, as before): the exp pass no longer reads the output's lines
// for ownership, a third of the traffic. On the Zen 3 VM (two threads, `fusec run --bench=20`,
// five alternations) softmax 4096 x 4096 took 10.1 ms against 12.1, 512 x 32768 10.7 against
// 11.8, 65536 x 64 3.18 against 3.17. AVX-512 kept the own row until the rows rode (the scratch
// row alone measured slower on the Zen 4 VM, row_stash()); with them, on the 2-vCPU Intel Xeon
// (family 6 model 207, `fusec run --bench=30`, alternated) softmax 4096 x 4096 took 6.4-6.9 ms
// against 10.6-11.6, 512 x 32768 6.5-9.9 against 10.5-11.5, 65536 x 64 2.8-3.1 either way.
int CpuKernelEmitter::row_stash_scratch(const RowPlan& plan) {
  int full_space = scratch_row_output(plan);
  if (full_space < 0) return -1;
  int64_t size = static_cast<int64_t>(ir::dtype_size(k_.body.node(k_.body.outputs[full_space].node).dtype));
  mlir::Value row_bytes = mul(stash_row_elements(plan), i64(size));
  return allocate_slot(add(mul(row_bytes, i64(row_rides(plan) ? 2 : 1)), i64(64)));
}

int CpuKernelEmitter::scratch_row_output(const RowPlan& plan) {
  int stash = scratch_stash_output(plan);
  return stash >= 0 ? stash : moments_ride_output(plan);
}

int CpuKernelEmitter::sole_full_space_output_of_lines() {
  int lanes = k_.schedule.cpu.vector_width;
  if (lanes < 2 || !ir::trailing_axes(k_)) return -1;
  int full_space = -1;
  for (size_t o = 0; o < k_.body.outputs.size(); ++o)
    if (k_.body.node(k_.body.outputs[o].node).shape == k_.space) {
      if (full_space >= 0) return -1;
      full_space = static_cast<int>(o);
    }
  if (full_space < 0) return -1;
  int64_t size = static_cast<int64_t>(ir::dtype_size(k_.body.node(k_.body.outputs[full_space].node).dtype));
  return streams_whole_lines(size * lanes) ? full_space : -1;
}

int CpuKernelEmitter::moments_ride_output(const RowPlan& plan) {
  if (plan.stash.node >= 0 || plan.moments.size() != 1) return -1;
  for (size_t g = 0; g < plan.groups.size(); ++g)
    if (!plan.groups[g].empty() || !plan.arg_groups[g].empty()) return -1;
  int output = sole_full_space_output_of_lines();
  if (output < 0) return -1;
  NodeId out = k_.body.outputs[output].node;
  return ir::is_float(k_.body.node(out).dtype) && row_access(out) == RowAccess::Contiguous ? output : -1;
}

int CpuKernelEmitter::scratch_stash_output(const RowPlan& plan) {
  return plan.stash.node < 0 ? -1 : sole_full_space_output_of_lines();
}

// A scratch row's elements: the row's, up to kRowStashBytes, rounded up to whole 64-byte lines
// (so that the second of two rows starts on a line).
mlir::Value CpuKernelEmitter::stash_row_elements(const RowPlan& plan) {
  NodeId held = plan.stash.node >= 0 ? plan.stash.node : k_.body.outputs[scratch_row_output(plan)].node;
  int64_t size = static_cast<int64_t>(ir::dtype_size(k_.body.node(held).dtype));
  int64_t line = 64 / size;
  mlir::Value elements = min_i64(dim(ir::num_elements(reduced_dims())), i64(kRowStashBytes / size));
  return mul(div(add(elements, i64(line - 1)), i64(line)), i64(line));
}

mlir::Value CpuKernelEmitter::stash_in_scratch(int output) {
  DType t = k_.body.node(k_.body.outputs[output].node).dtype;
  mlir::Value row_length = dim(ir::num_elements(reduced_dims()));
  mlir::Value fits = cmpi(mlir::arith::CmpIPredicate::sle, mul(row_length, i64(static_cast<int64_t>(ir::dtype_size(t)))),
                          i64(kRowStashBytes));
  return b_.create<mlir::arith::AndIOp>(loc_, fits,
                                        streams_rows(output_slot_[output], t, bytes_moved_per_element(t), row_length));
}

// Whether the rows ride (RowRide): a stash that may go to scratch rows, in a float output (the
// first row's pass computes from values never set: no integer division may trap on them).
bool CpuKernelEmitter::row_rides(const RowPlan& plan) {
  if (moments_ride_output(plan) >= 0) return true;
  int output = scratch_stash_output(plan);
  return output >= 0 && ir::is_float(k_.body.node(k_.body.outputs[output].node).dtype);
}

int CpuKernelEmitter::stash_scratch_row(const RowRide& ride, mlir::Value row) {
  DType t = k_.body.node(ride.stash_node >= 0 ? ride.stash_node : k_.body.outputs[ride.output].node).dtype;
  mlir::Value turn = b_.create<mlir::arith::AndIOp>(loc_, row, i64(1));
  base_.push_back(element_address(row_scratch_, t, mul(turn, ride.stash_elements)));
  return static_cast<int>(base_.size()) - 1;
}

void CpuKernelEmitter::emit_riding_rows(mlir::Value begin, mlir::Value end, const RowPlan& plan) {
  RowRide ride;
  ride.stash_node = plan.stash.node;
  ride.output = plan.stash.node >= 0 ? plan.stash.output : moments_ride_output(plan);
  ride.first_row = begin;
  NodeId out = k_.body.outputs[ride.output].node;
  DType t = k_.body.node(out).dtype;
  ir::Dim row_length = ir::num_elements(reduced_dims());
  if (ride.stash_node >= 0) {
    ride.stash_streams = stash_in_scratch(ride.output);
    mlir::Value long_rows = cmpi(mlir::arith::CmpIPredicate::sge,
                                 mul(dim(row_length), i64(static_cast<int64_t>(ir::dtype_size(t)))), i64(ride_row_bytes(t)));
    ride.streams = b_.create<mlir::arith::AndIOp>(loc_, ride.stash_streams, long_rows);
  } else {
    // The moments ride runs only where its output streams (emit()).
    ride.stash_streams = ride.streams = constant(DType::Bool, 0, 1, 1);
  }
  ride.stash_elements = stash_row_elements(plan);
  // The reductions the output reads (not those only other reductions read).
  {
    std::set<NodeId> seen{out};
    std::vector<NodeId> pending{out};
    while (!pending.empty()) {
      NodeId id = pending.back();
      pending.pop_back();
      if (k_.body.node(id).kind == OpKind::Reduce) {
        ride.carried.push_back(id);
        continue;
      }
      for (NodeId in : k_.body.node(id).inputs)
        if (seen.insert(in).second) pending.push_back(in);
    }
    std::sort(ride.carried.begin(), ride.carried.end());
  }
  std::vector<mlir::Value> none;
  for (NodeId id : ride.carried) none.push_back(constant(k_.body.node(id).dtype, 0, 0, 1));
  // The first group ahead (first_group_ahead()): in each row, the next row's results, computed
  // where `ahead` holds (the last row reads itself again rather than past the task's rows), and
  // the row's own, carried from the row before except in the task's first row or where not
  // `ahead`. Branches, not selects: a select would make the row wait for both.
  mlir::Value ahead = first_group_ahead(plan);
  std::vector<NodeId> first_group;
  std::vector<mlir::Value> init = none;
  if (ahead) {
    first_group = plan.groups[0];
    for (NodeId id : first_group) init.push_back(constant(k_.body.node(id).dtype, 0, 0, 1));  // (unused)
  }
  auto rows = b_.create<mlir::scf::ForOp>(loc_, begin, end, i64(1), init);
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(rows.getBody());
    clear_caches();
    mlir::Value row = rows.getInductionVar();
    for (size_t q = 0; q < ride.carried.size(); ++q) ride.reduced[ride.carried[q]] = rows.getRegionIterArgs()[q];
    std::vector<mlir::Value> following;
    if (ahead) {
      mlir::ValueRange carried = rows.getRegionIterArgs().drop_front(none.size());
      mlir::Value later = cmpi(mlir::arith::CmpIPredicate::sgt, row, begin);
      std::vector<mlir::Value> current = if_yielding(b_.create<mlir::arith::AndIOp>(loc_, ahead, later), [&](int k) {
        return k == 0 ? std::vector<mlir::Value>(carried.begin(), carried.end()) : first_group_of_row(plan, row);
      }, "the first group's results of the row");
      for (size_t q = 0; q < first_group.size(); ++q) ride.ahead[first_group[q]] = current[q];
      following = if_yielding(ahead, [&](int k) {
        if (k == 1) return std::vector<mlir::Value>(carried.begin(), carried.end());  // (unused)
        std::vector<mlir::Value> next_row = first_group_of_row(plan, min_i64(add(row, i64(1)), sub(end, i64(1))));
        computed_here(next_row);
        return next_row;
      }, "the first group's results of the next row");
    }
    std::vector<mlir::Value> next = emit_reduction_row(row, plan, &ride);
    for (size_t q = 0; q < next.size(); ++q)
      if (next[q].getType() != none[q].getType())
        throw ir::Error(fail_text("kernel " + k_.name + ": a carried reduction changed type between rows"));
    next.insert(next.end(), following.begin(), following.end());
    b_.create<mlir::scf::YieldOp>(loc_, next);
    clear_caches();
  }
  ride.ahead.clear();
  // The last row's output pass, which rides on nothing.
  mlir::Value any = cmpi(mlir::arith::CmpIPredicate::slt, begin, end);
  auto branch = b_.create<mlir::scf::IfOp>(loc_, b_.create<mlir::arith::AndIOp>(loc_, any, ride.streams),
                                           /*withElseRegion=*/false);
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(&branch.getThenRegion().front());
  int lanes = k_.schedule.cpu.vector_width;
  mlir::Value last = sub(end, i64(1));
  ride.kept = delinearize(last, kept_dims());
  ride.row_base = mul(last, dim(row_length));
  if (ride.stash_node >= 0) ride.stash_slot = stash_scratch_row(ride, last);
  base_.push_back(element_address(output_slot_[ride.output], t, ride.row_base));
  ride.output_slot = static_cast<int>(base_.size()) - 1;
  for (size_t q = 0; q < ride.carried.size(); ++q) ride.reduced[ride.carried[q]] = rows.getResult(q);
  // As far as the stash pass's whole steps went (accumulate()); the moments pass takes every
  // whole vector.
  int64_t step = lanes;
  if (ride.stash_node >= 0) {
    std::vector<NodeId> vectorized;
    for (NodeId id : plan.groups.back())
      if (row_vectorizable(id)) vectorized.push_back(id);
    step = static_cast<int64_t>(vector_chains(vectorized, /*stashes=*/true)) * lanes;
  }
  loop(i64(0), whole_steps_end(i64(0), dim(row_length), step), lanes,
       [&](mlir::Value j) { ride_step(ride, j, lanes); });
}

// Reading the first group one row ahead takes its dependency chain (the loads, a max over the
// row and its fold across lanes) off the row's own: softmax's exp pass then starts from a max
// known an iteration earlier, and the max of the next row overlaps it. Only for a first group
// that reads no earlier result (no moments, no arg reductions), and for rows of at most
// kAheadRowBytes (a run-time test where the length is symbolic). Softmax of 32 MiB of f32 on
// the 2-vCPU Intel Xeon (family 6 model 167, `fusec run --bench=100`, symbolic shapes, each
// variant in a compile cache of its own), ahead against not: rows of 16 1.13-1.16 ms against
// 1.32-1.36, of 64 1.09-1.14 against 1.31-1.34, of 128 0.88 against 0.96, of 256 0.75-0.79
// against 0.80-0.82, of 512 0.73-0.74 against 0.76; rows of 1024 lost (0.91 against 0.78), of
// 4096 and 32768 10-15%: the row ahead, read from memory, pushes the row out of L1 before its
// exp pass reads it again.
mlir::Value CpuKernelEmitter::first_group_ahead(const RowPlan& plan) {
  if (plan.groups.size() < 2 || plan.groups[0].empty() || !plan.moments.empty()) return {};
  for (const std::vector<NodeId>& args : plan.arg_groups)
    if (!args.empty()) return {};
  ir::Dim row_length = ir::num_elements(reduced_dims());
  int64_t element_bytes = 0;  // (of the widest value the group reads)
  for (NodeId id : plan.groups[0]) {
    DType t = k_.body.node(k_.body.node(id).inputs[0]).dtype;
    element_bytes = std::max(element_bytes, static_cast<int64_t>(ir::dtype_size(t)));
  }
  if (std::optional<int64_t> n = row_length.constant())
    return *n * element_bytes <= kAheadRowBytes ? constant(DType::Bool, 1, 1, 1) : mlir::Value();
  return cmpi(mlir::arith::CmpIPredicate::sle, mul(dim(row_length), i64(element_bytes)), i64(kAheadRowBytes));
}

// An empty asm with side effects that reads `values`: LLVM can no longer sink their computation
// below this point. Values used only by the next iteration (the next row's max) were sunk to
// the loop's latch, after the row's exp pass, so the core dispatched the max's loads early but
// its fold only at the end of the iteration, and the next row's exps waited on it.
void CpuKernelEmitter::computed_here(const std::vector<mlir::Value>& values) {
  std::vector<mlir::Value> inputs;
  std::string constraints;
  for (mlir::Value v : values) {
    mlir::Type t = v.getType();
    bool floating = mlir::isa<mlir::FloatType>(t);
    if (!floating && !(t.isInteger(32) || t.isInteger(64))) continue;
    constraints += std::string(constraints.empty() ? "" : ",") + (floating ? "v" : "r");
    inputs.push_back(v);
  }
  if (inputs.empty()) return;
  b_.create<mlir::LLVM::InlineAsmOp>(loc_, mlir::Type(), inputs, "", constraints, /*has_side_effects=*/true,
                                     /*is_align_stack=*/false, mlir::LLVM::AsmDialectAttr(), mlir::ArrayAttr());
}

std::vector<mlir::Value> CpuKernelEmitter::first_group_of_row(const RowPlan& plan, mlir::Value row) {
  clear_caches();
  const std::vector<NodeId>& group = plan.groups[0];
  ir::Dim row_length = ir::num_elements(reduced_dims());
  int lanes = std::max(1, k_.schedule.cpu.vector_width);
  std::vector<mlir::Value> accs = accumulate(group, delinearize(row, kept_dims()), mul(row, dim(row_length)), i64(0),
                                             dim(row_length), lanes, nullptr, nullptr);
  std::vector<mlir::Value> results;
  for (size_t q = 0; q < group.size(); ++q) results.push_back(finish(group[q], accs[q], row_length));
  clear_caches();
  return results;
}

void CpuKernelEmitter::ride_step(const RowRide& ride, mlir::Value j, int lanes) {
  clear_caches();  // another row's values from here on
  std::map<NodeId, mlir::Value> own = reduced_;
  for (const auto& [id, value] : ride.reduced) reduced_[id] = value;
  NodeId out = k_.body.outputs[ride.output].node;
  DType t = k_.body.node(out).dtype;
  if (ride.stash_node >= 0) row_cache_[ride.stash_node] = load(ride.stash_slot, t, j, lanes);
  store(ride.output_slot, t, j, row_value(out, ride.kept, ride.row_base, j, lanes), lanes, /*streaming=*/true);
  reduced_ = std::move(own);
  clear_caches();
}

CpuKernelEmitter::RowAccess CpuKernelEmitter::row_access(NodeId id) {
  auto it = row_access_memo_.find(id);
  if (it != row_access_memo_.end()) return it->second;
  const Node& n = k_.body.node(id);
  RowAccess a = RowAccess::Invalid;
  size_t kept = k_.space.size() - k_.axes.size();
  if (n.kind == OpKind::Reduce) {
    a = RowAccess::PerRow;
  } else if (n.shape == k_.space && (n.kind == OpKind::Input || n.kind == OpKind::Constant)) {
    a = RowAccess::Contiguous;
  } else if (n.shape == k_.space && n.kind == OpKind::Elementwise) {
    a = RowAccess::Contiguous;
    for (NodeId in : n.inputs)
      if (row_access(in) == RowAccess::Invalid) a = RowAccess::Invalid;
  } else if (ir::picks_along_rows(k_, id)) {
    a = RowAccess::Contiguous;  // (picked_along_rows())
  } else if (n.shape == k_.space && n.kind == OpKind::BroadcastTo) {
    const ir::Shape& from = k_.body.node(n.inputs[0]).shape;
    size_t offset = n.shape.size() - from.size();
    // RowLocal needs the operand to span every reduced dim, so that its own index is j (from
    // where its row starts, row_local_base(), where it varies along some kept dims too).
    bool reduced_all_one = true, kept_each_one_or_full = true, reduced_full = offset <= kept;
    for (size_t p = 0; p < from.size(); ++p) {
      bool is_kept = p + offset < kept;
      if (is_kept) kept_each_one_or_full = kept_each_one_or_full && (from[p] == ir::Dim(1) || from[p] == k_.space[p + offset]);
      else {
        reduced_all_one = reduced_all_one && from[p] == ir::Dim(1);
        reduced_full = reduced_full && from[p] == k_.space[p + offset];
      }
    }
    OpKind leaf = k_.body.node(n.inputs[0]).kind;
    if (reduced_all_one) a = RowAccess::PerRow;
    else if (kept_each_one_or_full && reduced_full && (leaf == OpKind::Input || leaf == OpKind::Constant)) a = RowAccess::RowLocal;
    else if (int period = period_axis(id); period_walk_axis_.value_or(-1) >= 0 && period >= static_cast<int>(kept) &&
                                           period <= *period_walk_axis_)
      a = RowAccess::RowLocal;  // within a period (accumulate_walked())
  }
  row_access_memo_[id] = a;
  return a;
}

// Where the row of `kept` starts in the operand of the RowLocal broadcast `id`: null where the
// operand has no kept dim but ones (a layernorm's gamma[N]), else its row-major position of the
// kept indices, 0 along its dims of 1 and the reduced ones (w[M, N] in sum(x[B, M, N] * w, 2)).
mlir::Value CpuKernelEmitter::row_local_base(NodeId id, const std::vector<mlir::Value>& kept) {
  const ir::Shape& from = k_.body.node(k_.body.node(id).inputs[0]).shape;
  size_t offset = k_.space.size() - from.size();
  std::vector<mlir::Value> idx;
  bool varies = false;
  for (size_t p = 0; p < from.size(); ++p) {
    bool along = p + offset < kept.size() && !(from[p] == ir::Dim(1));
    varies = varies || along;
    idx.push_back(along ? kept[p + offset] : i64(0));
  }
  return varies ? linearize(idx, from) : mlir::Value();
}

// The space dim from which the operand of `broadcast` (of the space's shape, read from memory)
// is the space's own dims, broadcast along every dim before it (absent or 1 there); -1: none.
int CpuKernelEmitter::period_axis(NodeId broadcast) const {
  const Node& n = k_.body.node(broadcast);
  if (n.kind != OpKind::BroadcastTo || !(n.shape == k_.space)) return -1;
  OpKind leaf = k_.body.node(n.inputs[0]).kind;
  if (leaf != OpKind::Input && leaf != OpKind::Constant) return -1;
  const ir::Shape& from = k_.body.node(n.inputs[0]).shape;
  int rank = static_cast<int>(k_.space.size()), offset = rank - static_cast<int>(from.size());
  int kept = rank - static_cast<int>(k_.axes.size());
  int axis = rank;  // the operand's trailing dims that are the space's...
  while (axis - 1 >= offset && from[axis - 1 - offset] == k_.space[axis - 1]) --axis;
  // ...and 1 before them, or a kept dim's size (b[B, 1, N] in rows of [B, M, N] over M and N:
  // where the row starts in it, row_local_base())
  for (int d = offset; d < axis; ++d)
    if (!(from[d - offset] == ir::Dim(1)) && !(d < kept && from[d - offset] == k_.space[d])) return -1;
  return axis;
}

int CpuKernelEmitter::period_walk_axis() {
  if (period_walk_axis_) return *period_walk_axis_;
  int found = -1;
  int rank = static_cast<int>(k_.space.size()), kept = rank - static_cast<int>(k_.axes.size());
  bool rows = k_.schedule.form == ir::LoopForm::ReductionRows && k_.schedule.cpu.vector_width > 1 &&
              !ir::has_arg_reduction(k_);
  for (const ir::GraphOutput& o : k_.body.outputs) rows = rows && !(k_.body.node(o.node).shape == k_.space);
  // Each period folds from the reduction's init and is combined into the running value, which
  // a user combiner that does not regroup (acc * 0.5 + v) would not give: those walk flat.
  if ((k_.schedule.form == ir::LoopForm::SplitReduction || rows) && combiners_regroup() && ir::trailing_axes(k_)) {
    for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id) {
      int axis = period_axis(id);
      // (axis <= kept: it spans every reduced dim, RowLocal as it is; rank: one value, PerRow)
      if (axis <= kept || axis == rank) continue;
      std::optional<int64_t> period = ir::num_elements(ir::Shape(k_.space.begin() + axis, k_.space.end())).constant();
      if (!period || *period >= kMinSplitPeriod) found = std::max(found, axis);
    }
  }
  period_walk_axis_ = found;
  row_access_memo_.clear();  // (periodic operands are RowLocal from here on)
  return found;
}

bool CpuKernelEmitter::row_vectorizable(NodeId reduce_id) {
  const Node& n = k_.body.node(reduce_id);
  const ir::ReduceAttrs& r = n.as<ir::ReduceAttrs>();
  return ir::trailing_axes(k_) && r.kind != ir::ReduceKind::Custom && row_access(n.inputs[0]) == RowAccess::Contiguous;
}

// The value of `id` at elements [j, j + lanes) of the row starting at `row_base`.
mlir::Value CpuKernelEmitter::row_value(NodeId id, const std::vector<mlir::Value>& kept, mlir::Value row_base, mlir::Value j, int lanes) {
  auto it = row_cache_.find(id);
  if (it != row_cache_.end()) return it->second;
  const Node& n = k_.body.node(id);
  mlir::Value v;
  if (n.kind == OpKind::Input || n.kind == OpKind::Constant) {
    v = load(input_slot_.at(id), n.dtype, add(row_base, j), lanes);
  } else if (n.kind == OpKind::Reduce) {  // reduced over size-1 axes: already the row's value
    v = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(scalar_type(n.dtype), lanes), reduced_.at(id));
  } else if (n.kind == OpKind::Elementwise) {
    std::vector<mlir::Value> args;
    for (NodeId in : n.inputs) args.push_back(row_value(in, kept, row_base, j, lanes));
    v = elementwise(id, args, lanes);
  } else if (n.kind == OpKind::TakeAlongAxis) {  // (row_access() Contiguous: ir::picks_along_rows())
    v = picked_along_rows(id, add(row_base, j), lanes);
  } else if (row_access(id) == RowAccess::RowLocal) {
    NodeId leaf = n.inputs[0];
    // j within the row, or within the split reduction's period (plus where that starts in this
    // operand's longer one), from where the row starts in the operand.
    mlir::Value at = j;
    if (segment_base_) {
      at = sub(j, segment_base_);
      if (auto shift = segment_shift_.find(id); shift != segment_shift_.end()) at = add(at, shift->second);
    }
    if (auto table = walk_table_.find(id); table != walk_table_.end()) {
      v = load(table->second, n.dtype, at, lanes);  // (emit_split_with_tables())
    } else {
      if (mlir::Value base = row_local_base(id, kept)) at = add(base, at);
      v = load(input_slot_.at(leaf), k_.body.node(leaf).dtype, at, lanes);
    }
  } else {  // PerRow: one value for the whole row, splat
    const ir::Shape& from = k_.body.node(n.inputs[0]).shape;
    size_t offset = n.shape.size() - from.size();
    std::vector<mlir::Value> idx;
    // A dim of size 1 is broadcast along the rows too (a total's [1, 1] read by every row).
    for (size_t p = 0; p < from.size(); ++p)
      idx.push_back(p + offset < kept.size() && !(from[p] == ir::Dim(1)) ? kept[p + offset] : i64(0));
    v = general_value(n.inputs[0], idx);
    v = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(scalar_type(n.dtype), lanes), v);
  }
  row_cache_[id] = v;
  return v;
}

// The elements [at, at + lanes) of the space of the take_along_axis `id` (ir::picks_along_rows):
// x's elements (at + l) * C + j[at + l], gathered under the lanes' mask and where j is within
// [0, C) after counting a negative one from C; 0 elsewhere, as the scalar form (gather_value())
// gives, which one lane takes. Indices out of range are reported one lane at a time
// (check_index), only when there is one.
mlir::Value CpuKernelEmitter::picked_along_rows(NodeId id, mlir::Value at, int lanes) {
  if (lanes == 1) return gather_value(id, delinearize(at, k_.space));
  using P = mlir::arith::CmpIPredicate;
  const Node& n = k_.body.node(id);
  const Node& x = k_.body.node(n.inputs[0]);
  NodeId leaf = ir::row_ordered_input(k_.body, n.inputs[1]);
  DType index_type = k_.body.node(leaf).dtype;
  mlir::Value index = cast(load(input_slot_.at(leaf), index_type, at, lanes), index_type, DType::I64, lanes);
  mlir::Value size = dim(x.shape.back());
  mlir::Value sizes = splat_i64(size, lanes), zero = constant(DType::I64, 0, 0, lanes);
  mlir::Value j = select(cmpi(P::slt, index, zero), add(index, sizes), index);
  mlir::Value in_range = cmpi(P::ult, j, sizes);  // unsigned: a negative j is out of range too
  mlir::Value live = mask_ ? mask_ : constant(DType::Bool, 0, 1, lanes);
  mlir::Value wanted = b_.create<mlir::arith::AndIOp>(loc_, in_range, live);
  {
    mlir::Value bad = b_.create<mlir::arith::XOrIOp>(loc_, wanted, live);  // live and out of range
    mlir::Value any = b_.create<mlir::vector::ReductionOp>(loc_, mlir::vector::CombiningKind::OR, bad);
    auto report = b_.create<mlir::scf::IfOp>(loc_, any, /*withElseRegion=*/false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&report.getThenRegion().front());
    for (int l = 0; l < lanes; ++l) {
      auto lane = b_.create<mlir::scf::IfOp>(loc_, b_.create<mlir::vector::ExtractOp>(loc_, bad, l), /*withElseRegion=*/false);
      mlir::OpBuilder::InsertionGuard lane_guard(b_);
      b_.setInsertionPointToStart(&lane.getThenRegion().front());
      check_index(id, b_.create<mlir::vector::ExtractOp>(loc_, index, l), size);
    }
  }
  mlir::Value positions = add(splat_i64(at, lanes), lane_numbers(lanes));
  mlir::Value offsets = add(b_.create<mlir::arith::MulIOp>(loc_, positions, sizes), select(wanted, j, zero));
  mlir::Value v = gather(element_address(input_slot_.at(n.inputs[0]), x.dtype, i64(0)), x.dtype, offsets, lanes, wanted);
  return select(wanted, v, constant(n.dtype, 0, 0, lanes));
}

// The horizontal (across lanes) form of a reduction's combine.
mlir::vector::CombiningKind CpuKernelEmitter::lane_combining_kind(NodeId id) {
  using Kind = mlir::vector::CombiningKind;
  bool floating = ir::is_float(accumulator_type(id));
  switch (k_.body.node(id).as<ir::ReduceAttrs>().kind) {
    case ir::ReduceKind::Prod: return Kind::MUL;
    case ir::ReduceKind::Max: return floating ? Kind::MAXIMUMF : Kind::MAXSI;
    case ir::ReduceKind::Min: return floating ? Kind::MINIMUMF : Kind::MINSI;
    case ir::ReduceKind::Any: return Kind::OR;
    case ir::ReduceKind::All: return Kind::AND;
    default: return Kind::ADD;
  }
}

// The lanes of a SIMD accumulator folded into one value. Float sums and products as a tree
// (reassoc): LLVM's default for a float vector.reduction is lane after lane, one dependent add
// per lane (31 for a sum and a sum of squares in f64 chains of 2 x 8 lanes), and that chain, not
// the loads, bounded a layernorm over rows of 64. A tree is no less accurate, and as
// deterministic: the same lanes always meet in the same order.
mlir::Value CpuKernelEmitter::fold_lanes(NodeId id, mlir::Value lanes) {
  mlir::vector::CombiningKind kind = lane_combining_kind(id);
  bool tree = ir::is_float(accumulator_type(id)) &&
              (kind == mlir::vector::CombiningKind::ADD || kind == mlir::vector::CombiningKind::MUL);
  return b_.create<mlir::vector::ReductionOp>(loc_, kind, lanes,
                                              tree ? mlir::arith::FastMathFlags::reassoc : mlir::arith::FastMathFlags::none);
}

// Float max and min in the SIMD loop: `x > acc ? x : acc` (one vmaxps on x86, where the
// NaN-propagating llvm.maximum costs six instructions on the loop-carried chain), which never
// takes a NaN, so whether one was seen is kept apart per chain (nan_tracker_step) and applied
// once after the loop. The result equals the interpreter's (`isnan(x) || x > acc`); only which
// of two equal zeros wins may differ, as it did with llvm.maximum across lanes.
bool CpuKernelEmitter::ordered_max_min(NodeId id) {
  ir::ReduceKind kind = k_.body.node(id).as<ir::ReduceAttrs>().kind;
  return ir::is_float(accumulator_type(id)) && (kind == ir::ReduceKind::Max || kind == ir::ReduceKind::Min);
}

// An ordered_max_min() whose NaNs show in every output that reads it anyway (softmax's max:
// a NaN in the row makes the sum of exp(x - max) NaN, and every y = e / sum with it) needs no
// tracker: its two vector instructions per step and its fold after the loop. Softmax on rows of
// 64 (two threads, `fusec run --bench --versus-cpu`, same process): see bench/README.md.
bool CpuKernelEmitter::tracks_nan(NodeId id) {
  auto it = tracks_nan_memo_.find(id);
  if (it == tracks_nan_memo_.end())
    it = tracks_nan_memo_.emplace(id, ordered_max_min(id) && !ir::nan_reaches_outputs_anyway(k_, id)).first;
  return it->second;
}

std::vector<size_t> CpuKernelEmitter::nan_tracker_positions(const std::vector<NodeId>& vectorized, int chains) {
  std::vector<size_t> at(vectorized.size(), 0);
  size_t next = vectorized.size() * static_cast<size_t>(chains);
  for (size_t q = 0; q < vectorized.size(); ++q)
    if (tracks_nan(vectorized[q])) {
      at[q] = next;
      next += static_cast<size_t>(chains);
    }
  return at;
}

mlir::Value CpuKernelEmitter::ordered_pick(NodeId id, mlir::Value acc, mlir::Value x) {
  bool max = k_.body.node(id).as<ir::ReduceAttrs>().kind == ir::ReduceKind::Max;
  return select(cmpf(max ? mlir::arith::CmpFPredicate::OGT : mlir::arith::CmpFPredicate::OLT, x, acc), x, acc);
}

// The NaN tracker of an ordered_max_min() chain. Where the integer unsigned max of its width is
// one instruction (32-bit lanes everywhere, 64-bit ones in 512-bit vectors), it is the largest
// magnitude seen as an integer, `max(tracker, bits(x) & ~sign)`, and a NaN was seen exactly when
// that exceeds the bits of infinity: two vector ALU instructions. Otherwise it is an OR of
// `x != x`, which AVX-512 keeps in mask registers; that form (compare into k, korw) made a
// loop over 100M floats 3-14% slower than the integer one on Zen 5 (bench/README.md), though
// it reads memory.
namespace {
bool nan_by_magnitude(DType t, int lanes) { return t == DType::F32 || (t == DType::F64 && lanes == 8); }
DType bits_type(DType t) { return t == DType::F32 ? DType::I32 : DType::I64; }
int64_t magnitude_mask(DType t) { return t == DType::F32 ? 0x7fffffff : 0x7fffffffffffffff; }
int64_t infinity_bits(DType t) { return t == DType::F32 ? 0x7f800000 : 0x7ff0000000000000; }
}  // namespace

mlir::Value CpuKernelEmitter::nan_tracker_identity(NodeId id, int lanes) {
  DType t = accumulator_type(id);
  return nan_by_magnitude(t, lanes) ? constant(bits_type(t), 0, 0, lanes) : constant(DType::Bool, 0, 0, lanes);
}

mlir::Value CpuKernelEmitter::nan_tracker_step(NodeId id, mlir::Value tracker, mlir::Value x, int lanes) {
  DType t = accumulator_type(id);
  if (!nan_by_magnitude(t, lanes))
    return b_.create<mlir::arith::OrIOp>(loc_, tracker, cmpf(mlir::arith::CmpFPredicate::UNO, x, x));
  mlir::Value bits = b_.create<mlir::arith::BitcastOp>(loc_, tracker.getType(), x);
  mlir::Value magnitude = b_.create<mlir::arith::AndIOp>(loc_, bits, constant(bits_type(t), 0, magnitude_mask(t), lanes));
  return b_.create<mlir::arith::MaxUIOp>(loc_, tracker, magnitude);
}

mlir::Value CpuKernelEmitter::nan_tracker_merge(NodeId id, mlir::Value a, mlir::Value b, int lanes) {
  if (!nan_by_magnitude(accumulator_type(id), lanes)) return b_.create<mlir::arith::OrIOp>(loc_, a, b);
  return b_.create<mlir::arith::MaxUIOp>(loc_, a, b);
}

mlir::Value CpuKernelEmitter::nan_tracker_seen(NodeId id, mlir::Value tracker, int lanes) {
  DType t = accumulator_type(id);
  if (!nan_by_magnitude(t, lanes))
    return b_.create<mlir::vector::ReductionOp>(loc_, mlir::vector::CombiningKind::OR, tracker);
  mlir::Value largest = b_.create<mlir::vector::ReductionOp>(loc_, mlir::vector::CombiningKind::MAXUI, tracker);
  return cmpi(mlir::arith::CmpIPredicate::ugt, largest, constant(bits_type(t), 0, infinity_bits(t), 1));
}

// Elements [from, to) of the row folded into one accumulator per reduction in `ids` (none may
// depend on another), all in the same loops so that they share their loads: SIMD with the
// schedule's number of independent vector accumulators each (dependency chains in flight) for
// those row_vectorizable(), then one scalar loop for the rest and the SIMD loop's tail.
std::vector<mlir::Value> CpuKernelEmitter::accumulate(const std::vector<NodeId>& ids, const std::vector<mlir::Value>& kept,
                                    mlir::Value row_base, mlir::Value from, mlir::Value to, int lanes, RowStash* stash,
                                    const RowRide* ride) {
  std::vector<NodeId> vectorized, scalar;
  for (NodeId id : ids) (lanes > 1 && row_vectorizable(id) ? vectorized : scalar).push_back(id);
  std::map<NodeId, mlir::Value> result;
  if (!vectorized.empty()) {
    int chains = vector_chains(vectorized, stash != nullptr);
    int64_t step = static_cast<int64_t>(chains) * lanes;
    mlir::Value vector_end = whole_steps_end(from, to, step), tail_from = vector_end;
    int streams = stash || ride ? 0 : split_stream_count(vectorized);
    if (streams > 0) {
      // Chain c reads [from + c s, from + (c + 1) s) for whole vectors s; the tail is the rest.
      chains = streams;
      mlir::Value stream_length = mul(div(sub(to, from), i64(static_cast<int64_t>(chains) * lanes)), i64(lanes));
      chain_stride_ = stream_length;
      vector_end = add(from, stream_length);
      tail_from = add(from, mul(stream_length, i64(chains)));
    }
    if (stash) stash->end = vector_end;
    // Whole vectors past the last whole step of several chains are one more chain (below); else
    // accumulate_vectors() folds the sums_in_f32_blocks() reductions itself.
    const bool joins_one_more = chains > 1 && !stash && !ride && !chain_stride_;
    const bool folds = !joins_one_more;
    mlir::Value needs_patch;
    std::vector<mlir::Value> results;
    if (!ride) {
      results = accumulate_vectors(vectorized, kept, row_base, from, vector_end, lanes, chains, stash, /*deferred=*/true,
                                   &needs_patch, nullptr, folds);
    } else {
      // Two loops behind the run-time test: with the row before's output riding, and without
      // (the stash then in this row's own output row). Both have the same fix-ups: the ride
      // defers none.
      bool patched = false;
      results = if_yielding(ride->streams, [&](int k) {
        mlir::Value patch;
        std::vector<mlir::Value> r = accumulate_vectors(vectorized, kept, row_base, from, vector_end, lanes, chains, stash,
                                                        /*deferred=*/true, &patch, k == 0 ? ride : nullptr, folds);
        if (k == 0) patched = static_cast<bool>(patch);
        if (patch) r.push_back(patch);
        return r;
      }, "the riding stash pass differs from the other");
      if (patched) {
        needs_patch = results.back();
        results.pop_back();
      }
    }
    // Some lane wanted an f32 fix-up (an exp below -87.3, whose result is subnormal), or a
    // blocked f32 sum was not finite: the whole loop again with the fix-ups in it and every sum
    // widened per vector. Rare, and it keeps the calls out of the hot loop.
    auto again_if_patched = [&](std::vector<mlir::Value>& loop_results, mlir::Value patch, mlir::Value loop_from,
                                mlir::Value loop_end, int loop_chains, RowStash* loop_stash) {
      if (!patch) return;
      std::vector<mlir::Type> types;
      for (mlir::Value v : loop_results) types.push_back(v.getType());
      auto again = b_.create<mlir::scf::IfOp>(loc_, types, patch, /*withElseRegion=*/true);
      {
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPointToStart(&again.getThenRegion().front());
        b_.create<mlir::scf::YieldOp>(loc_, accumulate_vectors(vectorized, kept, row_base, loop_from, loop_end, lanes,
                                                               loop_chains, loop_stash, /*deferred=*/false, nullptr,
                                                               nullptr, folds));
        b_.setInsertionPointToStart(&again.getElseRegion().front());
        b_.create<mlir::scf::YieldOp>(loc_, loop_results);
      }
      loop_results.assign(again.getResults().begin(), again.getResults().end());
    };
    again_if_patched(results, needs_patch, from, vector_end, chains, stash);
    // The whole vectors past the last whole step of several chains: a loop of one chain, whose
    // accumulators join the others as one more chain. Else a row of 16 or 48 f32 on AVX-512 (two
    // chains of 16 lanes) left 16 elements to the scalar tail: one at a time, an exp a call each
    // (softmax over rows of 16, symbolic shapes: 17 ms where rows of 32 took 4).
    if (joins_one_more) {
      mlir::Value vectors_end = whole_steps_end(vector_end, to, lanes);
      mlir::Value patch;
      std::vector<mlir::Value> more =
          accumulate_vectors(vectorized, kept, row_base, vector_end, vectors_end, lanes, 1, nullptr, /*deferred=*/true, &patch);
      again_if_patched(more, patch, vector_end, vectors_end, 1, nullptr);
      // Laid out as accumulate_vectors() lays out chains + 1 chains: each reduction's chains, then
      // each tracked one's trackers.
      std::vector<mlir::Value> joined;
      for (size_t q = 0; q < vectorized.size(); ++q) {
        joined.insert(joined.end(), results.begin() + chains * q, results.begin() + chains * (q + 1));
        joined.push_back(more[q]);
      }
      std::vector<size_t> trackers = nan_tracker_positions(vectorized, chains), more_trackers = nan_tracker_positions(vectorized, 1);
      for (size_t q = 0; q < vectorized.size(); ++q)
        if (tracks_nan(vectorized[q])) {
          joined.insert(joined.end(), results.begin() + trackers[q], results.begin() + trackers[q] + chains);
          joined.push_back(more[more_trackers[q]]);
        }
      results = std::move(joined);
      chains += 1;
      tail_from = vectors_end;
    }
    std::vector<size_t> nan_at = nan_tracker_positions(vectorized, chains);
    std::vector<mlir::Value> partial;
    for (size_t q = 0; q < vectorized.size(); ++q) {
      NodeId id = vectorized[q];
      mlir::Value all = results[chains * q];
      if (folds && sums_in_f32_blocks(id)) {  // folded by accumulate_vectors()
        partial.push_back(all);
        continue;
      }
      if (!ordered_max_min(id)) {
        for (int c = 1; c < chains; ++c) all = combine(id, all, results[chains * q + c]);
        partial.push_back(fold_lanes(id, all));
        continue;
      }
      bool tracked = tracks_nan(id);
      mlir::Value nan = tracked ? results[nan_at[q]] : mlir::Value();
      for (int c = 1; c < chains; ++c) {
        all = ordered_pick(id, all, results[chains * q + c]);
        if (tracked) nan = nan_tracker_merge(id, nan, results[nan_at[q] + c], lanes);
      }
      // No lane holds a NaN here, so the horizontal step needs no NaN handling either.
      mlir::Value lanes_folded = fold_ordered_lanes(id, all);
      if (!tracked) {
        partial.push_back(lanes_folded);
        continue;
      }
      mlir::Value seen = nan_tracker_seen(id, nan, lanes);
      DType t = accumulator_type(id);
      partial.push_back(select(seen, constant(t, std::numeric_limits<double>::quiet_NaN(), 0, 1), lanes_folded));
    }
    chain_stride_ = {};
    std::vector<mlir::Value> tail =
        min_masked_tail() == std::numeric_limits<int64_t>::max()
            ? accumulate_scalar(vectorized, partial, kept, tail_from, to)
            : if_yielding(
                  cmpi(mlir::arith::CmpIPredicate::sge, sub(to, tail_from), i64(min_masked_tail())), [&](int k) {
                    return k == 0 ? accumulate_masked(vectorized, partial, kept, row_base, tail_from, to, lanes)
                                  : accumulate_scalar(vectorized, partial, kept, tail_from, to);
                  },
                  "the masked and scalar tails differ");
    for (size_t q = 0; q < vectorized.size(); ++q) result[vectorized[q]] = tail[q];
  }
  if (!scalar.empty()) {
    std::vector<mlir::Value> init;
    for (NodeId id : scalar) init.push_back(accumulator_identity(id, 1));
    std::vector<mlir::Value> accs = accumulate_scalar(scalar, init, kept, from, to);
    for (size_t q = 0; q < scalar.size(); ++q) result[scalar[q]] = accs[q];
  }
  std::vector<mlir::Value> ordered;
  for (NodeId id : ids) ordered.push_back(result.at(id));
  return ordered;
}

std::vector<mlir::Value> CpuKernelEmitter::accumulate_vectors(const std::vector<NodeId>& vectorized,
                                                             const std::vector<mlir::Value>& kept, mlir::Value row_base,
                                                             mlir::Value from, mlir::Value vector_end, int lanes,
                                                             int chains, RowStash* stash, bool deferred,
                                                             mlir::Value* needs_patch, const RowRide* ride,
                                                             bool folds_blocked_sums) {
  // `chains` independent accumulators per reduction (vector_chains()): that many dependency
  // chains in flight, combined in order after the loop. Iteration arguments: each reduction's
  // chains, then a NaN tracker per chain of each ordered_max_min() one, then (deferred) the
  // lanes that wanted a fix-up.
  int64_t step = chain_stride_ ? lanes : static_cast<int64_t>(chains) * lanes;
  std::vector<mlir::Value> init;
  for (NodeId id : vectorized) init.insert(init.end(), chains, accumulator_identity(id, lanes));
  std::vector<size_t> nan_at = nan_tracker_positions(vectorized, chains);
  for (size_t q = 0; q < vectorized.size(); ++q)
    if (tracks_nan(vectorized[q])) init.insert(init.end(), chains, nan_tracker_identity(vectorized[q], lanes));
  size_t patch_at = init.size();
  if (deferred) init.push_back(no_patch_mask(lanes));
  // The deferred pass (the fast one, run again exactly when it reports a need) also adds the
  // sums_in_f32_blocks() ones into f32 chains (iteration arguments of an inner loop, after the
  // others) over kF32BlockSteps steps, then into their f64 chains.
  std::vector<int> block_of(vectorized.size(), -1);
  size_t f32_at = init.size();
  int blocks = 0;
  for (size_t q = 0; q < vectorized.size(); ++q)
    if (deferred && sums_in_f32_blocks(vectorized[q])) block_of[q] = blocks++;
  std::vector<mlir::Value> masks;  // deferred fix-ups of the body
  // One step of `chains` vectors from `iv`: the next values of `args`.
  auto emit_step = [&](mlir::ValueRange args, mlir::Value iv) {
    std::vector<mlir::Value> next(args.begin(), args.end());
    if (deferred) scalar_.defer_patches(&masks);
    for (int c = 0; c < chains; ++c) {
      clear_caches();
      mlir::Value j = chain_stride_ ? add(iv, mul(chain_stride_, i64(c))) : add(iv, i64(static_cast<int64_t>(c) * lanes));
      for (size_t q = 0; q < vectorized.size(); ++q) {
        NodeId id = vectorized[q];
        mlir::Value raw = row_value(k_.body.node(id).inputs[0], kept, row_base, j, lanes);
        if (block_of[q] >= 0) {
          size_t a = f32_at + static_cast<size_t>(block_of[q] * chains + c);
          next[a] = b_.create<mlir::arith::AddFOp>(loc_, args[a], raw);
          continue;
        }
        mlir::Value x = to_accumulator(id, raw, lanes);
        size_t a = chains * q + c;
        if (ordered_max_min(id)) {
          next[a] = ordered_pick(id, args[a], x);
          if (tracks_nan(id)) next[nan_at[q] + c] = nan_tracker_step(id, args[nan_at[q] + c], x, lanes);
        } else {
          next[a] = combine(id, args[a], x);
        }
      }
      if (stash) {
        DType t = k_.body.node(stash->node).dtype;
        store(stash->slot, t, j, row_value(stash->node, kept, row_base, j, lanes), lanes);
      }
      prefetch_inputs(row_base, j, chain_stride_ ? 0 : c, lanes);  // a stream's vector starts its step
      if (ride) {
        scalar_.defer_patches(nullptr);  // the row before's values are stored here: exact now
        ride_step(*ride, j, lanes);
        if (deferred) scalar_.defer_patches(&masks);
      }
    }
    scalar_.defer_patches(nullptr);
    if (deferred) next[patch_at] = or_patch_masks(args[patch_at], masks);
    clear_caches();
    return next;
  };
  auto loop_of = [&](mlir::Value begin, mlir::Value end, const std::vector<mlir::Value>& start) {
    auto vector_loop = b_.create<mlir::scf::ForOp>(loc_, begin, end, i64(step), start);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(vector_loop.getBody());
    b_.create<mlir::scf::YieldOp>(loc_, emit_step(vector_loop.getRegionIterArgs(), vector_loop.getInductionVar()));
    return std::vector<mlir::Value>(vector_loop.getResults().begin(), vector_loop.getResults().end());
  };
  std::vector<mlir::Value> results;
  std::vector<mlir::Value> last_block;  // folds_blocked_sums: the last block's f32 sums
  if (blocks == 0) {
    results = loop_of(from, vector_end, init);
  } else {
    int64_t block = step * kF32BlockSteps;
    std::vector<mlir::Value> block_init = init;
    if (folds_blocked_sums) block_init.insert(block_init.end(), static_cast<size_t>(blocks * chains), constant(DType::F32, 0, 0, lanes));
    auto block_loop = b_.create<mlir::scf::ForOp>(loc_, from, vector_end, i64(block), block_init);
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(block_loop.getBody());
      mlir::Value begin = block_loop.getInductionVar();
      std::vector<mlir::Value> start(block_loop.getRegionIterArgs().begin(), block_loop.getRegionIterArgs().begin() + f32_at);
      start.insert(start.end(), static_cast<size_t>(blocks * chains), constant(DType::F32, 0, 0, lanes));
      std::vector<mlir::Value> inner = loop_of(begin, min_i64(add(begin, i64(block)), vector_end), start);
      std::vector<mlir::Value> sums(inner.begin() + f32_at, inner.end());
      inner.resize(f32_at);
      for (size_t q = 0; q < vectorized.size(); ++q)
        for (int c = 0; c < chains && block_of[q] >= 0; ++c) {
          size_t a = chains * q + c;
          mlir::Value block_sum = sums[static_cast<size_t>(block_of[q] * chains + c)];
          inner[a] = combine(vectorized[q], inner[a], to_accumulator(vectorized[q], block_sum, lanes));
        }
      // The block's f32 sums also leave the loop as they are: a row of one block folds them (below).
      if (folds_blocked_sums) inner.insert(inner.end(), sums.begin(), sums.end());
      b_.create<mlir::scf::YieldOp>(loc_, inner);
    }
    results.assign(block_loop.getResults().begin(), block_loop.getResults().end());
    if (folds_blocked_sums) {
      last_block.assign(results.begin() + f32_at, results.end());
      results.resize(f32_at);
    }
  }
  if (deferred) {
    if (!masks.empty())
      *needs_patch = any_patch(results[patch_at]);
    results.pop_back();
  }
  if (folds_blocked_sums) {
    // Each sums_in_f32_blocks() reduction folded to its scalar (in every one of its chain slots).
    // A row of one block (rows up to 128 f32 on AVX-512: softmax's over 64) adds its block's
    // lanes as a tree in f32: eight instructions where widening the block, adding it to the f64
    // chains, testing them and folding 2 x 8 f64 lanes took some twenty (a fifth of a row of
    // 64's work besides the exps). It adds log2(lanes) roundings to the block's
    // kF32BlockSteps, still within the n 2^-24 the rounding model grants a sum of n elements.
    // Longer rows fold their f64 chains as before.
    std::vector<size_t> folded;
    for (size_t q = 0; q < vectorized.size(); ++q)
      if (sums_in_f32_blocks(vectorized[q])) folded.push_back(q);
    // Reduction q's chains from values[first] on combined in order, then its lanes: f64 chains,
    // or the last block's f32 sums (then widened once folded).
    auto fold = [&](size_t q, const std::vector<mlir::Value>& values, size_t first, bool f32_block) {
      NodeId id = vectorized[q];
      mlir::Value all = values[first];
      for (int c = 1; c < chains; ++c) all = combine(id, all, values[first + static_cast<size_t>(c)]);
      mlir::Value folded_lanes = fold_lanes(id, all);
      return f32_block ? to_accumulator(id, folded_lanes) : folded_lanes;
    };
    std::vector<mlir::Value> scalars;
    if (blocks == 0) {
      for (size_t q : folded) scalars.push_back(fold(q, results, chains * q, false));
    } else {
      // (The f64 chains hold every block, the last one too: a branch around its widening
      // measured nothing, LLVM computed it anyway.)
      mlir::Value one_block = cmpi(mlir::arith::CmpIPredicate::sle, sub(vector_end, from), i64(step * kF32BlockSteps));
      scalars = if_yielding(one_block, [&](int k) {
        std::vector<mlir::Value> r;
        for (size_t q : folded)
          r.push_back(k == 0 ? fold(q, last_block, static_cast<size_t>(block_of[q] * chains), true)
                             : fold(q, results, chains * q, false));
        return r;
      }, "a row of one block folds its sums as longer rows do");
      // A block's f32 sum can overflow where the f64 one would not (or meet a NaN or inf of the
      // input), and so can the f32 fold: a row whose sum is not finite runs the pass again,
      // unblocked. NaN and inf in any lane reach the folded sum (inf + x = inf, inf - inf = NaN).
      mlir::Value infinity = constant(DType::F64, std::numeric_limits<double>::infinity(), 0, 1);
      mlir::Value not_finite;
      for (mlir::Value scalar : scalars) {
        mlir::Value out = cmpf(mlir::arith::CmpFPredicate::UGE, b_.create<mlir::math::AbsFOp>(loc_, scalar), infinity);
        not_finite = not_finite ? b_.create<mlir::arith::OrIOp>(loc_, not_finite, out).getResult() : out;
      }
      *needs_patch = *needs_patch ? b_.create<mlir::arith::OrIOp>(loc_, *needs_patch, not_finite).getResult() : not_finite;
    }
    for (size_t f = 0; f < folded.size(); ++f)
      for (int c = 0; c < chains; ++c) results[chains * folded[f] + c] = scalars[f];
    return results;
  }
  if (blocks > 0) {
    // A block's f32 sum can overflow where the f64 one would not (or meet a NaN or inf of the
    // input): a row whose blocked sum is not finite runs the pass again, unblocked. The chains
    // are tested added up, one test per sum: a chain that is not finite makes their sum not
    // finite (inf + x = inf, inf - inf = NaN), and finite chains whose sum overflows only run
    // the pass again. (Testing each chain took some 20 instructions a row for softmax's sum.)
    mlir::Value infinity = constant(DType::F64, std::numeric_limits<double>::infinity(), 0, lanes);
    mlir::Value not_finite;
    for (size_t q = 0; q < vectorized.size(); ++q) {
      if (block_of[q] < 0) continue;
      mlir::Value all = results[chains * q];
      for (int c = 1; c < chains; ++c) all = combine(vectorized[q], all, results[chains * q + c]);
      mlir::Value magnitude = b_.create<mlir::math::AbsFOp>(loc_, all);
      mlir::Value lanes_out = cmpf(mlir::arith::CmpFPredicate::UGE, magnitude, infinity);
      mlir::Value any = b_.create<mlir::vector::ReductionOp>(loc_, mlir::vector::CombiningKind::OR, lanes_out);
      not_finite = not_finite ? b_.create<mlir::arith::OrIOp>(loc_, not_finite, any).getResult() : any;
    }
    *needs_patch = *needs_patch ? b_.create<mlir::arith::OrIOp>(loc_, *needs_patch, not_finite).getResult() : not_finite;
  }
  return results;
}

// An f32 sum or mean of values that cost a transcendental's worth or more to compute (softmax's
// exp(x - max)): its SIMD loop adds into f32 chains over blocks of kF32BlockSteps steps, each
// block then widened once into the f64 chains, about one instruction per vector where widening
// every vector took five (two vcvtps2pd, a vextract, two vaddpd on AVX-512; in cache, 19 of
// softmax's 84 us per 64 x 4096). Cheap values keep the per-vector widening: their loops are
// bound by memory, where blocking measured no faster (a plain sum: slower), and f64 all the way
// is more accurate. A chain adds at most kF32BlockSteps terms in f32 before widening, so the
// sum is off by at most kF32BlockSteps 2^-24 of the sum of magnitudes (the rounding model
// grants n 2^-24).
int64_t CpuKernelEmitter::min_masked_tail() {
  int lanes = std::max(1, k_.schedule.cpu.vector_width);
  std::optional<int64_t> length = known_size(ir::num_elements(reduced_dims()));
  bool cheap = ir::elementwise_cost(k_) < ir::kTranscendentalCost;
  return length && *length < lanes && cheap ? std::numeric_limits<int64_t>::max() : kMinMaskedTail;
}

bool CpuKernelEmitter::sums_in_f32_blocks(NodeId id) {
  const Node& n = k_.body.node(id);
  ir::ReduceKind kind = n.as<ir::ReduceAttrs>().kind;
  if ((kind != ir::ReduceKind::Sum && kind != ir::ReduceKind::Mean) || k_.body.node(n.inputs[0]).dtype != DType::F32 ||
      accumulator_type(id) != DType::F64)
    return false;
  return input_cost(id) >= ir::kTranscendentalCost;
}

// The elementwise work per element that feeds reduction `id` (each node once).
int CpuKernelEmitter::input_cost(NodeId id) {
  NodeId input = k_.body.node(id).inputs[0];
  int cost = 0;
  std::set<NodeId> seen{input};
  std::vector<NodeId> pending{input};
  while (!pending.empty()) {
    const Node& e = k_.body.node(pending.back());
    pending.pop_back();
    if (e.kind != OpKind::Elementwise) continue;
    cost += e.as<ir::ElementwiseAttrs>().body.cost();
    for (NodeId in : e.inputs)
      if (seen.insert(in).second) pending.push_back(in);
  }
  return cost;
}

// Vector accumulators per reduction in a SIMD loop over `vectorized`: the schedule's
// `accumulators` (chains in flight, so that the loop is not bound by one add's latency), but
// one in a pass that also stashes its values (row_stash()) when every reduction's values cost a
// transcendental's worth or more: softmax's exp(x - max) pass. On AVX2 (16 vector registers)
// LLVM spilled the second chain's live values and reloaded exp's constants in every step; one
// chain also leaves at most lanes - 1 elements to the scalar tail, not 2 lanes - 1. Measured in
// cache on the Zen 3 VM (old and new kernels alternating in one process, both link orders):
// softmax rows of 64 1.5-9% faster (four runs), rows of 1000 6-10%, rows of 4096 the same within
// noise (4% either way, following link order). On AVX-512 (Intel Xeon, two threads, 32 MiB
// moved, symbolic shapes, `fusec run --bench --versus-cpu`, both riding and streaming) one chain
// took 13-16% less time on rows of 64 f32, 3% less on rows of 128, 79% less on rows of 48 (two
// chains left 16 elements a row to the scalar tail's exp calls), 1% more on rows of 1000 and 4%
// more on rows of 4096 (1-2.4% more on rows of 1000 to 32768 at 134 MB).
// Without the stash two chains stay: logsumexp's sum of exp took up to 8% (rows of 64) and
// 18-28% (rows of 4096) longer with one on AVX2 (its second exp in flight, not spilled, hides
// the first's latency).
int CpuKernelEmitter::vector_chains(const std::vector<NodeId>& vectorized, bool stashes) {
  int chains = std::max(1, k_.schedule.cpu.accumulators);
  if (!stashes || vectorized.empty()) return chains;
  for (NodeId id : vectorized)
    if (input_cost(id) < ir::kTranscendentalCost) return chains;
  return 1;
}

int CpuKernelEmitter::split_stream_count(const std::vector<NodeId>& vectorized) {
  if (!split_streams_ || vectorized.empty()) return 0;
  for (NodeId id : vectorized)
    if (input_cost(id) >= ir::kTranscendentalCost || sums_in_f32_blocks(id)) return 0;
  return kSplitStreams;
}

void CpuKernelEmitter::prefetch_inputs(mlir::Value row_base, mlir::Value j, int chain, int lanes) {
  if (!prefetch_next_row_ && !prefetch_ahead_) return;
  for (auto [id, slot] : input_slot_) {
    const Node& n = k_.body.node(id);
    if (n.kind != OpKind::Input || !(n.shape == k_.space)) continue;
    if (prefetch_next_row_) {
      mlir::Value address = element_address(slot, n.dtype, add(add(row_base, prefetch_next_row_), j));
      b_.create<mlir::LLVM::Prefetch>(loc_, address, /*rw=*/0u, /*locality=*/3u, /*data cache=*/1u);
      address = element_address(slot, n.dtype, add(add(row_base, next_row_in_l2_), j));
      b_.create<mlir::LLVM::Prefetch>(loc_, address, /*rw=*/0u, /*locality=*/2u, /*data cache=*/1u);
    }
    if (prefetch_ahead_) {
      // One prefetch per 64 bytes of the step: at each multiple of 64 within this vector's bytes.
      int64_t size = static_cast<int64_t>(ir::dtype_size(n.dtype));
      int64_t first = static_cast<int64_t>(chain) * lanes * size, last = first + lanes * size;
      for (int64_t line = (first + 63) / 64 * 64; line < last; line += 64) {
        mlir::Value ahead = add(add(row_base, j), i64((kPrefetchAheadBytes + line - first) / size));
        b_.create<mlir::LLVM::Prefetch>(loc_, element_address(slot, n.dtype, ahead), /*rw=*/0u, /*locality=*/3u,
                                        /*data cache=*/1u);
      }
    }
  }
}

mlir::Value CpuKernelEmitter::or_patch_masks(mlir::Value seen, const std::vector<mlir::Value>& masks) {
  auto lanes_of = [](mlir::Type t) {
    auto v = mlir::dyn_cast<mlir::VectorType>(t);
    return v ? v.getNumElements() : int64_t{1};
  };
  const int64_t lanes = lanes_of(seen.getType());
  for (mlir::Value m : masks) {
    if (lanes_of(m.getType()) != lanes) {  // a mask of other lanes: whether any is set, in every lane
      mlir::Value any = mlir::isa<mlir::VectorType>(m.getType())
                            ? b_.create<mlir::vector::ReductionOp>(loc_, mlir::vector::CombiningKind::OR, m).getResult()
                            : m;
      m = lanes > 1 ? b_.create<mlir::vector::BroadcastOp>(loc_, scalar_.lane_type(b_.getI1Type(), static_cast<int>(lanes)), any)
                          .getResult()
                    : any;
    }
    seen = b_.create<mlir::arith::OrIOp>(loc_, seen, b_.create<mlir::arith::ExtSIOp>(loc_, seen.getType(), m));
  }
  return seen;
}

mlir::Value CpuKernelEmitter::any_patch(mlir::Value seen) {
  mlir::Value any = mlir::isa<mlir::VectorType>(seen.getType())
                        ? b_.create<mlir::vector::ReductionOp>(loc_, mlir::vector::CombiningKind::OR, seen).getResult()
                        : seen;
  return cmpi(mlir::arith::CmpIPredicate::ne, any, constant(DType::I32, 0, 0, 1));
}

// One element at a time, each element's index taken apart into the reduced dims.
// The elements [from, to) past the whole vectors of a row (or a chunk) as vectors under a lane
// mask: masked-off lanes read nothing and take the reduction's identity, and each vector's lanes
// fold and combine into the running value. One element at a time, a row of fewer elements than
// a vector cost an exp a call: softmax over rows of 3 to 15 f32 (12M elements, two threads on
// the Intel Xeon) took 50-58 ms, 20x rows of 64 (bench/README.md).
std::vector<mlir::Value> CpuKernelEmitter::accumulate_masked(const std::vector<NodeId>& ids, const std::vector<mlir::Value>& init,
                                                             const std::vector<mlir::Value>& kept, mlir::Value row_base,
                                                             mlir::Value from, mlir::Value to, int lanes) {
  auto loop = b_.create<mlir::scf::ForOp>(loc_, from, to, i64(lanes), init);
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(loop.getBody());
  clear_caches();
  mlir::Value j = loop.getInductionVar();
  mask_ = lanes_below(sub(to, j), lanes);
  std::vector<mlir::Value> next;
  for (size_t q = 0; q < ids.size(); ++q) {
    mlir::Value x = to_accumulator(ids[q], row_value(k_.body.node(ids[q]).inputs[0], kept, row_base, j, lanes), lanes);
    x = select(mask_, x, accumulator_identity(ids[q], lanes));
    mlir::Value folded;
    if (ordered_max_min(ids[q])) {
      // As the whole vectors fold: a max (min) ignoring NaN, a tree of vmaxps, and NaN where a
      // lane held one and the reduction tracks NaN (the NaN-propagating fold, maximumf, took
      // some 40 instructions a vector).
      folded = fold_ordered_lanes(ids[q], x);
      if (tracks_nan(ids[q])) {
        mlir::Value nan = b_.create<mlir::vector::ReductionOp>(loc_, mlir::vector::CombiningKind::OR,
                                                               cmpf(mlir::arith::CmpFPredicate::UNO, x, x));
        folded = select(nan, constant(accumulator_type(ids[q]), std::numeric_limits<double>::quiet_NaN(), 0, 1), folded);
      }
    } else {
      folded = fold_lanes(ids[q], x);
    }
    next.push_back(combine(ids[q], loop.getRegionIterArgs()[q], folded));
  }
  mask_ = {};
  b_.create<mlir::scf::YieldOp>(loc_, next);
  clear_caches();
  b_.setInsertionPointAfter(loop);
  return {loop.getResults().begin(), loop.getResults().end()};
}

std::vector<mlir::Value> CpuKernelEmitter::accumulate_scalar(const std::vector<NodeId>& ids, const std::vector<mlir::Value>& init,
                                           const std::vector<mlir::Value>& kept, mlir::Value from, mlir::Value to) {
  auto loop = b_.create<mlir::scf::ForOp>(loc_, from, to, i64(1), init);
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(loop.getBody());
  clear_caches();
  std::vector<mlir::Value> full = full_index(kept, delinearize(loop.getInductionVar(), reduced_dims()));
  std::vector<mlir::Value> next;
  for (size_t q = 0; q < ids.size(); ++q) {
    mlir::Value x = to_accumulator(ids[q], general_value(k_.body.node(ids[q]).inputs[0], full), 1);
    next.push_back(combine(ids[q], loop.getRegionIterArgs()[q], x));
  }
  b_.create<mlir::scf::YieldOp>(loc_, next);
  clear_caches();
  b_.setInsertionPointAfter(loop);
  return {loop.getResults().begin(), loop.getResults().end()};
}

void CpuKernelEmitter::emit_columns(mlir::Value begin, mlir::Value end, int lanes) {
  if (int64_t columns = narrow_columns(lanes); columns > 0) {
    emit_narrow_columns(columns, lanes);  // (every column: one task has them all)
    return;
  }
  ir::Shape kept = kept_dims();
  ir::Shape outer_shape(kept.begin(), kept.end() - 1);
  // The accumulators of emit_columns_by_rows(), acquired once per task.
  int acc_slot = -1;
  if (lanes > 1)
    acc_slot = allocate_slot(i64(static_cast<int64_t>(reduce_nodes().size()) * kColumnChunkVectors * lanes * widest_accumulator()));
  for_each_row_piece(begin, end, kept.back(), outer_shape,
                     [&](const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value from, mlir::Value to) {
                       mlir::Value vector_end = from;
                       if (std::optional<int64_t> width = known_size(kept.back());
                           lanes > 1 && width && *width > lanes && *width % lanes != 0 &&
                           *width <= ir::kColumnWalkVectors * lanes) {
                         // A whole row of a known width of a few vectors, the last partial: its
                         // whole vectors and the masked last one in one walk down the rows; a
                         // task's piece of a row (from or to within it) as below.
                         mlir::Value whole_row = b_.create<mlir::arith::AndIOp>(
                             loc_, cmpi(mlir::arith::CmpIPredicate::eq, from, i64(0)),
                             cmpi(mlir::arith::CmpIPredicate::eq, to, i64(*width)));
                         auto one_walk = b_.create<mlir::scf::IfOp>(loc_, whole_row, /*withElseRegion=*/true);
                         b_.setInsertionPointToStart(&one_walk.getThenRegion().front());
                         clear_caches();
                         emit_column_lanes(outer, row_start, i64(0), lanes, static_cast<int>(*width / lanes + 1),
                                           lanes_below(i64(*width % lanes), lanes));
                         clear_caches();
                         b_.setInsertionPointToStart(&one_walk.getElseRegion().front());
                       }
                       if (lanes > 1) {
                         vector_end = whole_steps_end(from, to, lanes);
                         int64_t block = lanes * kColumnVectors;
                         mlir::Value wide = cmpi(mlir::arith::CmpIPredicate::sgt, sub(vector_end, from), i64(block));
                         auto branch = b_.create<mlir::scf::IfOp>(loc_, wide, /*withElseRegion=*/true);
                         mlir::OpBuilder::InsertionGuard guard(b_);
                         b_.setInsertionPointToStart(&branch.getThenRegion().front());
                         emit_columns_by_rows(outer, row_start, from, vector_end, lanes, acc_slot);
                         // Else blocks of kColumnVectors vectors, then single vectors.
                         b_.setInsertionPointToStart(&branch.getElseRegion().front());
                         mlir::Value block_end = whole_steps_end(from, vector_end, block);
                         loop(from, block_end, block,
                              [&](mlir::Value c) { emit_column_lanes(outer, row_start, c, lanes, kColumnVectors); });
                         loop(block_end, vector_end, lanes, [&](mlir::Value c) { emit_column_lanes(outer, row_start, c, lanes); });
                         // The columns past the last whole vector: from kMinMaskedColumns of them, one
                         // vector under a mask, down the rows once rather than once per column
                         // (sum(x, axis=0) of x[1M, 12] f32 took 11.4 ms column by column, 1.2 so;
                         // fewer columns, each row's masked vector one step of a chain, were
                         // slower so: x[4M, 3] 11.5 ms against 4.0; bench/README.md).
                         b_.setInsertionPointAfter(branch);
                         mlir::Value left = sub(to, vector_end);
                         auto tail = b_.create<mlir::scf::IfOp>(
                             loc_, cmpi(mlir::arith::CmpIPredicate::sge, left, i64(kMinMaskedColumns)), /*withElseRegion=*/true);
                         b_.setInsertionPointToStart(&tail.getThenRegion().front());
                         mask_ = lanes_below(left, lanes);
                         emit_column_lanes(outer, row_start, vector_end, lanes);
                         mask_ = {};
                         b_.setInsertionPointToStart(&tail.getElseRegion().front());
                         loop(vector_end, to, 1, [&](mlir::Value c) { emit_column_lanes(outer, row_start, c, 1); });
                         return;
                       }
                       loop(vector_end, to, 1, [&](mlir::Value c) { emit_column_lanes(outer, row_start, c, 1); });
                     });
  if (acc_slot >= 0) release_scratch();
}

int64_t CpuKernelEmitter::widest_accumulator() {
  int64_t widest = 1;
  for (NodeId id : reduce_nodes()) widest = std::max<int64_t>(widest, static_cast<int64_t>(ir::dtype_size(accumulator_type(id))));
  return widest;
}

void CpuKernelEmitter::emit_columns_by_rows(const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value from,
                                            mlir::Value to, int lanes, int acc_slot) {
  std::vector<NodeId> ids = reduce_nodes();
  int last = static_cast<int>(k_.space.size()) - 1;
  int64_t chunk = static_cast<int64_t>(kColumnChunkVectors) * lanes;
  // Reduction q's accumulator for column c of the chunk: element q * chunk + c of its type
  // (addressed in units of the largest, so that each array starts aligned to its elements).
  int64_t unit = widest_accumulator();
  auto acc_at = [&](size_t q, mlir::Value c) {
    int64_t size = static_cast<int64_t>(ir::dtype_size(accumulator_type(ids[q])));
    return add(i64(static_cast<int64_t>(q) * chunk * unit / size), c);
  };
  std::vector<mlir::Value> kept0 = outer;
  kept0.push_back(i64(0));
  loop(from, to, chunk, [&](mlir::Value c0) {
    mlir::Value width = min_i64(i64(chunk), sub(to, c0));
    loop(i64(0), width, lanes, [&](mlir::Value c) {
      for (size_t q = 0; q < ids.size(); ++q)
        store(acc_slot, accumulator_type(ids[q]), acc_at(q, c), accumulator_identity(ids[q], lanes), lanes);
    });
    auto [rows_from, rows_to] = column_rows();
    loop(rows_from, rows_to, 1, [&](mlir::Value r) {
      std::vector<mlir::Value> idx0 = full_index(kept0, delinearize(r, reduced_dims()));
      loop(i64(0), width, lanes, [&](mlir::Value c) {
        clear_caches();
        for (size_t q = 0; q < ids.size(); ++q) {
          DType t = accumulator_type(ids[q]);
          mlir::Value x = to_accumulator(ids[q], lane_value(k_.body.node(ids[q]).inputs[0], idx0, last, add(c0, c), lanes), lanes);
          store(acc_slot, t, acc_at(q, c), combine(ids[q], load(acc_slot, t, acc_at(q, c), lanes), x), lanes);
        }
        clear_caches();
      });
    });
    loop(i64(0), width, lanes, [&](mlir::Value c) {
      clear_caches();
      std::vector<mlir::Value> accs;
      for (size_t q = 0; q < ids.size(); ++q) accs.push_back(load(acc_slot, accumulator_type(ids[q]), acc_at(q, c), lanes));
      store_column_outputs(row_start, add(c0, c), lanes, accs);
      clear_caches();
    });
  });
}

// Outputs at kept positions [row_start + c, + lanes * vectors): every reduction down its
// columns, `vectors` adjacent vectors at a time (a row then supplies whole cache lines).
void CpuKernelEmitter::emit_column_lanes(const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value c, int lanes,
                       int vectors, mlir::Value last_mask) {
  std::vector<NodeId> ids = reduce_nodes();
  int last = static_cast<int>(k_.space.size()) - 1;
  std::vector<mlir::Value> init;
  for (int v = 0; v < vectors; ++v)
    for (NodeId id : ids) init.push_back(accumulator_identity(id, lanes));
  auto [rows_from, rows_to] = column_rows();
  auto down = b_.create<mlir::scf::ForOp>(loc_, rows_from, rows_to, i64(1), init);
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(down.getBody());
    std::vector<mlir::Value> kept0 = outer;
    kept0.push_back(i64(0));
    std::vector<mlir::Value> next;
    for (int v = 0; v < vectors; ++v) {
      clear_caches();
      std::vector<mlir::Value> idx0 = full_index(kept0, delinearize(down.getInductionVar(), reduced_dims()));
      mlir::Value column = add(c, i64(static_cast<int64_t>(v) * lanes));
      mlir::Value caller_mask = mask_;  // (a caller's mask covers every vector)
      if (last_mask && v == vectors - 1) mask_ = last_mask;
      for (size_t q = 0; q < ids.size(); ++q) {
        mlir::Value x = to_accumulator(ids[q], lane_value(k_.body.node(ids[q]).inputs[0], idx0, last, column, lanes), lanes);
        next.push_back(combine(ids[q], down.getRegionIterArgs()[v * ids.size() + q], x));
      }
      mask_ = caller_mask;
    }
    b_.create<mlir::scf::YieldOp>(loc_, next);
    clear_caches();
  }
  for (int v = 0; v < vectors; ++v) {
    std::vector<mlir::Value> accs;
    for (size_t q = 0; q < ids.size(); ++q) accs.push_back(down.getResult(v * ids.size() + q));
    mlir::Value caller_mask = mask_;
    if (last_mask && v == vectors - 1) mask_ = last_mask;
    store_column_outputs(row_start, add(c, i64(static_cast<int64_t>(v) * lanes)), lanes, accs);
    mask_ = caller_mask;
  }
}

void CpuKernelEmitter::store_column_outputs(mlir::Value row_start, mlir::Value column, int lanes,
                                            const std::vector<mlir::Value>& accs) {
  std::vector<NodeId> ids = reduce_nodes();
  if (column_partials_chunk_) {  // a chunk of the split form: its accumulators, for _finish
    for (size_t q = 0; q < ids.size(); ++q)
      store(slot_count_, accumulator_type(ids[q]), column_partial_offset(q, column_partials_chunk_, add(row_start, column)),
            accs[q], lanes);
    return;
  }
  ir::Dim column_length = ir::num_elements(reduced_dims());
  std::map<NodeId, mlir::Value> values;
  for (size_t q = 0; q < ids.size(); ++q) {
    NodeId id = ids[q];
    const Node& n = k_.body.node(id);
    mlir::Value acc = accs[q];
    DType acc_type = accumulator_type(id);
    if (n.as<ir::ReduceAttrs>().kind == ir::ReduceKind::Mean) {
      mlir::Value count = b_.create<mlir::arith::SIToFPOp>(loc_, b_.getF64Type(), dim(column_length));
      if (lanes > 1) count = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(b_.getF64Type(), lanes), count);
      acc = b_.create<mlir::arith::DivFOp>(loc_, acc, count);
    }
    values[id] = acc_type == n.dtype ? acc : cast(acc, acc_type, n.dtype, lanes);
  }
  // The epilogue: elementwise functions of the reductions (columns_form()).
  for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id) {
    const Node& n = k_.body.node(id);
    if (n.kind != OpKind::Elementwise || values.count(id)) continue;
    std::vector<mlir::Value> args;
    for (NodeId in : n.inputs) {
      if (!values.count(in)) break;
      args.push_back(values.at(in));
    }
    if (args.size() == n.inputs.size()) values[id] = elementwise(id, args, lanes);
  }
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    NodeId out = k_.body.outputs[o].node;
    store(output_slot_[o], k_.body.node(out).dtype, add(row_start, column), values.at(out), lanes);
  }
}

std::pair<mlir::Value, mlir::Value> CpuKernelEmitter::column_rows() {
  if (column_rows_from_) return {column_rows_from_, column_rows_to_};
  return {i64(0), dim(ir::num_elements(reduced_dims()))};
}

mlir::Value CpuKernelEmitter::column_partial_offset(size_t q, mlir::Value chunk, mlir::Value column) {
  std::vector<NodeId> ids = reduce_nodes();
  int64_t size = static_cast<int64_t>(ir::dtype_size(accumulator_type(ids[q])));
  mlir::Value columns = dim(ir::num_elements(kept_dims()));
  // Rows of 8-byte units: (q * S + chunk) * columns of them before this one.
  mlir::Value row = add(i64(static_cast<int64_t>(q) * ir::kColumnSplitChunks), chunk);
  return add(mul(mul(row, columns), i64(8 / size)), column);
}

void CpuKernelEmitter::emit_column_split_chunks(mlir::func::FuncOp func) {
  column_split_ = true;
  enter(func);
  mlir::Value begin = entry_->getArgument(2), end = entry_->getArgument(3);
  int lanes = std::max(1, k_.schedule.cpu.vector_width);
  mlir::Value rows = dim(ir::num_elements(reduced_dims()));
  loop(begin, end, 1, [&](mlir::Value chunk) {
    column_partials_chunk_ = chunk;
    column_rows_from_ = div(mul(chunk, rows), i64(ir::kColumnSplitChunks));
    column_rows_to_ = div(mul(add(chunk, i64(1)), rows), i64(ir::kColumnSplitChunks));
    emit_columns(i64(0), dim(ir::num_elements(kept_dims())), lanes);
    column_partials_chunk_ = column_rows_from_ = column_rows_to_ = {};
  });
  b_.create<mlir::func::ReturnOp>(loc_);
}

void CpuKernelEmitter::emit_column_split_finish(mlir::func::FuncOp func) {
  column_split_ = true;
  enter(func);
  mlir::Value begin = entry_->getArgument(2), end = entry_->getArgument(3);
  int lanes = std::max(1, k_.schedule.cpu.vector_width);
  std::vector<NodeId> ids = reduce_nodes();
  // Kept positions [c, c + width): each reduction's chunks combined in order.
  auto columns = [&](mlir::Value c, int width) {
    std::vector<mlir::Value> init;
    for (NodeId id : ids) init.push_back(accumulator_identity(id, width));
    auto chunks = b_.create<mlir::scf::ForOp>(loc_, i64(0), i64(ir::kColumnSplitChunks), i64(1), init);
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(chunks.getBody());
      std::vector<mlir::Value> next;
      for (size_t q = 0; q < ids.size(); ++q) {
        mlir::Value partial = load(slot_count_, accumulator_type(ids[q]), column_partial_offset(q, chunks.getInductionVar(), c), width);
        next.push_back(combine(ids[q], chunks.getRegionIterArgs()[q], partial));
      }
      b_.create<mlir::scf::YieldOp>(loc_, next);
    }
    clear_caches();
    std::vector<mlir::Value> accs(chunks.getResults().begin(), chunks.getResults().end());
    store_column_outputs(i64(0), c, width, accs);
    clear_caches();
  };
  mlir::Value vector_end = lanes > 1 ? whole_steps_end(begin, end, lanes) : begin;
  if (lanes > 1) loop(begin, vector_end, lanes, [&](mlir::Value c) { columns(c, lanes); });
  loop(vector_end, end, 1, [&](mlir::Value c) { columns(c, 1); });
  b_.create<mlir::func::ReturnOp>(loc_);
}

int64_t CpuKernelEmitter::narrow_columns(int lanes) {
  ir::Shape kept = kept_dims();
  if (lanes <= 1 || kept.size() != 1) return 0;
  std::optional<int64_t> columns = known_size(kept[0]);
  // (A task takes at least the schedule's grain of columns: one task has them all.)
  if (!columns || *columns < 2 || *columns >= lanes || *columns > ir::kMaxNarrowColumns || *columns > k_.schedule.cpu.grain)
    return 0;
  // Each reduction reads, through elementwise ops, inputs laid out like the space, single
  // elements broadcast, or operands broadcast along the rows (varying along the columns only:
  // w[C] in sum(x * w, axis=0), read as one vector per vector of the period,
  // narrow_column_vectors()).
  int rank = static_cast<int>(k_.space.size());
  std::vector<NodeId> pending;
  for (NodeId id : reduce_nodes()) pending.push_back(k_.body.node(id).inputs[0]);
  while (!pending.empty()) {
    NodeId id = pending.back();
    const Node& n = k_.body.node(id);
    pending.pop_back();
    if (!(n.shape == k_.space)) return 0;
    if (n.kind == OpKind::Elementwise) pending.insert(pending.end(), n.inputs.begin(), n.inputs.end());
    else if (n.kind == OpKind::BroadcastTo && num_elements(k_.body.node(n.inputs[0]).shape) == ir::Dim(1)) continue;
    else if (n.kind == OpKind::BroadcastTo && ir::periodic_broadcast_axis(k_, id) == rank - 1) continue;
    else if (n.kind != OpKind::Input && n.kind != OpKind::Constant) return 0;
  }
  return *columns;
}

std::map<NodeId, std::vector<mlir::Value>> CpuKernelEmitter::narrow_column_vectors(int64_t columns, int lanes) {
  int rank = static_cast<int>(k_.space.size());
  int64_t period = std::lcm(columns, static_cast<int64_t>(lanes));
  std::map<NodeId, std::vector<mlir::Value>> vectors;
  for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id) {
    if (ir::periodic_broadcast_axis(k_, id) != rank - 1) continue;
    std::vector<mlir::Value> column_values;  // the operand's value in each column
    for (int64_t c = 0; c < columns; ++c) {
      std::vector<mlir::Value> idx(static_cast<size_t>(rank), i64(0));
      idx.back() = i64(c);
      column_values.push_back(general_value(id, idx));
      clear_caches();
    }
    // Vector v of the period: lane l holds column (v lanes + l) mod columns; then, past the
    // vectors, each column's value alone (the rows past the last period).
    mlir::Type type = lane_type(scalar_type(k_.body.node(id).dtype), lanes);
    for (int64_t v = 0; v < period / lanes; ++v) {
      std::vector<mlir::Value> lane_values;
      for (int64_t l = 0; l < lanes; ++l) lane_values.push_back(column_values[static_cast<size_t>((v * lanes + l) % columns)]);
      vectors[id].push_back(b_.create<mlir::vector::FromElementsOp>(loc_, type, lane_values));
    }
    vectors[id].insert(vectors[id].end(), column_values.begin(), column_values.end());
  }
  return vectors;
}

void CpuKernelEmitter::emit_narrow_columns(int64_t columns, int lanes) {
  std::vector<NodeId> ids = reduce_nodes();
  size_t reductions = ids.size();
  auto [rows_from, rows_to] = column_rows();
  // A period: whole rows and whole vectors.
  int64_t period = std::lcm(columns, static_cast<int64_t>(lanes));
  int vectors = static_cast<int>(period / lanes);
  std::map<NodeId, std::vector<mlir::Value>> along_rows = narrow_column_vectors(columns, lanes);
  int64_t period_rows = period / columns;
  mlir::Value whole_to = add(rows_from, mul(div(sub(rows_to, rows_from), i64(period_rows)), i64(period_rows)));
  std::vector<mlir::Value> init;
  for (NodeId id : ids) init.insert(init.end(), vectors, accumulator_identity(id, lanes));
  auto periods = b_.create<mlir::scf::ForOp>(loc_, mul(rows_from, i64(columns)), mul(whole_to, i64(columns)), i64(period), init);
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(periods.getBody());
    // (The inputs are laid out like the space: row_value() of flat element e, one row of all.)
    std::vector<mlir::Value> next(reductions * vectors);
    for (int v = 0; v < vectors; ++v) {
      clear_caches();
      for (const auto& [id, values] : along_rows) row_cache_[id] = values[static_cast<size_t>(v)];
      mlir::Value e = add(periods.getInductionVar(), i64(static_cast<int64_t>(v) * lanes));
      for (size_t q = 0; q < reductions; ++q) {
        mlir::Value x = to_accumulator(ids[q], row_value(k_.body.node(ids[q]).inputs[0], {}, i64(0), e, lanes), lanes);
        next[q * vectors + v] = combine(ids[q], periods.getRegionIterArgs()[q * vectors + v], x);
      }
    }
    clear_caches();
    b_.create<mlir::scf::YieldOp>(loc_, next);
  }
  // Each column's lanes folded, in order of their elements within the period.
  std::vector<mlir::Value> accs;  // [column * reductions + q]
  for (int64_t c = 0; c < columns; ++c)
    for (size_t q = 0; q < reductions; ++q) {
      mlir::Value acc = accumulator_identity(ids[q], 1);
      for (int64_t at = c; at < period; at += columns) {
        mlir::Value lane = b_.create<mlir::vector::ExtractElementOp>(
            loc_, periods.getResult(q * vectors + static_cast<size_t>(at / lanes)), i64(at % lanes));
        acc = combine(ids[q], acc, lane);
      }
      accs.push_back(acc);
    }
  // The rows past the whole periods, one element at a time.
  auto tail = b_.create<mlir::scf::ForOp>(loc_, whole_to, rows_to, i64(1), accs);
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(tail.getBody());
    std::vector<mlir::Value> next;
    for (int64_t c = 0; c < columns; ++c) {
      clear_caches();
      for (const auto& [id, values] : along_rows) row_cache_[id] = values[static_cast<size_t>(vectors + c)];
      mlir::Value e = add(mul(tail.getInductionVar(), i64(columns)), i64(c));
      for (size_t q = 0; q < reductions; ++q) {
        mlir::Value x = to_accumulator(ids[q], row_value(k_.body.node(ids[q]).inputs[0], {}, i64(0), e, 1), 1);
        next.push_back(combine(ids[q], tail.getRegionIterArgs()[static_cast<size_t>(c) * reductions + q], x));
      }
    }
    b_.create<mlir::scf::YieldOp>(loc_, next);
  }
  for (int64_t c = 0; c < columns; ++c) {
    clear_caches();
    std::vector<mlir::Value> column_accs;
    for (size_t q = 0; q < reductions; ++q) column_accs.push_back(tail.getResult(static_cast<size_t>(c) * reductions + q));
    store_column_outputs(i64(0), i64(c), 1, column_accs);
  }
  clear_caches();
}

}  // namespace fuse::codegen
