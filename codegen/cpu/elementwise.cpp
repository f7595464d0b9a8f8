// CPU loop forms without reductions: Contiguous, Rows, TiledRows and General.
#include "codegen/cpu/emitter.h"

#include <algorithm>

#include "mlir/IR/Matchers.h"

namespace fuse::codegen {

using ir::DType;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

// ---- the two loop forms ----
void CpuKernelEmitter::emit_contiguous(mlir::Value base, int lanes) {
  if (period_length_ || row_length_) set_flat_state(flat_state_at(base));
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    const Node& n = k_.body.node(k_.body.outputs[o].node);
    store(output_slot_[o], n.dtype, base, contiguous_value(k_.body.outputs[o].node, base, lanes), lanes);
  }
}

// The contiguous loop over [begin, end) as one loop of whole vectors: the first and last
// iterations load and store under a lane mask (masked-off lanes touch no memory), so the body
// is emitted once, with no scalar copy for the tails (compile time). A large kernel starts at
// the vector boundary below `begin` and writes its whole vectors with non-temporal stores, when
// its outputs have one element size and start at the same offset within a line (HostArrays
// start on one), so that one boundary is every output's.
void CpuKernelEmitter::emit_contiguous_loops(mlir::Value begin, mlir::Value end, int lanes) {
  // Nothing, not even the hoisted loads below, for an empty range (a kernel with takes runs
  // with one to check their indices; an operand broadcast from an empty array has no element 0).
  auto nonempty = b_.create<mlir::scf::IfOp>(loc_, cmpi(mlir::arith::CmpIPredicate::slt, begin, end), /*withElseRegion=*/false);
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(&nonempty.getThenRegion().front());
  mlir::Value streaming = b_.create<mlir::arith::ConstantIntOp>(loc_, 0, 1);
  mlir::Value aligned = begin;
  DType out_type = k_.body.node(k_.body.outputs[0].node).dtype;
  int64_t out_size = static_cast<int64_t>(ir::dtype_size(out_type));
  // Streaming needs outputs whose vectors span whole 64-byte lines, of one element size.
  bool one_size = std::all_of(k_.body.outputs.begin(), k_.body.outputs.end(), [&](const ir::GraphOutput& o) {
    return static_cast<int64_t>(ir::dtype_size(k_.body.node(o.node).dtype)) == out_size;
  });
  int64_t other_outputs = static_cast<int64_t>(k_.body.outputs.size()) - 1;
  mlir::Value large = moves_more_than_streaming_bytes(bytes_moved_per_element(out_type) + other_outputs * out_size);
  if (one_size && streams_whole_lines(out_size * lanes)) {
    mlir::Value address = b_.create<mlir::LLVM::PtrToIntOp>(loc_, i64_type(), base_[output_slot_[0]]);
    // Elements are aligned to their size (the runtime's buffers are), so a boundary is an element.
    mlir::Value element_aligned =
        cmpi(mlir::arith::CmpIPredicate::eq, b_.create<mlir::arith::RemUIOp>(loc_, address, i64(out_size)), i64(0));
    streaming = b_.create<mlir::arith::AndIOp>(loc_, large, element_aligned);
    for (size_t o = 1; o < k_.body.outputs.size(); ++o) {
      mlir::Value other = b_.create<mlir::LLVM::PtrToIntOp>(loc_, i64_type(), base_[output_slot_[o]]);
      mlir::Value same_offset = cmpi(mlir::arith::CmpIPredicate::eq, b_.create<mlir::arith::RemUIOp>(loc_, other, i64(64)),
                                     b_.create<mlir::arith::RemUIOp>(loc_, address, i64(64)));
      streaming = b_.create<mlir::arith::AndIOp>(loc_, streaming, same_offset);
    }
    // To the next vector boundary (a non-temporal store needs one), so that the peel fits the
    // masked head vector; with 32-byte vectors the line it may start in the middle of is written
    // half by that ordinary store, every later line by two streaming ones.
    int64_t vector_bytes = out_size * lanes;
    mlir::Value misalignment = b_.create<mlir::arith::RemUIOp>(loc_, add(address, mul(begin, i64(out_size))), i64(vector_bytes));
    mlir::Value peel = b_.create<mlir::arith::DivUIOp>(
        loc_, b_.create<mlir::arith::RemUIOp>(loc_, sub(i64(vector_bytes), misalignment), i64(vector_bytes)), i64(out_size));
    aligned = select(streaming, min_i64(add(begin, peel), end), begin);  // peel < lanes
  }
  // Whole vectors from `aligned` on, unmasked; the elements before it and after the last whole
  // vector are one masked vector each (no scalar copy of the body: compile time).
  mlir::Value vector_end = whole_steps_end(aligned, end, lanes);
  mlir::Value numbers = lane_numbers(lanes);
  // Lanes [lo, hi) of the vector at i, under a mask; nothing when the range is empty.
  auto masked_vector = [&](mlir::Value i, mlir::Value lo, mlir::Value hi) {
    auto branch = b_.create<mlir::scf::IfOp>(loc_, cmpi(mlir::arith::CmpIPredicate::slt, lo, hi), /*withElseRegion=*/false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&branch.getThenRegion().front());
    clear_caches();
    mask_ = b_.create<mlir::arith::AndIOp>(loc_, cmpi(mlir::arith::CmpIPredicate::sge, numbers, splat_i64(lo, lanes)),
                                           cmpi(mlir::arith::CmpIPredicate::slt, numbers, splat_i64(hi, lanes)));
    emit_contiguous(i, lanes);
    mask_ = {};
    clear_caches();
  };
  // Values that are the same in every lane and iteration, computed once before the loops: the
  // stores inside might alias a broadcast input as far as LLVM knows, so it would reload and
  // recompute them for every vector.
  for (const ir::GraphOutput& out : k_.body.outputs) hoist_invariants(out.node, lanes);
  // Before `aligned`: lanes [lanes - (aligned - begin), lanes) of the vector ending there.
  mlir::Value head = sub(aligned, i64(lanes));
  masked_vector(head, sub(begin, head), min_i64(i64(lanes), sub(end, head)));
  // The whole vectors in blocks of kPatchBlockVectors: each block's loop defers the f32
  // fix-ups (ScalarLowering::defer_patches) and runs again with them when any lane wanted one
  // (an exp whose result is subnormal). A call in the loop, even one never taken, makes LLVM
  // reload the loop's constants every iteration; the block is still in L1 when it runs again.
  // Running again reads the inputs a second time: the runtime never gives a kernel an output
  // that overlaps one of its inputs (Executable::run_views gives such an output a new array).
  bool costly_body = ir::elementwise_cost(k_) >= kPrefetchingBodyCost;
  loop(aligned, vector_end, kPatchBlockVectors * lanes, [&](mlir::Value block) {
    mlir::Value block_end = min_i64(add(block, i64(kPatchBlockVectors * lanes)), vector_end);
    if (costly_body) prefetch_from_memory_ = large;
    mlir::Value needs_patch = emit_contiguous_vectors(block, block_end, lanes, streaming, /*deferred=*/true);
    prefetch_from_memory_ = {};
    if (!needs_patch) return;
    auto again = b_.create<mlir::scf::IfOp>(loc_, needs_patch, /*withElseRegion=*/false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&again.getThenRegion().front());
    emit_contiguous_vectors(block, block_end, lanes, streaming, /*deferred=*/false);
  });
  // After the last whole vector: lanes [0, end - vector_end), when the head did not cover them.
  masked_vector(vector_end, max_i64(i64(0), sub(begin, vector_end)), sub(end, vector_end));
  invariant_.clear();
  varying_.clear();
}

