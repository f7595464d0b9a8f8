// The CUDA kernel: dispatch on the loop form, parameters, launches, global and shared memory.
#include "codegen/cuda/emitter.h"

#include "ir/index_check.h"

#include <algorithm>

#include "mlir/Dialect/Math/IR/Math.h"

namespace fuse::codegen {

using ir::DType;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

CudaKernelEmitter::CudaKernelEmitter(mlir::OpBuilder& b, const ir::Kernel& k, int kernel_index,
                                     const std::vector<std::string>& symbols, const CudaOptions& options, ir::CudaPlan& plan)
    : KernelEmitterBase(b, k, options.fast_math, /*libdevice=*/true, "CUDA"),
      kernel_index_(kernel_index),
      symbols_(symbols),
      plan_(plan) {}

void CudaKernelEmitter::emit(mlir::gpu::GPUModuleOp module) {
  module_ = module;
  assign_args();
  switch (k_.schedule.form) {
    case ir::LoopForm::GridStride: emit_elementwise(); break;
    case ir::LoopForm::SharedTileTranspose: emit_transpose(); break;
    case ir::LoopForm::BlockPerRow: emit_block_per_row(); break;
    case ir::LoopForm::TwoStage: emit_two_stage(); break;
    case ir::LoopForm::SharedTileMatmul: emit_matmul(); break;
    case ir::LoopForm::PerElement: emit_per_element(); break;
    case ir::LoopForm::ScanRows: emit_scan_rows(); break;
    case ir::LoopForm::Scatter: emit_scatter(); break;  // issue 16
    default:
      throw ir::Error(fail_text("kernel " + k_.name + " has loop form " + std::string(ir::loop_form_name(k_.schedule.form)) +
                                ", which is not a CUDA form"));
  }
}

void CudaKernelEmitter::assign_args() {
  std::vector<NodeId> constants;
  int slots = assign_slots([&](NodeId id) { constants.push_back(id); });
  for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
    if (k_.body.node(id).kind == OpKind::Input)
      args_.push_back({ir::CudaArg::Kind::Buffer, k_.inputs.at(static_cast<size_t>(input_slot_.at(id)))});
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) args_.push_back({ir::CudaArg::Kind::Buffer, k_.outputs.at(o)});
  for (NodeId id : constants) {
    args_.push_back({ir::CudaArg::Kind::Constant, static_cast<int>(plan_.constants.size())});
    plan_.constants.push_back(k_.body.node(id).as<ir::ConstantAttrs>().value);
  }
  if (k_.schedule.form == ir::LoopForm::TwoStage) {
    scratch_param_ = slots++;
    args_.push_back({ir::CudaArg::Kind::Scratch, static_cast<int>(plan_.scratch_bytes.size())});
    plan_.scratch_bytes.push_back(two_stage_scratch_bytes(k_));
  }
  if (k_.schedule.form == ir::LoopForm::Scatter && scatter_scratch_bytes(k_) > 0) {  // issue 16: 8-byte bins
    scratch_param_ = slots++;
    args_.push_back({ir::CudaArg::Kind::Scratch, static_cast<int>(plan_.scratch_bytes.size())});
    plan_.scratch_bytes.push_back(scatter_scratch_bytes(k_));
  }
  if (k_.schedule.form == ir::LoopForm::ScanRows) {  // np-cuda-scan: the chunk totals of long scans
    scratch_param_ = slots++;
    args_.push_back({ir::CudaArg::Kind::Scratch, static_cast<int>(plan_.scratch_bytes.size())});
    plan_.scratch_bytes.push_back(scan_scratch_bytes(k_));
  }
  if (!ir::checked_nodes(k_.body).empty()) {  // issue 16: the run's error record, one per plan
    if (plan_.error_scratch < 0) {
      plan_.error_scratch = static_cast<int>(plan_.scratch_bytes.size());
      plan_.scratch_bytes.push_back(ir::kErrorRecordWords * 8);
    }
    error_param_ = slots++;
    args_.push_back({ir::CudaArg::Kind::Scratch, plan_.error_scratch});
  }
  pointer_params_ = slots;
  for (size_t s = 0; s < symbols_.size(); ++s) args_.push_back({ir::CudaArg::Kind::Symbol, static_cast<int>(s)});
}

mlir::Value CudaKernelEmitter::symbol_value(const std::string& name) {
  auto it = std::find(symbols_.begin(), symbols_.end(), name);
  return entry_->getArgument(static_cast<unsigned>(pointer_params_ + (it - symbols_.begin())));
}

mlir::Value CudaKernelEmitter::result_at(NodeId id, const std::vector<mlir::Value>& idx) {
  // This row's (element's) result, computed before; or, element by element, computed here.
  if (!per_element_) return reduced_.at(id);
  return k_.body.node(id).kind == OpKind::Reduce ? reduce_here(id, idx) : matmul_here(id, idx);
}

