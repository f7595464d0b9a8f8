// CUDA reductions: BlockPerRow (also row-wise kernels), TwoStage and PerElement.
#include "codegen/cuda/emitter.h"

#include <algorithm>

#include "mlir/Dialect/Math/IR/Math.h"

namespace fuse::codegen {

using ir::DType;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

// The index in the space of element j of row `row` (its kept index `kept`). With trailing
// reduced axes that is position row * L + j of the space, so that operands laid out like the
// space are read there without index arithmetic (see linearize).
std::vector<mlir::Value> CudaKernelEmitter::element_index(const std::vector<mlir::Value>& kept, mlir::Value row, mlir::Value j) {
  bool trailing = !k_.axes.empty();
  for (size_t i = 0; i < k_.axes.size(); ++i)
    trailing = trailing && k_.axes[i] == static_cast<int>(k_.space.size() - k_.axes.size() + i);
  ir::Shape reduced_shape = reduced_dims();
  if (!trailing) return full_index(kept, delinearize(j, reduced_shape));
  return delinearize(add(mul(row, dim(ir::num_elements(reduced_shape))), j), k_.space);
}

// An accumulator as 8 bytes (shared memory and scratch slots) and back.
mlir::Value CudaKernelEmitter::to_slot(DType t, mlir::Value v) {
  if (t == DType::Bool) return b_.create<mlir::arith::ExtUIOp>(loc_, i64_type(), v);
  if (t == DType::I32) return b_.create<mlir::arith::ExtSIOp>(loc_, i64_type(), v);
  if (t == DType::F32) v = b_.create<mlir::arith::ExtFOp>(loc_, b_.getF64Type(), v);
  if (ir::is_float(t)) return b_.create<mlir::arith::BitcastOp>(loc_, i64_type(), v);
  return v;
}

mlir::Value CudaKernelEmitter::from_slot(DType t, mlir::Value v) {
  if (t == DType::Bool) return scalar_.cmpi(mlir::arith::CmpIPredicate::ne, v, i64(0));
  if (t == DType::I32) return b_.create<mlir::arith::TruncIOp>(loc_, b_.getI32Type(), v);
  if (!ir::is_float(t)) return v;
  mlir::Value f = b_.create<mlir::arith::BitcastOp>(loc_, b_.getF64Type(), v);
  return t == DType::F32 ? mlir::Value(b_.create<mlir::arith::TruncFOp>(loc_, b_.getF32Type(), f)) : f;  // exact: it was extended
}

// Lane `lane ^ mask`'s value of `v` (any accumulator type; 64-bit values as two halves).
mlir::Value CudaKernelEmitter::shuffle_xor(mlir::Value v, int mask) { return shuffle(v, mask, mlir::gpu::ShuffleMode::XOR); }

mlir::Value CudaKernelEmitter::shuffle(mlir::Value v, int offset, mlir::gpu::ShuffleMode mode) {
  auto shuffle32 = [&](mlir::Value x) {
    return b_.create<mlir::gpu::ShuffleOp>(loc_, x, offset, kWarp, mode).getResult(0);
  };
  mlir::Type t = v.getType();
  if (t.isF32() || t.isInteger(32)) return shuffle32(v);
  if (t.isInteger(1)) {
    mlir::Value wide = b_.create<mlir::arith::ExtUIOp>(loc_, b_.getI32Type(), v);
    return scalar_.cmpi(mlir::arith::CmpIPredicate::ne, shuffle32(wide), i32(0));
  }
  mlir::Value bits = t.isF64() ? mlir::Value(b_.create<mlir::arith::BitcastOp>(loc_, i64_type(), v)) : v;
  mlir::Value lo = b_.create<mlir::arith::TruncIOp>(loc_, b_.getI32Type(), bits);
  mlir::Value hi = b_.create<mlir::arith::TruncIOp>(loc_, b_.getI32Type(), b_.create<mlir::arith::ShRUIOp>(loc_, bits, i64(32)));
  lo = b_.create<mlir::arith::ExtUIOp>(loc_, i64_type(), shuffle32(lo));
  hi = b_.create<mlir::arith::ExtUIOp>(loc_, i64_type(), shuffle32(hi));
  mlir::Value joined = b_.create<mlir::arith::OrIOp>(loc_, lo, b_.create<mlir::arith::ShLIOp>(loc_, hi, i64(32)));
  return t.isF64() ? mlir::Value(b_.create<mlir::arith::BitcastOp>(loc_, b_.getF64Type(), joined)) : joined;
}

// Every thread's `acc` combined over the block; every thread gets the result. Within a warp
// an xor butterfly (every lane ends with the same value: each step combines the same two
// partial results, in either order, and the combiners are commutative); then one slot per
// warp in shared memory, read by every thread in warp order. Ends with a barrier, so the
// slots can be reused at once.
mlir::Value CudaKernelEmitter::block_reduce(NodeId id, mlir::Value acc, int threads) {
  for (int mask = kWarp / 2; mask >= 1; mask /= 2) acc = combine(id, acc, shuffle_xor(acc, mask));
  int warps = std::max(1, threads / kWarp);
  if (warps == 1) return acc;
  DType t = accumulator_type(id);
  mlir::Value slots = shared_array("warps", i64_type(), kWarp);
  mlir::Value tid = linear_thread_id();
  if_then(eq(rem(tid, i64(kWarp)), i64(0)), [&] { shared_store(slots, i64_type(), div(tid, i64(kWarp)), to_slot(t, acc)); });
  barrier();
  mlir::Value total = from_slot(t, shared_load(slots, i64_type(), i64(0)));
  for (int w = 1; w < warps; ++w) total = combine(id, total, from_slot(t, shared_load(slots, i64_type(), i64(w))));
  barrier();
  return total;
}

mlir::Value CudaKernelEmitter::block_arg_reduce(NodeId id, std::pair<mlir::Value, mlir::Value> acc, int threads) {
  for (int mask = kWarp / 2; mask >= 1; mask /= 2)
    acc = arg_pick(id, acc, {shuffle_xor(acc.first, mask), shuffle_xor(acc.second, mask)});
  int warps = std::max(1, threads / kWarp);
  if (warps == 1) return acc.second;
  DType in = k_.body.node(k_.body.node(id).inputs[0]).dtype;
  DType t = ir::is_float(in) ? in : DType::I64;  // fold_arg's value type
  mlir::Value values = shared_array("arg_values", i64_type(), kWarp), indices = shared_array("arg_indices", i64_type(), kWarp);
  mlir::Value tid = linear_thread_id();
  if_then(eq(rem(tid, i64(kWarp)), i64(0)), [&] {
    shared_store(values, i64_type(), div(tid, i64(kWarp)), to_slot(t, acc.first));
    shared_store(indices, i64_type(), div(tid, i64(kWarp)), acc.second);
  });
  barrier();
  std::pair<mlir::Value, mlir::Value> total = {from_slot(t, shared_load(values, i64_type(), i64(0))), shared_load(indices, i64_type(), i64(0))};
  for (int w = 1; w < warps; ++w)
    total = arg_pick(id, total, {from_slot(t, shared_load(values, i64_type(), i64(w))), shared_load(indices, i64_type(), i64(w))});
  barrier();
  return total.second;
}

mlir::Value CudaKernelEmitter::linear_thread_id() {
  using mlir::gpu::Dimension;
  return add(mul(thread_id(Dimension::y), block_dim(Dimension::x)), thread_id(Dimension::x));
}

// ---- ordered reductions (user combiners) ----

CudaKernelEmitter::Chunk CudaKernelEmitter::chunk_of(mlir::Value from, mlir::Value to, mlir::Value part, mlir::Value parts) {
  mlir::Value size = max_i64(i64(1), div(add(sub(to, from), sub(parts, i64(1))), parts));
  mlir::Value begin = min_i64(to, add(from, mul(part, size)));
  return {begin, min_i64(to, add(begin, size))};
}

mlir::Value CudaKernelEmitter::chunks_used(mlir::Value from, mlir::Value to, mlir::Value parts) {
  mlir::Value n = sub(to, from);
  mlir::Value size = max_i64(i64(1), div(add(n, sub(parts, i64(1))), parts));
  return max_i64(i64(1), div(add(n, sub(size, i64(1))), size));
}

std::vector<mlir::Value> CudaKernelEmitter::ordered_fold(const std::vector<NodeId>& ids, Chunk c,
                                                         const std::function<std::vector<mlir::Value>(mlir::Value)>& element) {
  return strided_fold(ids, c.begin, c.end, i64(1), element);
}

std::vector<mlir::Value> CudaKernelEmitter::strided_fold(const std::vector<NodeId>& ids, mlir::Value begin, mlir::Value end,
                                                         mlir::Value step,
                                                         const std::function<std::vector<mlir::Value>(mlir::Value)>& element) {
  std::vector<mlir::Value> init;
  for (NodeId id : ids) init.push_back(accumulator_identity(id));
  auto fold = b_.create<mlir::scf::ForOp>(loc_, begin, end, step, init);
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(fold.getBody());
    clear_caches();
    std::vector<mlir::Value> x = element(fold.getInductionVar()), next;
    for (size_t q = 0; q < ids.size(); ++q) next.push_back(combine(ids[q], fold.getRegionIterArgs()[q], x[q]));
    b_.create<mlir::scf::YieldOp>(loc_, next);
    clear_caches();
  }
  return {fold.getResults().begin(), fold.getResults().end()};
}