bool CpuKernelEmitter::hoist_invariants(NodeId id, int lanes) {
  if (invariant_.count(id)) return true;
  if (!varying_.insert(id).second) return false;  // visited (a diamond's second path): varying
  const Node& n = k_.body.node(id);
  bool invariant = n.kind == OpKind::BroadcastTo && !periodic_slot_.count(id) && !per_row_.count(id);
  if (n.kind == OpKind::Elementwise && !n.inputs.empty()) {
    invariant = true;
    for (NodeId in : n.inputs) invariant = hoist_invariants(in, lanes) && invariant;  // every input hoisted
  }
  if (invariant) {
    varying_.erase(id);
    invariant_[id] = contiguous_value(id, {}, lanes);
  }
  return invariant;
}

// Whole vectors [from, to) of the contiguous form, stored with streaming stores when
// `streaming`. With `deferred`, the body's f32 fix-ups are left out: the result is whether any
// lane wanted one (null when the body has none).
mlir::Value CpuKernelEmitter::emit_contiguous_vectors(mlir::Value from, mlir::Value to, int lanes, mlir::Value streaming,
                                                      bool deferred) {
  mlir::Value no_lane = no_patch_mask(lanes);
  std::vector<mlir::Value> carried{no_lane};
  for (mlir::Value v : flat_state_at(from)) carried.push_back(v);  // (emit_flat's)
  auto vector_loop = b_.create<mlir::scf::ForOp>(loc_, from, to, i64(lanes), carried);
  std::vector<mlir::Value> masks;  // the deferred fix-ups of the body
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(vector_loop.getBody());
    clear_caches();
    mlir::Value i = vector_loop.getInductionVar();
    std::vector<mlir::Value> next_state;
    if (carried.size() > 1) {
      mlir::ValueRange state = vector_loop.getRegionIterArgs().drop_front(1);
      set_flat_state(std::vector<mlir::Value>(state.begin(), state.end()));
      next_state = next_flat_state();
    }
    if (prefetch_from_memory_) {
      auto from_memory = b_.create<mlir::scf::IfOp>(loc_, prefetch_from_memory_, /*withElseRegion=*/false);
      mlir::OpBuilder::InsertionGuard inner(b_);
      b_.setInsertionPointToStart(&from_memory.getThenRegion().front());
      prefetch_ahead_ = true;
      prefetch_inputs(i64(0), i, 0, lanes);
      prefetch_ahead_ = false;
    }
    if (deferred) scalar_.defer_patches(&masks);
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      const Node& n = k_.body.node(k_.body.outputs[o].node);
      store_or_stream(streaming, output_slot_[o], n.dtype, i, contiguous_value(k_.body.outputs[o].node, i, lanes), lanes);
    }
    scalar_.defer_patches(nullptr);
    std::vector<mlir::Value> yielded{or_patch_masks(vector_loop.getRegionIterArgs()[0], masks)};
    yielded.insert(yielded.end(), next_state.begin(), next_state.end());
    b_.create<mlir::scf::YieldOp>(loc_, yielded);
    clear_caches();
  }
  if (masks.empty()) return {};
  return any_patch(vector_loop.getResult(0));
}

