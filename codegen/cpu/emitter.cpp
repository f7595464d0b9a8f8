// The CPU kernel function: its dispatch on the loop form, slots and memory access.
#include "codegen/cpu/emitter.h"

#include "ir/index_check.h"

#include <algorithm>

#include "llvm/TargetParser/Host.h"

namespace fuse::codegen {

namespace {

// The SLEEF builds this CPU runs (the code always runs here, whatever vector width the target
// describes): read once.
ScalarLowering::SleefIsa host_sleef_isa() {
  static const ScalarLowering::SleefIsa isa = [] {
    llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
    auto has = [&](const char* f) { return features.lookup(f); };
    ScalarLowering::SleefIsa i;
    i.fma = has("fma");
    i.avx2 = has("avx2") && i.fma;
    i.avx512f = has("avx512f");
    return i;
  }();
  return isa;
}

}  // namespace

using ir::DType;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

CpuKernelEmitter::CpuKernelEmitter(mlir::OpBuilder& b, const ir::Kernel& k, const std::map<std::string, int>& symbols,
                                   const CpuOptions& options, std::vector<ir::HostArray>& constants)
    : KernelEmitterBase(b, k, options.fast_math, /*libdevice=*/false, "CPU"),
      symbols_(symbols),
      options_(options),
      constants_(constants) {
  scalar_.use_sleef(host_sleef_isa());
}

void CpuKernelEmitter::enter(mlir::func::FuncOp func) {
  entry_ = func.addEntryBlock();
  b_.setInsertionPointToStart(entry_);
  buffers_ = entry_->getArgument(0);
  symbols_arg_ = entry_->getArgument(1);
  // Buffer addresses and dims are loaded once, before the loops: LLVM cannot hoist them out
  // itself, since the kernel's stores might alias the arrays they come from.
  load_bases();
}

void CpuKernelEmitter::emit(mlir::func::FuncOp func) {
  enter(func);
  mlir::Value begin = entry_->getArgument(2), end = entry_->getArgument(3);
  const ir::CpuSchedule& s = k_.schedule.cpu;
  int lanes = std::max(1, s.vector_width);
  // np-gaps: the first chunk (the runtime calls a kernel with checks once even with no work).
  if (error_record_) check_indices_of_empty_takes(cmpi(mlir::arith::CmpIPredicate::eq, begin, i64(0)));
  switch (k_.schedule.form) {
    case ir::LoopForm::Contiguous:
      if (lanes > 1) emit_contiguous_loops(begin, end, lanes);  // whole vectors, masked at both ends
      else loop(begin, end, 1, [&](mlir::Value i) { emit_contiguous(i, 1); });
      break;
    case ir::LoopForm::Rows: emit_rows(begin, end, lanes); break;
    case ir::LoopForm::TiledRows: emit_tiled(begin, end); break;
    case ir::LoopForm::General: loop(begin, end, 1, [&](mlir::Value i) { emit_general(i); }); break;
    case ir::LoopForm::ReductionRows: {
      RowPlan plan = row_plan();
      row_scratch_ = row_stash_scratch(plan);  // acquired once per task, before the rows
      if (int64_t length = lane_rows_length(lanes); length > 0) {
        // Short rows, `lanes` at a time (codegen/cpu/lane_rows.cpp) from a multiple of `lanes` on
        // (a group's output then starts on a line, for streaming stores); the rows before that,
        // one at a time, and the task's last rows, fewer than `lanes`, as below.
        mlir::Value first = min_i64(round_up(begin, lanes), end);
        mlir::Value whole = add(first, mul(div(sub(end, first), i64(lanes)), i64(lanes)));
        loop(begin, first, 1, [&](mlir::Value row) { emit_reduction_row(row, plan); });
        emit_lane_rows(first, whole, length, lanes);
        begin = whole;
      }
      if (int output = moments_ride_output(plan); output >= 0) {
        // Layernorm's rows ride where the output streams; elsewhere the plain rows, with no
        // trace of the ride (its run-time tests cost rows of 7-100 f32 3-6%).
        auto branch = b_.create<mlir::scf::IfOp>(loc_, stash_in_scratch(output), /*withElseRegion=*/true);
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPointToStart(&branch.getThenRegion().front());
        emit_riding_rows(begin, end, plan);
        b_.setInsertionPointToStart(&branch.getElseRegion().front());
        loop(begin, end, 1, [&](mlir::Value row) { emit_reduction_row(row, plan); });
      } else if (row_rides(plan)) {
        emit_riding_rows(begin, end, plan);
      } else {
        loop(begin, end, 1, [&](mlir::Value row) { emit_reduction_row(row, plan); });
      }
      if (row_scratch_ >= 0) release_scratch();
      break;
    }
    case ir::LoopForm::ColumnReduction: emit_columns(begin, end, lanes); break;
    case ir::LoopForm::SplitReduction: emit_split_with_tables(begin, end); break;
    case ir::LoopForm::BlockedMatmul: emit_matmul_blocked(begin, end); break;
    case ir::LoopForm::MatmulRows: emit_matmul(begin, end); break;
    case ir::LoopForm::ScanRows: loop(begin, end, 1, [&](mlir::Value row) { scan_row(row, scan_store()); }); break;
    case ir::LoopForm::Scatter: emit_scatter(begin, end); break;  // codegen/cpu/scatter.cpp
    default:
      throw ir::Error(fail_text("kernel " + k_.name + " has loop form " + std::string(ir::loop_form_name(k_.schedule.form)) +
                                ", which is not a CPU form"));
  }
  b_.create<mlir::func::ReturnOp>(loc_);
}

void CpuKernelEmitter::load_bases() {
  slot_count_ = assign_slots([&](NodeId id) { constants_.push_back(k_.body.node(id).as<ir::ConstantAttrs>().value); });
  // A split reduction's or histogram's scratch, and a chunked scan's (np-scan)
  int slots = slot_count_ + (takes_scratch() || scan_scratch_ ? 1 : 0);
  bool checks = !ir::checked_nodes(k_.body).empty();  // issue 16: the run's error record, last
  for (int slot = 0; slot < slots + (checks ? 1 : 0); ++slot) {
    mlir::Value slot_ptr = b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), ptr_type(), buffers_,
                                                        mlir::ArrayRef<mlir::LLVM::GEPArg>{slot});
    base_.push_back(b_.create<mlir::LLVM::LoadOp>(loc_, ptr_type(), slot_ptr));
  }
  if (checks) {
    error_record_ = base_.back();
    base_.pop_back();  // not a slot: later slots (allocate_slot) follow the real ones
  }
  for (const Node& n : k_.body.nodes)
    for (const ir::Dim& d : n.shape) dim(d);
  for (const ir::Dim& d : k_.space) dim(d);
}

