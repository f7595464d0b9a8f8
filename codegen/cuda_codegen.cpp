// Lowers Program kernels scheduled for CUDA to one gpu.module with an #nvvm.target, then through
// NVVM to PTX (libdevice linked), and writes the launch plan the runtime follows.
//
// Kernel ABI (ir/cuda_plan.h): every parameter is 8 bytes, in this order: the kernel's input
// buffers (its body's Input nodes in order), its output buffers, the constants it reads, its
// scratch (two-stage reductions), then the size of every shape symbol of the Program (sorted by
// name, CudaPlan::symbols). Buffers are addressed with llvm.getelementptr/load/store on plain
// pointers; shared memory is an llvm.mlir.global in address space 3; indices are i64.
//
// Every kernel walks its work in grid-stride loops on every grid axis, so it is correct for any
// grid the runtime launches; the plan's grid rule only picks a good one. Kernel forms:
// - Elementwise/Copy: one element per thread per step. Where every operand is laid out like the
//   output space (or is one broadcast element), 16-byte vector loads/stores when every pointer
//   is 16-byte aligned (checked at run time), then a scalar tail; otherwise each element
//   delinearizes its index and follows views (broadcast, permute, reshape...) as index maps.
// - Transpose: 32x32 tiles through shared memory padded to 33 columns; block 32x8.
// - Reduction/RowWise: one block per row (of the kept dims): each thread folds a strided part of
//   the row, then warp shuffles (xor butterfly) and one slot per warp in shared memory combine
//   the threads in a fixed order; full-space outputs (softmax) are written over the row after.
//   A reduction to one element (TwoStage) is two launches: per-block partials in scratch, then
//   one block combines them in block order. Deterministic: the order depends only on the sizes.
// - Matmul: 128x128 tiles of C per block of 16x16 threads, 8x8 outputs per thread in registers,
//   8-deep tiles of A and B (prologues applied on load) in shared memory, the epilogue applied
//   to each output before its store.
// - A kernel whose outputs permute or reshape a reduction's or matmul's result: element by
//   element, each thread folding the reductions (dot products) its elements need.
// Accumulation follows the interpreter: float sums, products and means in f64, integer ones in
// i64, float max/min in their own type (exact), user combiners sequentially in the node's dtype
// (a user combiner need not be associative: one thread folds the row in order). Exception: the
// tiled Matmul kernel accumulates in the matmul's dtype (f32 FMAs for f32: f64 accumulators
// spilled), so f32 matmuls carry f32 rounding over K terms (the rounding model's bound covers it);
// only element-by-element dot products (the permuted-result form) use f64.
#include "codegen/cuda_codegen.h"
#include "codegen/cuda_nvvm.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "codegen/cpu_codegen.h"
#include "codegen/kernel_queries.h"
#include "codegen/scalar_lowering.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

namespace fuse::codegen {

using ir::DType;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

namespace {

std::string fail_text(const std::string& what) { return "internal error in CUDA codegen: " + what; }

// Partial results per reduction in a two-stage reduction's scratch (the first launch's grid is
// capped at this many blocks).
constexpr int64_t kMaxPartials = 1024;
constexpr int kWarp = 32;

std::vector<std::string> program_symbols(const ir::Program& p) {
  std::set<std::string> names;
  for (const ir::Buffer& b : p.buffers)
    for (const ir::Dim& d : b.shape) names.insert(d.symbols.begin(), d.symbols.end());
  for (const ir::Kernel& k : p.kernels)
    for (const Node& n : k.body.nodes)
      for (const ir::Dim& d : n.shape) names.insert(d.symbols.begin(), d.symbols.end());
  return {names.begin(), names.end()};
}

std::vector<NodeId> reduce_nodes(const ir::Kernel& k) {
  std::vector<NodeId> ids;
  for (NodeId id = 0; id < static_cast<NodeId>(k.body.nodes.size()); ++id)
    if (k.body.node(id).kind == OpKind::Reduce) ids.push_back(id);
  return ids;
}

bool depends_on(const ir::Kernel& k, NodeId id, NodeId reduce) { return ir::computed_from(k.body, reduce)[id]; }

ir::Shape kept_dims(const ir::Kernel& k) {
  ir::Shape kept;
  for (size_t d = 0; d < k.space.size(); ++d)
    if (std::find(k.axes.begin(), k.axes.end(), static_cast<int>(d)) == k.axes.end()) kept.push_back(k.space[d]);
  return kept;
}
ir::Shape reduced_dims(const ir::Kernel& k) {
  ir::Shape reduced;
  for (int a : k.axes) reduced.push_back(k.space[a]);
  return reduced;
}

// The two-stage form: a reduction kernel with one row whose outputs are single elements and
// whose reductions are built-in (associative) and independent of each other (they share one
// pass over the elements). Other one-row kernels (logsumexp of everything, user combiners)
// run as one block.
// Whether the reductions' or matmul's results reach the outputs in the rows they were computed
// for (codegen::cpu_compiles: only elementwise ops, broadcasts, expand_dims and squeeze after
// them), and a matmul kernel's outputs are shaped like the matmul. Otherwise the kernel runs
// element by element (GpuEmitter::emit_per_element).
bool in_row_order(const ir::Kernel& k) {
  if (!cpu_compiles(k)) return false;
  if (k.kind != ir::KernelKind::Matmul) return true;
  for (const ir::GraphOutput& o : k.body.outputs)
    if (!(k.body.node(o.node).shape == k.space)) return false;
  return true;
}

bool two_stage(const ir::Kernel& k) {
  if (k.kind != ir::KernelKind::Reduction || k.schedule.cuda.reduction != ir::CudaReduction::TwoStage) return false;
  if (!in_row_order(k)) return false;
  if (!(ir::num_elements(kept_dims(k)) == ir::Dim(1))) return false;
  for (const ir::GraphOutput& o : k.body.outputs)
    if (!(ir::num_elements(k.body.node(o.node).shape) == ir::Dim(1))) return false;
  std::vector<NodeId> ids = reduce_nodes(k);
  for (NodeId id : ids) {
    if (k.body.node(id).as<ir::ReduceAttrs>().kind == ir::ReduceKind::Custom) return false;
    for (NodeId other : ids)
      if (other != id && depends_on(k, id, other)) return false;
  }
  return !ids.empty();
}

int64_t two_stage_scratch_bytes(const ir::Kernel& k) {
  // The first launch's block count, then kMaxPartials slots of 8 bytes per reduction.
  return 8 + static_cast<int64_t>(reduce_nodes(k).size()) * kMaxPartials * 8;
}

// The tiled transpose applies to a kernel whose first output, through views and unary
// elementwise ops, reads one input along another axis than its own innermost: the result is
// the output axis that carries that input's innermost axis (the tile's other axis is the
// output's innermost). -1: not this form.
int transpose_inner_axis(const ir::Kernel& k) {
  const Node& out = k.body.node(k.body.outputs[0].node);
  int rank = static_cast<int>(out.shape.size());
  if (rank < 2 || !(ir::num_elements(out.shape) == ir::num_elements(k.space))) return -1;
  for (int d = 0; d < rank - 1; ++d) {
    NodeId id = k.body.outputs[0].node;
    int axis = d;
    while (axis >= 0) {
      const Node& n = k.body.node(id);
      if (n.kind == OpKind::Input || n.kind == OpKind::Constant) {
        if (axis + 1 == static_cast<int>(n.shape.size())) return d;
        break;
      }
      if (n.kind == OpKind::Elementwise && n.inputs.size() == 1) {
        id = n.inputs[0];
        continue;
      }
      const ir::Shape& from = n.inputs.empty() ? n.shape : k.body.node(n.inputs[0]).shape;
      switch (n.kind) {
        case OpKind::Permute: axis = n.as<ir::PermuteAttrs>().perm[axis]; break;
        case OpKind::ExpandDims: {
          int a = n.as<ir::ExpandDimsAttrs>().axis;
          axis = axis == a ? -1 : axis > a ? axis - 1 : axis;
          break;
        }
        case OpKind::Squeeze: {
          const std::vector<int>& axes = n.as<ir::SqueezeAttrs>().axes;
          int seen = -1, found = -1;
          for (int f = 0; f < static_cast<int>(from.size()) && found < 0; ++f)
            if (std::find(axes.begin(), axes.end(), f) == axes.end() && ++seen == axis) found = f;
          axis = found;
          break;
        }
        default: axis = -1;
      }
      if (axis >= 0) id = n.inputs[0];
    }
  }
  return -1;
}

// Emits one kernel as gpu.func(s) and its launches.
class GpuEmitter {
 public:
  GpuEmitter(mlir::OpBuilder& b, const ir::Kernel& k, int kernel_index, const std::vector<std::string>& symbols,
             const CudaOptions& options, ir::CudaPlan& plan)
      : b_(b),
        loc_(b.getUnknownLoc()),
        k_(k),
        kernel_index_(kernel_index),
        symbols_(symbols),
        plan_(plan),
        scalar_(b, options.fast_math, /*libdevice=*/true, "internal error in CUDA codegen: ") {}