mlir::Value CpuKernelEmitter::contiguous_value(NodeId id, mlir::Value base, int lanes) {
  if (auto hoisted = invariant_.find(id); hoisted != invariant_.end()) return hoisted->second;
  auto it = contiguous_cache_.find(id);
  if (it != contiguous_cache_.end()) return it->second;
  const Node& n = k_.body.node(id);
  mlir::Value v;
  if (auto table = periodic_slot_.find(id); table != periodic_slot_.end()) {
    v = load(table->second, n.dtype, period_offset_, lanes);
  } else if (per_row_.count(id)) {
    v = gathered_row_value(id, lanes);
  } else if (n.kind == OpKind::BroadcastTo) {
    const Node& in = k_.body.node(n.inputs[0]);
    v = general_value(n.inputs[0], std::vector<mlir::Value>(in.shape.size(), i64(0)));
    if (lanes > 1) v = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(scalar_type(n.dtype), lanes), v);
  } else if (n.kind == OpKind::Elementwise) {
    std::vector<mlir::Value> args;
    for (NodeId in : n.inputs) args.push_back(contiguous_value(in, base, lanes));
    v = elementwise(id, args, lanes);
  } else {
    v = load(input_slot_.at(id), n.dtype, base, lanes);
  }
  contiguous_cache_[id] = v;
  return v;
}

// Outputs may differ in shape from the space (same element count, e.g. x.T and its reshape):
// each is evaluated at its own index of the same row-major position.
void CpuKernelEmitter::emit_general(mlir::Value linear) {
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    const Node& n = k_.body.node(k_.body.outputs[o].node);
    store(output_slot_[o], n.dtype, linear, general_value(k_.body.outputs[o].node, delinearize(linear, n.shape)), 1);
  }
}

// Value of `id` at columns [c, c + lanes) of the row whose index (with the innermost index 0
// on `axis`) is `idx0`. Only for nodes whose inner_access is Constant or Unit.
mlir::Value CpuKernelEmitter::lane_value(NodeId id, const std::vector<mlir::Value>& idx0, int axis, mlir::Value c, int lanes) {
  // Keyed by index too: one node can be read at several indices (x broadcast two ways).
  std::vector<const void*> key{reinterpret_cast<const void*>(static_cast<intptr_t>(id)),
                               reinterpret_cast<const void*>(static_cast<intptr_t>(axis)), c.getAsOpaquePointer()};
  for (mlir::Value v : idx0) key.push_back(v.getAsOpaquePointer());
  auto it = lane_cache_.find(key);
  if (it != lane_cache_.end()) return it->second;
  const Node& n = k_.body.node(id);
  mlir::Value v;
  if (n.kind == OpKind::Matmul) {
    v = matmul_strip_;  // this strip of C (emit_matmul_strips)
  } else if (axis < 0 || access_.inner(id, axis) == ir::InnerAccess::Constant) {
    v = general_value(id, idx0);
    if (lanes > 1) v = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(scalar_type(n.dtype), lanes), v);
  } else if (n.kind == OpKind::Input || n.kind == OpKind::Constant) {
    v = load(input_slot_.at(id), n.dtype, add(linearize(idx0, n.shape), c), lanes);
  } else if (n.kind == OpKind::Elementwise) {
    std::vector<mlir::Value> args;
    for (NodeId in : n.inputs) args.push_back(lane_value(in, idx0, axis, c, lanes));
    v = elementwise(id, args, lanes);
  } else {  // a view
    v = lane_value(n.inputs[0], operand_index(n, idx0), ir::view_operand_axis(k_.body, n, axis), c, lanes);
  }
  lane_cache_[key] = v;
  return v;
}

// Stores every output at columns [c, c + lanes) of the row `row` (its index `outer`), with
// non-temporal stores where `streaming` (set, and true at run time).
void CpuKernelEmitter::emit_lanes(const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value c, int lanes,
                                  mlir::Value streaming) {
  std::vector<mlir::Value> idx0 = outer;
  idx0.push_back(i64(0));
  int axis = static_cast<int>(k_.space.size()) - 1;
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    NodeId out = k_.body.outputs[o].node;
    store_or_stream(streaming, output_slot_[o], k_.body.node(out).dtype, add(row_start, c),
                    lane_value(out, idx0, axis, c, lanes), lanes);
  }
}

// One element at column c of a row, through general_value (any strides).
void CpuKernelEmitter::emit_element(const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value c) {
  std::vector<mlir::Value> idx = outer;
  idx.push_back(c);
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    NodeId out = k_.body.outputs[o].node;
    store(output_slot_[o], k_.body.node(out).dtype, add(row_start, c), general_value(out, idx), 1);
  }
}

// Elements [begin, end) row by row: SIMD columns and a scalar tail in each row. A large kernel
// with one output writes its vectors with non-temporal stores, as the contiguous form does (a row
// plus a broadcast row as fast as two rows): in each row piece (a thread's range may start
// mid-row) from the first 64-byte line of the output on, the elements before it one at a time,
// so that rows which are not whole lines (a[N, 1001] + b) stream as well.
void CpuKernelEmitter::emit_rows(mlir::Value begin, mlir::Value end, int lanes) {
  emit_flat_or(begin, end, lanes, /*whole_vector_rows_too=*/false, [&] { emit_rows_by_row(begin, end, lanes); });
}