mlir::Value CudaKernelEmitter::ordered_block_reduce(NodeId id, mlir::Value acc, mlir::Value used, int threads) {
  DType t = accumulator_type(id);
  mlir::Value slots = shared_array("ordered", i64_type(), threads);
  mlir::Value tid = linear_thread_id();
  shared_store(slots, i64_type(), tid, to_slot(t, acc));
  barrier();
  for (int step = 1; step < threads; step *= 2) {
    mlir::Value other = add(tid, i64(step));
    if_then(and_(eq(rem(tid, i64(2 * step)), i64(0)), lt(other, used)), [&] {
      mlir::Value left = from_slot(t, shared_load(slots, i64_type(), tid));
      mlir::Value right = from_slot(t, shared_load(slots, i64_type(), other));
      shared_store(slots, i64_type(), tid, to_slot(t, combine(id, left, right)));
    });
    barrier();
  }
  mlir::Value total = from_slot(t, shared_load(slots, i64_type(), i64(0)));
  barrier();
  return total;
}

bool CudaKernelEmitter::regroups(const std::vector<NodeId>& ids) const {
  for (NodeId id : ids) {
    const ir::Node& n = k_.body.node(id);
    const auto& r = n.as<ir::ReduceAttrs>();
    if (r.kind == ir::ReduceKind::Custom && !ir::combiner_regroups(r, n.dtype)) return false;
  }
  return true;
}