mlir::Value CpuKernelEmitter::symbol_value(const std::string& name) {
  for (const auto& [bound, size] : options_.bound_symbols)
    if (bound == name) return i64(size);
  mlir::Value address = b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), i64_type(), symbols_arg_,
                                                     mlir::ArrayRef<mlir::LLVM::GEPArg>{symbols_.at(name)});
  return b_.create<mlir::LLVM::LoadOp>(loc_, i64_type(), address);
}

std::optional<int64_t> CpuKernelEmitter::known_size(const ir::Dim& d) const {
  ir::SymbolBindings bound(options_.bound_symbols.begin(), options_.bound_symbols.end());
  for (const std::string& name : d.symbol_names())
    if (!bound.count(name)) return std::nullopt;  // bound only at run time
  return ir::evaluate(d, bound);
}

// Values cached while emitting one loop body are defined inside it: never reuse them outside.
void CpuKernelEmitter::clear_caches() {
  KernelEmitterBase::clear_caches();
  contiguous_cache_.clear();
  row_cache_.clear();
  lane_cache_.clear();
}

// Byte address of element `offset` of the buffer in `slot`.
mlir::Value CpuKernelEmitter::element_address(int slot, DType t, mlir::Value offset) {
  return b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), memory_type(t), base_[slot], mlir::ValueRange{offset});
}

mlir::Value CpuKernelEmitter::load(int slot, DType t, mlir::Value offset, int lanes) {
  mlir::Value address = element_address(slot, t, offset);
  unsigned align = static_cast<unsigned>(ir::dtype_size(t));
  mlir::Value v;
  if (mask_ && lanes > 1) {
    // Masked-off lanes read nothing and hold ones: safe operands for every op (x / 1, log 1).
    mlir::Value ones = t == DType::Bool ? constant_i8(1, lanes) : constant(t, 1, 1, lanes);
    v = b_.create<mlir::LLVM::MaskedLoadOp>(loc_, lane_type(memory_type(t), lanes), address, mask_,
                                            mlir::ValueRange{ones}, align);
  } else {
    v = b_.create<mlir::LLVM::LoadOp>(loc_, lane_type(memory_type(t), lanes), address, align);
  }
  if (t == DType::Bool) v = cmpi(mlir::arith::CmpIPredicate::ne, v, zero_i8(lanes));
  return v;
}

