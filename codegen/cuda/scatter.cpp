// The CUDA Scatter form (issue 16): histogram, bincount and index_add with their elementwise
// prologues, as atomics (codegen/cuda/emitter.h).
//  - histogram/bincount: NAME_zero zeroes the bins; NAME walks the input grid-stride, each
//    block counting into its own bins in shared memory (shared atomics) when B is static and
//    B * 8 <= kSharedBinBytes, then adding its nonzero bins to global memory with one atomic
//    each; larger or symbolic B: global atomics directly. Bins are the output itself (counts
//    and i64/i32/f64 sums: integer adds wrap as the interpreter's i64 sum cast to the dtype
//    does), except f32 weights with a static B, which are summed in f64 in scratch and cast by
//    NAME_finish (f32 weights with a symbolic B are summed in f32).
//  - index_add: NAME_copy copies x into the output; NAME adds each element of `values` at its
//    checked index with a global atomic.
// Integer results are exact. Float sums (weighted bincount, float index_add) are added in
// whatever order the atomics land, so they may differ in the last bits from the interpreter's
// in-order sum and between runs. Bad bincount values / index_add indices are reported in the
// run's error record (check_index) and touch no memory; when several are bad, which one is
// reported depends on the threads' timing (the CPU and the interpreter report the first).
#include "codegen/cuda/emitter.h"

#include "ir/kernel_forms.h"