void CpuKernelEmitter::emit_flat_or(mlir::Value begin, mlir::Value end, int lanes, bool whole_vector_rows_too,
                                    llvm::function_ref<void()> otherwise) {
  ir::FlatBroadcasts flat = lanes > 1 ? ir::flat_broadcasts(k_) : ir::FlatBroadcasts{};
  if (!flat.applies()) return otherwise();
  mlir::Value task = sub(end, begin);
  mlir::Value yes = constant(DType::Bool, 0, 1, 1), no = constant(DType::Bool, 0, 0, 1);
  mlir::Value possible = yes, worth = whole_vector_rows_too ? yes : no;
  auto all = [&](mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::AndIOp>(loc_, a, c).getResult(); };
  auto any = [&](mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::OrIOp>(loc_, a, c).getResult(); };
  auto partial = [&](mlir::Value n) { return cmpi(mlir::arith::CmpIPredicate::ne, rem(n, i64(lanes)), i64(0)); };
  if (flat.periodic_axis >= 0) {
    mlir::Value period = dim(ir::num_elements(ir::Shape(k_.space.begin() + flat.periodic_axis, k_.space.end())));
    // (a period of 0 elements: the space is empty)
    possible = all(possible, all(cmpi(mlir::arith::CmpIPredicate::sgt, period, i64(0)),
                                 cmpi(mlir::arith::CmpIPredicate::sle,
                                      mul(add(period, i64(2 * lanes)), i64(kFlatTaskShare)), task)));
    worth = any(worth, partial(period));
  }
  if (flat.per_row_axis >= 0) {
    mlir::Value q = dim(ir::num_elements(ir::Shape(k_.space.begin() + flat.per_row_axis, k_.space.end())));
    possible = all(possible, all(all(cmpi(mlir::arith::CmpIPredicate::sgt, q, i64(0)),
                                     cmpi(mlir::arith::CmpIPredicate::sle, q, i64(kMaxGatheredRowLength))),
                                 cmpi(mlir::arith::CmpIPredicate::sle, mul(q, i64(lanes * kFlatTaskShare)), task)));
    worth = any(worth, partial(q));
  }
  auto branch = b_.create<mlir::scf::IfOp>(loc_, all(possible, worth), /*withElseRegion=*/true);
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(&branch.getThenRegion().front());
  emit_flat(begin, end, lanes, flat);
  b_.setInsertionPointToStart(&branch.getElseRegion().front());
  otherwise();
}

std::vector<mlir::Value> CpuKernelEmitter::flat_state_at(mlir::Value i) {
  std::vector<mlir::Value> state;
  if (period_length_) state.push_back(rem(add(i, period_length_), period_length_));  // (i >= -lanes)
  if (row_length_) {
    int lanes = k_.schedule.cpu.vector_width;
    mlir::Value shifted = add(i, mul(row_length_, i64(lanes)));  // whole rows on: not negative
    state.push_back(sub(div(shifted, row_length_), i64(lanes)));
    state.push_back(rem(shifted, row_length_));
  }
  return state;
}

void CpuKernelEmitter::set_flat_state(const std::vector<mlir::Value>& state) {
  size_t at = 0;
  if (period_length_) period_offset_ = state.at(at++);
  if (row_length_) {
    flat_row_ = state.at(at++);
    flat_row_rem_ = state.at(at++);
  }
}

std::vector<mlir::Value> CpuKernelEmitter::next_flat_state() {
  int lanes = k_.schedule.cpu.vector_width;
  std::vector<mlir::Value> next;
  if (period_length_) {
    mlir::Value offset = add(period_offset_, i64(lanes));
    next.push_back(select(cmpi(mlir::arith::CmpIPredicate::sge, offset, period_length_), sub(offset, period_length_), offset));
  }
  if (row_length_) {
    mlir::Value r = add(flat_row_rem_, row_step_rem_), row = add(flat_row_, row_step_);
    mlir::Value wraps = cmpi(mlir::arith::CmpIPredicate::sge, r, row_length_);
    next.push_back(select(wraps, add(row, i64(1)), row));
    next.push_back(select(wraps, sub(r, row_length_), r));
  }
  return next;
}

// Node `id`, a per-row broadcast, at the vector whose first lane is in row flat_row_, element
// flat_row_rem_ of it: lane j reads row flat_row_ + (flat_row_rem_ + j) / Q, its offset from
// the index table's row flat_row_rem_; gathered under mask_ (masked-off lanes read nothing).
mlir::Value CpuKernelEmitter::gathered_row_value(NodeId id, int lanes) {
  NodeId leaf = ir::row_ordered_input(k_.body, k_.body.node(id).inputs[0]);
  DType t = k_.body.node(leaf).dtype;
  mlir::Value offsets = load(row_index_table_, DType::I32, mul(flat_row_rem_, i64(lanes)), lanes);
  return gather(element_address(input_slot_.at(leaf), t, flat_row_), t, offsets, lanes);
}