mlir::Value CpuKernelEmitter::gather(mlir::Value first, DType t, mlir::Value offsets, int lanes, mlir::Value mask) {
  mlir::Type pointers = mlir::LLVM::getFixedVectorType(ptr_type(), static_cast<unsigned>(lanes));
  mlir::Value addresses = b_.create<mlir::LLVM::GEPOp>(loc_, pointers, memory_type(t), first, mlir::ValueRange{offsets});
  if (!mask) mask = mask_ ? mask_ : constant(DType::Bool, 0, 1, lanes);
  mlir::Value ones = t == DType::Bool ? constant_i8(1, lanes) : constant(t, 1, 1, lanes);
  mlir::Value v = b_.create<mlir::LLVM::masked_gather>(loc_, lane_type(memory_type(t), lanes), addresses, mask,
                                                       mlir::ValueRange{ones},
                                                       b_.getI32IntegerAttr(static_cast<int32_t>(ir::dtype_size(t))));
  if (t == DType::Bool) v = cmpi(mlir::arith::CmpIPredicate::ne, v, zero_i8(lanes));
  return v;
}

mlir::Value CpuKernelEmitter::constant_i8(int64_t value, int lanes) {
  mlir::TypedAttr attr = b_.getIntegerAttr(b_.getI8Type(), value);
  if (lanes > 1) attr = mlir::DenseElementsAttr::get(mlir::cast<mlir::ShapedType>(lane_type(b_.getI8Type(), lanes)), attr);
  return b_.create<mlir::arith::ConstantOp>(loc_, attr);
}

mlir::Value CpuKernelEmitter::zero_i8(int lanes) {
  mlir::TypedAttr attr = b_.getIntegerAttr(b_.getI8Type(), 0);
  if (lanes > 1) attr = mlir::DenseElementsAttr::get(mlir::cast<mlir::ShapedType>(lane_type(b_.getI8Type(), lanes)), attr);
  return b_.create<mlir::arith::ConstantOp>(loc_, attr);
}

// `streaming`: a non-temporal store (the address must be aligned to the vector's size), which
// writes around the caches instead of first reading the line it overwrites.
void CpuKernelEmitter::store(int slot, DType t, mlir::Value offset, mlir::Value v, int lanes, bool streaming) {
  if (t == DType::Bool) v = b_.create<mlir::arith::ExtUIOp>(loc_, lane_type(b_.getI8Type(), lanes), v);
  unsigned align = static_cast<unsigned>(ir::dtype_size(t)) * (streaming ? lanes : 1);
  if (mask_ && lanes > 1 && !streaming) {
    b_.create<mlir::LLVM::MaskedStoreOp>(loc_, v, element_address(slot, t, offset), mask_, align);
    return;
  }
  b_.create<mlir::LLVM::StoreOp>(loc_, v, element_address(slot, t, offset), align, false, streaming);
}

void CpuKernelEmitter::store_or_stream(mlir::Value streaming, int slot, DType t, mlir::Value offset, mlir::Value v,
                                       int lanes) {
  if (!streaming) {
    store(slot, t, offset, v, lanes);
    return;
  }
  auto branch = b_.create<mlir::scf::IfOp>(loc_, streaming, /*withElseRegion=*/true);
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(&branch.getThenRegion().front());
  store(slot, t, offset, v, lanes, /*streaming=*/true);
  b_.setInsertionPointToStart(&branch.getElseRegion().front());
  store(slot, t, offset, v, lanes);
}

int CpuKernelEmitter::full_space_outputs() const {
  int count = 0;
  for (const ir::GraphOutput& o : k_.body.outputs) count += k_.body.node(o.node).shape == k_.space;
  return count;
}

int64_t CpuKernelEmitter::bytes_moved_per_element(DType out) const {
  int64_t bytes = static_cast<int64_t>(ir::dtype_size(out));
  for (const Node& n : k_.body.nodes)
    if (n.kind == ir::OpKind::Input && n.shape == k_.space) bytes += static_cast<int64_t>(ir::dtype_size(n.dtype));
  return bytes;
}

mlir::Value CpuKernelEmitter::moves_more_than_streaming_bytes(int64_t bytes_per_element) {
  return cmpi(mlir::arith::CmpIPredicate::sgt, mul(dim(ir::num_elements(k_.space)), i64(bytes_per_element)),
              i64(streaming_bytes()));
}

mlir::Value CpuKernelEmitter::streams_rows(int slot, DType out, int64_t bytes_per_element, mlir::Value row_length) {
  int64_t out_size = static_cast<int64_t>(ir::dtype_size(out));
  mlir::Value large = moves_more_than_streaming_bytes(bytes_per_element);
  mlir::Value address = b_.create<mlir::LLVM::PtrToIntOp>(loc_, i64_type(), base_[slot]);
  mlir::Value line_start = cmpi(mlir::arith::CmpIPredicate::eq, rem(address, i64(64)), i64(0));
  mlir::Value whole_lines = cmpi(mlir::arith::CmpIPredicate::eq, rem(mul(row_length, i64(out_size)), i64(64)), i64(0));
  return b_.create<mlir::arith::AndIOp>(loc_, large, b_.create<mlir::arith::AndIOp>(loc_, line_start, whole_lines));
}