mlir::Value CudaKernelEmitter::ordered_row_reduce(NodeId id, const std::vector<mlir::Value>& kept, mlir::Value row,
                                                  const ir::Dim& length, int threads) {
  mlir::Value tid = linear_thread_id(), n = dim(length);
  // A fold that does not regroup is one chunk: thread 0 folds the row, the others nothing.
  mlir::Value chunks = i64(regroups({id}) ? threads : 1);
  Chunk c = chunk_of(i64(0), n, tid, chunks);
  mlir::Value acc = ordered_fold({id}, c, [&](mlir::Value j) {
    std::vector<mlir::Value> full = element_index(kept, row, j);
    return std::vector<mlir::Value>{to_accumulator(id, general_value(k_.body.node(id).inputs[0], full))};
  })[0];
  return ordered_block_reduce(id, acc, chunks_used(i64(0), n, chunks), threads);
}

// Elements per thread held in registers by a row-wise kernel's on-chip path (rows of up to
// threads * R elements). 16 for kernels whose values are at most 4 bytes (4096-element rows in
// 256-thread blocks: softmax and layernorm rows are mostly 1024 to 4096 wide), 8 where a value
// is 8 bytes (f64, i64: two registers each, so the same register footprint, rows up to 2048).
// The cost is registers, allocated for the whole kernel (short rows pay it too): ptxas gives
// examples/softmax.expr (f32) 128 registers per thread at R = 16 (64 at R = 8, 32 without the
// on-chip path), layernorm 168 (92 at R = 8), no spills: 2 (1) resident 256-thread blocks per
// SM, each thread with 16 independent loads in flight. R = 16 reads the common 4096-wide f32
// rows once; a GPU profile may favour 8 (rows up to 2048, twice the occupancy).
int CudaKernelEmitter::elements_per_thread() const {
  size_t widest = 1;
  for (const Node& n : k_.body.nodes) widest = std::max(widest, static_cast<size_t>(ir::dtype_size(n.dtype)));
  return widest >= 8 ? 8 : 16;
}