void CpuKernelEmitter::emit_flat(mlir::Value begin, mlir::Value end, int lanes, const ir::FlatBroadcasts& flat) {
  size_t first_scratch = scratch_slot_.size();
  if (flat.periodic_axis >= 0) {
    int axis = flat.periodic_axis;
    ir::Shape trailing(k_.space.begin() + axis, k_.space.end());
    mlir::Value period = dim(ir::num_elements(trailing));
    mlir::Value length = mul(period, div(add(period, i64(lanes - 1)), period));  // L
    mlir::Value table_elements = add(length, i64(lanes));
    for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
      if (ir::periodic_broadcast_axis(k_, id) >= 0) periodic_slot_[id] = period_table(id, axis, table_elements);
    period_length_ = length;
  }
  if (flat.per_row_axis >= 0) {
    for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
      if (ir::per_row_broadcast_axis(k_, id) >= 0) per_row_.insert(id);
    mlir::Value q = dim(ir::num_elements(ir::Shape(k_.space.begin() + flat.per_row_axis, k_.space.end())));
    // Row r of the index table: lane j's row past the vector's first, (r + j) / Q.
    row_index_table_ = allocate_slot(mul(q, i64(lanes * 4)));
    loop(i64(0), mul(q, i64(lanes)), 1, [&](mlir::Value e) {
      mlir::Value offset = div(add(div(e, i64(lanes)), rem(e, i64(lanes))), q);
      store(row_index_table_, DType::I32, e, b_.create<mlir::arith::TruncIOp>(loc_, b_.getI32Type(), offset), 1);
    });
    row_length_ = q;
    row_step_ = div(i64(lanes), q);
    row_step_rem_ = rem(i64(lanes), q);
  }
  emit_contiguous_loops(begin, end, lanes);
  period_length_ = period_offset_ = row_length_ = row_step_ = row_step_rem_ = flat_row_ = flat_row_rem_ = {};
  row_index_table_ = -1;
  periodic_slot_.clear();
  per_row_.clear();
  release_scratch_from(first_scratch);  // (its values live in this branch only)
}

int CpuKernelEmitter::period_table(NodeId id, int axis, mlir::Value elements) {
  ir::Shape trailing(k_.space.begin() + axis, k_.space.end());
  mlir::Value period = dim(ir::num_elements(trailing));
  DType t = k_.body.node(id).dtype;
  int slot = allocate_slot(mul(elements, i64(static_cast<int64_t>(ir::dtype_size(t)))));
  // Element e: the value at flat position e, i.e. at e mod P within the trailing axes (the
  // leading ones are broadcast: index 0).
  loop(i64(0), elements, 1, [&](mlir::Value e) {
    std::vector<mlir::Value> idx(static_cast<size_t>(axis), i64(0));
    for (mlir::Value v : delinearize(rem(e, period), trailing)) idx.push_back(v);
    store(slot, t, e, general_value(id, idx), 1);
    clear_caches();
  });
  return slot;
}

void CpuKernelEmitter::emit_rows_by_row(mlir::Value begin, mlir::Value end, int lanes) {
  ir::Shape outer_shape(k_.space.begin(), k_.space.end() - 1);
  mlir::Value streaming, address;
  int64_t out_size = 0;
  if (lanes > 1 && k_.body.outputs.size() == 1) {
    DType t = k_.body.node(k_.body.outputs[0].node).dtype;
    out_size = static_cast<int64_t>(ir::dtype_size(t));
    if (streams_whole_lines(out_size * lanes)) {
      mlir::Value large = moves_more_than_streaming_bytes(bytes_moved_per_element(t));
      address = b_.create<mlir::LLVM::PtrToIntOp>(loc_, i64_type(), base_[output_slot_[0]]);
      // (whole elements from a line boundary: a non-temporal store to an unaligned address faults)
      mlir::Value element_aligned = cmpi(mlir::arith::CmpIPredicate::eq, rem(address, i64(out_size)), i64(0));
      streaming = b_.create<mlir::arith::AndIOp>(loc_, large, element_aligned);
    }
  }
  for_each_row_piece(begin, end, k_.space.back(), outer_shape,
                     [&](const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value from, mlir::Value to) {
                       mlir::Value vector_end = from;
                       if (lanes > 1) {
                         mlir::Value vector_from = from;
                         if (streaming) {
                           mlir::Value at = add(address, mul(add(row_start, from), i64(out_size)));
                           mlir::Value to_line = div(rem(sub(i64(64), rem(at, i64(64))), i64(64)), i64(out_size));
                           vector_from = select(streaming, min_i64(to, add(from, to_line)), from);
                           loop(from, vector_from, 1, [&](mlir::Value c) { emit_lanes(outer, row_start, c, 1); });
                         }
                         vector_end = whole_steps_end(vector_from, to, lanes);
                         loop(vector_from, vector_end, lanes,
                              [&](mlir::Value c) { emit_lanes(outer, row_start, c, lanes, streaming); });
                       }
                       loop(vector_end, to, 1, [&](mlir::Value c) { emit_lanes(outer, row_start, c, 1); });
                     });
}

void CpuKernelEmitter::emit_tiled(mlir::Value begin, mlir::Value end) {
  // A transposed operand under a periodic broadcast (x[B, H, C] + d[C, H].T) is read once per
  // task into its table; the flat loop then reads every other operand along its rows.
  int lanes = k_.schedule.cpu.vector_width;
  emit_flat_or(begin, end, lanes, /*whole_vector_rows_too=*/true, [&] { emit_tiled_rows(begin, end); });
}