int64_t two_stage_scratch_bytes(const ir::Kernel& k) {
  // The first launch's block count, then kMaxPartials slots of 8 bytes per reduction.
  return 8 + static_cast<int64_t>(ir::reduce_nodes(k).size()) * kMaxPartials * 8;
}

// Starts gpu.func `name` (a kernel) with the kernel's parameters, launched in blocks of
// `block` threads (known to the function: ptxas then budgets registers for that block, not for
// 1024 threads); the builder is left in its body. `finish_function` ends it.
void CudaKernelEmitter::begin_function(const std::string& name, std::array<int, 3> block) {
  block_ = block;
  std::vector<mlir::Type> params;
  for (size_t a = 0; a < args_.size(); ++a)
    params.push_back(static_cast<int>(a) < pointer_params_ ? ptr_type() : i64_type());
  b_.setInsertionPoint(module_.getBody()->getTerminator());
  auto func = b_.create<mlir::gpu::GPUFuncOp>(loc_, name, b_.getFunctionType(params, {}));
  func->setAttr(mlir::gpu::GPUDialect::getKernelFuncAttrName(), b_.getUnitAttr());
  func.setKnownBlockSizeAttr(b_.getDenseI32ArrayAttr(block));
  entry_ = &func.getBody().front();
  b_.setInsertionPointToStart(entry_);
  base_.clear();
  dims_.clear();
  clear_caches();
  for (int p = 0; p < pointer_params_; ++p) base_.push_back(entry_->getArgument(static_cast<unsigned>(p)));
  if (error_param_ >= 0) {
    error_record_ = base_[error_param_];
    // np-gaps: on the grid's first thread (every launch has at least one block).
    mlir::Value first = b_.create<mlir::arith::ConstantIntOp>(loc_, 1, 1);
    for (mlir::gpu::Dimension d : {mlir::gpu::Dimension::x, mlir::gpu::Dimension::y, mlir::gpu::Dimension::z}) {
      mlir::Value at_zero = b_.create<mlir::arith::OrIOp>(loc_, thread_id(d), block_id(d));
      first = b_.create<mlir::arith::AndIOp>(loc_, first, cmpi(mlir::arith::CmpIPredicate::eq, at_zero, i64(0)));
    }
    check_indices_of_empty_takes(first);
  }
}

void CudaKernelEmitter::finish_function() { b_.create<mlir::gpu::ReturnOp>(loc_); }

// The launch of the function begun last.
ir::CudaLaunch& CudaKernelEmitter::add_launch(const std::string& entry) {
  ir::CudaLaunch l;
  l.entry = entry;
  l.kernel = kernel_index_;
  l.block = block_;
  l.args = args_;
  plan_.launches.push_back(l);
  return plan_.launches.back();
}

mlir::Value CudaKernelEmitter::i32(int64_t v) { return b_.create<mlir::arith::ConstantIntOp>(loc_, v, 32); }

mlir::Value CudaKernelEmitter::lt(mlir::Value a, mlir::Value c) { return scalar_.cmpi(mlir::arith::CmpIPredicate::slt, a, c); }

mlir::Value CudaKernelEmitter::eq(mlir::Value a, mlir::Value c) { return scalar_.cmpi(mlir::arith::CmpIPredicate::eq, a, c); }

mlir::Value CudaKernelEmitter::and_(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::AndIOp>(loc_, a, c); }

mlir::Value CudaKernelEmitter::ceil_div(mlir::Value a, int64_t d) { return div(add(a, i64(d - 1)), i64(d)); }

mlir::Value CudaKernelEmitter::index_to_i64(mlir::Value v) { return b_.create<mlir::arith::IndexCastOp>(loc_, i64_type(), v); }

mlir::Value CudaKernelEmitter::thread_id(mlir::gpu::Dimension d) { return index_to_i64(b_.create<mlir::gpu::ThreadIdOp>(loc_, d)); }

mlir::Value CudaKernelEmitter::block_id(mlir::gpu::Dimension d) { return index_to_i64(b_.create<mlir::gpu::BlockIdOp>(loc_, d)); }

mlir::Value CudaKernelEmitter::block_dim(mlir::gpu::Dimension d) { return index_to_i64(b_.create<mlir::gpu::BlockDimOp>(loc_, d)); }

mlir::Value CudaKernelEmitter::grid_dim(mlir::gpu::Dimension d) { return index_to_i64(b_.create<mlir::gpu::GridDimOp>(loc_, d)); }

void CudaKernelEmitter::barrier() { b_.create<mlir::gpu::BarrierOp>(loc_); }