// One block per row of the kept dims (grid-stride over rows): each reduction in order (a
// later one may read an earlier one's result, as softmax's sum reads its max), then the outputs.
// A row of 1 to threads * R elements is held on chip (row_on_chip); longer rows, empty rows and
// kernels with a user combiner re-read the row from global memory in each pass (row_by_loops).
void CudaKernelEmitter::emit_block_per_row() {
  int threads = k_.schedule.cuda.block_x * k_.schedule.cuda.block_y;
  if (threads % kWarp != 0) throw ir::Error(fail_text("a reduction block of " + std::to_string(threads) + " threads"));
  ir::Shape kept_shape = kept_dims();
  begin_function(k_.name, {k_.schedule.cuda.block_x, k_.schedule.cuda.block_y, 1});
  using mlir::gpu::Dimension;
  mlir::Value length = dim(ir::num_elements(reduced_dims()));
  bool built_in = true;
  for (NodeId id : reduce_nodes()) built_in = built_in && k_.body.node(id).as<ir::ReduceAttrs>().kind != ir::ReduceKind::Custom;
  built_in = built_in && !ir::has_arg_reduction(k_);  // (value, index) pairs: row_by_loops
  int per_thread = elements_per_thread();
  loop(block_id(Dimension::x), dim(ir::num_elements(kept_shape)), grid_dim(Dimension::x), [&](mlir::Value row) {
    std::vector<mlir::Value> kept = delinearize(row, kept_shape);
    if (!built_in) {
      row_by_loops(kept, row, threads);
      return;
    }
    mlir::Value fits = and_(lt(i64(0), length), lt(length, i64(static_cast<int64_t>(threads) * per_thread + 1)));
    if_else(fits, [&] { row_on_chip(kept, row, threads, per_thread); }, [&] { row_by_loops(kept, row, threads); });
  });
  finish_function();
  ir::CudaLaunch& l = add_launch(k_.name);
  l.work[0] = ir::num_elements(kept_shape);
}