void CpuKernelEmitter::emit_tiled_rows(mlir::Value begin, mlir::Value end) {
  ir::Shape outer_shape(k_.space.begin(), k_.space.end() - 1);
  mlir::Value width = max_i64(dim(k_.space.back()), i64(1));
  mlir::Value full_first = div(add(begin, sub(width, i64(1))), width);
  mlir::Value full_last = max_i64(div(end, width), full_first);
  mlir::Value head_end = min_i64(end, mul(full_first, width));
  mlir::Value tail_begin = max_i64(head_end, mul(full_last, width));
  loop(begin, head_end, 1, [&](mlir::Value i) { emit_general(i); });
  if (register_tiles_apply()) {
    emit_register_tiles(full_first, full_last, width);
  } else {
    loop(full_first, full_last, k_.schedule.cpu.transpose_block, [&](mlir::Value row_block) {
      mlir::Value rows_end = min_i64(add(row_block, i64(k_.schedule.cpu.transpose_block)), full_last);
      loop(i64(0), width, k_.schedule.cpu.transpose_block, [&](mlir::Value column_block) {
        mlir::Value columns_end = min_i64(add(column_block, i64(k_.schedule.cpu.transpose_block)), width);
        loop(row_block, rows_end, 1, [&](mlir::Value row) {
          std::vector<mlir::Value> outer = delinearize(row, outer_shape);
          mlir::Value row_start = mul(row, width);
          loop(column_block, columns_end, 1, [&](mlir::Value c) { emit_element(outer, row_start, c); });
        });
      });
    });
  }
  loop(tail_begin, end, 1, [&](mlir::Value i) { emit_general(i); });
}

// ---- TiledRows in registers (issue 15) ----

// Tiles per band of rows in emit_register_tiles: two, so that a transposed operand's rows are
// read 128 bytes (two adjacent cache lines) at a time. On the Zen 4 VM, 4096 x 4096 transposes
// took (medians, same runs) f64 30.5 ms with one tile, 19.5 ms with two, 24 ms with four; f32
// about 10% less with two than with one or four.
constexpr int kBandTiles = 2;
// Rows per block when tiles go two or more across (emit_register_tiles).
constexpr int64_t kStripRows = 1024;

struct CpuKernelEmitter::RegisterTile {
  int lanes = 0;
  mlir::Value first_row_of_matrix, first_column;   // along the space's last two axes
  std::vector<std::vector<mlir::Value>> row_index;     // row i's index, 0 on the last axis
  std::vector<std::vector<mlir::Value>> column_index;  // column j's index, 0 on the second-to-last
  std::vector<mlir::Value> row_start;                  // row i's flattened position
  std::map<NodeId, std::vector<mlir::Value>> rows;     // a node's row vectors, once computed
};

CpuKernelEmitter::TileRead CpuKernelEmitter::tile_read(NodeId id) {
  const Node& n = k_.body.node(id);
  int last = static_cast<int>(k_.space.size()) - 1;
  ir::InnerAccess along_row = access_.inner(id, last);
  if (along_row == ir::InnerAccess::Constant || along_row == ir::InnerAccess::Unit) return TileRead::Rows;
  // Bools stay out of the shuffles (i1 lanes): an elementwise bool is computed after them.
  if (along_row == ir::InnerAccess::Strided && access_.inner(id, last - 1) == ir::InnerAccess::Unit &&
      ir::dtype_size(n.dtype) >= 4)
    return TileRead::Columns;
  return n.kind == OpKind::Elementwise ? TileRead::Elementwise : TileRead::Unsupported;
}

bool CpuKernelEmitter::register_tiles_apply() {
  int lanes = k_.schedule.cpu.vector_width;
  if (k_.space.size() < 2 || lanes < 2 || (lanes & (lanes - 1)) != 0) return false;
  for (const Node& n : k_.body.nodes)
    if (n.kind == OpKind::Matmul) return false;  // (lane_value reads a matmul as the strip of C)
  for (const ir::GraphOutput& o : k_.body.outputs) {
    size_t size = ir::dtype_size(k_.body.node(o.node).dtype);
    if (size != 4 && size != 8) return false;
  }
  return every_tile_read([](NodeId, TileRead read) { return read != TileRead::Unsupported; });
}

bool CpuKernelEmitter::every_tile_read(llvm::function_ref<bool(NodeId, TileRead)> accept) {
  std::vector<NodeId> pending;
  for (const ir::GraphOutput& o : k_.body.outputs) pending.push_back(o.node);
  std::vector<bool> seen(k_.body.nodes.size(), false);
  while (!pending.empty()) {
    NodeId id = pending.back();
    pending.pop_back();
    if (seen[id]) continue;
    seen[id] = true;
    TileRead read = tile_read(id);
    if (!accept(id, read)) return false;
    if (read == TileRead::Elementwise)
      for (NodeId in : k_.body.node(id).inputs) pending.push_back(in);
  }
  return true;
}

// Whether no operand of the tiles is read along its rows (every leaf is read by columns, as a
// transpose's, or is constant along the rows). Strips of columns walked down the rows
// (emit_register_tiles) read such an operand one line from each of a thousand rows: on the Zen 3
// VM, `x.T * 2.0 + y` (4096 x 4096 f32) took 30.3 ms so against 23.6 ms in bands.
bool CpuKernelEmitter::tiles_read_no_rows() {
  int last = static_cast<int>(k_.space.size()) - 1;
  return every_tile_read([&](NodeId id, TileRead read) {
    return read != TileRead::Rows || access_.inner(id, last) != ir::InnerAccess::Unit;
  });
}

