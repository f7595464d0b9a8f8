// CUDA loop forms without reductions: GridStride and SharedTileTranspose.
#include "codegen/cuda/emitter.h"

#include <algorithm>

#include "mlir/Dialect/Math/IR/Math.h"

namespace fuse::codegen {

using ir::DType;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

// Node `id` at elements [base, base + lanes) of a contiguous kernel, one value per lane.
std::vector<mlir::Value> CudaKernelEmitter::contiguous_lanes(NodeId id, mlir::Value base, int lanes, std::map<NodeId, std::vector<mlir::Value>>& cache) {
  auto it = cache.find(id);
  if (it != cache.end()) return it->second;
  const Node& n = k_.body.node(id);
  std::vector<mlir::Value> v;
  if (n.kind == OpKind::BroadcastTo) {
    const Node& in = k_.body.node(n.inputs[0]);
    v.assign(lanes, general_value(n.inputs[0], std::vector<mlir::Value>(in.shape.size(), i64(0))));
  } else if (n.kind == OpKind::Elementwise) {
    std::vector<std::vector<mlir::Value>> args;
    for (NodeId in : n.inputs) args.push_back(contiguous_lanes(in, base, lanes, cache));
    for (int l = 0; l < lanes; ++l) {
      std::vector<mlir::Value> lane_args;
      for (const auto& a : args) lane_args.push_back(a[l]);
      v.push_back(scalar_.scalar_fn(n.as<ir::ElementwiseAttrs>().body, lane_args, 1));
    }
  } else if (lanes > 1) {
    v = load_lanes(input_slot_.at(id), n.dtype, base, lanes);
  } else {
    v.push_back(load(input_slot_.at(id), n.dtype, base));
  }
  cache[id] = v;
  return v;
}

void CudaKernelEmitter::emit_contiguous(mlir::Value base, int lanes) {
  std::map<NodeId, std::vector<mlir::Value>> cache;
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    NodeId out = k_.body.outputs[o].node;
    std::vector<mlir::Value> v = contiguous_lanes(out, base, lanes, cache);
    if (lanes > 1) store_lanes(output_slot_[o], k_.body.node(out).dtype, base, v);
    else store(output_slot_[o], k_.body.node(out).dtype, base, v[0]);
  }
}

// Outputs may differ in shape from the space (same element count): each is evaluated at its
// own index of the same row-major position.
void CudaKernelEmitter::emit_general(mlir::Value linear) {
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    const Node& n = k_.body.node(k_.body.outputs[o].node);
    store(output_slot_[o], n.dtype, linear, general_value(k_.body.outputs[o].node, delinearize(linear, n.shape)));
  }
}

// Lanes of a 16-byte vector of the widest element the kernel moves.
int CudaKernelEmitter::vector_lanes() const {
  size_t widest = 1;
  for (const Node& n : k_.body.nodes)
    if (n.kind == OpKind::Input || n.kind == OpKind::Constant) widest = std::max(widest, ir::dtype_size(n.dtype));
  for (const ir::GraphOutput& o : k_.body.outputs) widest = std::max(widest, ir::dtype_size(k_.body.node(o.node).dtype));
  return std::max(1, k_.schedule.cuda.vector_bytes / static_cast<int>(widest));
}

void CudaKernelEmitter::emit_elementwise() {
  int block = k_.schedule.cuda.block_x * k_.schedule.cuda.block_y;
  begin_function(k_.name, {block, 1, 1});
  using mlir::gpu::Dimension;
  mlir::Value n = dim(ir::num_elements(k_.space));
  mlir::Value first = add(mul(block_id(Dimension::x), block_dim(Dimension::x)), thread_id(Dimension::x));
  mlir::Value stride = mul(grid_dim(Dimension::x), block_dim(Dimension::x));
  int lanes = (k_.schedule.form == ir::LoopForm::GridStride && ir::elementwise_contiguous(k_)) ? vector_lanes() : 1;
  if (!(k_.schedule.form == ir::LoopForm::GridStride && ir::elementwise_contiguous(k_))) {
    loop(first, n, stride, [&](mlir::Value i) { emit_general(i); });
  } else if (lanes == 1) {
    loop(first, n, stride, [&](mlir::Value i) { emit_contiguous(i, 1); });
  } else {
    // Vectors only where every pointer is 16-byte aligned (cuMemAlloc's are; a sub-allocated
    // buffer may not be): else element by element.
    mlir::Value aligned = b_.create<mlir::arith::ConstantIntOp>(loc_, 1, 1);
    for (mlir::Value base : base_) {
      mlir::Value address = b_.create<mlir::LLVM::PtrToIntOp>(loc_, i64_type(), base);
      aligned = and_(aligned, eq(b_.create<mlir::arith::AndIOp>(loc_, address, i64(15)), i64(0)));
    }
    auto branch = b_.create<mlir::scf::IfOp>(loc_, aligned, /*withElseRegion=*/true);
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(&branch.getThenRegion().front());
      clear_caches();
      mlir::Value vectors = div(n, i64(lanes));
      loop(first, vectors, stride, [&](mlir::Value v) { emit_contiguous(mul(v, i64(lanes)), lanes); });
      loop(add(mul(vectors, i64(lanes)), first), n, stride, [&](mlir::Value i) { emit_contiguous(i, 1); });
      b_.setInsertionPointToStart(&branch.getElseRegion().front());
      clear_caches();
      loop(first, n, stride, [&](mlir::Value i) { emit_contiguous(i, 1); });
    }
    clear_caches();
  }
  finish_function();
  ir::CudaLaunch& l = add_launch(k_.name);
  l.work[0] = ir::num_elements(k_.space);
  l.work_per_block[0] = static_cast<int64_t>(block) * lanes * std::max(1, k_.schedule.cuda.items_per_thread);
  l.max_grid[0] = 65536;  // grid-stride: more blocks than this only add scheduling
}