  // Adds the kernel's functions at the end of `module` and its launches to the plan.
  void emit(mlir::gpu::GPUModuleOp module) {
    module_ = module;
    assign_args();
    if (!in_row_order(k_)) {
      emit_per_element();
      return;
    }
    switch (k_.kind) {
      case ir::KernelKind::Matmul: emit_matmul(); break;
      case ir::KernelKind::Reduction:
      case ir::KernelKind::RowWise:
        if (two_stage(k_)) emit_two_stage();
        else emit_block_per_row();
        break;
      case ir::KernelKind::Transpose:
      case ir::KernelKind::Copy:
      case ir::KernelKind::Elementwise:
        if (k_.kind == ir::KernelKind::Transpose && transpose_inner_axis(k_) >= 0) emit_transpose();
        else emit_elementwise();
        break;
    }
  }

 private:
  // ---- parameters and the function ----

  void assign_args() {
    int param = 0;
    for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
      if (k_.body.node(id).kind == OpKind::Input) {
        input_param_[id] = param++;
        args_.push_back({ir::CudaArg::Kind::Buffer, k_.inputs.at(static_cast<size_t>(input_param_[id]))});
      }
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      output_param_.push_back(param++);
      args_.push_back({ir::CudaArg::Kind::Buffer, k_.outputs.at(o)});
    }
    for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
      if (k_.body.node(id).kind == OpKind::Constant) {
        input_param_[id] = param++;
        args_.push_back({ir::CudaArg::Kind::Constant, static_cast<int>(plan_.constants.size())});
        plan_.constants.push_back(k_.body.node(id).as<ir::ConstantAttrs>().value);
      }
    if (two_stage(k_)) {
      scratch_param_ = param++;
      args_.push_back({ir::CudaArg::Kind::Scratch, static_cast<int>(plan_.scratch_bytes.size())});
      plan_.scratch_bytes.push_back(two_stage_scratch_bytes(k_));
    }
    pointer_params_ = param;
    for (size_t s = 0; s < symbols_.size(); ++s) args_.push_back({ir::CudaArg::Kind::Symbol, static_cast<int>(s)});
  }

  // Starts gpu.func `name` (a kernel) with the kernel's parameters, launched in blocks of
  // `block` threads (known to the function: ptxas then budgets registers for that block, not for
  // 1024 threads); the builder is left in its body. `finish_function` ends it.
  void begin_function(const std::string& name, std::array<int, 3> block) {
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
  }
  void finish_function() { b_.create<mlir::gpu::ReturnOp>(loc_); }

  // The launch of the function begun last.
  ir::CudaLaunch& add_launch(const std::string& entry) {
    ir::CudaLaunch l;
    l.entry = entry;
    l.kernel = kernel_index_;
    l.block = block_;
    l.args = args_;
    plan_.launches.push_back(l);
    return plan_.launches.back();
  }

  // ---- small helpers ----
  mlir::Type i64_type() { return b_.getI64Type(); }
  mlir::Type ptr_type(unsigned space = 0) { return mlir::LLVM::LLVMPointerType::get(b_.getContext(), space); }
  mlir::Value i64(int64_t v) { return b_.create<mlir::arith::ConstantIntOp>(loc_, v, 64); }
  mlir::Value i32(int64_t v) { return b_.create<mlir::arith::ConstantIntOp>(loc_, v, 32); }
  mlir::Value add(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::AddIOp>(loc_, a, c); }
  mlir::Value sub(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::SubIOp>(loc_, a, c); }
  mlir::Value mul(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::MulIOp>(loc_, a, c); }
  mlir::Value div(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::DivSIOp>(loc_, a, c); }
  mlir::Value rem(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::RemSIOp>(loc_, a, c); }
  mlir::Value min_i64(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::MinSIOp>(loc_, a, c); }
  mlir::Value max_i64(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::MaxSIOp>(loc_, a, c); }
  mlir::Value lt(mlir::Value a, mlir::Value c) { return scalar_.cmpi(mlir::arith::CmpIPredicate::slt, a, c); }
  mlir::Value eq(mlir::Value a, mlir::Value c) { return scalar_.cmpi(mlir::arith::CmpIPredicate::eq, a, c); }
  mlir::Value and_(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::AndIOp>(loc_, a, c); }
  mlir::Value ceil_div(mlir::Value a, int64_t d) { return div(add(a, i64(d - 1)), i64(d)); }

  mlir::Value index_to_i64(mlir::Value v) { return b_.create<mlir::arith::IndexCastOp>(loc_, i64_type(), v); }
  mlir::Value thread_id(mlir::gpu::Dimension d) { return index_to_i64(b_.create<mlir::gpu::ThreadIdOp>(loc_, d)); }
  mlir::Value block_id(mlir::gpu::Dimension d) { return index_to_i64(b_.create<mlir::gpu::BlockIdOp>(loc_, d)); }
  mlir::Value block_dim(mlir::gpu::Dimension d) { return index_to_i64(b_.create<mlir::gpu::BlockDimOp>(loc_, d)); }
  mlir::Value grid_dim(mlir::gpu::Dimension d) { return index_to_i64(b_.create<mlir::gpu::GridDimOp>(loc_, d)); }
  void barrier() { b_.create<mlir::gpu::BarrierOp>(loc_); }

  mlir::Type memory_type(DType t) { return t == DType::Bool ? b_.getI8Type() : scalar_.scalar_type(t); }
  mlir::Value zero_of(DType t) { return scalar_.constant(t, 0, 0, 1); }

  // Values cached while emitting one region are defined inside it: never reuse them outside.
  void clear_caches() {
    general_cache_.clear();
    linear_memo_.clear();
  }

  // A nested region: the caches start empty in it, and what they held before it comes back after
  // it (those values were defined before the region, so they dominate what follows it; what the
  // region defined is forgotten). The row-wise kernels' on-chip path relies on this: a
  // block_reduce between two passes over the row (its if_then) keeps the row's loaded values.
  class CacheScope {
   public:
    explicit CacheScope(GpuEmitter& e) : e_(e), general_(e.general_cache_), linear_(e.linear_memo_) { e_.clear_caches(); }
    ~CacheScope() {
      e_.general_cache_ = std::move(general_);
      e_.linear_memo_ = std::move(linear_);
    }
    CacheScope(const CacheScope&) = delete;
    CacheScope& operator=(const CacheScope&) = delete;

   private:
    GpuEmitter& e_;
    std::map<std::vector<const void*>, mlir::Value> general_;
    std::map<std::pair<std::string, std::vector<const void*>>, mlir::Value> linear_;
  };

  template <class Body>
  void loop(mlir::Value from, mlir::Value to, mlir::Value step, Body body) {
    auto for_op = b_.create<mlir::scf::ForOp>(loc_, from, to, step);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(for_op.getBody());
    CacheScope scope(*this);
    body(for_op.getInductionVar());
  }

  template <class Body>
  void if_then(mlir::Value condition, Body body) {
    auto branch = b_.create<mlir::scf::IfOp>(loc_, condition, /*withElseRegion=*/false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&branch.getThenRegion().front());
    CacheScope scope(*this);
    body();
  }

  // `then_body()` where `condition` holds, else `else_body()` (no results).
  template <class Then, class Else>
  void if_else(mlir::Value condition, Then then_body, Else else_body) {
    auto branch = b_.create<mlir::scf::IfOp>(loc_, condition, /*withElseRegion=*/true);
    mlir::OpBuilder::InsertionGuard guard(b_);
    {
      b_.setInsertionPointToStart(&branch.getThenRegion().front());
      CacheScope scope(*this);
      then_body();
    }
    {
      b_.setInsertionPointToStart(&branch.getElseRegion().front());
      CacheScope scope(*this);
      else_body();
    }
  }