// Node `id`'s values on row `row` of the tile, one vector.
mlir::Value CpuKernelEmitter::tile_row(NodeId id, RegisterTile& t, int row) {
  auto it = t.rows.find(id);
  if (it != t.rows.end()) return it->second[row];
  const Node& n = k_.body.node(id);
  int last = static_cast<int>(k_.space.size()) - 1;
  std::vector<mlir::Value> rows;
  switch (tile_read(id)) {
    case TileRead::Rows:
      for (int i = 0; i < t.lanes; ++i) rows.push_back(lane_value(id, t.row_index[i], last, t.first_column, t.lanes));
      break;
    case TileRead::Columns: {
      std::vector<mlir::Value> columns;
      for (int j = 0; j < t.lanes; ++j)
        columns.push_back(lane_value(id, t.column_index[j], last - 1, t.first_row_of_matrix, t.lanes));
      rows = transpose_in_registers(b_, loc_, std::move(columns));
      break;
    }
    case TileRead::Elementwise:
      for (int i = 0; i < t.lanes; ++i) {
        std::vector<mlir::Value> args;
        for (NodeId in : n.inputs) args.push_back(tile_row(in, t, i));
        rows.push_back(elementwise(id, args, t.lanes));
      }
      break;
    case TileRead::Unsupported: throw ir::Error(fail_text("register tile of a node it cannot read (" + k_.name + ")"));
  }
  return t.rows.emplace(id, std::move(rows)).first->second[row];
}

// Every output's rows of tiles side by side (the same rows, adjacent columns), each one
// full-width store, row by row across the tiles: with two 32-byte tiles across (AVX2), each row
// of the pair is one whole 64-byte line stored in order, which a streaming store needs (stored
// tile by tile, the halves of a line were 8 stores apart and streamed 1.5x slower than ordinary
// stores). `streaming` (null: never; a constant true: always) picks non-temporal stores at run time.
void CpuKernelEmitter::emit_register_tiles_across(std::vector<RegisterTile>& tiles, mlir::Value streaming) {
  int lanes = tiles.front().lanes;
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    NodeId out = k_.body.outputs[o].node;
    DType type = k_.body.node(out).dtype;
    std::vector<std::vector<mlir::Value>> rows(tiles.size());
    for (size_t t = 0; t < tiles.size(); ++t)
      for (int i = 0; i < lanes; ++i) rows[t].push_back(tile_row(out, tiles[t], i));
    auto store_rows = [&](bool non_temporal) {
      for (int i = 0; i < lanes; ++i)
        for (size_t t = 0; t < tiles.size(); ++t)
          store(output_slot_[o], type, add(tiles[t].row_start[i], tiles[t].first_column), rows[t][i], lanes, non_temporal);
    };
    if (!streaming || mlir::matchPattern(streaming, mlir::m_One())) {
      store_rows(static_cast<bool>(streaming));
      continue;
    }
    auto branch = b_.create<mlir::scf::IfOp>(loc_, streaming, /*withElseRegion=*/true);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&branch.getThenRegion().front());
    store_rows(true);
    b_.setInsertionPointToStart(&branch.getElseRegion().front());
    store_rows(false);
  }
}