// One row, each pass a loop over the row that reads it from global memory.
void CudaKernelEmitter::row_by_loops(const std::vector<mlir::Value>& kept, mlir::Value row, int threads) {
  ir::Shape kept_shape = kept_dims();
  ir::Dim row_length = ir::num_elements(reduced_dims());
  mlir::Value tid = linear_thread_id();
  mlir::Value step = i64(threads);
  mlir::Value length = dim(row_length);
  for (NodeId id : reduce_nodes()) {
    if (k_.body.node(id).as<ir::ReduceAttrs>().kind == ir::ReduceKind::Custom) {
      reduced_[id] = finish(id, ordered_row_reduce(id, kept, row, row_length, threads), row_length);
      continue;
    }
    ir::ReduceKind kind = k_.body.node(id).as<ir::ReduceAttrs>().kind;
    if (kind == ir::ReduceKind::ArgMax || kind == ir::ReduceKind::ArgMin) {
      auto partial = fold_arg(id, tid, length, step, [&](mlir::Value j) {
        return general_value(k_.body.node(id).inputs[0], element_index(kept, row, j));
      });
      reduced_[id] = block_arg_reduce(id, partial, threads);
      continue;
    }
    auto fold = b_.create<mlir::scf::ForOp>(loc_, tid, length, step, mlir::ValueRange{accumulator_identity(id)});
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(fold.getBody());
      CacheScope scope(*this);
      std::vector<mlir::Value> full = element_index(kept, row, fold.getInductionVar());
      mlir::Value x = to_accumulator(id, general_value(k_.body.node(id).inputs[0], full));
      b_.create<mlir::scf::YieldOp>(loc_, combine(id, fold.getRegionIterArgs()[0], x));
    }
    reduced_[id] = finish(id, block_reduce(id, fold.getResult(0), threads), row_length);
  }
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    NodeId out = k_.body.outputs[o].node;
    const Node& n = k_.body.node(out);
    if (n.shape == k_.space) {
      loop(tid, length, step, [&](mlir::Value j) {
        std::vector<mlir::Value> full = element_index(kept, row, j);
        store(output_slot_[o], n.dtype, linearize(full, k_.space), general_value(out, full));
      });
    } else if (!(ir::num_elements(n.shape) == ir::num_elements(kept_shape))) {
      // Laid out like the space in another shape (never downstream of a reduction).
      loop(tid, length, step, [&](mlir::Value j) {
        mlir::Value linear = linearize(element_index(kept, row, j), k_.space);
        store(output_slot_[o], n.dtype, linear, general_value(out, delinearize(linear, n.shape)));
      });
    } else {
      // A reduced-space output: element `row` (cpu_compiles() keeps rows in order up to here).
      if_then(eq(tid, i64(0)), [&] { store(output_slot_[o], n.dtype, row, general_value(out, delinearize(row, n.shape))); });
    }
  }
}

// One row of 1 to threads * R elements (every reduction a built-in kind), held in registers:
// thread t owns elements j_r = t + r * threads, r < R (the order row_by_loops folds them in, so
// the results are bit-identical to it), each read at min(j_r, length - 1) so that every load
// is in bounds. Each element's index is built once and the same index Values are used in every
// pass, so general_value's cache hands every pass the values the first one loaded: the row is
// read from global memory once. Nothing on this straight-line path clears the cache
// (block_reduce's if_then restores it, see CacheScope). Element j_r counts in a fold, and is
// stored, only where j_r < length.
void CudaKernelEmitter::row_on_chip(const std::vector<mlir::Value>& kept, mlir::Value row, int threads, int per_thread) {
  ir::Shape kept_shape = kept_dims();
  ir::Dim row_length = ir::num_elements(reduced_dims());
  mlir::Value tid = linear_thread_id();
  mlir::Value length = dim(row_length);
  mlir::Value last = sub(length, i64(1));
  std::vector<mlir::Value> valid, unclamped;
  std::vector<std::vector<mlir::Value>> full;
  for (int r = 0; r < per_thread; ++r) {
    mlir::Value j = add(tid, i64(static_cast<int64_t>(r) * threads));
    valid.push_back(lt(j, length));
    unclamped.push_back(j);
    full.push_back(element_index(kept, row, min_i64(j, last)));
  }
  for (NodeId id : reduce_nodes()) {
    mlir::Value acc = accumulator_identity(id);
    for (int r = 0; r < per_thread; ++r) {
      mlir::Value x = to_accumulator(id, general_value(k_.body.node(id).inputs[0], full[r]));
      acc = b_.create<mlir::arith::SelectOp>(loc_, valid[r], combine(id, acc, x), acc);
    }
    reduced_[id] = finish(id, block_reduce(id, acc, threads), row_length);
  }
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    NodeId out = k_.body.outputs[o].node;
    const Node& n = k_.body.node(out);
    if (n.shape == k_.space || !(ir::num_elements(n.shape) == ir::num_elements(kept_shape))) {
      for (int r = 0; r < per_thread; ++r) {
        // The value is computed outside the branch (from the registers: the cache is emptied
        // inside a branch), on the clamped element where j_r is past the row. It is stored at
        // element j_r itself (the same element where j_r is valid): an address a constant
        // offset from the thread's first, so that the clamped offsets die with the loads
        // (softmax: 128 registers instead of 152).
        mlir::Value v = n.shape == k_.space ? general_value(out, full[r])
                                            : general_value(out, delinearize(linearize(full[r], k_.space), n.shape));
        mlir::Value linear = linearize(element_index(kept, row, unclamped[r]), k_.space);
        if_then(valid[r], [&] { store(output_slot_[o], n.dtype, linear, v); });
      }
    } else {
      if_then(eq(tid, i64(0)), [&] { store(output_slot_[o], n.dtype, row, general_value(out, delinearize(row, n.shape))); });
    }
  }
}

