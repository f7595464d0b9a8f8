// CUDA matmuls: SharedTileMatmul, and the dot products of PerElement kernels.
#include "codegen/cuda/emitter.h"

#include <algorithm>

#include "mlir/Dialect/Math/IR/Math.h"

namespace fuse::codegen {

using ir::DType;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

// Matmul node `id` at index `idx` of its shape, one dot product in k order, in f64 or i64.
mlir::Value CudaKernelEmitter::matmul_here(NodeId id, const std::vector<mlir::Value>& idx) {
  const Node& n = k_.body.node(id);
  NodeId a_id = n.inputs[0], b_id = n.inputs[1];
  const ir::Shape &a_shape = k_.body.node(a_id).shape, &b_shape = k_.body.node(b_id).shape;
  bool a_matrix = a_shape.size() > 1, b_matrix = b_shape.size() > 1;
  size_t batch_rank = n.shape.size() - (a_matrix ? 1 : 0) - (b_matrix ? 1 : 0);
  std::vector<mlir::Value> batch(idx.begin(), idx.begin() + static_cast<long>(batch_rank));
  mlir::Value m = a_matrix ? idx[batch_rank] : i64(0), col = b_matrix ? idx.back() : i64(0);
  DType acc_type = ir::is_float(n.dtype) ? DType::F64 : DType::I64;
  auto fold = b_.create<mlir::scf::ForOp>(loc_, i64(0), dim(a_shape.back()), i64(1),
                                          mlir::ValueRange{scalar_.constant(acc_type, 0, 0, 1)});
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(fold.getBody());
    clear_caches();
    mlir::Value k = fold.getInductionVar();
    std::vector<mlir::Value> a_idx = operand_index_of(a_shape, batch, a_matrix ? std::vector<mlir::Value>{m, k} : std::vector<mlir::Value>{k});
    std::vector<mlir::Value> b_idx = operand_index_of(b_shape, batch, b_matrix ? std::vector<mlir::Value>{k, col} : std::vector<mlir::Value>{k});
    auto operand = [&](NodeId o, const std::vector<mlir::Value>& at) {
      mlir::Value v = scalar_.cast(general_value(o, at), k_.body.node(o).dtype, n.dtype, 1);
      return scalar_.cast(v, n.dtype, acc_type, 1);
    };
    mlir::Value product = ir::is_float(n.dtype) ? mlir::Value(b_.create<mlir::arith::MulFOp>(loc_, operand(a_id, a_idx), operand(b_id, b_idx)))
                                                : mul(operand(a_id, a_idx), operand(b_id, b_idx));
    mlir::Value sum = ir::is_float(n.dtype) ? mlir::Value(b_.create<mlir::arith::AddFOp>(loc_, fold.getRegionIterArgs()[0], product))
                                            : add(fold.getRegionIterArgs()[0], product);
    b_.create<mlir::scf::YieldOp>(loc_, sum);
    clear_caches();
  }
  return scalar_.cast(fold.getResult(0), acc_type, n.dtype, 1);
}

// A matmul operand's index for batch index `batch` (broadcast from the right) and its matrix index.
std::vector<mlir::Value> CudaKernelEmitter::operand_index_of(const ir::Shape& shape, const std::vector<mlir::Value>& batch,
                                          const std::vector<mlir::Value>& matrix) {
  size_t own = shape.size() - matrix.size();
  std::vector<mlir::Value> idx;
  for (size_t d = 0; d < own; ++d) idx.push_back(shape[d] == ir::Dim(1) ? i64(0) : batch[batch.size() - own + d]);
  idx.insert(idx.end(), matrix.begin(), matrix.end());
  return idx;
}