// An llvm.call to a C library function (declared in the module on first use).
mlir::Value CpuKernelEmitter::call_c(const std::string& name, mlir::Type result, mlir::ValueRange args) {
  auto module = b_.getBlock()->getParentOp()->getParentOfType<mlir::ModuleOp>();
  auto fn = module.lookupSymbol<mlir::LLVM::LLVMFuncOp>(name);
  if (!fn) {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(module.getBody());
    std::vector<mlir::Type> params;
    for (mlir::Value a : args) params.push_back(a.getType());
    fn = b_.create<mlir::LLVM::LLVMFuncOp>(loc_, name, mlir::LLVM::LLVMFunctionType::get(result, params));
  }
  auto call = b_.create<mlir::LLVM::CallOp>(loc_, fn, args);
  return call.getNumResults() ? call.getResult() : mlir::Value();
}

int CpuKernelEmitter::allocate_slot(mlir::Value bytes) {
  mlir::Value index = i64(static_cast<int64_t>(scratch_slot_.size()));  // the runtime's scratch slot
  base_.push_back(call_c("fuse_cpu_scratch_acquire", ptr_type(), mlir::ValueRange{index, bytes}));
  scratch_slot_.push_back(static_cast<int>(base_.size()) - 1);
  return scratch_slot_.back();
}

void CpuKernelEmitter::release_scratch_from(size_t first) {
  for (size_t i = first; i < scratch_slot_.size(); ++i)
    call_c("fuse_cpu_scratch_release", mlir::LLVM::LLVMVoidType::get(b_.getContext()),
           mlir::ValueRange{i64(static_cast<int64_t>(i)), base_[scratch_slot_[i]]});
  scratch_slot_.resize(first);
}

void CpuKernelEmitter::release_scratch() {
  for (size_t i = 0; i < scratch_slot_.size(); ++i)
    call_c("fuse_cpu_scratch_release", mlir::LLVM::LLVMVoidType::get(b_.getContext()),
           mlir::ValueRange{i64(static_cast<int64_t>(i)), base_[scratch_slot_[i]]});
}

mlir::Value CpuKernelEmitter::lane_numbers(int lanes) {
  std::vector<mlir::Attribute> iota;
  for (int l = 0; l < lanes; ++l) iota.push_back(b_.getI64IntegerAttr(l));
  auto type = mlir::cast<mlir::ShapedType>(lane_type(b_.getI64Type(), lanes));
  return b_.create<mlir::arith::ConstantOp>(loc_, mlir::DenseElementsAttr::get(type, iota));
}

mlir::Value CpuKernelEmitter::splat_i64(mlir::Value v, int lanes) {
  return b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(b_.getI64Type(), lanes), v);
}

mlir::Value CpuKernelEmitter::lanes_below(mlir::Value count, int lanes) {
  return cmpi(mlir::arith::CmpIPredicate::slt, lane_numbers(lanes), splat_i64(count, lanes));
}

// The transpose of the square matrix whose rows are `rows` (n vectors of n elements, n a power
// of two): log2(n) rounds that interleave row i with row i + n/2 (their lower halves make row
// 2i, their upper halves row 2i + 1). A round moves the element at (row, column) to the position
// whose bits are those of (row, column) rotated left by one, so log2(n) rounds swap the row's
// bits with the column's. Each interleave is one two-source permute (vpermt2ps on AVX-512).
std::vector<mlir::Value> transpose_in_registers(mlir::OpBuilder& b, mlir::Location loc, std::vector<mlir::Value> rows) {
  int64_t n = static_cast<int64_t>(rows.size());
  std::vector<int64_t> low, high;
  for (int64_t k = 0; k < n / 2; ++k) {
    low.insert(low.end(), {k, n + k});
    high.insert(high.end(), {n / 2 + k, n + n / 2 + k});
  }
  for (int64_t round = 1; round < n; round *= 2) {
    std::vector<mlir::Value> next(rows.size());
    for (int64_t i = 0; i < n / 2; ++i) {
      next[2 * i] = b.create<mlir::vector::ShuffleOp>(loc, rows[i], rows[i + n / 2], low);
      next[2 * i + 1] = b.create<mlir::vector::ShuffleOp>(loc, rows[i], rows[i + n / 2], high);
    }
    rows = std::move(next);
  }
  return rows;
}

}  // namespace fuse::codegen