mlir::Value CudaKernelEmitter::zero_of(DType t) { return scalar_.constant(t, 0, 0, 1); }

// ---- global memory ----
mlir::Value CudaKernelEmitter::element_address(mlir::Value base, mlir::Type element, mlir::Value offset) {
  return b_.create<mlir::LLVM::GEPOp>(loc_, base.getType(), element, base, mlir::ValueRange{offset});
}

mlir::Value CudaKernelEmitter::load(int param, DType t, mlir::Value offset) {
  mlir::Value v = b_.create<mlir::LLVM::LoadOp>(loc_, memory_type(t), element_address(base_[param], memory_type(t), offset),
                                                static_cast<unsigned>(ir::dtype_size(t)));
  return t == DType::Bool ? scalar_.cmpi(mlir::arith::CmpIPredicate::ne, v, b_.create<mlir::arith::ConstantIntOp>(loc_, 0, 8))
                          : v;
}

void CudaKernelEmitter::store(int param, DType t, mlir::Value offset, mlir::Value v) {
  if (t == DType::Bool) v = b_.create<mlir::arith::ExtUIOp>(loc_, b_.getI8Type(), v);
  b_.create<mlir::LLVM::StoreOp>(loc_, v, element_address(base_[param], memory_type(t), offset),
                                 static_cast<unsigned>(ir::dtype_size(t)));
}

// `lanes` elements from `offset` (a multiple of lanes, the pointer 16-byte aligned) as
// scalars of the register type.
std::vector<mlir::Value> CudaKernelEmitter::load_lanes(int param, DType t, mlir::Value offset, int lanes) {
  mlir::Type vector = mlir::VectorType::get({lanes}, memory_type(t));
  mlir::Value v = b_.create<mlir::LLVM::LoadOp>(loc_, vector, element_address(base_[param], memory_type(t), offset),
                                                static_cast<unsigned>(ir::dtype_size(t)) * lanes);
  std::vector<mlir::Value> out;
  for (int l = 0; l < lanes; ++l) {
    mlir::Value e = b_.create<mlir::LLVM::ExtractElementOp>(loc_, v, i32(l));
    if (t == DType::Bool) e = scalar_.cmpi(mlir::arith::CmpIPredicate::ne, e, b_.create<mlir::arith::ConstantIntOp>(loc_, 0, 8));
    out.push_back(e);
  }
  return out;
}

void CudaKernelEmitter::store_lanes(int param, DType t, mlir::Value offset, const std::vector<mlir::Value>& lanes_values) {
  int lanes = static_cast<int>(lanes_values.size());
  mlir::Type vector = mlir::VectorType::get({lanes}, memory_type(t));
  mlir::Value v = b_.create<mlir::LLVM::UndefOp>(loc_, vector);
  for (int l = 0; l < lanes; ++l) {
    mlir::Value e = lanes_values[l];
    if (t == DType::Bool) e = b_.create<mlir::arith::ExtUIOp>(loc_, b_.getI8Type(), e);
    v = b_.create<mlir::LLVM::InsertElementOp>(loc_, v, e, i32(l));
  }
  b_.create<mlir::LLVM::StoreOp>(loc_, v, element_address(base_[param], memory_type(t), offset),
                                 static_cast<unsigned>(ir::dtype_size(t)) * lanes);
}

// ---- shared memory: one llvm.mlir.global in address space 3 per array ----
mlir::Value CudaKernelEmitter::shared_array(const std::string& suffix, mlir::Type element, int64_t count) {
  std::string name = k_.name + "_" + suffix;
  auto array = mlir::LLVM::LLVMArrayType::get(element, static_cast<unsigned>(count));
  if (!module_.lookupSymbol(name)) {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(module_.getBody());
    b_.create<mlir::LLVM::GlobalOp>(loc_, array, /*isConstant=*/false, mlir::LLVM::Linkage::Internal, name, mlir::Attribute(),
                                    /*alignment=*/16, /*addrSpace=*/3);
  }
  return b_.create<mlir::LLVM::AddressOfOp>(loc_, ptr_type(3), name);
}

mlir::Value CudaKernelEmitter::shared_load(mlir::Value array, mlir::Type element, mlir::Value index) {
  unsigned align = (element.getIntOrFloatBitWidth() + 7) / 8;
  return b_.create<mlir::LLVM::LoadOp>(loc_, element, element_address(array, element, index), align);
}

void CudaKernelEmitter::shared_store(mlir::Value array, mlir::Type element, mlir::Value index, mlir::Value v) {
  unsigned align = (element.getIntOrFloatBitWidth() + 7) / 8;
  b_.create<mlir::LLVM::StoreOp>(loc_, v, element_address(array, element, index), align);
}

}  // namespace fuse::codegen