// ---- matmul ----
// C[batch, m, n] = sum_k A[batch, m, k] * B[batch, k, n], A and B cast to the matmul's dtype
// and multiplied and summed in it (fused multiply-adds for floats). A
// block of TX x TY threads computes a tile of (TY*R) x (TX*C) outputs, R x C per thread
// (rows ty*R + i, columns tx*C + j); per step of `depth`, the threads load the A tile
// (k-major: As[k][row]) and the B tile (Bs[k][col]) with the prologues applied, out-of-range
// elements as 0, then each thread accumulates its R x C products.
void CudaKernelEmitter::emit_matmul() {
  const ir::CudaSchedule& s = k_.schedule.cuda;
  const int tx_count = s.block_x, ty_count = s.block_y, rows = s.thread_rows, cols = s.thread_cols;
  const int64_t tile_m = static_cast<int64_t>(ty_count) * rows, tile_n = static_cast<int64_t>(tx_count) * cols;
  const int64_t depth = s.tile_k, threads = static_cast<int64_t>(tx_count) * ty_count;
  if (tile_m <= 0 || tile_n <= 0 || depth <= 0 || (tile_m * depth) % threads || (tile_n * depth) % threads)
    throw ir::Error(fail_text("matmul schedule without whole tiles per thread"));
  NodeId mm = -1;
  for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
    if (k_.body.node(id).kind == OpKind::Matmul) mm = id;
  if (mm < 0) throw ir::Error(fail_text("a matmul kernel without a matmul"));
  const Node& mm_node = k_.body.node(mm);
  NodeId a_id = mm_node.inputs[0], b_id = mm_node.inputs[1];
  const ir::Shape &a_shape = k_.body.node(a_id).shape, &b_shape = k_.body.node(b_id).shape;
  bool a_matrix = a_shape.size() > 1, b_matrix = b_shape.size() > 1;
  ir::Dim m_dim = a_matrix ? a_shape[a_shape.size() - 2] : ir::Dim(1), k_dim = a_shape.back();
  ir::Dim n_dim = b_matrix ? b_shape.back() : ir::Dim(1);
  size_t batch_rank = k_.space.size() - (a_matrix ? 1 : 0) - (b_matrix ? 1 : 0);
  ir::Shape batch_shape(k_.space.begin(), k_.space.begin() + static_cast<long>(batch_rank));
  // Accumulated in the matmul's own dtype, as cuBLAS does and as the CPU's blocked matmul does:
  // f32 in f32 FMAs (f64 accumulators needed 255 registers and spilled), integers wrapping
  // exactly like the interpreter's i64 sums cast back.
  DType acc_type = mm_node.dtype;
  mlir::Type acc = scalar_.scalar_type(acc_type);
  bool floating = ir::is_float(acc_type);

  begin_function(k_.name, {tx_count, ty_count, 1});
  using mlir::gpu::Dimension;
  mlir::Value a_tile = shared_array("a", acc, depth * tile_m), b_tile = shared_array("b", acc, depth * tile_n);
  mlir::Value size_m = dim(m_dim), size_n = dim(n_dim), size_k = dim(k_dim);
  mlir::Value tx = thread_id(Dimension::x), ty = thread_id(Dimension::y);
  mlir::Value tid = add(mul(ty, i64(tx_count)), tx);
  auto operand_value = [&](NodeId id, const std::vector<mlir::Value>& idx) {
    mlir::Value v = scalar_.cast(general_value(id, idx), k_.body.node(id).dtype, mm_node.dtype, 1);
    return scalar_.cast(v, mm_node.dtype, acc_type, 1);
  };
  loop(block_id(Dimension::z), dim(ir::num_elements(batch_shape)), grid_dim(Dimension::z), [&](mlir::Value z) {
    std::vector<mlir::Value> batch = delinearize(z, batch_shape);
    loop(block_id(Dimension::y), ceil_div(size_m, tile_m), grid_dim(Dimension::y), [&](mlir::Value y) {
      mlir::Value m0 = mul(y, i64(tile_m));
      loop(block_id(Dimension::x), ceil_div(size_n, tile_n), grid_dim(Dimension::x), [&](mlir::Value x) {
        mlir::Value n0 = mul(x, i64(tile_n));
        std::vector<mlir::Value> init(static_cast<size_t>(rows * cols), scalar_.constant(acc_type, 0, 0, 1));
        auto steps = b_.create<mlir::scf::ForOp>(loc_, i64(0), size_k, i64(depth), init);
        {
          mlir::OpBuilder::InsertionGuard guard(b_);
          b_.setInsertionPointToStart(steps.getBody());
          clear_caches();
          mlir::Value k0 = steps.getInductionVar();
          for (int64_t e0 = 0; e0 < tile_m * depth; e0 += threads) {
            mlir::Value e = add(tid, i64(e0));
            mlir::Value row = div(e, i64(depth)), kk = rem(e, i64(depth));
            mlir::Value m = add(m0, row), k = add(k0, kk);
            mlir::Value v = if_value(and_(lt(m, size_m), lt(k, size_k)), [&] {
              std::vector<mlir::Value> matrix = a_matrix ? std::vector<mlir::Value>{m, k} : std::vector<mlir::Value>{k};
              return operand_value(a_id, operand_index_of(a_shape, batch, matrix));
            }, scalar_.constant(acc_type, 0, 0, 1));
            shared_store(a_tile, acc, add(mul(kk, i64(tile_m)), row), v);
          }
          for (int64_t e0 = 0; e0 < tile_n * depth; e0 += threads) {
            mlir::Value e = add(tid, i64(e0));
            mlir::Value kk = div(e, i64(tile_n)), col = rem(e, i64(tile_n));
            mlir::Value n = add(n0, col), k = add(k0, kk);
            mlir::Value v = if_value(and_(lt(n, size_n), lt(k, size_k)), [&] {
              std::vector<mlir::Value> matrix = b_matrix ? std::vector<mlir::Value>{k, n} : std::vector<mlir::Value>{k};
              return operand_value(b_id, operand_index_of(b_shape, batch, matrix));
            }, scalar_.constant(acc_type, 0, 0, 1));
            shared_store(b_tile, acc, add(mul(kk, i64(tile_n)), col), v);
          }
          barrier();
          mlir::Value row_base = mul(ty, i64(rows)), col_base = mul(tx, i64(cols));
          // A loop over the tile's depth, not unrolled here: unrolled, LLVM hoisted the shared
          // loads of every k above the FMAs (128 values live next to the 64 sums: 255
          // registers and spills).
          auto depth_loop = b_.create<mlir::scf::ForOp>(loc_, i64(0), i64(depth), i64(1), steps.getRegionIterArgs());
          {
            mlir::OpBuilder::InsertionGuard inner(b_);
            b_.setInsertionPointToStart(depth_loop.getBody());
            mlir::Value kk = depth_loop.getInductionVar();
            std::vector<mlir::Value> sums(depth_loop.getRegionIterArgs().begin(), depth_loop.getRegionIterArgs().end());
            // A's column of R values, then B's values one at a time (fewer live registers).
            std::vector<mlir::Value> av;
            for (int i = 0; i < rows; ++i) av.push_back(shared_load(a_tile, acc, add(mul(kk, i64(tile_m)), add(row_base, i64(i)))));
            for (int j = 0; j < cols; ++j) {
              mlir::Value bj = shared_load(b_tile, acc, add(mul(kk, i64(tile_n)), add(col_base, i64(j))));
              for (int i = 0; i < rows; ++i) {
                mlir::Value& sum = sums[static_cast<size_t>(i * cols + j)];
                sum = floating ? mlir::Value(b_.create<mlir::math::FmaOp>(loc_, av[i], bj, sum)) : add(sum, mul(av[i], bj));
              }
            }
            b_.create<mlir::scf::YieldOp>(loc_, sums);
          }
          barrier();  // the next step overwrites the tiles
          b_.create<mlir::scf::YieldOp>(loc_, depth_loop.getResults());
          clear_caches();
        }
        // The epilogue, output by output of this thread's R x C.
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < cols; ++j) {
            mlir::Value m = add(m0, add(mul(ty, i64(rows)), i64(i))), n = add(n0, add(mul(tx, i64(cols)), i64(j)));
            if_then(and_(lt(m, size_m), lt(n, size_n)), [&] {
              reduced_[mm] = scalar_.cast(steps.getResult(static_cast<unsigned>(i * cols + j)), acc_type, mm_node.dtype, 1);
              std::vector<mlir::Value> idx = batch;
              if (a_matrix) idx.push_back(m);
              if (b_matrix) idx.push_back(n);
              for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
                NodeId out = k_.body.outputs[o].node;
                store(output_slot_[o], k_.body.node(out).dtype, linearize(idx, k_.space), general_value(out, idx));
              }
            });
          }
      });
    });
  });
  finish_function();
  ir::CudaLaunch& l = add_launch(k_.name);
  l.work = {n_dim, m_dim, ir::num_elements(batch_shape)};
  l.work_per_block = {tile_n, tile_m, 1};
  l.max_grid = {2147483647, 65535, 65535};
}

}  // namespace fuse::codegen
