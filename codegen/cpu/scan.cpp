// CPU scans (np-scan): ScanRows as a row per iteration (codegen/cpu/emitter.cpp), and its chunked
// form for few long rows (codegen/cpu_codegen.h, CompiledKernel::scan_totals): a reduce-then-scan
// over kScanChunks chunks per row. Rescanning each chunk from its carry (instead of adding the
// carry to stored prefixes) reads the input twice but writes the outputs once, and keeps every
// step in the accumulator type: an f32 cumsum is still summed in f64 and rounded once, and the
// epilogue reads the finished prefix.
#include "codegen/cpu/emitter.h"

namespace fuse::codegen {

KernelEmitterBase::ScanStore CpuKernelEmitter::scan_store() {
  return [this](size_t o, mlir::Value at, mlir::Value v) {
    store(output_slot_[o], k_.body.node(k_.body.outputs[o].node).dtype, at, v, 1);
  };
}

std::array<mlir::Value, 3> CpuKernelEmitter::scan_chunk(mlir::Value pair) {
  const Node& n = k_.body.node(scan_node());
  mlir::Value length = dim(n.shape[n.as<ir::ScanAttrs>().axis]);
  mlir::Value row = div(pair, i64(kScanChunks)), chunk = rem(pair, i64(kScanChunks));
  mlir::Value from = div(mul(chunk, length), i64(kScanChunks));
  mlir::Value to = div(mul(add(chunk, i64(1)), length), i64(kScanChunks));
  return {row, from, to};
}

mlir::Value CpuKernelEmitter::scan_scratch_address(mlir::Value pair) {
  return b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), i64_type(), base_[slot_count_], mlir::ValueRange{pair});
}

void CpuKernelEmitter::emit_scan_totals(mlir::func::FuncOp func) {
  scan_scratch_ = true;
  enter(func);
  loop(entry_->getArgument(2), entry_->getArgument(3), 1, [&](mlir::Value pair) {
    auto [row, from, to] = scan_chunk(pair);
    // A chunk's fold needs no order: its quarters fold side by side, four independent chains
    // of adds (or multiplies) instead of one whose latency bounds the loop; the rest in order.
    constexpr int kChains = 4;
    mlir::Value quarter = div(sub(to, from), i64(kChains));
    std::vector<mlir::Value> starts(kChains, scan_identity());
    auto fold = b_.create<mlir::scf::ForOp>(loc_, i64(0), quarter, i64(1), starts);
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(fold.getBody());
      CacheScope scope(*this);
      std::vector<mlir::Value> accs;
      for (int c = 0; c < kChains; ++c) {
        mlir::Value j = add(add(from, mul(quarter, i64(c))), fold.getInductionVar());
        accs.push_back(scan_combine(fold.getRegionIterArgs()[c], scan_element(scan_index(row, j))));
      }
      b_.create<mlir::scf::YieldOp>(loc_, accs);
    }
    mlir::Value total = scan_combine(scan_combine(fold.getResult(0), fold.getResult(1)),
                                     scan_combine(fold.getResult(2), fold.getResult(3)));
    total = scan_range(row, add(from, mul(quarter, i64(kChains))), to, total, nullptr);
    b_.create<mlir::LLVM::StoreOp>(loc_, total, scan_scratch_address(pair), 8);
  });
  b_.create<mlir::func::ReturnOp>(loc_);
}

void CpuKernelEmitter::emit_scan_carries(mlir::func::FuncOp func) {
  scan_scratch_ = true;
  enter(func);
  mlir::Type acc_type = scalar_type(scan_accumulator_type());
  loop(entry_->getArgument(2), entry_->getArgument(3), 1, [&](mlir::Value row) {
    mlir::Value first = mul(row, i64(kScanChunks));
    auto chunks = b_.create<mlir::scf::ForOp>(loc_, first, add(first, i64(kScanChunks)), i64(1),
                                              mlir::ValueRange{scan_identity()});
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(chunks.getBody());
    mlir::Value address = scan_scratch_address(chunks.getInductionVar());
    mlir::Value total = b_.create<mlir::LLVM::LoadOp>(loc_, acc_type, address, 8);
    mlir::Value carry = chunks.getRegionIterArgs()[0];
    b_.create<mlir::LLVM::StoreOp>(loc_, carry, address, 8);
    b_.create<mlir::scf::YieldOp>(loc_, scan_combine(carry, total));
  });
  b_.create<mlir::func::ReturnOp>(loc_);
}

void CpuKernelEmitter::emit_scan_chunks(mlir::func::FuncOp func) {
  scan_scratch_ = true;
  enter(func);
  mlir::Type acc_type = scalar_type(scan_accumulator_type());
  loop(entry_->getArgument(2), entry_->getArgument(3), 1, [&](mlir::Value pair) {
    auto [row, from, to] = scan_chunk(pair);
    mlir::Value carry = b_.create<mlir::LLVM::LoadOp>(loc_, acc_type, scan_scratch_address(pair), 8);
    ScanStore store = scan_store();
    scan_range(row, from, to, carry, &store);
  });
  b_.create<mlir::func::ReturnOp>(loc_);
}

}  // namespace fuse::codegen