  // `then_value()` where `condition` holds, else `otherwise` (computed before the branch).
  template <class Then>
  mlir::Value if_value(mlir::Value condition, Then then_value, mlir::Value otherwise) {
    auto branch = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange{otherwise.getType()}, condition, /*withElseRegion=*/true);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&branch.getThenRegion().front());
    {
      CacheScope scope(*this);
      b_.create<mlir::scf::YieldOp>(loc_, then_value());
    }
    b_.setInsertionPointToStart(&branch.getElseRegion().front());
    b_.create<mlir::scf::YieldOp>(loc_, otherwise);
    return branch.getResult(0);
  }

  // ---- global memory ----

  mlir::Value element_address(mlir::Value base, mlir::Type element, mlir::Value offset) {
    return b_.create<mlir::LLVM::GEPOp>(loc_, base.getType(), element, base, mlir::ValueRange{offset});
  }
  mlir::Value load(int param, DType t, mlir::Value offset) {
    mlir::Value v = b_.create<mlir::LLVM::LoadOp>(loc_, memory_type(t), element_address(base_[param], memory_type(t), offset),
                                                  static_cast<unsigned>(ir::dtype_size(t)));
    return t == DType::Bool ? scalar_.cmpi(mlir::arith::CmpIPredicate::ne, v, b_.create<mlir::arith::ConstantIntOp>(loc_, 0, 8))
                            : v;
  }
  void store(int param, DType t, mlir::Value offset, mlir::Value v) {
    if (t == DType::Bool) v = b_.create<mlir::arith::ExtUIOp>(loc_, b_.getI8Type(), v);
    b_.create<mlir::LLVM::StoreOp>(loc_, v, element_address(base_[param], memory_type(t), offset),
                                   static_cast<unsigned>(ir::dtype_size(t)));
  }
  // `lanes` elements from `offset` (a multiple of lanes, the pointer 16-byte aligned) as
  // scalars of the register type.
  std::vector<mlir::Value> load_lanes(int param, DType t, mlir::Value offset, int lanes) {
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
  void store_lanes(int param, DType t, mlir::Value offset, const std::vector<mlir::Value>& lanes_values) {
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

  mlir::Value shared_array(const std::string& suffix, mlir::Type element, int64_t count) {
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
  mlir::Value shared_load(mlir::Value array, mlir::Type element, mlir::Value index) {
    unsigned align = (element.getIntOrFloatBitWidth() + 7) / 8;
    return b_.create<mlir::LLVM::LoadOp>(loc_, element, element_address(array, element, index), align);
  }
  void shared_store(mlir::Value array, mlir::Type element, mlir::Value index, mlir::Value v) {
    unsigned align = (element.getIntOrFloatBitWidth() + 7) / 8;
    b_.create<mlir::LLVM::StoreOp>(loc_, v, element_address(array, element, index), align);
  }

  // ---- dims and indices ----

  // A dim's value: factor * the symbols' sizes (computed once, at the function's entry).
  mlir::Value dim(const ir::Dim& d) {
    std::string key = d.str();
    auto cached = dims_.find(key);
    if (cached != dims_.end()) return cached->second;
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(entry_);
    mlir::Value v = i64(d.factor);
    for (const std::string& s : d.symbols) {
      auto it = std::find(symbols_.begin(), symbols_.end(), s);
      v = mul(v, entry_->getArgument(static_cast<unsigned>(pointer_params_ + (it - symbols_.begin()))));
    }
    dims_[key] = v;
    return v;
  }

  // An index delinearize() took apart is put back together as the value it came from (the
  // division and remainder then go unused and are removed): an operand laid out like the
  // space is read at the loop's own position.
  std::pair<std::string, std::vector<const void*>> memo_key(const std::vector<mlir::Value>& idx, const ir::Shape& shape) {
    std::vector<const void*> values;
    for (mlir::Value v : idx) values.push_back(v.getAsOpaquePointer());
    return {ir::shape_str(shape), values};
  }

  mlir::Value linearize(const std::vector<mlir::Value>& idx, const ir::Shape& shape) {
    auto known = linear_memo_.find(memo_key(idx, shape));
    if (known != linear_memo_.end()) return known->second;
    mlir::Value lin = i64(0);
    for (size_t d = 0; d < shape.size(); ++d) lin = add(mul(lin, dim(shape[d])), idx[d]);
    return lin;
  }
  std::vector<mlir::Value> delinearize(mlir::Value lin, const ir::Shape& shape) {
    std::vector<mlir::Value> idx = delinearize_uncached(lin, shape);
    linear_memo_[memo_key(idx, shape)] = lin;
    return idx;
  }
  std::vector<mlir::Value> delinearize_uncached(mlir::Value lin, const ir::Shape& shape) {
    std::vector<mlir::Value> idx(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
      if (d == 0) {
        idx[0] = lin;
        break;
      }
      mlir::Value size = dim(shape[d]);
      idx[d] = rem(lin, size);
      lin = div(lin, size);
    }
    return idx;
  }

  // The index in the space of element j of row `row` (its kept index `kept`). With trailing
  // reduced axes that is position row * L + j of the space, so that operands laid out like the
  // space are read there without index arithmetic (see linearize).
  std::vector<mlir::Value> element_index(const std::vector<mlir::Value>& kept, mlir::Value row, mlir::Value j) {
    bool trailing = !k_.axes.empty();
    for (size_t i = 0; i < k_.axes.size(); ++i)
      trailing = trailing && k_.axes[i] == static_cast<int>(k_.space.size() - k_.axes.size() + i);
    ir::Shape reduced_shape = reduced_dims(k_);
    if (!trailing) return full_index(kept, delinearize(j, reduced_shape));
    return delinearize(add(mul(row, dim(ir::num_elements(reduced_shape))), j), k_.space);
  }

  std::vector<mlir::Value> full_index(const std::vector<mlir::Value>& kept, const std::vector<mlir::Value>& reduced) {
    std::vector<mlir::Value> full;
    size_t next_kept = 0, next_reduced = 0;
    for (size_t d = 0; d < k_.space.size(); ++d) {
      bool is_reduced = std::find(k_.axes.begin(), k_.axes.end(), static_cast<int>(d)) != k_.axes.end();
      full.push_back(is_reduced ? reduced[next_reduced++] : kept[next_kept++]);
    }
    return full;
  }

  // ---- values: node `id` at multi-index `idx` of its shape, views as index maps ----

  mlir::Value general_value(NodeId id, const std::vector<mlir::Value>& idx) {
    std::vector<const void*> key{reinterpret_cast<const void*>(static_cast<intptr_t>(id))};
    for (mlir::Value v : idx) key.push_back(v.getAsOpaquePointer());
    auto it = general_cache_.find(key);
    if (it != general_cache_.end()) return it->second;
    const Node& n = k_.body.node(id);
    mlir::Value v;
    switch (n.kind) {
      case OpKind::Input:
      case OpKind::Constant: v = load(input_param_.at(id), n.dtype, linearize(idx, n.shape)); break;
      case OpKind::Elementwise: {
        std::vector<mlir::Value> args;
        for (NodeId in : n.inputs) args.push_back(general_value(in, idx));
        v = scalar_.scalar_fn(n.as<ir::ElementwiseAttrs>().body, args, 1);
        break;
      }
      case OpKind::BroadcastTo:
      case OpKind::Permute:
      case OpKind::ExpandDims:
      case OpKind::Squeeze:
      case OpKind::Reshape: v = general_value(n.inputs[0], operand_index(n, idx)); break;
      case OpKind::Reduce:
      case OpKind::Matmul:
        // This row's (element's) result, computed before; or, element by element, computed here.
        v = per_element_ ? (n.kind == OpKind::Reduce ? reduce_here(id, idx) : matmul_here(id, idx)) : reduced_.at(id);
        break;
      case OpKind::Arange: v = idx[0]; break;
      case OpKind::Rand: v = scalar_.philox_uniform(linearize(idx, n.shape), n.as<ir::RandAttrs>().seed); break;
      default: throw ir::Error(fail_text(std::string(ir::op_kind_name(n.kind)) + " in a kernel body"));
    }
    general_cache_[key] = v;
    return v;
  }

  std::vector<mlir::Value> operand_index(const Node& n, const std::vector<mlir::Value>& idx) {
    const ir::Shape& from = k_.body.node(n.inputs[0]).shape;
    return scalar_.view_operand_index(n, from, idx, [&](const std::vector<mlir::Value>& i) {
      return delinearize(linearize(i, n.shape), from);
    });
  }

  // ---- elementwise and copy kernels ----

  bool contiguous() const { return elementwise_contiguous(k_); }

  // Node `id` at elements [base, base + lanes) of a contiguous kernel, one value per lane.
  std::vector<mlir::Value> contiguous_lanes(NodeId id, mlir::Value base, int lanes, std::map<NodeId, std::vector<mlir::Value>>& cache) {
    auto it = cache.find(id);
    if (it != cache.end()) return it->second;
    const Node& n = k_.body.node(id);
    std::vector<mlir::Value> v;
    if (n.kind == OpKind::BroadcastTo) {
      const Node& in = k_.body.node(n.inputs[0]);
      v.assign(lanes, general_value(n.inputs[0], std::vector<mlir::Value>(in.shape.size(), i64(0))));
    } else if (n.kind == OpKind::Elementwise) {
      std::vector<std::vector<mlir::Value>> args;
      for (NodeId in : n.inputs) args.push_back(contiguous_lanes(in, base, lanes, cache));
      for (int l = 0; l < lanes; ++l) {
        std::vector<mlir::Value> lane_args;
        for (const auto& a : args) lane_args.push_back(a[l]);
        v.push_back(scalar_.scalar_fn(n.as<ir::ElementwiseAttrs>().body, lane_args, 1));
      }
    } else if (lanes > 1) {
      v = load_lanes(input_param_.at(id), n.dtype, base, lanes);
    } else {
      v.push_back(load(input_param_.at(id), n.dtype, base));
    }
    cache[id] = v;
    return v;
  }

  void emit_contiguous(mlir::Value base, int lanes) {
    std::map<NodeId, std::vector<mlir::Value>> cache;
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      NodeId out = k_.body.outputs[o].node;
      std::vector<mlir::Value> v = contiguous_lanes(out, base, lanes, cache);
      if (lanes > 1) store_lanes(output_param_[o], k_.body.node(out).dtype, base, v);
      else store(output_param_[o], k_.body.node(out).dtype, base, v[0]);
    }
  }

  // Outputs may differ in shape from the space (same element count): each is evaluated at its
  // own index of the same row-major position.
  void emit_general(mlir::Value linear) {
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      const Node& n = k_.body.node(k_.body.outputs[o].node);
      store(output_param_[o], n.dtype, linear, general_value(k_.body.outputs[o].node, delinearize(linear, n.shape)));
    }
  }

  // Lanes of a 16-byte vector of the widest element the kernel moves.
  int vector_lanes() const {
    size_t widest = 1;
    for (const Node& n : k_.body.nodes)
      if (n.kind == OpKind::Input || n.kind == OpKind::Constant) widest = std::max(widest, ir::dtype_size(n.dtype));
    for (const ir::GraphOutput& o : k_.body.outputs) widest = std::max(widest, ir::dtype_size(k_.body.node(o.node).dtype));
    return std::max(1, k_.schedule.cuda.vector_bytes / static_cast<int>(widest));
  }

  void emit_elementwise() {
    int block = k_.schedule.cuda.block_x * k_.schedule.cuda.block_y;
    begin_function(k_.name, {block, 1, 1});
    using mlir::gpu::Dimension;
    mlir::Value n = dim(ir::num_elements(k_.space));
    mlir::Value first = add(mul(block_id(Dimension::x), block_dim(Dimension::x)), thread_id(Dimension::x));
    mlir::Value stride = mul(grid_dim(Dimension::x), block_dim(Dimension::x));
    int lanes = contiguous() ? vector_lanes() : 1;
    if (!contiguous()) {
      loop(first, n, stride, [&](mlir::Value i) { emit_general(i); });
    } else if (lanes == 1) {
      loop(first, n, stride, [&](mlir::Value i) { emit_contiguous(i, 1); });
    } else {
      // Vectors only where every pointer is 16-byte aligned (cuMemAlloc's are; a sub-allocated
      // buffer may not be): else element by element.
      mlir::Value aligned = b_.create<mlir::arith::ConstantIntOp>(loc_, 1, 1);
      for (mlir::Value base : base_) {
        mlir::Value address = b_.create<mlir::LLVM::PtrToIntOp>(loc_, i64_type(), base);
        aligned = and_(aligned, eq(b_.create<mlir::arith::AndIOp>(loc_, address, i64(15)), i64(0)));
      }
      auto branch = b_.create<mlir::scf::IfOp>(loc_, aligned, /*withElseRegion=*/true);
      {
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPointToStart(&branch.getThenRegion().front());
        clear_caches();
        mlir::Value vectors = div(n, i64(lanes));
        loop(first, vectors, stride, [&](mlir::Value v) { emit_contiguous(mul(v, i64(lanes)), lanes); });
        loop(add(mul(vectors, i64(lanes)), first), n, stride, [&](mlir::Value i) { emit_contiguous(i, 1); });
        b_.setInsertionPointToStart(&branch.getElseRegion().front());
        clear_caches();
        loop(first, n, stride, [&](mlir::Value i) { emit_contiguous(i, 1); });
      }
      clear_caches();
    }
    finish_function();
    ir::CudaLaunch& l = add_launch(k_.name);
    l.work[0] = ir::num_elements(k_.space);
    l.work_per_block[0] = static_cast<int64_t>(block) * lanes * std::max(1, k_.schedule.cuda.items_per_thread);
    l.max_grid[0] = 65536;  // grid-stride: more blocks than this only add scheduling
  }

  // ---- transposes: 32x32 tiles through shared memory ----
  // Tile (a, b): `a` the output's innermost axis (coalesced stores), `b` the output axis that
  // carries the input's innermost axis (coalesced loads). Threads (tx, ty) of a 32x8 block load
  // out[b = b0 + tx, a = a0 + ty + 8r] into tile[ty + 8r][tx], then store tile[tx][ty + 8r] to
  // out[a = a0 + tx, b = b0 + ty + 8r]. The 33-column rows put a tile column in 32 banks.
  void emit_transpose() {
    const ir::CudaSchedule& s = k_.schedule.cuda;
    int64_t tile = s.tile_rows > 0 ? s.tile_rows : 32, pitch = s.shared_cols > 0 ? s.shared_cols : tile + 1;
    int64_t rows_per_pass = s.block_y > 0 ? s.block_y : 8;
    NodeId out = k_.body.outputs[0].node;
    const Node& out_node = k_.body.node(out);
    const ir::Shape& shape = out_node.shape;
    int rank = static_cast<int>(shape.size());
    int a = rank - 1, bx = transpose_inner_axis(k_);
    ir::Shape batch_shape;
    for (int d = 0; d < rank; ++d)
      if (d != a && d != bx) batch_shape.push_back(shape[d]);
    begin_function(k_.name, {static_cast<int>(tile), static_cast<int>(rows_per_pass), 1});
    using mlir::gpu::Dimension;
    mlir::Type element = memory_type(out_node.dtype);
    mlir::Value shared = shared_array("tile", element, tile * pitch);
    mlir::Value size_a = dim(shape[a]), size_b = dim(shape[bx]);
    mlir::Value tiles_a = ceil_div(size_a, tile), tiles_b = ceil_div(size_b, tile);
    mlir::Value tiles_y = mul(tiles_b, dim(ir::num_elements(batch_shape)));
    mlir::Value tx = thread_id(Dimension::x), ty = thread_id(Dimension::y);
    loop(block_id(Dimension::y), tiles_y, grid_dim(Dimension::y), [&](mlir::Value y) {
      mlir::Value b0 = mul(rem(y, tiles_b), i64(tile));
      std::vector<mlir::Value> batch = delinearize(div(y, tiles_b), batch_shape);
      loop(block_id(Dimension::x), tiles_a, grid_dim(Dimension::x), [&](mlir::Value x) {
        mlir::Value a0 = mul(x, i64(tile));
        auto index = [&](mlir::Value at_a, mlir::Value at_b) {
          std::vector<mlir::Value> idx;
          size_t next = 0;
          for (int d = 0; d < rank; ++d) idx.push_back(d == a ? at_a : d == bx ? at_b : batch[next++]);
          return idx;
        };
        for (int64_t r = 0; r < tile; r += rows_per_pass) {
          mlir::Value row = add(ty, i64(r));
          mlir::Value at_a = add(a0, row), at_b = add(b0, tx);
          if_then(and_(lt(at_a, size_a), lt(at_b, size_b)), [&] {
            mlir::Value v = general_value(out, index(at_a, at_b));
            if (out_node.dtype == DType::Bool) v = b_.create<mlir::arith::ExtUIOp>(loc_, b_.getI8Type(), v);
            shared_store(shared, element, add(mul(row, i64(pitch)), tx), v);
          });
        }
        barrier();
        for (int64_t r = 0; r < tile; r += rows_per_pass) {
          mlir::Value row = add(ty, i64(r));
          mlir::Value at_a = add(a0, tx), at_b = add(b0, row);
          if_then(and_(lt(at_a, size_a), lt(at_b, size_b)), [&] {
            mlir::Value v = shared_load(shared, element, add(mul(tx, i64(pitch)), row));
            mlir::Value offset = linearize(index(at_a, at_b), shape);
            unsigned align = static_cast<unsigned>(ir::dtype_size(out_node.dtype));
            // The other outputs at the same row-major position: a reshape of the first takes
            // the tile's value; any other is computed there.
            for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
              NodeId other = k_.body.outputs[o].node;
              const Node& n = k_.body.node(other);
              if (o == 0 || reshape_of(other, out))
                b_.create<mlir::LLVM::StoreOp>(loc_, v, element_address(base_[output_param_[o]], element, offset), align);
              else
                store(output_param_[o], n.dtype, offset, general_value(other, delinearize(offset, n.shape)));
            }
          });
        }
        barrier();  // the next tile overwrites the shared tile
      });
    });
    finish_function();
    ir::CudaLaunch& l = add_launch(k_.name);
    l.work[0] = shape[a];
    l.work_per_block[0] = tile;
    l.work[1] = shape[bx] * ir::num_elements(batch_shape);
    l.work_per_block[1] = tile;
    l.max_grid[1] = 65535;
  }

  // Whether node `id` is node `of` reshaped (the same elements in the same row-major order).
  bool reshape_of(NodeId id, NodeId of) const {
    const Node& n = k_.body.node(id);
    if (id == of) return true;
    bool reshape = n.kind == OpKind::Reshape || n.kind == OpKind::ExpandDims || n.kind == OpKind::Squeeze;
    return reshape && n.dtype == k_.body.node(of).dtype && reshape_of(n.inputs[0], of);
  }

  // ---- reductions ----

  DType accumulator_type(NodeId id) { return ScalarLowering::reduce_accumulator_type(k_.body, id); }
  mlir::Value accumulator_identity(NodeId id) { return scalar_.reduce_identity(k_.body, id, 1); }
  mlir::Value combine(NodeId id, mlir::Value acc, mlir::Value x) { return scalar_.reduce_combine(k_.body, id, acc, x); }
  mlir::Value to_accumulator(NodeId id, mlir::Value x) { return scalar_.reduce_input(k_.body, id, x, 1); }
  mlir::Value finish(NodeId id, mlir::Value acc, const ir::Dim& row_length) {
    return scalar_.reduce_finish(k_.body, id, acc, dim(row_length));
  }

  // An accumulator as 8 bytes (shared memory and scratch slots) and back.
  mlir::Value to_slot(DType t, mlir::Value v) {
    if (t == DType::Bool) return b_.create<mlir::arith::ExtUIOp>(loc_, i64_type(), v);
    if (t == DType::I32) return b_.create<mlir::arith::ExtSIOp>(loc_, i64_type(), v);
    if (t == DType::F32) v = b_.create<mlir::arith::ExtFOp>(loc_, b_.getF64Type(), v);
    if (ir::is_float(t)) return b_.create<mlir::arith::BitcastOp>(loc_, i64_type(), v);
    return v;
  }
  mlir::Value from_slot(DType t, mlir::Value v) {
    if (t == DType::Bool) return scalar_.cmpi(mlir::arith::CmpIPredicate::ne, v, i64(0));
    if (t == DType::I32) return b_.create<mlir::arith::TruncIOp>(loc_, b_.getI32Type(), v);
    if (!ir::is_float(t)) return v;
    mlir::Value f = b_.create<mlir::arith::BitcastOp>(loc_, b_.getF64Type(), v);
    return t == DType::F32 ? mlir::Value(b_.create<mlir::arith::TruncFOp>(loc_, b_.getF32Type(), f)) : f;  // exact: it was extended
  }

  // Lane `lane ^ mask`'s value of `v` (any accumulator type; 64-bit values as two halves).
  mlir::Value shuffle_xor(mlir::Value v, int mask) {
    auto shuffle32 = [&](mlir::Value x) {
      return b_.create<mlir::gpu::ShuffleOp>(loc_, x, mask, kWarp, mlir::gpu::ShuffleMode::XOR).getResult(0);
    };
    mlir::Type t = v.getType();
    if (t.isF32() || t.isInteger(32)) return shuffle32(v);
    if (t.isInteger(1)) {
      mlir::Value wide = b_.create<mlir::arith::ExtUIOp>(loc_, b_.getI32Type(), v);
      return scalar_.cmpi(mlir::arith::CmpIPredicate::ne, shuffle32(wide), i32(0));
    }
    mlir::Value bits = t.isF64() ? mlir::Value(b_.create<mlir::arith::BitcastOp>(loc_, i64_type(), v)) : v;
    mlir::Value lo = b_.create<mlir::arith::TruncIOp>(loc_, b_.getI32Type(), bits);
    mlir::Value hi = b_.create<mlir::arith::TruncIOp>(loc_, b_.getI32Type(), b_.create<mlir::arith::ShRUIOp>(loc_, bits, i64(32)));
    lo = b_.create<mlir::arith::ExtUIOp>(loc_, i64_type(), shuffle32(lo));
    hi = b_.create<mlir::arith::ExtUIOp>(loc_, i64_type(), shuffle32(hi));
    mlir::Value joined = b_.create<mlir::arith::OrIOp>(loc_, lo, b_.create<mlir::arith::ShLIOp>(loc_, hi, i64(32)));
    return t.isF64() ? mlir::Value(b_.create<mlir::arith::BitcastOp>(loc_, b_.getF64Type(), joined)) : joined;
  }

  // Every thread's `acc` combined over the block; every thread gets the result. Within a warp
  // an xor butterfly (every lane ends with the same value: each step combines the same two
  // partial results, in either order, and the combiners are commutative); then one slot per
  // warp in shared memory, read by every thread in warp order. Ends with a barrier, so the
  // slots can be reused at once.
  mlir::Value block_reduce(NodeId id, mlir::Value acc, int threads) {
    for (int mask = kWarp / 2; mask >= 1; mask /= 2) acc = combine(id, acc, shuffle_xor(acc, mask));
    int warps = std::max(1, threads / kWarp);
    if (warps == 1) return acc;
    DType t = accumulator_type(id);
    mlir::Value slots = shared_array("warps", i64_type(), kWarp);
    mlir::Value tid = linear_thread_id();
    if_then(eq(rem(tid, i64(kWarp)), i64(0)), [&] { shared_store(slots, i64_type(), div(tid, i64(kWarp)), to_slot(t, acc)); });
    barrier();
    mlir::Value total = from_slot(t, shared_load(slots, i64_type(), i64(0)));
    for (int w = 1; w < warps; ++w) total = combine(id, total, from_slot(t, shared_load(slots, i64_type(), i64(w))));
    barrier();
    return total;
  }

  mlir::Value linear_thread_id() {
    using mlir::gpu::Dimension;
    return add(mul(thread_id(Dimension::y), block_dim(Dimension::x)), thread_id(Dimension::x));
  }

  // One thread folds [0, length) of the row in order (user combiners); every thread gets it.
  mlir::Value sequential_reduce(NodeId id, const std::vector<mlir::Value>& kept, mlir::Value row, const ir::Dim& length) {
    DType t = accumulator_type(id);
    mlir::Value slots = shared_array("warps", i64_type(), kWarp);
    if_then(eq(linear_thread_id(), i64(0)), [&] {
      auto fold = b_.create<mlir::scf::ForOp>(loc_, i64(0), dim(length), i64(1), mlir::ValueRange{accumulator_identity(id)});
      {
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPointToStart(fold.getBody());
        clear_caches();
        std::vector<mlir::Value> full = element_index(kept, row, fold.getInductionVar());
        mlir::Value x = to_accumulator(id, general_value(k_.body.node(id).inputs[0], full));
        b_.create<mlir::scf::YieldOp>(loc_, combine(id, fold.getRegionIterArgs()[0], x));
        clear_caches();
      }
      shared_store(slots, i64_type(), i64(0), to_slot(t, fold.getResult(0)));
    });
    barrier();
    mlir::Value v = from_slot(t, shared_load(slots, i64_type(), i64(0)));
    barrier();
    return v;
  }

  // Elements per thread held in registers by a row-wise kernel's on-chip path (rows of up to
  // threads * R elements). 16 for kernels whose values are at most 4 bytes (4096-element rows in
  // 256-thread blocks: softmax and layernorm rows are mostly 1024 to 4096 wide), 8 where a value
  // is 8 bytes (f64, i64: two registers each, so the same register footprint, rows up to 2048).
  // The cost is registers, allocated for the whole kernel (short rows pay it too): ptxas gives
  // examples/softmax.expr (f32) 128 registers per thread at R = 16 (64 at R = 8, 32 without the
  // on-chip path), layernorm 168 (92 at R = 8), no spills: 2 (1) resident 256-thread blocks per
  // SM, each thread with 16 independent loads in flight. R = 16 reads the common 4096-wide f32
  // rows once; a GPU profile may favour 8 (rows up to 2048, twice the occupancy).
  int elements_per_thread() const {
    size_t widest = 1;
    for (const Node& n : k_.body.nodes) widest = std::max(widest, static_cast<size_t>(ir::dtype_size(n.dtype)));
    return widest >= 8 ? 8 : 16;
  }

  // One block per row of the kept dims (grid-stride over rows): each reduction in order (a
  // later one may read an earlier one's result, as softmax's sum reads its max), then the outputs.
  // A row of 1 to threads * R elements is held on chip (row_on_chip); longer rows, empty rows and
  // kernels with a user combiner re-read the row from global memory in each pass (row_by_loops).
  void emit_block_per_row() {
    int threads = k_.schedule.cuda.block_x * k_.schedule.cuda.block_y;
    if (threads % kWarp != 0) throw ir::Error(fail_text("a reduction block of " + std::to_string(threads) + " threads"));
    ir::Shape kept_shape = kept_dims(k_);
    begin_function(k_.name, {k_.schedule.cuda.block_x, k_.schedule.cuda.block_y, 1});
    using mlir::gpu::Dimension;
    mlir::Value length = dim(ir::num_elements(reduced_dims(k_)));
    bool built_in = true;
    for (NodeId id : reduce_nodes(k_)) built_in = built_in && k_.body.node(id).as<ir::ReduceAttrs>().kind != ir::ReduceKind::Custom;
    int per_thread = elements_per_thread();
    loop(block_id(Dimension::x), dim(ir::num_elements(kept_shape)), grid_dim(Dimension::x), [&](mlir::Value row) {
      std::vector<mlir::Value> kept = delinearize(row, kept_shape);
      if (!built_in) {
        row_by_loops(kept, row, threads);
        return;
      }
      mlir::Value fits = and_(lt(i64(0), length), lt(length, i64(static_cast<int64_t>(threads) * per_thread + 1)));
      if_else(fits, [&] { row_on_chip(kept, row, threads, per_thread); }, [&] { row_by_loops(kept, row, threads); });
    });
    finish_function();
    ir::CudaLaunch& l = add_launch(k_.name);
    l.work[0] = ir::num_elements(kept_shape);
  }

  // One row, each pass a loop over the row that reads it from global memory.
  void row_by_loops(const std::vector<mlir::Value>& kept, mlir::Value row, int threads) {
    ir::Shape kept_shape = kept_dims(k_);
    ir::Dim row_length = ir::num_elements(reduced_dims(k_));
    mlir::Value tid = linear_thread_id();
    mlir::Value step = i64(threads);
    mlir::Value length = dim(row_length);
    for (NodeId id : reduce_nodes(k_)) {
      if (k_.body.node(id).as<ir::ReduceAttrs>().kind == ir::ReduceKind::Custom) {
        reduced_[id] = finish(id, sequential_reduce(id, kept, row, row_length), row_length);
        continue;
      }
      auto fold = b_.create<mlir::scf::ForOp>(loc_, tid, length, step, mlir::ValueRange{accumulator_identity(id)});
      {
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPointToStart(fold.getBody());
        CacheScope scope(*this);
        std::vector<mlir::Value> full = element_index(kept, row, fold.getInductionVar());
        mlir::Value x = to_accumulator(id, general_value(k_.body.node(id).inputs[0], full));
        b_.create<mlir::scf::YieldOp>(loc_, combine(id, fold.getRegionIterArgs()[0], x));
      }
      reduced_[id] = finish(id, block_reduce(id, fold.getResult(0), threads), row_length);
    }
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      NodeId out = k_.body.outputs[o].node;
      const Node& n = k_.body.node(out);
      if (n.shape == k_.space) {
        loop(tid, length, step, [&](mlir::Value j) {
          std::vector<mlir::Value> full = element_index(kept, row, j);
          store(output_param_[o], n.dtype, linearize(full, k_.space), general_value(out, full));
        });
      } else if (!(ir::num_elements(n.shape) == ir::num_elements(kept_shape))) {
        // Laid out like the space in another shape (never downstream of a reduction).
        loop(tid, length, step, [&](mlir::Value j) {
          mlir::Value linear = linearize(element_index(kept, row, j), k_.space);
          store(output_param_[o], n.dtype, linear, general_value(out, delinearize(linear, n.shape)));
        });
      } else {
        // A reduced-space output: element `row` (cpu_compiles() keeps rows in order up to here).
        if_then(eq(tid, i64(0)), [&] { store(output_param_[o], n.dtype, row, general_value(out, delinearize(row, n.shape))); });
      }
    }
  }

  // One row of 1 to threads * R elements (every reduction a built-in kind), held in registers:
  // thread t owns elements j_r = t + r * threads, r < R (the order row_by_loops folds them in, so
  // the results are bit-identical to it), each read at min(j_r, length - 1) so that every load
  // is in bounds. Each element's index is built once and the same index Values are used in every
  // pass, so general_value's cache hands every pass the values the first one loaded: the row is
  // read from global memory once. Nothing on this straight-line path clears the cache
  // (block_reduce's if_then restores it, see CacheScope). Element j_r counts in a fold, and is
  // stored, only where j_r < length.
  void row_on_chip(const std::vector<mlir::Value>& kept, mlir::Value row, int threads, int per_thread) {
    ir::Shape kept_shape = kept_dims(k_);
    ir::Dim row_length = ir::num_elements(reduced_dims(k_));
    mlir::Value tid = linear_thread_id();
    mlir::Value length = dim(row_length);
    mlir::Value last = sub(length, i64(1));
    std::vector<mlir::Value> valid, unclamped;
    std::vector<std::vector<mlir::Value>> full;
    for (int r = 0; r < per_thread; ++r) {
      mlir::Value j = add(tid, i64(static_cast<int64_t>(r) * threads));
      valid.push_back(lt(j, length));
      unclamped.push_back(j);
      full.push_back(element_index(kept, row, min_i64(j, last)));
    }
    for (NodeId id : reduce_nodes(k_)) {
      mlir::Value acc = accumulator_identity(id);
      for (int r = 0; r < per_thread; ++r) {
        mlir::Value x = to_accumulator(id, general_value(k_.body.node(id).inputs[0], full[r]));
        acc = b_.create<mlir::arith::SelectOp>(loc_, valid[r], combine(id, acc, x), acc);
      }
      reduced_[id] = finish(id, block_reduce(id, acc, threads), row_length);
    }
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      NodeId out = k_.body.outputs[o].node;
      const Node& n = k_.body.node(out);
      if (n.shape == k_.space || !(ir::num_elements(n.shape) == ir::num_elements(kept_shape))) {
        for (int r = 0; r < per_thread; ++r) {
          // The value is computed outside the branch (from the registers: the cache is emptied
          // inside a branch), on the clamped element where j_r is past the row. It is stored at
          // element j_r itself (the same element where j_r is valid): an address a constant
          // offset from the thread's first, so that the clamped offsets die with the loads
          // (softmax: 128 registers instead of 152).
          mlir::Value v = n.shape == k_.space ? general_value(out, full[r])
                                              : general_value(out, delinearize(linearize(full[r], k_.space), n.shape));
          mlir::Value linear = linearize(element_index(kept, row, unclamped[r]), k_.space);
          if_then(valid[r], [&] { store(output_param_[o], n.dtype, linear, v); });
        }
      } else {
        if_then(eq(tid, i64(0)), [&] { store(output_param_[o], n.dtype, row, general_value(out, delinearize(row, n.shape))); });
      }
    }
  }

  // A reduction to single elements in two launches. `NAME_partials`: block b folds elements
  // b*T + t, stepping by the whole grid, combines its threads and writes one partial per
  // reduction (block 0 also writes the block count). `NAME`: one block folds the partials in
  // block order, finishes (mean's division, the cast) and writes the outputs.
  void emit_two_stage() {
    int threads = k_.schedule.cuda.block_x * k_.schedule.cuda.block_y;
    if (threads % kWarp != 0) throw ir::Error(fail_text("a reduction block of " + std::to_string(threads) + " threads"));
    std::vector<NodeId> ids = reduce_nodes(k_);
    ir::Shape reduced_shape = reduced_dims(k_);
    ir::Dim length = ir::num_elements(reduced_shape);
    std::vector<mlir::Value> kept(kept_dims(k_).size());
    using mlir::gpu::Dimension;
    auto slot = [&](size_t q, mlir::Value block) { return add(i64(1 + static_cast<int64_t>(q) * kMaxPartials), block); };
    mlir::Value scratch;

    begin_function(k_.name + "_partials", {k_.schedule.cuda.block_x, k_.schedule.cuda.block_y, 1});
    for (mlir::Value& v : kept) v = i64(0);
    scratch = base_[scratch_param_];
    mlir::Value tid = linear_thread_id(), block = block_id(Dimension::x);
    // Blocks past kMaxPartials (a launch that ignored max_grid) have no slot: they do nothing.
    mlir::Value blocks = min_i64(grid_dim(Dimension::x), i64(kMaxPartials));
    if_then(lt(block, blocks), [&] {
      std::vector<mlir::Value> init;
      for (NodeId id : ids) init.push_back(accumulator_identity(id));
      auto fold = b_.create<mlir::scf::ForOp>(loc_, add(mul(block, i64(threads)), tid), dim(length),
                                              mul(blocks, i64(threads)), init);
      {
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPointToStart(fold.getBody());
        clear_caches();
        std::vector<mlir::Value> full = element_index(kept, i64(0), fold.getInductionVar());
        std::vector<mlir::Value> next;
        for (size_t q = 0; q < ids.size(); ++q)
          next.push_back(combine(ids[q], fold.getRegionIterArgs()[q], to_accumulator(ids[q], general_value(k_.body.node(ids[q]).inputs[0], full))));
        b_.create<mlir::scf::YieldOp>(loc_, next);
        clear_caches();
      }
      for (size_t q = 0; q < ids.size(); ++q) {
        mlir::Value total = block_reduce(ids[q], fold.getResult(q), threads);
        if_then(eq(tid, i64(0)), [&] {
          b_.create<mlir::LLVM::StoreOp>(loc_, to_slot(accumulator_type(ids[q]), total), element_address(scratch, i64_type(), slot(q, block)), 8);
        });
      }
      if_then(and_(eq(tid, i64(0)), eq(block, i64(0))),
              [&] { b_.create<mlir::LLVM::StoreOp>(loc_, blocks, element_address(scratch, i64_type(), i64(0)), 8); });
    });
    finish_function();
    ir::CudaLaunch& first = add_launch(k_.name + "_partials");
    first.work[0] = length;
    first.work_per_block[0] = static_cast<int64_t>(threads) * std::max(1, k_.schedule.cuda.items_per_thread);
    first.max_grid[0] = kMaxPartials;

    begin_function(k_.name, {k_.schedule.cuda.block_x, k_.schedule.cuda.block_y, 1});
    scratch = base_[scratch_param_];
    {
      mlir::Value tid = linear_thread_id();
      mlir::Value blocks = b_.create<mlir::LLVM::LoadOp>(loc_, i64_type(), element_address(scratch, i64_type(), i64(0)), 8);
      blocks = min_i64(blocks, i64(kMaxPartials));
      for (size_t q = 0; q < ids.size(); ++q) {
        NodeId id = ids[q];
        DType t = accumulator_type(id);
        auto fold = b_.create<mlir::scf::ForOp>(loc_, tid, blocks, i64(threads), mlir::ValueRange{accumulator_identity(id)});
        {
          mlir::OpBuilder::InsertionGuard guard(b_);
          b_.setInsertionPointToStart(fold.getBody());
          mlir::Value partial =
              b_.create<mlir::LLVM::LoadOp>(loc_, i64_type(), element_address(scratch, i64_type(), slot(q, fold.getInductionVar())), 8);
          b_.create<mlir::scf::YieldOp>(loc_, combine(id, fold.getRegionIterArgs()[0], from_slot(t, partial)));
        }
        reduced_[id] = finish(id, block_reduce(id, fold.getResult(0), threads), length);
      }
      if_then(eq(tid, i64(0)), [&] {
        for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
          NodeId out = k_.body.outputs[o].node;
          const Node& n = k_.body.node(out);
          store(output_param_[o], n.dtype, i64(0), general_value(out, std::vector<mlir::Value>(n.shape.size(), i64(0))));
        }
      });
    }
    finish_function();
    add_launch(k_.name);
  }

  // ---- kernels whose outputs reorder their rows: element by element ----
  // Each thread computes output elements (grid-stride), each reduction or matmul element the
  // element needs folded right there by the thread, in the interpreter's order (a reduction
  // read by another one is folded again for each of its elements). Slow, but it takes any
  // view after a reduction or matmul; the kernels the passes make rarely need it.

  void emit_per_element() {
    int block = 256;
    begin_function(k_.name, {block, 1, 1});
    using mlir::gpu::Dimension;
    per_element_ = true;
    mlir::Value first = add(mul(block_id(Dimension::x), block_dim(Dimension::x)), thread_id(Dimension::x));
    mlir::Value stride = mul(grid_dim(Dimension::x), block_dim(Dimension::x));
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      const Node& n = k_.body.node(k_.body.outputs[o].node);
      loop(first, dim(ir::num_elements(n.shape)), stride, [&](mlir::Value i) {
        store(output_param_[o], n.dtype, i, general_value(k_.body.outputs[o].node, delinearize(i, n.shape)));
      });
    }
    finish_function();
    ir::CudaLaunch& l = add_launch(k_.name);
    l.work[0] = ir::num_elements(k_.space);  // no output has more elements
    l.work_per_block[0] = block;
    l.max_grid[0] = 65536;
  }

  // Reduce node `id` at index `idx` of its shape, folded by this thread.
  mlir::Value reduce_here(NodeId id, const std::vector<mlir::Value>& idx) {
    const Node& n = k_.body.node(id);
    const ir::ReduceAttrs& r = n.as<ir::ReduceAttrs>();
    const ir::Shape& in_shape = k_.body.node(n.inputs[0]).shape;
    ir::Shape reduced_shape;
    for (int a : r.axes) reduced_shape.push_back(in_shape[static_cast<size_t>(a)]);
    ir::Dim length = ir::num_elements(reduced_shape);
    auto fold = b_.create<mlir::scf::ForOp>(loc_, i64(0), dim(length), i64(1), mlir::ValueRange{accumulator_identity(id)});
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(fold.getBody());
      clear_caches();
      std::vector<mlir::Value> reduced = delinearize(fold.getInductionVar(), reduced_shape), in_idx;
      size_t next_kept = 0, next_reduced = 0;
      for (size_t d = 0; d < in_shape.size(); ++d) {
        bool is_reduced = std::find(r.axes.begin(), r.axes.end(), static_cast<int>(d)) != r.axes.end();
        if (is_reduced) {
          in_idx.push_back(reduced[next_reduced++]);
          if (r.keepdims) ++next_kept;  // the reduced dim's place (index 0) in the result
        } else {
          in_idx.push_back(idx[next_kept++]);
        }
      }
      mlir::Value x = to_accumulator(id, general_value(n.inputs[0], in_idx));
      b_.create<mlir::scf::YieldOp>(loc_, combine(id, fold.getRegionIterArgs()[0], x));
      clear_caches();
    }
    return finish(id, fold.getResult(0), length);
  }

  // Matmul node `id` at index `idx` of its shape, one dot product in k order, in f64 or i64.
  mlir::Value matmul_here(NodeId id, const std::vector<mlir::Value>& idx) {
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
  std::vector<mlir::Value> operand_index_of(const ir::Shape& shape, const std::vector<mlir::Value>& batch,
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
  void emit_matmul() {
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
                  store(output_param_[o], k_.body.node(out).dtype, linearize(idx, k_.space), general_value(out, idx));
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

  mlir::OpBuilder& b_;
  mlir::Location loc_;
  const ir::Kernel& k_;
  int kernel_index_;
  const std::vector<std::string>& symbols_;
  ir::CudaPlan& plan_;
  ScalarLowering scalar_;
  mlir::gpu::GPUModuleOp module_;
  std::vector<ir::CudaArg> args_;
  std::map<NodeId, int> input_param_;
  std::vector<int> output_param_;
  int scratch_param_ = -1;
  int pointer_params_ = 0;  // parameters before the symbols
  std::array<int, 3> block_{1, 1, 1};  // the block of the function begun last
  mlir::Block* entry_ = nullptr;
  std::vector<mlir::Value> base_;            // each pointer parameter
  std::map<std::string, mlir::Value> dims_;  // by Dim::str()
  std::map<std::vector<const void*>, mlir::Value> general_cache_;
  std::map<std::pair<std::string, std::vector<const void*>>, mlir::Value> linear_memo_;  // see linearize
  std::map<NodeId, mlir::Value> reduced_;    // Reduce/Matmul node -> this row's (element's) result
  bool per_element_ = false;                 // Reduce/Matmul values are folded where they are read
};

std::unique_ptr<mlir::MLIRContext> make_context() {
  mlir::DialectRegistry registry;
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  mlir::registerNVVMDialectTranslation(registry);
  mlir::registerGPUDialectTranslation(registry);
  mlir::NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  auto context = std::make_unique<mlir::MLIRContext>(registry);
  context->loadDialect<mlir::gpu::GPUDialect, mlir::arith::ArithDialect, mlir::math::MathDialect, mlir::scf::SCFDialect,
                       mlir::LLVM::LLVMDialect, mlir::NVVM::NVVMDialect, mlir::cf::ControlFlowDialect>();
  return context;
}

struct Built {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::gpu::GPUModuleOp gpu_module;
  ir::CudaPlan plan;
};

// The compute capabilities LLVM 19's NVPTX backend generates code for (newer GPUs JIT-compile
// sm_90 PTX) that CUDA 13's ptxas still accepts.
void check_sm(int sm) {
  static const int known[] = {75, 80, 86, 87, 89, 90};
  if (std::find(std::begin(known), std::end(known), sm) == std::end(known))
    throw ir::Error("CUDA codegen: sm_" + std::to_string(sm) +
                    " is not a target of LLVM 19's NVPTX backend (sm_75, sm_80, sm_86, sm_87, sm_89, sm_90); newer GPUs "
                    "run sm_90 PTX (the driver compiles it for them)");
}

Built build_module(mlir::MLIRContext& context, const ir::Program& p, const CudaOptions& options) {
  check_sm(options.sm);
  Built built;
  built.plan.sm = "sm_" + std::to_string(options.sm);
  built.plan.symbols = program_symbols(p);
  mlir::OpBuilder b(&context);
  built.module = mlir::ModuleOp::create(b.getUnknownLoc());
  (*built.module)->setAttr(mlir::gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  b.setInsertionPointToEnd(built.module->getBody());
  auto target = mlir::NVVM::NVVMTargetAttr::get(&context, /*optLevel=*/3, "nvptx64-nvidia-cuda", built.plan.sm, "+ptx80");
  built.gpu_module = b.create<mlir::gpu::GPUModuleOp>(b.getUnknownLoc(), "fuse_kernels", mlir::ArrayRef<mlir::Attribute>{target});
  for (int ki : p.launch_order) {
    const ir::Kernel& k = p.kernels.at(static_cast<size_t>(ki));
    if (k.schedule.target != ir::TargetKind::Cuda)
      throw ir::Error("kernel " + k.name + " is not scheduled for CUDA (run the pipeline with TargetInfo::cuda)");
    GpuEmitter(b, k, ki, built.plan.symbols, options, built.plan).emit(built.gpu_module);
  }
  return built;
}

std::string to_text(mlir::Operation* op) {
  std::string text;
  llvm::raw_string_ostream out(text);
  op->print(out);
  return text;
}

// Lowers the gpu.module to the LLVM and NVVM dialects. Pass order from
// shared/notes/mlir19-debian.md: math -> llvm after gpu -> nvvm (which sends math.exp etc. to
// libdevice; NVPTX cannot select llvm.exp.f32).
void lower(Built& built) {
  mlir::MLIRContext* context = built.module->getContext();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(context, [&](mlir::Diagnostic& d) {
    diagnostics += "\n  " + d.str();
    return mlir::success();
  });
  mlir::PassManager pm(context);
  mlir::OpPassManager& device = pm.nest<mlir::gpu::GPUModuleOp>();
  device.addPass(mlir::createConvertSCFToCFPass());
  mlir::ConvertGpuOpsToNVVMOpsOptions nvvm;
  nvvm.indexBitwidth = 64;
  device.addPass(mlir::createConvertGpuOpsToNVVMOps(nvvm));
  device.addPass(mlir::createConvertMathToLLVMPass());
  device.addPass(mlir::createCanonicalizerPass());
  device.addPass(mlir::createCSEPass());
  device.addPass(mlir::createReconcileUnrealizedCastsPass());
  if (mlir::failed(pm.run(*built.module))) throw ir::Error(fail_text("lowering to NVVM failed:" + diagnostics));
}

// The toolkit whose libdevice is linked: the option, else $CUDA_HOME, $CUDA_PATH, /usr/local/cuda.
std::string toolkit_path(const CudaOptions& options) {
  if (!options.toolkit_path.empty()) return options.toolkit_path;
  for (const char* name : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(name); v && *v) return v;
  return "/usr/local/cuda";
}

bool calls_libdevice(mlir::gpu::GPUModuleOp module) {
  bool found = false;
  module.walk([&](mlir::LLVM::LLVMFuncOp f) { found = found || f.getName().starts_with("__nv_"); });
  return found;
}

}  // namespace

std::string emit_cuda_mlir(const ir::Program& p, const CudaOptions& options) {
  auto context = make_context();
  Built built = build_module(*context, p, options);
  return to_text(built.module.get());
}

std::string emit_cuda_llvm(const ir::Program& p, const CudaOptions& options) {
  auto context = make_context();
  Built built = build_module(*context, p, options);
  lower(built);
  llvm::LLVMContext llvm_context;
  std::unique_ptr<llvm::Module> llvm_module = mlir::translateModuleToLLVMIR(built.gpu_module.getOperation(), llvm_context, "fuse_kernels");
  if (!llvm_module) throw ir::Error(fail_text("translation to LLVM IR failed"));
  std::string text;
  llvm::raw_string_ostream out(text);
  llvm_module->print(out, nullptr);
  return text;
}

// ---- the CUDA simulator's entry point (codegen/cuda_sim.cpp): the same lowering, no NVPTX ----
std::unique_ptr<llvm::Module> lower_cuda_to_nvvm(const ir::Program& p, const CudaOptions& options,
                                                 llvm::LLVMContext& llvm_context, ir::CudaPlan& plan) {
  auto context = make_context();
  Built built = build_module(*context, p, options);
  lower(built);
  std::unique_ptr<llvm::Module> m = mlir::translateModuleToLLVMIR(built.gpu_module.getOperation(), llvm_context, "fuse_kernels");
  if (!m) throw ir::Error(fail_text("translation to LLVM IR failed"));
  plan = std::move(built.plan);
  return m;
}

CudaModule compile_cuda(const ir::Program& p, const CudaOptions& options) {
  auto context = make_context();
  Built built = build_module(*context, p, options);
  lower(built);
  std::string toolkit;
  if (calls_libdevice(built.gpu_module)) {
    toolkit = toolkit_path(options);
    std::string libdevice = toolkit + "/nvvm/libdevice/libdevice.10.bc";
    if (!std::filesystem::is_regular_file(libdevice))
      throw ir::Error("CUDA codegen: the kernels call libdevice (exp, log, sin, pow...) but " + libdevice +
                      " does not exist; set CUDA_HOME to the CUDA toolkit");
  }
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(context.get(), [&](mlir::Diagnostic& d) {
    diagnostics += "\n  " + d.str();
    return mlir::success();
  });
  auto target = mlir::cast<mlir::gpu::TargetAttrInterface>(built.gpu_module.getTargetsAttr()[0]);
  std::optional<llvm::SmallVector<char, 0>> ptx =
      target.serializeToObject(built.gpu_module.getOperation(), mlir::gpu::TargetOptions(toolkit, {}, "", mlir::gpu::CompilationTarget::Assembly));
  if (!ptx) throw ir::Error(fail_text("PTX generation failed:" + diagnostics));
  CudaModule result;
  result.ptx.assign(ptx->begin(), ptx->end());
  while (!result.ptx.empty() && result.ptx.back() == '\0') result.ptx.pop_back();  // cuModuleLoadData's NUL
  result.plan = std::move(built.plan);
  return result;
}

}  // namespace fuse::codegen
