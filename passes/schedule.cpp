#include "passes/schedule.h"

#include "ir/error.h"
#include "ir/kernel_forms.h"

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

// Whether another kernel of the program reads one of k's outputs (an intermediate, or a result
// that is also an operand further on).
static bool outputs_read_later(const ir::Program& p, const Kernel& k) {
  for (const Kernel& other : p.kernels) {
    if (&other == &k) continue;
    for (ir::BufferId in : other.inputs)
      if (std::find(k.outputs.begin(), k.outputs.end(), in) != k.outputs.end()) return true;
  }
  return false;
}

constexpr int64_t kColumnTaskBytes = 2048;

static ir::CpuSchedule cpu_schedule(const Kernel& k, const ir::Target& t, bool read_later) {
  ir::CpuSchedule s;
  size_t elem = widest_element(k);
  s.vector_width = std::max(1, static_cast<int>(t.vector_bits / 8 / elem));
  // Streamed outputs come back from memory: worth it for the program's results (no consumer
  // here), which on the Xeon stream faster from 4-8 MiB moved, warm or cold, while a consumer
  // kernel reading a streamed intermediate of 4-16 MiB lost up to 25% (bench/README.md).
  s.streaming_bytes = read_later ? t.streaming_bytes : t.result_streaming_bytes;
  // Enough work per task to amortize a thread-pool wake-up (~a few microseconds).
  s.grain = k.kind == KernelKind::Elementwise || k.kind == KernelKind::Copy ? 1 << 14 : 1;
  switch (k.kind) {
    case KernelKind::Reduction:
    case KernelKind::RowWise: s.accumulators = 2; break;  // two dependency chains in flight per reduction
    case KernelKind::Matmul: {
      // BLIS-style blocking: an mr x nr tile of C in registers (mr * nr / lanes accumulators
      // plus the nr / lanes vectors of B and a broadcast of A must fit the register file:
      // 32 vector registers with AVX-512, 16 below), an mc x kc block of A in half of L2, a
      // kc x nc panel of B in a thread's share of half of L3. kc is long, since every K block
      // is one more pass over C's partial sums.
      // AVX-512: a 6 x 64 tile (oneDNN's brgemm kernel on the Intel Xeon has this shape: four
      // vectors of B and six broadcasts of A per 24 FMAs) reading A in place, its six rows
      // (kc long) in half of L1 and the kc x 64 panel of B streamed from L2. On the 2-vCPU
      // Intel Xeon (bench/README.md, twenty-fifth session) this ran 1024^3 2-5% faster than
      // the 12 x 32 tile over packed A with kc = 768 (that tile reading A in place: 1024^3
      // faster, 2048^3 5% slower: twelve rows 4 or 8 KiB apart share one set of L1), and kc =
      // 1024 beat 512 and 768 by 2-4% at 1024^3 and 2048^3.
      // Below AVX-512, a 6 x 16 tile over packed A: it does half the FMAs per byte of A and B it
      // loads (0.46 bytes from L2 per flop with B streamed, against 0.23), more than L2 keeps up
      // with: its panel of B fills L1 once, not twice (Zen 3: kc = 512, 2048^3 9% faster than
      // 1024; bench/README.md). In place, A ran 2048^3 2-4% slower there (AVX2 code on the
      // Intel Xeon; no AVX2-only machine measured).
      int64_t e = static_cast<int64_t>(elem);
      s.mr = 6;
      if (t.vector_bits >= 512) {
        s.nr = 4 * s.vector_width;
        s.a_in_place = true;
        s.kc = t.l1_bytes / 2 / (s.mr * e);
      } else {
        s.nr = 2 * s.vector_width;
        s.kc = t.l1_bytes / (s.nr * e);
      }
      s.kc = std::clamp<int64_t>(s.kc / s.vector_width * s.vector_width, s.vector_width, 1024);
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
    case KernelKind::Reduction:
    case KernelKind::RowWise: break;  // block per row: 256 threads; two stages: 4 items per thread
    case KernelKind::Scan: break;     // 256 threads: a thread per short row, a block per long one (np-scan)
    case KernelKind::Scatter: break;  // grid-stride over the input, 256 threads per block
    case KernelKind::Transpose:
      s.block_x = 32;
      s.block_y = 8;
      s.tile_rows = 32;
      s.shared_cols = 33;  // one padding column: the column reads hit 32 different banks
      break;
    case KernelKind::Matmul:
      s.block_x = 16;
      s.block_y = 16;
      s.tile_k = 8;  // a 128 x 128 tile of C: 16 x 16 threads of 8 x 8 outputs
      s.thread_rows = s.thread_cols = 8;
      break;
  }
  return s;
}

// Scatter kernels (np-scatter): compiled when the scatter's dtypes are numeric. (np-gaps: the
// builders reject bool operands of every scatter, so the bool case is only a guard: a graph
// built another way would run in the interpreter.) Bad bincount values and index_add indices
// are reported through the run's error record (ir/index_check.h).
static bool scatter_compiles(const Kernel& k) {
  const ir::Node& n = k.body.node(ir::scatter_node(k));
  for (ir::NodeId in : n.inputs)
    if (k.body.node(in).dtype == ir::DType::Bool) return false;
  return true;
}

// The CPU loop form: the first of these the kernel's body allows.
static ir::LoopForm cpu_form(const Kernel& k, const ir::CpuSchedule& s) {
  using ir::LoopForm;
  if (k.kind == KernelKind::Scan) return LoopForm::ScanRows;
  if (k.kind == KernelKind::Scatter) return scatter_compiles(k) ? LoopForm::Scatter : LoopForm::Interpreted;
  if (!ir::results_in_row_order(k)) return LoopForm::Interpreted;
  // scatters (issue 16): no CPU code yet; the reference interpreter runs these kernels.
  // take / take_along_axis are indexed loads in any form that reads values element by element.
  for (const ir::Node& n : k.body.nodes)
    if (ir::is_gather_scatter(n.kind) && n.kind != ir::OpKind::Take && n.kind != ir::OpKind::TakeAlongAxis)
      return LoopForm::Interpreted;
  ir::KernelAccess access(k);
  switch (k.kind) {
    case KernelKind::Matmul: {
      // The blocked form takes float and integer matmuls whose epilogue runs on column vectors;
      // it accumulates in the matmul's own dtype (as BLAS does for floats; integer sums wrap
      // exactly as the interpreter's i64 sums cast back).
      ir::DType t = k.body.node(ir::matmul_node(k)).dtype;
      bool numeric = t == ir::DType::F32 || t == ir::DType::F64 || t == ir::DType::I32 || t == ir::DType::I64;
      bool tiled = s.mr > 0 && s.nr > 0 && s.kc > 0 && s.mc > 0 && s.nc > 0 && s.vector_width >= 2;
      return tiled && numeric && access.epilogue_on_column_vectors() ? LoopForm::BlockedMatmul : LoopForm::MatmulRows;
    }
    case KernelKind::Reduction:
      // argmax/argmin fold each row in order on one thread (a split would need partials
      // combined by (value, index)).
      if (ir::has_arg_reduction(k)) return LoopForm::ReductionRows;
      if (ir::reduces_to_one_element(k)) return LoopForm::SplitReduction;
      if (access.column_reduction()) return LoopForm::ColumnReduction;
      return LoopForm::ReductionRows;
    case KernelKind::RowWise: return LoopForm::ReductionRows;
    default: break;
  }
  if (ir::elementwise_contiguous(k)) return LoopForm::Contiguous;
  switch (access.kernel_inner()) {
    case ir::InnerAccess::Constant:
    case ir::InnerAccess::Unit: return LoopForm::Rows;
    case ir::InnerAccess::Strided: return LoopForm::TiledRows;
    default: return LoopForm::General;
  }
}

// The CUDA loop form.
static ir::LoopForm cuda_form(const Kernel& k) {
  using ir::LoopForm;
  if (k.kind == KernelKind::Scan) return LoopForm::ScanRows;
  if (k.kind == KernelKind::Scatter) return LoopForm::Scatter;
  bool in_row_order = ir::results_in_row_order(k);
  if (in_row_order && k.kind == KernelKind::Matmul)
    for (const ir::GraphOutput& o : k.body.outputs) in_row_order = in_row_order && k.body.node(o.node).shape == k.space;
  if (!in_row_order) return LoopForm::PerElement;
  switch (k.kind) {
    case KernelKind::Matmul: return LoopForm::SharedTileMatmul;
    case KernelKind::Reduction:
    case KernelKind::RowWise:
      // argmax/argmin: a block per row (one block for a whole tensor), partials combined by
      // (value, index).
      if (ir::has_arg_reduction(k)) return LoopForm::BlockPerRow;
      // User combiners too: TwoStage folds them in order (codegen/cuda/reduction.cpp).
      return ir::reduces_to_one_element(k, /*user_combiners=*/true) ? LoopForm::TwoStage : LoopForm::BlockPerRow;
    case KernelKind::Transpose:
      if (ir::transpose_inner_axis(k) >= 0) return LoopForm::SharedTileTranspose;
      return LoopForm::GridStride;
    default: return LoopForm::GridStride;
  }
}

void schedule_program(ir::Program& p, const ir::Target& target) {
  for (Kernel& k : p.kernels) {
    k.schedule.target = target.kind;
    if (target.kind == ir::TargetKind::Cpu) {
      k.schedule.cpu = cpu_schedule(k, target, outputs_read_later(p, k));
      k.schedule.form = cpu_form(k, k.schedule.cpu);
      // A column reduction's task reads its columns' stretch of every row: tasks of under 2 KiB
      // a row read the same lines' neighbours from memory twice (the other's prefetches), and
      // ran slower on two threads than on one (sum(x, 0) over 65536 x 64 f32 on the Intel Xeon:
      // 2.07 ms against 1.26; 16384 x 256 1.72 against 1.61; 4096 x 1024 1.47 against 1.68).
      if (k.schedule.form == ir::LoopForm::ColumnReduction)
        k.schedule.cpu.grain = std::max<int64_t>(1, kColumnTaskBytes / static_cast<int64_t>(widest_element(k)));
    } else {
      k.schedule.cuda = cuda_schedule(k, target);
      k.schedule.form = cuda_form(k);
    }
  }
}

}  // namespace fuse::passes