namespace fuse::codegen {

using ir::DType;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

namespace {

constexpr int kScatterBlock = 256;

// Whether histogram/bincount `n` sums f32 weights in f64 scratch bins (B static).
bool f64_scratch_bins(const ir::Graph& body, const Node& n) {
  return n.kind == OpKind::Bincount && n.inputs.size() == 2 && body.node(n.inputs[1]).dtype == DType::F32 &&
         n.shape[0].is_constant();
}

}  // namespace

int64_t scatter_scratch_bytes(const ir::Kernel& k) {
  NodeId id = ir::scatter_node(k);
  if (id < 0) return 0;
  const Node& n = k.body.node(id);
  return f64_scratch_bins(k.body, n) ? *n.shape[0].constant() * 8 : 0;
}

void CudaKernelEmitter::atomic_add(DType t, mlir::Value address, mlir::Value v) {
  auto op = ir::is_float(t) ? mlir::LLVM::AtomicBinOp::fadd : mlir::LLVM::AtomicBinOp::add;
  b_.create<mlir::LLVM::AtomicRMWOp>(loc_, op, address, v, mlir::LLVM::AtomicOrdering::monotonic);
}

void CudaKernelEmitter::emit_scatter() {
  NodeId id = ir::scatter_node(k_);
  if (id < 0 || k_.body.outputs.size() != 1 || k_.body.outputs[0].node != id)
    throw ir::Error(fail_text("scatter kernel " + k_.name + " must write exactly its scatter's result"));
  if (k_.body.node(id).kind == OpKind::IndexAdd) emit_index_add(id);
  else emit_scatter_bins(id);
}

void CudaKernelEmitter::emit_scatter_bins(NodeId id) {
  using mlir::gpu::Dimension;
  const Node& n = k_.body.node(id);
  bool scratch = f64_scratch_bins(k_.body, n);
  DType t = scratch ? DType::F64 : n.dtype;  // the bins' type
  int bins_param = scratch ? scratch_param_ : output_slot_[0];
  const ir::Dim& bins_dim = n.shape[0];
  auto grid_stride = [&](mlir::Value end, const std::function<void(mlir::Value)>& body) {
    mlir::Value first = add(mul(block_id(Dimension::x), block_dim(Dimension::x)), thread_id(Dimension::x));
    loop(first, end, mul(grid_dim(Dimension::x), block_dim(Dimension::x)), body);
  };
  auto bins_launch = [&](const std::string& entry) {
    ir::CudaLaunch& l = add_launch(entry);
    l.work[0] = bins_dim;
    l.work_per_block[0] = kScatterBlock;
    l.max_grid[0] = 65536;
  };
  // NAME_zero
  begin_function(k_.name + "_zero", {kScatterBlock, 1, 1});
  grid_stride(dim(bins_dim), [&](mlir::Value b) { store(bins_param, t, b, zero_of(t)); });
  finish_function();
  bins_launch(k_.name + "_zero");
  // NAME
  begin_function(k_.name, {kScatterBlock, 1, 1});
  mlir::Value bins = dim(bins_dim);
  std::optional<int64_t> static_bins = bins_dim.constant();
  bool shared = static_bins && *static_bins * 8 <= kSharedBinBytes;
  mlir::Type bin_type = scalar_type(t);
  mlir::Value shared_bins;
  mlir::Value tid = thread_id(Dimension::x);
  if (shared) {
    shared_bins = shared_array("bins", bin_type, *static_bins);
    loop(tid, bins, i64(kScatterBlock), [&](mlir::Value b) { shared_store(shared_bins, bin_type, b, zero_of(t)); });
    barrier();
  }
  grid_stride(dim(ir::num_elements(k_.space)), [&](mlir::Value i) {
    std::vector<mlir::Value> idx = delinearize(i, k_.space);
    mlir::Value inside, bin;
    std::tie(inside, bin) = scatter_bin(id, idx, bins);
    if_then(inside, [&] {
      mlir::Value weight = constant(t, 1, 1, 1);
      if (n.kind == OpKind::Bincount && n.inputs.size() == 2) {
        NodeId w = n.inputs[1];
        weight = cast(general_value(w, idx), k_.body.node(w).dtype, t, 1);
      }
      mlir::Value address = shared ? element_address(shared_bins, bin_type, bin)
                                   : element_address(base_[bins_param], bin_type, bin);
      atomic_add(t, address, weight);
    });
  });
  if (shared) {
    // The block's bins to global memory: one atomic per nonzero bin.
    barrier();
    loop(tid, bins, i64(kScatterBlock), [&](mlir::Value b) {
      mlir::Value v = shared_load(shared_bins, bin_type, b);
      mlir::Value nonzero = ir::is_float(t) ? cmpf(mlir::arith::CmpFPredicate::UNE, v, zero_of(t))
                                            : cmpi(mlir::arith::CmpIPredicate::ne, v, zero_of(t));
      if_then(nonzero, [&] { atomic_add(t, element_address(base_[bins_param], bin_type, b), v); });
    });
  }
  finish_function();
  ir::CudaLaunch& l = add_launch(k_.name);
  l.work[0] = ir::num_elements(k_.space);
  l.work_per_block[0] = kScatterBlock * 8;
  l.max_grid[0] = 1024;  // each block flushes B bins: more blocks only add atomics
  if (!scratch) return;
  // NAME_finish: f64 sums rounded once to the output's dtype, as the interpreter does.
  begin_function(k_.name + "_finish", {kScatterBlock, 1, 1});
  grid_stride(dim(bins_dim), [&](mlir::Value b) {
    store(output_slot_[0], n.dtype, b, cast(load(scratch_param_, DType::F64, b), DType::F64, n.dtype, 1));
  });
  finish_function();
  bins_launch(k_.name + "_finish");
}

void CudaKernelEmitter::emit_index_add(NodeId id) {
  using mlir::gpu::Dimension;
  const Node& n = k_.body.node(id);
  if (n.dtype == DType::Bool)  // (the op takes numeric x only)
    throw ir::Error(fail_text("index_add on bool has no atomic add"));
  int axis = n.as<ir::GatherAttrs>().axis;
  NodeId x = n.inputs[0], indices = n.inputs[1], values = n.inputs[2];
  int out = output_slot_[0];
  auto grid_stride = [&](mlir::Value end, const std::function<void(mlir::Value)>& body) {
    mlir::Value first = add(mul(block_id(Dimension::x), block_dim(Dimension::x)), thread_id(Dimension::x));
    loop(first, end, mul(grid_dim(Dimension::x), block_dim(Dimension::x)), body);
  };
  // NAME_copy: out = x.
  begin_function(k_.name + "_copy", {kScatterBlock, 1, 1});
  grid_stride(dim(ir::num_elements(n.shape)), [&](mlir::Value i) {
    store(out, n.dtype, i, general_value(x, delinearize(i, n.shape)));
  });
  finish_function();
  {
    ir::CudaLaunch& l = add_launch(k_.name + "_copy");
    l.work[0] = ir::num_elements(n.shape);
    l.work_per_block[0] = kScatterBlock;
    l.max_grid[0] = 65536;
  }
  // NAME: out[.., idx[j], ..] += values[.., j, ..], one element of values per thread.
  begin_function(k_.name, {kScatterBlock, 1, 1});
  mlir::Value size = dim(n.shape[axis]);
  DType it = k_.body.node(indices).dtype;
  grid_stride(dim(ir::num_elements(k_.space)), [&](mlir::Value i) {
    std::vector<mlir::Value> idx = delinearize(i, k_.space);
    // An index outside [-size, size) is reported in the run's error record and adds nowhere.
    auto [inside, row] = check_index(id, cast(general_value(indices, {idx[axis]}), it, DType::I64, 1), size);
    if_then(inside, [&] {
      std::vector<mlir::Value> at = idx;
      at[axis] = row;
      mlir::Value address = element_address(base_[out], memory_type(n.dtype), linearize(at, n.shape));
      atomic_add(n.dtype, address, general_value(values, idx));
    });
  });
  finish_function();
  ir::CudaLaunch& l = add_launch(k_.name);
  l.work[0] = ir::num_elements(k_.space);
  l.work_per_block[0] = kScatterBlock;
  l.max_grid[0] = 65536;
}

}  // namespace fuse::codegen