// A reduction to single elements in two launches. `NAME_partials`: block b folds elements
// b*T + t, stepping by the whole grid, combines its threads and writes one partial per
// reduction (block 0 also writes the block count). `NAME`: one block folds the partials in
// block order, finishes (mean's division, the cast) and writes the outputs.
void CudaKernelEmitter::emit_two_stage() {
  int threads = k_.schedule.cuda.block_x * k_.schedule.cuda.block_y;
  if (threads % kWarp != 0) throw ir::Error(fail_text("a reduction block of " + std::to_string(threads) + " threads"));
  std::vector<NodeId> ids = reduce_nodes();
  ir::Shape reduced_shape = reduced_dims();
  ir::Dim length = ir::num_elements(reduced_shape);
  std::vector<mlir::Value> kept(kept_dims().size());
  bool ordered = false;
  for (NodeId id : ids) ordered = ordered || k_.body.node(id).as<ir::ReduceAttrs>().kind == ir::ReduceKind::Custom;
  const bool serial = ordered && !regroups(ids);  // one chunk: block 0's thread 0 folds it all
  using mlir::gpu::Dimension;
  auto slot = [&](size_t q, mlir::Value block) { return add(i64(1 + static_cast<int64_t>(q) * kMaxPartials), block); };
  mlir::Value scratch;

  begin_function(k_.name + "_partials", {k_.schedule.cuda.block_x, k_.schedule.cuda.block_y, 1});
  for (mlir::Value& v : kept) v = i64(0);
  scratch = base_[scratch_param_];
  mlir::Value tid = linear_thread_id(), block = block_id(Dimension::x);
  // Blocks past kMaxPartials (a launch that ignored max_grid) have no slot: they do nothing.
  mlir::Value blocks = min_i64(grid_dim(Dimension::x), i64(kMaxPartials));
  if_then(lt(block, blocks), [&] {
    std::vector<mlir::Value> totals;
    auto element = [&](mlir::Value j) {
      std::vector<mlir::Value> full = element_index(kept, i64(0), j), x;
      for (NodeId id : ids) x.push_back(to_accumulator(id, general_value(k_.body.node(id).inputs[0], full)));
      return x;
    };
    if (ordered) {
      mlir::Value parts = serial ? i64(1) : blocks;
      int chunks = serial ? 1 : threads;
      Chunk mine = chunk_of(i64(0), dim(length), block, parts);
      Chunk c = chunk_of(mine.begin, mine.end, tid, i64(chunks));
      std::vector<mlir::Value> acc = ordered_fold(ids, c, element);
      mlir::Value used = chunks_used(mine.begin, mine.end, i64(chunks));
      for (size_t q = 0; q < ids.size(); ++q) totals.push_back(ordered_block_reduce(ids[q], acc[q], used, threads));
    } else {
      std::vector<mlir::Value> acc = strided_fold(ids, add(mul(block, i64(threads)), tid), dim(length),
                                                  mul(blocks, i64(threads)), element);
      for (size_t q = 0; q < ids.size(); ++q) totals.push_back(block_reduce(ids[q], acc[q], threads));
    }
    for (size_t q = 0; q < ids.size(); ++q) {
      if_then(eq(tid, i64(0)), [&] {
        b_.create<mlir::LLVM::StoreOp>(loc_, to_slot(accumulator_type(ids[q]), totals[q]), element_address(scratch, i64_type(), slot(q, block)), 8);
      });
    }
    if_then(and_(eq(tid, i64(0)), eq(block, i64(0))),
            [&] { b_.create<mlir::LLVM::StoreOp>(loc_, blocks, element_address(scratch, i64_type(), i64(0)), 8); });
  });
  finish_function();
  ir::CudaLaunch& first = add_launch(k_.name + "_partials");
  first.work[0] = length;
  first.work_per_block[0] = static_cast<int64_t>(threads) * std::max(1, k_.schedule.cuda.items_per_thread);
  first.max_grid[0] = kMaxPartials;

  begin_function(k_.name, {k_.schedule.cuda.block_x, k_.schedule.cuda.block_y, 1});
  scratch = base_[scratch_param_];
  {
    mlir::Value tid = linear_thread_id();
    mlir::Value blocks = b_.create<mlir::LLVM::LoadOp>(loc_, i64_type(), element_address(scratch, i64_type(), i64(0)), 8);
    blocks = min_i64(blocks, i64(kMaxPartials));
    auto partial = [&](size_t q, mlir::Value b) {
      mlir::Value bits = b_.create<mlir::LLVM::LoadOp>(loc_, i64_type(), element_address(scratch, i64_type(), slot(q, b)), 8);
      return from_slot(accumulator_type(ids[q]), bits);
    };
    if (serial) {
      for (size_t q = 0; q < ids.size(); ++q) reduced_[ids[q]] = finish(ids[q], partial(q, i64(0)), length);
    } else if (ordered) {
      // The partials of the blocks whose chunks are not empty (block 0's always counts: it
      // is the identity of an empty tensor), in block order.
      mlir::Value n = dim(length);
      mlir::Value per_block = max_i64(i64(1), div(add(n, sub(blocks, i64(1))), blocks));
      mlir::Value used_blocks = max_i64(i64(1), div(add(n, sub(per_block, i64(1))), per_block));
      Chunk c = chunk_of(i64(0), used_blocks, tid, i64(threads));
      mlir::Value used = chunks_used(i64(0), used_blocks, i64(threads));
      for (size_t q = 0; q < ids.size(); ++q) {
        mlir::Value acc = ordered_fold({ids[q]}, c, [&](mlir::Value b) { return std::vector<mlir::Value>{partial(q, b)}; })[0];
        reduced_[ids[q]] = finish(ids[q], ordered_block_reduce(ids[q], acc, used, threads), length);
      }
    } else {
      for (size_t q = 0; q < ids.size(); ++q) {
        NodeId id = ids[q];
        auto fold = b_.create<mlir::scf::ForOp>(loc_, tid, blocks, i64(threads), mlir::ValueRange{accumulator_identity(id)});
        {
          mlir::OpBuilder::InsertionGuard guard(b_);
          b_.setInsertionPointToStart(fold.getBody());
          b_.create<mlir::scf::YieldOp>(loc_, combine(id, fold.getRegionIterArgs()[0], partial(q, fold.getInductionVar())));
        }
        reduced_[id] = finish(id, block_reduce(id, fold.getResult(0), threads), length);
      }
    }
    if_then(eq(tid, i64(0)), [&] {
      for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
        NodeId out = k_.body.outputs[o].node;
        const Node& n = k_.body.node(out);
        store(output_slot_[o], n.dtype, i64(0), general_value(out, std::vector<mlir::Value>(n.shape.size(), i64(0))));
      }
    });
  }
  finish_function();
  add_launch(k_.name);
}

