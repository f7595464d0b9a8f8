// ScanRows on CUDA (codegen/cuda/emitter.h): a thread per short row, a block per long row.
#include "codegen/cuda/emitter.h"

namespace fuse::codegen {

namespace {

// Rows of at least this many elements fill a 256-thread block's first tile: a block scans each.
constexpr int64_t kBlockScanLength = 256;

}  // namespace

void CudaKernelEmitter::emit_scan_rows() {
  int block = k_.schedule.cuda.block_x;
  begin_function(k_.name, {block, 1, 1});
  using mlir::gpu::Dimension;
  const Node& n = k_.body.node(scan_node());
  mlir::Value length = dim(n.shape[n.as<ir::ScanAttrs>().axis]);
  mlir::Value rows = dim(ir::parallel_iterations(k_));
  ScanStore store_output = [&](size_t o, mlir::Value at, mlir::Value v) {
    store(output_slot_[o], k_.body.node(k_.body.outputs[o].node).dtype, at, v);
  };
  if_else(
      lt(length, i64(std::min<int64_t>(kBlockScanLength, block))),
      [&] {
        mlir::Value first = add(mul(block_id(Dimension::x), block_dim(Dimension::x)), thread_id(Dimension::x));
        mlir::Value stride = mul(grid_dim(Dimension::x), block_dim(Dimension::x));
        loop(first, rows, stride, [&](mlir::Value row) { scan_row(row, store_output); });
      },
      [&] {
        loop(block_id(Dimension::x), rows, grid_dim(Dimension::x),
             [&](mlir::Value row) { block_scan_row(row, block, store_output); });
      });
  finish_function();
  ir::CudaLaunch& l = add_launch(k_.name);
  l.work[0] = ir::parallel_iterations(k_);
  l.work_per_block[0] = 1;
  l.max_grid[0] = 65536;
}

void CudaKernelEmitter::block_scan_row(mlir::Value row, int threads, const ScanStore& store) {
  const Node& n = k_.body.node(scan_node());
  mlir::Value length = dim(n.shape[n.as<ir::ScanAttrs>().axis]);
  DType acc_type = scan_accumulator_type();
  int warps = std::max(1, threads / kWarp);
  mlir::Value slots = shared_array("scan_warps", i64_type(), kWarp);
  mlir::Value tid = linear_thread_id(), lane = rem(tid, i64(kWarp)), warp = div(tid, i64(kWarp));
  auto tiles = b_.create<mlir::scf::ForOp>(loc_, i64(0), length, i64(threads), mlir::ValueRange{scan_identity()});
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(tiles.getBody());
  CacheScope scope(*this);
  mlir::Value carry = tiles.getRegionIterArgs()[0];
  mlir::Value j = add(tiles.getInductionVar(), tid);
  std::vector<mlir::Value> idx = scan_index(row, j);
  mlir::Value in_row = lt(j, length);
  // Lanes past the row's end hold the identity: they leave every prefix and total as it is.
  mlir::Value x = if_value(in_row, [&] { return scan_element(idx); }, scan_identity());
  for (int d = 1; d < kWarp; d *= 2) {
    mlir::Value below = shuffle(x, d, mlir::gpu::ShuffleMode::UP);
    x = select(scalar_.cmpi(mlir::arith::CmpIPredicate::sge, lane, i64(d)), scan_combine(below, x), x);
  }
  if_then(eq(lane, i64(kWarp - 1)), [&] { shared_store(slots, i64_type(), warp, to_slot(acc_type, x)); });
  barrier();
  mlir::Value before = scan_identity(), total = scan_identity();
  for (int w = 0; w < warps; ++w) {
    mlir::Value v = from_slot(acc_type, shared_load(slots, i64_type(), i64(w)));
    before = select(lt(i64(w), warp), scan_combine(before, v), before);
    total = scan_combine(total, v);
  }
  mlir::Value prefix = scan_combine(carry, scan_combine(before, x));
  if_then(in_row, [&] { scan_store_step(idx, prefix, store); });
  barrier();  // every thread has read the slots before the next tile writes them
  b_.create<mlir::scf::YieldOp>(loc_, scan_combine(carry, total));
}

}  // namespace fuse::codegen
