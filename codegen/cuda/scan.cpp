// ScanRows on CUDA: a thread per row along the scan axis (codegen/cuda/emitter.h).
#include "codegen/cuda/emitter.h"

namespace fuse::codegen {

void CudaKernelEmitter::emit_scan_rows() {
  int block = k_.schedule.cuda.block_x;
  begin_function(k_.name, {block, 1, 1});
  using mlir::gpu::Dimension;
  mlir::Value first = add(mul(block_id(Dimension::x), block_dim(Dimension::x)), thread_id(Dimension::x));
  mlir::Value stride = mul(grid_dim(Dimension::x), block_dim(Dimension::x));
  ScanStore store_output = [&](size_t o, mlir::Value at, mlir::Value v) {
    store(output_slot_[o], k_.body.node(k_.body.outputs[o].node).dtype, at, v);
  };
  loop(first, dim(ir::parallel_iterations(k_)), stride, [&](mlir::Value row) { scan_row(row, store_output); });
  finish_function();
  ir::CudaLaunch& l = add_launch(k_.name);
  l.work[0] = ir::parallel_iterations(k_);
  l.work_per_block[0] = block;
  l.max_grid[0] = 65536;
}

}  // namespace fuse::codegen