// ---- kernels whose outputs reorder their rows: element by element ----
// Each thread computes output elements (grid-stride), each reduction or matmul element the
// element needs folded right there by the thread, in the interpreter's order (a reduction
// read by another one is folded again for each of its elements). Slow, but it takes any
// view after a reduction or matmul; the kernels the passes make rarely need it.
void CudaKernelEmitter::emit_per_element() {
  int block = 256;
  begin_function(k_.name, {block, 1, 1});
  using mlir::gpu::Dimension;
  per_element_ = true;
  mlir::Value first = add(mul(block_id(Dimension::x), block_dim(Dimension::x)), thread_id(Dimension::x));
  mlir::Value stride = mul(grid_dim(Dimension::x), block_dim(Dimension::x));
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    const Node& n = k_.body.node(k_.body.outputs[o].node);
    loop(first, dim(ir::num_elements(n.shape)), stride, [&](mlir::Value i) {
      store(output_slot_[o], n.dtype, i, general_value(k_.body.outputs[o].node, delinearize(i, n.shape)));
    });
  }
  finish_function();
  ir::CudaLaunch& l = add_launch(k_.name);
  l.work[0] = ir::num_elements(k_.space);  // no output has more elements
  l.work_per_block[0] = block;
  l.max_grid[0] = 65536;
}