// ---- transposes: 32x32 tiles through shared memory ----
// Tile (a, b): `a` the output's innermost axis (coalesced stores), `b` the output axis that
// carries the input's innermost axis (coalesced loads). Threads (tx, ty) of a 32x8 block load
// out[b = b0 + tx, a = a0 + ty + 8r] into tile[ty + 8r][tx], then store tile[tx][ty + 8r] to
// out[a = a0 + tx, b = b0 + ty + 8r]. The 33-column rows put a tile column in 32 banks.
void CudaKernelEmitter::emit_transpose() {
  const ir::CudaSchedule& s = k_.schedule.cuda;
  int64_t tile = s.tile_rows > 0 ? s.tile_rows : 32, pitch = s.shared_cols > 0 ? s.shared_cols : tile + 1;
  int64_t rows_per_pass = s.block_y > 0 ? s.block_y : 8;
  NodeId out = k_.body.outputs[0].node;
  const Node& out_node = k_.body.node(out);
  const ir::Shape& shape = out_node.shape;
  int rank = static_cast<int>(shape.size());
  int a = rank - 1, bx = ir::transpose_inner_axis(k_);
  ir::Shape batch_shape;
  for (int d = 0; d < rank; ++d)
    if (d != a && d != bx) batch_shape.push_back(shape[d]);
  begin_function(k_.name, {static_cast<int>(tile), static_cast<int>(rows_per_pass), 1});
  using mlir::gpu::Dimension;
  mlir::Type element = memory_type(out_node.dtype);
  mlir::Value shared = shared_array("tile", element, tile * pitch);
  mlir::Value size_a = dim(shape[a]), size_b = dim(shape[bx]);
  mlir::Value tiles_a = ceil_div(size_a, tile), tiles_b = ceil_div(size_b, tile);
  mlir::Value tiles_y = mul(tiles_b, dim(ir::num_elements(batch_shape)));
  mlir::Value tx = thread_id(Dimension::x), ty = thread_id(Dimension::y);
  loop(block_id(Dimension::y), tiles_y, grid_dim(Dimension::y), [&](mlir::Value y) {
    mlir::Value b0 = mul(rem(y, tiles_b), i64(tile));
    std::vector<mlir::Value> batch = delinearize(div(y, tiles_b), batch_shape);
    loop(block_id(Dimension::x), tiles_a, grid_dim(Dimension::x), [&](mlir::Value x) {
      mlir::Value a0 = mul(x, i64(tile));
      auto index = [&](mlir::Value at_a, mlir::Value at_b) {
        std::vector<mlir::Value> idx;
        size_t next = 0;
        for (int d = 0; d < rank; ++d) idx.push_back(d == a ? at_a : d == bx ? at_b : batch[next++]);
        return idx;
      };
      for (int64_t r = 0; r < tile; r += rows_per_pass) {
        mlir::Value row = add(ty, i64(r));
        mlir::Value at_a = add(a0, row), at_b = add(b0, tx);
        if_then(and_(lt(at_a, size_a), lt(at_b, size_b)), [&] {
          mlir::Value v = general_value(out, index(at_a, at_b));
          if (out_node.dtype == DType::Bool) v = b_.create<mlir::arith::ExtUIOp>(loc_, b_.getI8Type(), v);
          shared_store(shared, element, add(mul(row, i64(pitch)), tx), v);
        });
      }
      barrier();
      for (int64_t r = 0; r < tile; r += rows_per_pass) {
        mlir::Value row = add(ty, i64(r));
        mlir::Value at_a = add(a0, tx), at_b = add(b0, row);
        if_then(and_(lt(at_a, size_a), lt(at_b, size_b)), [&] {
          mlir::Value v = shared_load(shared, element, add(mul(tx, i64(pitch)), row));
          mlir::Value offset = linearize(index(at_a, at_b), shape);
          unsigned align = static_cast<unsigned>(ir::dtype_size(out_node.dtype));
          // The other outputs at the same row-major position: a reshape of the first takes
          // the tile's value; any other is computed there.
          for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
            NodeId other = k_.body.outputs[o].node;
            const Node& n = k_.body.node(other);
            if (o == 0 || reshape_of(other, out))
              b_.create<mlir::LLVM::StoreOp>(loc_, v, element_address(base_[output_slot_[o]], element, offset), align);
            else
              store(output_slot_[o], n.dtype, offset, general_value(other, delinearize(offset, n.shape)));
          }
        });
      }
      barrier();  // the next tile overwrites the shared tile
    });
  });
  finish_function();
  ir::CudaLaunch& l = add_launch(k_.name);
  l.work[0] = shape[a];
  l.work_per_block[0] = tile;
  l.work[1] = shape[bx] * ir::num_elements(batch_shape);
  l.work_per_block[1] = tile;
  l.max_grid[1] = 65535;
}

// Whether node `id` is node `of` reshaped (the same elements in the same row-major order).
bool CudaKernelEmitter::reshape_of(NodeId id, NodeId of) const {
  const Node& n = k_.body.node(id);
  if (id == of) return true;
  bool reshape = n.kind == OpKind::Reshape || n.kind == OpKind::ExpandDims || n.kind == OpKind::Squeeze;
  return reshape && n.dtype == k_.body.node(of).dtype && reshape_of(n.inputs[0], of);
}

}  // namespace fuse::codegen
