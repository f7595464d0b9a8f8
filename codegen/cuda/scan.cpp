// ScanRows on CUDA (codegen/cuda/emitter.h): a thread per short row, a block per long row, and
// for few long rows a block per chunk with a carry pass across blocks (np-cuda-scan).
#include "codegen/cuda/emitter.h"

#include <algorithm>

namespace fuse::codegen {

using ir::DType;
using ir::Node;

namespace {

// Rows of at least this many elements fill a 256-thread block's first tile: a block scans each.
constexpr int64_t kBlockScanLength = 256;
// The first launch's grid cap when it takes a block per row (grid-stride beyond it).
constexpr int64_t kMaxRowBlocks = 65536;

}  // namespace

int64_t scan_scratch_bytes(const ir::Kernel&) { return kMaxScanChunks * 8; }

mlir::Value CudaKernelEmitter::scan_chunks(mlir::Value rows, mlir::Value length) {
  mlir::Value few_long = and_(lt(rows, i64(kScanFewRows)), lt(i64(kScanChunkLength), length));
  // R < kScanFewRows, so kMaxScanChunks / R >= 32: a long row always gets at least 2 chunks.
  mlir::Value chunks = min_i64(ceil_div(length, kScanChunkLength), div(i64(kMaxScanChunks), max_i64(rows, i64(1))));
  return select(few_long, chunks, i64(1));
}

void CudaKernelEmitter::emit_scan_rows() {
  const int block = k_.schedule.cuda.block_x;
  const Node& n = k_.body.node(scan_node());
  const ir::Dim length_dim = n.shape[n.as<ir::ScanAttrs>().axis];
  const ir::Dim rows_dim = ir::parallel_iterations(k_);
  const DType acc_type = scan_accumulator_type();
  using mlir::gpu::Dimension;
  ScanStore store_output = [&](size_t o, mlir::Value at, mlir::Value v) {
    store(output_slot_[o], k_.body.node(k_.body.outputs[o].node).dtype, at, v);
  };
  // Chunk totals and carries, one 8-byte scratch slot per (row, chunk) pair: row * C + chunk.
  auto slot_address = [&](mlir::Value slot) { return element_address(base_[scratch_param_], i64_type(), slot); };
  auto load_slot = [&](mlir::Value slot) {
    return from_slot(acc_type, b_.create<mlir::LLVM::LoadOp>(loc_, i64_type(), slot_address(slot), 8));
  };
  auto store_slot = [&](mlir::Value slot, mlir::Value v) {
    b_.create<mlir::LLVM::StoreOp>(loc_, to_slot(acc_type, v), slot_address(slot), 8);
  };
  // body(row, chunk, pair) for every (row, chunk) pair of the multi-block form, a block each
  // (grid-stride over the pairs).
  auto for_each_chunk = [&](mlir::Value rows, mlir::Value length, mlir::Value chunks, const auto& body) {
    loop(block_id(Dimension::x), mul(rows, chunks), grid_dim(Dimension::x), [&](mlir::Value pair) {
      body(div(pair, chunks), chunk_of(i64(0), length, rem(pair, chunks), chunks), pair);
    });
  };

  // NAME: the single-launch forms, or (few long rows) each chunk's total.
  begin_function(k_.name, {block, 1, 1});
  {
    mlir::Value length = dim(length_dim), rows = dim(rows_dim), chunks = scan_chunks(rows, length);
    if_else(
        lt(i64(1), chunks),
        [&] {
          for_each_chunk(rows, length, chunks, [&](mlir::Value row, Chunk c, mlir::Value pair) {
            mlir::Value total = block_scan(c.begin, c.end, scan_identity(), block, scan_row_steps(row, nullptr));
            if_then(eq(linear_thread_id(), i64(0)), [&] { store_slot(pair, total); });
          });
        },
        [&] {
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
        });
  }
  finish_function();
  // The grid rules mirror scan_chunks: `few_long` is 1 exactly when the kernels take the
  // multi-block form (R < kScanFewRows and L > kScanChunkLength), else 0 (a grid of one block
  // that returns at once for the carry and finish launches).
  ir::Dim few_long = ir::dim_min(ir::dim_max(ir::Dim(kScanFewRows) - rows_dim, 0), 1) *
                     ir::dim_min(ir::dim_max(length_dim - ir::Dim(kScanChunkLength), 0), 1);
  // At least R * C (C = scan_chunks: the scratch holds kMaxScanChunks totals).
  ir::Dim pairs = ir::dim_min(rows_dim * ir::ceil_div(length_dim, kScanChunkLength) * few_long, kMaxScanChunks);
  ir::CudaLaunch& first = add_launch(k_.name);
  first.work[0] = ir::dim_max(rows_dim, pairs);
  first.max_grid[0] = kMaxRowBlocks;

  // NAME_carries: each row's chunk totals scanned in place (slot c then holds the total of chunks
  // 0..c: chunk c + 1's carry), a block per row.
  begin_function(k_.name + "_carries", {block, 1, 1});
  {
    mlir::Value length = dim(length_dim), rows = dim(rows_dim), chunks = scan_chunks(rows, length);
    if_then(lt(i64(1), chunks), [&] {
      loop(block_id(Dimension::x), rows, grid_dim(Dimension::x), [&](mlir::Value row) {
        mlir::Value row_first = mul(row, chunks);
        BlockScanSteps totals;
        totals.index = [&](mlir::Value c) { return std::vector<mlir::Value>{add(row_first, c)}; };
        totals.element = [&](const std::vector<mlir::Value>& slot) { return load_slot(slot[0]); };
        totals.store = [&](const std::vector<mlir::Value>& slot, mlir::Value prefix) { store_slot(slot[0], prefix); };
        block_scan(i64(0), chunks, scan_identity(), block, totals);
      });
    });
  }
  finish_function();
  ir::CudaLaunch& carries = add_launch(k_.name + "_carries");
  carries.work[0] = rows_dim * few_long;
  carries.max_grid[0] = kScanFewRows;

  // NAME_finish: each chunk rescanned from its carry, every step stored (the epilogue reads the
  // final prefixes), a block per (row, chunk) pair.
  begin_function(k_.name + "_finish", {block, 1, 1});
  {
    mlir::Value length = dim(length_dim), rows = dim(rows_dim), chunks = scan_chunks(rows, length);
    if_then(lt(i64(1), chunks), [&] {
      for_each_chunk(rows, length, chunks, [&](mlir::Value row, Chunk c, mlir::Value pair) {
        mlir::Value identity = scan_identity();
        mlir::Value carry = if_value(lt(i64(0), rem(pair, chunks)), [&] { return load_slot(sub(pair, i64(1))); }, identity);
        block_scan(c.begin, c.end, carry, block, scan_row_steps(row, &store_output));
      });
    });
  }
  finish_function();
  ir::CudaLaunch& finish = add_launch(k_.name + "_finish");
  finish.work[0] = pairs;
  finish.max_grid[0] = kMaxScanChunks;
}

CudaKernelEmitter::BlockScanSteps CudaKernelEmitter::scan_row_steps(mlir::Value row, const ScanStore* store) {
  BlockScanSteps steps;
  steps.index = [this, row](mlir::Value j) { return scan_index(row, j); };
  steps.element = [this](const std::vector<mlir::Value>& idx) { return scan_element(idx); };
  if (store)
    steps.store = [this, store](const std::vector<mlir::Value>& idx, mlir::Value prefix) { scan_store_step(idx, prefix, *store); };
  return steps;
}

void CudaKernelEmitter::block_scan_row(mlir::Value row, int threads, const ScanStore& store) {
  const Node& n = k_.body.node(scan_node());
  block_scan(i64(0), dim(n.shape[n.as<ir::ScanAttrs>().axis]), scan_identity(), threads, scan_row_steps(row, &store));
}

mlir::Value CudaKernelEmitter::block_scan(mlir::Value from, mlir::Value to, mlir::Value carry, int threads,
                                          const BlockScanSteps& steps) {
  DType acc_type = scan_accumulator_type();
  int warps = std::max(1, threads / kWarp);
  mlir::Value slots = shared_array("scan_warps", i64_type(), kWarp);
  mlir::Value tid = linear_thread_id(), lane = rem(tid, i64(kWarp)), warp = div(tid, i64(kWarp));
  auto tiles = b_.create<mlir::scf::ForOp>(loc_, from, to, i64(threads), mlir::ValueRange{carry});
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(tiles.getBody());
    CacheScope scope(*this);
    mlir::Value carry_in = tiles.getRegionIterArgs()[0];
    mlir::Value j = add(tiles.getInductionVar(), tid);
    std::vector<mlir::Value> idx = steps.index(j);
    mlir::Value in_range = lt(j, to);
    // Lanes past the range's end hold the identity: they leave every prefix and total as it is.
    mlir::Value x = if_value(in_range, [&] { return steps.element(idx); }, scan_identity());
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
    if (steps.store) {
      mlir::Value prefix = scan_combine(carry_in, scan_combine(before, x));
      if_then(in_range, [&] { steps.store(idx, prefix); });
    }
    barrier();  // every thread has read the slots before the next tile writes them
    b_.create<mlir::scf::YieldOp>(loc_, scan_combine(carry_in, total));
  }
  return tiles.getResult(0);
}

}  // namespace fuse::codegen