// Reduce node `id` at index `idx` of its shape, folded by this thread.
mlir::Value CudaKernelEmitter::reduce_here(NodeId id, const std::vector<mlir::Value>& idx) {
  const Node& n = k_.body.node(id);
  const ir::ReduceAttrs& r = n.as<ir::ReduceAttrs>();
  const ir::Shape& in_shape = k_.body.node(n.inputs[0]).shape;
  ir::Shape reduced_shape;
  for (int a : r.axes) reduced_shape.push_back(in_shape[static_cast<size_t>(a)]);
  ir::Dim length = ir::num_elements(reduced_shape);
  // The input's index for position j of the reduced axes (row-major) at this output index.
  auto input_index = [&](mlir::Value j) {
    std::vector<mlir::Value> reduced = delinearize(j, reduced_shape), in_idx;
    size_t next_kept = 0, next_reduced = 0;
    for (size_t d = 0; d < in_shape.size(); ++d) {
      bool is_reduced = std::find(r.axes.begin(), r.axes.end(), static_cast<int>(d)) != r.axes.end();
      if (is_reduced) {
        in_idx.push_back(reduced[next_reduced++]);
        if (r.keepdims) ++next_kept;  // the reduced dim's place (index 0) in the result
      } else {
        in_idx.push_back(idx[next_kept++]);
      }
    }
    return in_idx;
  };
  if (r.kind == ir::ReduceKind::ArgMax || r.kind == ir::ReduceKind::ArgMin)
    return fold_arg(id, i64(0), dim(length), i64(1), [&](mlir::Value j) { return general_value(n.inputs[0], input_index(j)); })
        .second;
  auto fold = b_.create<mlir::scf::ForOp>(loc_, i64(0), dim(length), i64(1), mlir::ValueRange{accumulator_identity(id)});
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(fold.getBody());
    clear_caches();
    mlir::Value x = to_accumulator(id, general_value(n.inputs[0], input_index(fold.getInductionVar())));
    b_.create<mlir::scf::YieldOp>(loc_, combine(id, fold.getRegionIterArgs()[0], x));
    clear_caches();
  }
  return finish(id, fold.getResult(0), length);
}

}  // namespace fuse::codegen
