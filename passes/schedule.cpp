#include "passes/schedule.h"

#include <algorithm>

namespace fuse::passes {

using ir::Kernel;
using ir::KernelKind;

// The widest element type the kernel moves, which bounds its vector width.
static size_t widest_element(const Kernel& k) {
  size_t widest = 1;
  for (const ir::Node& n : k.body.nodes) widest = std::max(widest, ir::dtype_size(n.dtype));
  return widest;
}

// The outer dims whose iterations are independent, flattened into the range split over threads:
// every dim of elementwise work, the rows (dims before the first reduced axis) of reductions,
// the batch and row dims of a matmul.
static int parallel_dims(const Kernel& k) {
  int rank = static_cast<int>(k.space.size());
  switch (k.kind) {
    case KernelKind::Reduction:
    case KernelKind::RowWise: return k.axes.empty() ? rank : k.axes.front();
    case KernelKind::Matmul: return std::max(0, rank - 1);
    default: return rank;
  }
}

static ir::CpuSchedule cpu_schedule(const Kernel& k, const ir::Target& t) {
  ir::CpuSchedule s;
  size_t elem = widest_element(k);
  s.vector_width = std::max(1, static_cast<int>(t.vector_bits / 8 / elem));
  s.parallel_dims = parallel_dims(k);
  // Enough work per task to amortize a thread-pool wake-up (~a few microseconds).
  s.grain = k.kind == KernelKind::Elementwise || k.kind == KernelKind::Copy ? 1 << 14 : 1;
  switch (k.kind) {
    case KernelKind::Reduction:
    case KernelKind::RowWise: s.accumulators = 4; break;  // hides the FMA/add latency of 4 cycles
    case KernelKind::Transpose:
      s.transpose_block = static_cast<int>(64 / elem) * 2;  // two cache lines per block row
      break;
    case KernelKind::Matmul: {
      // BLIS-style blocking: an mr x nr tile of C in registers (mr * nr / lanes accumulators
      // plus the nr / lanes vectors of B and a broadcast of A must fit the register file:
      // 32 vector registers with AVX-512, 16 below), an mc x kc block of A in half of L2, a
      // kc x nc panel of B in a thread's share of half of L3. kc is long: the kc x nr panel of
      // B takes twice L1 (streamed from L2), since every K block is one more pass over C's
      // partial sums; on the Zen 4 this was tuned on, kc = 128 (the panel in half of L1) ran
      // 2048^3 at 0.8x OpenBLAS, 256-384 at 0.95x, 512 at 1.02x (bench/README.md).
      int64_t e = static_cast<int64_t>(elem);
      s.nr = 2 * s.vector_width;
      s.mr = t.vector_bits >= 512 ? 12 : 6;
      s.kc = std::clamp<int64_t>(2 * t.l1_bytes / (s.nr * e) / s.vector_width * s.vector_width, s.vector_width, 1024);
      s.mc = std::max<int64_t>(s.mr, t.l2_bytes / 2 / (s.kc * e) / s.mr * s.mr);
      s.nc = std::max<int64_t>(s.nr, t.l3_bytes / 2 / std::max(1, t.cores) / (s.kc * e) / s.nr * s.nr);
      break;
    }
    default: break;
  }
  return s;
}

static ir::CudaSchedule cuda_schedule(const Kernel& k, const ir::Target&) {
  ir::CudaSchedule s;
  switch (k.kind) {
    case KernelKind::Elementwise:
    case KernelKind::Copy: break;  // grid-stride, 256 threads, 4 items of 16 bytes per thread
    case KernelKind::Reduction: {
      // Keeping some dims: one block per output row; reducing everything: deterministic two stages.
      const ir::Node& out = k.body.node(k.body.outputs.front().node);
      s.reduction = ir::num_elements(out.shape) == ir::Dim(1) ? ir::CudaReduction::TwoStage
                                                              : ir::CudaReduction::BlockPerRow;
      break;
    }
    case KernelKind::RowWise: s.reduction = ir::CudaReduction::BlockPerRow; break;
    case KernelKind::Transpose:
      s.block_x = 32;
      s.block_y = 8;
      s.tile_rows = s.tile_cols = 32;
      s.shared_cols = 33;  // one padding column: the column reads hit 32 different banks
      break;
    case KernelKind::Matmul:
      s.block_x = 16;
      s.block_y = 16;
      s.tile_rows = s.tile_cols = 128;
      s.tile_k = 8;
      s.shared_cols = 128;
      s.thread_rows = s.thread_cols = 8;
      break;
  }
  return s;
}

void schedule_program(ir::Program& p, const ir::Target& target) {
  for (Kernel& k : p.kernels) {
    k.schedule.target = target.kind;
    if (target.kind == ir::TargetKind::Cpu) k.schedule.cpu = cpu_schedule(k, target);
    else k.schedule.cuda = cuda_schedule(k, target);
  }
}

}  // namespace fuse::passes