// Rows [full_first, full_last) of the space (whole rows), matrix by matrix of its last two axes:
// whole tiles of `lanes` rows and columns, then the columns and rows past them element by element.
void CpuKernelEmitter::emit_register_tiles(mlir::Value full_first, mlir::Value full_last, mlir::Value width) {
  int lanes = k_.schedule.cpu.vector_width;
  size_t rank = k_.space.size();
  ir::Shape matrices_shape(k_.space.begin(), k_.space.end() - 2);
  mlir::Value height = max_i64(dim(k_.space[rank - 2]), i64(1));
  // Tiles across: as many side by side as make one 64-byte line of a row (two for AVX2's
  // 32-byte rows, one for AVX-512). Non-temporal stores when one output moves more than
  // streaming_bytes() / 2 (about as much is read) and the rows start on lines.
  mlir::Value streaming;
  DType out_type = k_.body.node(k_.body.outputs[0].node).dtype;
  int64_t out_size = static_cast<int64_t>(ir::dtype_size(out_type));
  int across = out_size * lanes < 64 && 64 % (out_size * lanes) == 0 && tiles_read_no_rows()
                   ? static_cast<int>(64 / (out_size * lanes))
                   : 1;
  if (k_.body.outputs.size() == 1 && out_size * lanes * across == 64)
    streaming = streams_rows(output_slot_[0], out_type, 2 * out_size, width);
  mlir::Value tiled_width = mul(div(width, i64(lanes)), i64(lanes));
  // Tile rows of one line (AVX-512) walk strips where the output streams and bands elsewhere;
  // two tiles across (AVX2) always walk strips (see tile_blocks).
  bool strips_where_streamed = streaming && across == 1 && tiles_read_no_rows();
  // Elements [from, to) of row `row` (row `n` of matrix `matrix`), one at a time.
  auto elements = [&](const std::vector<mlir::Value>& matrix, mlir::Value row, mlir::Value n, mlir::Value from,
                      mlir::Value to) {
    std::vector<mlir::Value> outer = matrix;
    outer.push_back(n);
    mlir::Value row_start = mul(row, width);
    loop(from, to, 1, [&](mlir::Value c) { emit_element(outer, row_start, c); });
  };
  mlir::Value first_matrix = div(full_first, height);
  mlir::Value last_matrix = div(add(full_last, sub(height, i64(1))), height);
  loop(first_matrix, last_matrix, 1, [&](mlir::Value m) {
    std::vector<mlir::Value> matrix = delinearize(m, matrices_shape);
    mlir::Value matrix_row = mul(m, height);
    mlir::Value n_first = max_i64(sub(full_first, matrix_row), i64(0));
    mlir::Value n_end = min_i64(sub(full_last, matrix_row), height);
    // `count` tiles across from column c0, for each of `group` tiles down from row `band`.
    auto tiles_at = [&](mlir::Value band, int group, mlir::Value c0, int count, mlir::Value stream) {
      for (int g = 0; g < group; ++g) {
        std::vector<RegisterTile> tiles(count);
        for (int a = 0; a < count; ++a) {
          RegisterTile& t = tiles[a];
          t.lanes = lanes;
          t.first_row_of_matrix = add(band, i64(g * lanes));
          t.first_column = add(c0, i64(a * lanes));
          for (int i = 0; i < lanes; ++i) {
            mlir::Value n = add(t.first_row_of_matrix, i64(i));
            std::vector<mlir::Value> row = matrix;
            row.insert(row.end(), {n, i64(0)});
            t.row_index.push_back(row);
            t.row_start.push_back(mul(add(matrix_row, n), width));
            std::vector<mlir::Value> column = matrix;
            column.insert(column.end(), {i64(0), add(t.first_column, i64(i))});
            t.column_index.push_back(column);
          }
        }
        emit_register_tiles_across(tiles, stream);
      }
    };
    // Rows [from, to) (a multiple of group * lanes of them) in blocks of `block_rows`; in each,
    // strips of one line of columns (`across` tiles) walked down the block's bands of `group`
    // tiles; or, without strips, one band per block walked across the columns, each row of a
    // transposed operand read group * 64 bytes at a time. A strip reads `across * lanes` rows of
    // a transposed operand along the block, each a stream of block_rows elements, and writes one
    // whole line per row (streamed): on the Zen 3 VM a 4096 x 4096 f32 transpose on AVX2 took
    // 7.4-8.2 ms so (blocks of 1024-2048 rows; 9.9 with 512, 11-19 with 16-256) against 17-24 ms
    // walking 16-row bands across, streamed or not, in the same runs of a C model of these loops.
    // On AVX-512 (one tile across), where the output streams, on the Xeon VM (fusec --bench,
    // medians): 4096 x 4096 f32 10.0-10.6 -> 4.5-5.0 ms warm, f64 16.4-17.1 -> 9.3-10.1, 2048 x 2048
    // cold 2.4 -> 1.4, 1280 x 1280 cold 1.0-1.1 -> 0.64-0.71; blocks of 2048 rows as fast, 256-512
    // slower; 1024 x 1024 cold 5-15% slower (1.07-1.18 -> 1.20-1.36 ms). Bands where nothing
    // streams (on AVX2 the strips gained nothing without streaming stores).
    auto tile_blocks = [&](mlir::Value from, mlir::Value to, int group, bool strips, mlir::Value stream) {
      int64_t block_rows = strips ? kStripRows / (group * lanes) * (group * lanes) : group * lanes;
      loop(from, to, block_rows, [&](mlir::Value block) {
        mlir::Value block_end = min_i64(add(block, i64(block_rows)), to);
        auto down_the_block = [&](mlir::Value c0, int count, mlir::Value tile_stream) {
          if (!strips) return tiles_at(block, group, c0, count, tile_stream);  // one band
          loop(block, block_end, group * lanes, [&](mlir::Value band) { tiles_at(band, group, c0, count, tile_stream); });
        };
        if (across == 1) {
          loop(i64(0), tiled_width, lanes, [&](mlir::Value c0) { down_the_block(c0, 1, stream); });
        } else {
          // Whole lines (`across` tiles) first; a last tile of a row that is not a whole number
          // of lines (then nothing streams: streams_rows wants whole-line rows) alone.
          mlir::Value lines_end = mul(div(width, i64(across * lanes)), i64(across * lanes));
          loop(i64(0), lines_end, across * lanes, [&](mlir::Value c0) { down_the_block(c0, across, stream); });
          loop(lines_end, tiled_width, lanes, [&](mlir::Value c0) { down_the_block(c0, 1, mlir::Value()); });
        }
        loop(block, block_end, 1, [&](mlir::Value n) { elements(matrix, add(matrix_row, n), n, tiled_width, width); });
      });
    };
    mlir::Value banded_end = whole_steps_end(n_first, n_end, kBandTiles * lanes);
    mlir::Value tiled_end = whole_steps_end(banded_end, n_end, lanes);
    auto all_tiles = [&](bool strips, mlir::Value stream) {
      // Strips one tile across walk bands of one tile: their rows are streams either way, and
      // with bands of two tiles as well `fusec bench/transpose.expr --emit=obj` took 0.41-0.51 s,
      // not 0.27-0.32, for the same speed (4096 x 4096 f32 4.2-4.4 ms against 4.3-4.8). (The
      // bands keep two tiles: one lost 20-25% on 2048 x 256 in cache.) fuse_bench's warm compile
      // of the transpose: 369-393 ms, 306 before the strips.
      if (strips && across == 1) {
        tile_blocks(n_first, tiled_end, 1, strips, stream);
        return;
      }
      tile_blocks(n_first, banded_end, kBandTiles, strips, stream);
      tile_blocks(banded_end, tiled_end, 1, strips, stream);
    };
    if (strips_where_streamed) {
      auto branch = b_.create<mlir::scf::IfOp>(loc_, streaming, /*withElseRegion=*/true);
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(&branch.getThenRegion().front());
      all_tiles(true, b_.create<mlir::arith::ConstantIntOp>(loc_, 1, 1));
      b_.setInsertionPointToStart(&branch.getElseRegion().front());
      all_tiles(false, mlir::Value());
    } else {
      all_tiles(across > 1, streaming);
    }
    loop(tiled_end, n_end, 1, [&](mlir::Value n) { elements(matrix, add(matrix_row, n), n, i64(0), width); });
  });
}

}  // namespace fuse::codegen
