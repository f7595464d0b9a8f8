// Lowers Program kernels to MLIR and compiles them to an object file for the host CPU
// (cpu_jit.cpp caches and loads it).
//
// Each kernel becomes `func @name(%buffers: !llvm.ptr, %symbols: !llvm.ptr, %begin: i64,
// %end: i64)` iterating the flattened output space over [begin, end). Buffers are addressed with
// llvm.getelementptr/load/store (a plain pointer ABI the runtime calls without MLIR types);
// arithmetic is arith/math on scalars or vector<N x T> values. Two loop forms:
// - contiguous: every value the kernel reads is either laid out like the output space or a single
//   element broadcast, so lane j of a vector is element base+j of every operand: SIMD main loop
//   and a scalar tail;
// - general: each iteration delinearizes its index into the output space and follows views
//   (broadcast, permute, reshape, expand/squeeze) as index maps to its operands.
// Transcendental functions on f32 use MLIR's polynomial approximations (they vectorize); the
// rest lower to LLVM intrinsics or libm.
#include "codegen/cpu_codegen.h"
#include "codegen/cpu_object.h"
#include "codegen/kernel_queries.h"
#include "codegen/scalar_lowering.h"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Operator.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

namespace fuse::codegen {

using ir::DType;
using ir::Node;
using ir::NodeId;
using ir::OpKind;
using ir::ScalarOp;

// Every kernel kind is compiled. Reductions and matmuls need each output element to sit at the
// position of the row (or element) of the result it depends on: between a reduction or matmul
// and an output only elementwise ops, broadcasts, expand_dims and squeeze (a permute or reshape
// there would move elements across rows; such kernels run in the interpreter for now).
bool cpu_compiles(const ir::Kernel& k) {
  if (k.kind != ir::KernelKind::Reduction && k.kind != ir::KernelKind::RowWise && k.kind != ir::KernelKind::Matmul)
    return true;
  std::vector<bool> after_reduce(k.body.nodes.size(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(k.body.nodes.size()); ++id) {
    const Node& n = k.body.node(id);
    bool downstream = false;
    for (NodeId in : n.inputs) {
      OpKind kind = k.body.node(in).kind;
      downstream = downstream || after_reduce[in] || kind == OpKind::Reduce || kind == OpKind::Matmul;
    }
    after_reduce[id] = downstream;
    bool allowed = n.kind == OpKind::Elementwise || n.kind == OpKind::BroadcastTo || n.kind == OpKind::ExpandDims ||
                   n.kind == OpKind::Squeeze || n.kind == OpKind::Reduce;
    if (downstream && !allowed) return false;
  }
  return true;
}

namespace {


std::string fail_text(const std::string& what) { return "internal error in CPU codegen: " + what; }

std::vector<std::string> program_symbols(const ir::Program& p) {
  std::set<std::string> names;
  for (const ir::Buffer& b : p.buffers)
    for (const ir::Dim& d : b.shape) names.insert(d.symbols.begin(), d.symbols.end());
  for (const ir::Kernel& k : p.kernels)
    for (const Node& n : k.body.nodes)
      for (const ir::Dim& d : n.shape) names.insert(d.symbols.begin(), d.symbols.end());
  return {names.begin(), names.end()};
}

// How many chunks a split reduction's elements are divided into: enough for every core of a
// large machine to take a few, few enough that combining them costs nothing.
constexpr int64_t kSplitChunks = 64;

// A reduction to a single element (sum(x), max(x * y)) has one row, so one parallel iteration:
// it is split into chunks instead (see KernelEmitter::emit_split_chunk). Only when the
// reductions are independent of each other and combine associatively (built-in kinds), and the
// outputs are single elements.
bool split_reduction(const ir::Kernel& k) {
  if (k.kind != ir::KernelKind::Reduction) return false;
  ir::Dim rows = 1;
  for (size_t d = 0; d < k.space.size(); ++d)
    if (std::find(k.axes.begin(), k.axes.end(), static_cast<int>(d)) == k.axes.end()) rows = rows * k.space[d];
  if (!(rows == ir::Dim(1))) return false;
  for (const ir::GraphOutput& o : k.body.outputs)
    if (!(ir::num_elements(k.body.node(o.node).shape) == ir::Dim(1))) return false;
  std::vector<bool> after_reduce(k.body.nodes.size(), false);
  bool any = false;
  for (NodeId id = 0; id < static_cast<NodeId>(k.body.nodes.size()); ++id) {
    const Node& n = k.body.node(id);
    bool downstream = false;
    for (NodeId in : n.inputs) downstream = downstream || after_reduce[in];
    if (n.kind == OpKind::Reduce) {
      if (downstream || n.as<ir::ReduceAttrs>().kind == ir::ReduceKind::Custom) return false;
      any = true;
      downstream = true;
    }
    after_reduce[id] = downstream;
  }
  return any;
}

int64_t split_scratch_bytes(const ir::Kernel& k) {
  int64_t reduces = 0;
  for (const Node& n : k.body.nodes) reduces += n.kind == OpKind::Reduce;
  return reduces * kSplitChunks * 8;
}

// Emits one kernel's function body.
class KernelEmitter {
 public:
  KernelEmitter(mlir::OpBuilder& b, const ir::Kernel& k, const std::map<std::string, int>& symbols,
                const CpuOptions& options, std::vector<ir::HostArray>& constants)
      : b_(b),
        loc_(b.getUnknownLoc()),
        k_(k),
        symbols_(symbols),
        options_(options),
        constants_(constants),
        scalar_(b, options.fast_math, /*libdevice=*/false, "internal error in CPU codegen: ") {}

  void emit(mlir::func::FuncOp func) {
    mlir::Block* entry = func.addEntryBlock();
    entry_ = entry;
    b_.setInsertionPointToStart(entry);
    buffers_ = entry->getArgument(0);
    symbols_arg_ = entry->getArgument(1);
    mlir::Value begin = entry->getArgument(2), end = entry->getArgument(3);
    // Buffer addresses and dims are loaded once, before the loops: LLVM cannot hoist them out
    // itself, since the kernel's stores might alias the arrays they come from.
    load_bases();
    if (k_.kind == ir::KernelKind::Matmul) {
      emit_matmul(begin, end);
      b_.create<mlir::func::ReturnOp>(loc_);
      return;
    }
    if (split_reduction(k_)) {
      loop(begin, end, 1, [&](mlir::Value chunk) { emit_split_chunk(chunk); });
      b_.create<mlir::func::ReturnOp>(loc_);
      return;
    }
    if (columns_form()) {
      emit_columns(begin, end, std::max(1, k_.schedule.cpu.vector_width));
      b_.create<mlir::func::ReturnOp>(loc_);
      return;
    }
    if (k_.kind == ir::KernelKind::Reduction || k_.kind == ir::KernelKind::RowWise) {
      loop(begin, end, 1, [&](mlir::Value row) { emit_reduction_row(row); });
      b_.create<mlir::func::ReturnOp>(loc_);
      return;
    }
    int lanes = contiguous() ? std::max(1, k_.schedule.cpu.vector_width) : 0;
    if (lanes > 1) {
      emit_contiguous_loops(begin, end, lanes);  // whole vectors, then a scalar tail
    } else if (lanes == 1) {
      loop(begin, end, 1, [&](mlir::Value i) { emit_contiguous(i, 1); });
    } else if (Inner inner = kernel_inner_access(); inner == Inner::Constant || inner == Inner::Unit) {
      emit_rows(begin, end, std::max(1, k_.schedule.cpu.vector_width));
    } else if (inner == Inner::Strided) {
      emit_tiled(begin, end);
    } else {
      loop(begin, end, 1, [&](mlir::Value i) { emit_general(i); });
    }
    b_.create<mlir::func::ReturnOp>(loc_);
  }

  // The second function of a split reduction: combines the chunks' accumulators, in chunk order,
  // and writes the outputs (a single element each).
  void emit_split_finish(mlir::func::FuncOp func) {
    mlir::Block* entry = func.addEntryBlock();
    entry_ = entry;
    b_.setInsertionPointToStart(entry);
    buffers_ = entry->getArgument(0);
    symbols_arg_ = entry->getArgument(1);
    load_bases();
    ir::Dim row_length = ir::num_elements(reduced_dims());
    int q = 0;
    for (NodeId id : reduce_nodes()) {
      auto chunks = b_.create<mlir::scf::ForOp>(loc_, i64(0), i64(kSplitChunks), i64(1),
                                                mlir::ValueRange{accumulator_identity(id, 1)});
      {
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPointToStart(chunks.getBody());
        mlir::Value partial = load_partial(id, q, chunks.getInductionVar());
        b_.create<mlir::scf::YieldOp>(loc_, combine(id, chunks.getRegionIterArgs()[0], partial));
      }
      reduced_[id] = finish(id, chunks.getResult(0), row_length);
      ++q;
    }
    clear_caches();
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      const Node& n = k_.body.node(k_.body.outputs[o].node);
      store(output_slot_[o], n.dtype, i64(0), general_value(k_.body.outputs[o].node, delinearize(i64(0), n.shape)), 1);
    }
    b_.create<mlir::func::ReturnOp>(loc_);
  }

 private:
  // ---- split reductions: a reduction to one element, over chunks of its elements ----
  // Chunk c of kSplitChunks folds elements [c*L/C, (c+1)*L/C) into one accumulator per Reduce
  // in a scratch buffer (the slot after the constants, 8 bytes per accumulator); the _finish
  // function combines them. The thread pool runs chunks in parallel.

  std::vector<NodeId> reduce_nodes() const {
    std::vector<NodeId> ids;
    for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
      if (k_.body.node(id).kind == OpKind::Reduce) ids.push_back(id);
    return ids;
  }

  mlir::Value partial_address(int q, mlir::Value chunk) {
    mlir::Value index = add(i64(static_cast<int64_t>(q) * kSplitChunks), chunk);
    return b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), i64_type(), base_[slot_count_], mlir::ValueRange{index});
  }
  void store_partial(NodeId id, int q, mlir::Value chunk, mlir::Value acc) {
    if (accumulator_type(id) == DType::Bool) acc = b_.create<mlir::arith::ExtUIOp>(loc_, b_.getI8Type(), acc);
    b_.create<mlir::LLVM::StoreOp>(loc_, acc, partial_address(q, chunk), 8);
  }
  mlir::Value load_partial(NodeId id, int q, mlir::Value chunk) {
    DType t = accumulator_type(id);
    mlir::Value v = b_.create<mlir::LLVM::LoadOp>(loc_, memory_type(t), partial_address(q, chunk), 8);
    return t == DType::Bool ? cmpi(mlir::arith::CmpIPredicate::ne, v, zero_i8(1)) : v;
  }

  void emit_split_chunk(mlir::Value chunk) {
    ir::Dim row_length = ir::num_elements(reduced_dims());
    mlir::Value length = dim(row_length);
    mlir::Value from = b_.create<mlir::arith::DivSIOp>(loc_, mul(chunk, length), i64(kSplitChunks));
    mlir::Value to = b_.create<mlir::arith::DivSIOp>(loc_, mul(add(chunk, i64(1)), length), i64(kSplitChunks));
    int lanes = std::max(1, k_.schedule.cpu.vector_width);
    std::vector<NodeId> ids = reduce_nodes();
    std::vector<mlir::Value> kept(kept_dims().size(), i64(0));  // every kept dim has size 1
    std::vector<mlir::Value> accs = accumulate(ids, kept, i64(0), from, to, lanes);
    for (size_t q = 0; q < ids.size(); ++q) store_partial(ids[q], static_cast<int>(q), chunk, accs[q]);
  }

  void load_bases() {
    assign_slots();
    int slots = slot_count_ + (split_reduction(k_) ? 1 : 0);  // a split reduction's scratch
    for (int slot = 0; slot < slots; ++slot) {
      mlir::Value slot_ptr = b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), ptr_type(), buffers_,
                                                          mlir::ArrayRef<mlir::LLVM::GEPArg>{slot});
      base_.push_back(b_.create<mlir::LLVM::LoadOp>(loc_, ptr_type(), slot_ptr));
    }
    for (const Node& n : k_.body.nodes)
      for (const ir::Dim& d : n.shape) dim(d);
    for (const ir::Dim& d : k_.space) dim(d);
  }

  // ---- small helpers ----
  mlir::Type i64_type() { return b_.getI64Type(); }
  mlir::Value i64(int64_t v) { return b_.create<mlir::arith::ConstantIntOp>(loc_, v, 64); }
  mlir::Value add(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::AddIOp>(loc_, a, c); }
  mlir::Value sub(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::SubIOp>(loc_, a, c); }
  mlir::Value mul(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::MulIOp>(loc_, a, c); }
  mlir::Type ptr_type() { return mlir::LLVM::LLVMPointerType::get(b_.getContext()); }

  // Values cached while emitting one loop body are defined inside it: never reuse them outside.
  void clear_caches() {
    general_cache_.clear();
    contiguous_cache_.clear();
    row_cache_.clear();
    lane_cache_.clear();
  }

  template <class Body>
  void loop(mlir::Value from, mlir::Value to, int64_t step, Body body) {
    auto for_op = b_.create<mlir::scf::ForOp>(loc_, from, to, i64(step));
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(for_op.getBody());
    clear_caches();
    body(for_op.getInductionVar());
    clear_caches();
  }

  // The register type of one lane: bool is i1 in registers, i8 in memory.
  mlir::Type scalar_type(DType t) {
    switch (t) {
      case DType::Bool: return b_.getI1Type();
      case DType::I32: return b_.getI32Type();
      case DType::I64: return b_.getI64Type();
      case DType::F32: return b_.getF32Type();
      case DType::F64: return b_.getF64Type();
    }
    return {};
  }
  mlir::Type memory_type(DType t) { return t == DType::Bool ? b_.getI8Type() : scalar_type(t); }
  mlir::Type lane_type(mlir::Type scalar, int lanes) {
    return lanes > 1 ? mlir::Type(mlir::VectorType::get({lanes}, scalar)) : scalar;
  }

  mlir::Value constant(DType t, double f, int64_t i, int lanes) {
    mlir::Type s = scalar_type(t);
    mlir::TypedAttr attr = ir::is_float(t) ? mlir::TypedAttr(b_.getFloatAttr(s, f)) : mlir::TypedAttr(b_.getIntegerAttr(s, i));
    if (lanes > 1) attr = mlir::DenseElementsAttr::get(mlir::cast<mlir::ShapedType>(lane_type(s, lanes)), attr);
    return b_.create<mlir::arith::ConstantOp>(loc_, attr);
  }

  // Byte address of element `offset` of the buffer in `slot`.
  mlir::Value element_address(int slot, DType t, mlir::Value offset) {
    return b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), memory_type(t), base_[slot], mlir::ValueRange{offset});
  }

  mlir::Value load(int slot, DType t, mlir::Value offset, int lanes) {
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

  mlir::Value constant_i8(int64_t value, int lanes) {
    mlir::TypedAttr attr = b_.getIntegerAttr(b_.getI8Type(), value);
    if (lanes > 1) attr = mlir::DenseElementsAttr::get(mlir::cast<mlir::ShapedType>(lane_type(b_.getI8Type(), lanes)), attr);
    return b_.create<mlir::arith::ConstantOp>(loc_, attr);
  }

  mlir::Value zero_i8(int lanes) {
    mlir::TypedAttr attr = b_.getIntegerAttr(b_.getI8Type(), 0);
    if (lanes > 1) attr = mlir::DenseElementsAttr::get(mlir::cast<mlir::ShapedType>(lane_type(b_.getI8Type(), lanes)), attr);
    return b_.create<mlir::arith::ConstantOp>(loc_, attr);
  }

  // `streaming`: a non-temporal store (the address must be 64-byte aligned), which writes
  // around the caches instead of first reading the line it overwrites.
  void store(int slot, DType t, mlir::Value offset, mlir::Value v, int lanes, bool streaming = false) {
    if (t == DType::Bool) v = b_.create<mlir::arith::ExtUIOp>(loc_, lane_type(b_.getI8Type(), lanes), v);
    unsigned align = streaming ? 64 : static_cast<unsigned>(ir::dtype_size(t));
    if (mask_ && lanes > 1 && !streaming) {
      b_.create<mlir::LLVM::MaskedStoreOp>(loc_, v, element_address(slot, t, offset), mask_, align);
      return;
    }
    b_.create<mlir::LLVM::StoreOp>(loc_, v, element_address(slot, t, offset), align, false, streaming);
  }

  // A dim's value: factor * the symbols' sizes (computed once, at the function's entry).
  mlir::Value dim(const ir::Dim& d) {
    std::string key = d.str();
    auto cached = dims_.find(key);
    if (cached != dims_.end()) return cached->second;
    // At the function's entry, wherever it is first asked for: it is cached for every later use
    // (it depends only on the symbols argument).
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(entry_);
    mlir::Value v = i64(d.factor);
    for (const std::string& s : d.symbols) {
      mlir::Value address = b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), i64_type(), symbols_arg_,
                                                         mlir::ArrayRef<mlir::LLVM::GEPArg>{symbols_.at(s)});
      v = mul(v, b_.create<mlir::LLVM::LoadOp>(loc_, i64_type(), address));
    }
    dims_[key] = v;
    return v;
  }

  mlir::Value linearize(const std::vector<mlir::Value>& idx, const ir::Shape& shape) {
    mlir::Value lin = i64(0);
    for (size_t k = 0; k < shape.size(); ++k) lin = add(mul(lin, dim(shape[k])), idx[k]);
    return lin;
  }

  // (The outermost index is what is left: no remainder, and a rank-1 index is the position.)
  std::vector<mlir::Value> delinearize(mlir::Value lin, const ir::Shape& shape) {
    std::vector<mlir::Value> idx(shape.size());
    for (size_t k = shape.size(); k-- > 0;) {
      if (k == 0) {
        idx[0] = lin;
        break;
      }
      mlir::Value d = dim(shape[k]);
      idx[k] = b_.create<mlir::arith::RemSIOp>(loc_, lin, d);
      lin = b_.create<mlir::arith::DivSIOp>(loc_, lin, d);
    }
    return idx;
  }

  // Buffers array layout: the kernel's inputs (body Input nodes in order), outputs, constants.
  void assign_slots() {
    int slot = 0;
    for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
      if (k_.body.node(id).kind == OpKind::Input) input_slot_[id] = slot++;
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) output_slot_.push_back(slot++);
    for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
      if (k_.body.node(id).kind == OpKind::Constant) {
        input_slot_[id] = slot++;
        constants_.push_back(k_.body.node(id).as<ir::ConstantAttrs>().value);
      }
    slot_count_ = slot;
  }

  bool contiguous() const { return elementwise_contiguous(k_); }

  // ---- the two loop forms ----

  void emit_contiguous(mlir::Value base, int lanes) {
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      const Node& n = k_.body.node(k_.body.outputs[o].node);
      store(output_slot_[o], n.dtype, base, contiguous_value(k_.body.outputs[o].node, base, lanes), lanes);
    }
  }

  // Kernels moving more than this many bytes write their output with non-temporal stores: the
  // output could not stay in the caches anyway (larger than a typical L3 share), and streaming
  // it saves reading every line before it is overwritten (a third of an add's traffic).
  static constexpr int64_t kStreamingBytes = int64_t{32} << 20;

  // The contiguous SIMD loop over [begin, end), with non-temporal stores when the kernel is large
  // and has one output: scalar iterations until the output is 64-byte aligned, aligned streaming
  // vectors, a scalar tail.
  // The contiguous loop over [begin, end) as one loop of whole vectors: the first and last
  // iterations load and store under a lane mask (masked-off lanes touch no memory), so the body
  // is emitted once, with no scalar copy for the tails (compile time). A large kernel with one
  // output starts at the 64-byte boundary below `begin` and writes its whole vectors with
  // non-temporal stores.
  void emit_contiguous_loops(mlir::Value begin, mlir::Value end, int lanes) {
    mlir::Value streaming = b_.create<mlir::arith::ConstantIntOp>(loc_, 0, 1);
    mlir::Value aligned = begin;
    DType out_type = k_.body.node(k_.body.outputs[0].node).dtype;
    int64_t out_size = static_cast<int64_t>(ir::dtype_size(out_type));
    // Streaming needs one output whose vectors span whole 64-byte lines.
    if (k_.body.outputs.size() == 1 && out_size * lanes >= 64) {
      int64_t bytes_per_element = out_size;
      for (const Node& n : k_.body.nodes)
        if (n.kind == OpKind::Input && n.shape == k_.space) bytes_per_element += static_cast<int64_t>(ir::dtype_size(n.dtype));
      mlir::Value total = dim(ir::num_elements(k_.space));
      mlir::Value large = cmpi(mlir::arith::CmpIPredicate::sgt, mul(total, i64(bytes_per_element)), i64(kStreamingBytes));
      mlir::Value address = b_.create<mlir::LLVM::PtrToIntOp>(loc_, i64_type(), base_[output_slot_[0]]);
      // Elements are aligned to their size (the runtime's buffers are), so a boundary is an element.
      mlir::Value element_aligned =
          cmpi(mlir::arith::CmpIPredicate::eq, b_.create<mlir::arith::RemUIOp>(loc_, address, i64(out_size)), i64(0));
      streaming = b_.create<mlir::arith::AndIOp>(loc_, large, element_aligned);
      mlir::Value misalignment = b_.create<mlir::arith::RemUIOp>(loc_, add(address, mul(begin, i64(out_size))), i64(64));
      mlir::Value peel = b_.create<mlir::arith::DivUIOp>(
          loc_, b_.create<mlir::arith::RemUIOp>(loc_, sub(i64(64), misalignment), i64(64)), i64(out_size));
      aligned = select(streaming, min_i64(add(begin, peel), end), begin);  // peel <= lanes
    }
    // Whole vectors from `aligned` on, unmasked; the elements before it and after the last whole
    // vector are one masked vector each (no scalar copy of the body: compile time).
    mlir::Value vector_end = whole_steps_end(aligned, end, lanes);
    mlir::Type lane_index = mlir::VectorType::get({lanes}, b_.getI64Type());
    std::vector<mlir::Attribute> iota;
    for (int l = 0; l < lanes; ++l) iota.push_back(b_.getI64IntegerAttr(l));
    mlir::Value lane_numbers = b_.create<mlir::arith::ConstantOp>(
        loc_, mlir::DenseElementsAttr::get(mlir::cast<mlir::ShapedType>(lane_index), iota));
    // Lanes [lo, hi) of the vector at i, under a mask; nothing when the range is empty.
    auto masked_vector = [&](mlir::Value i, mlir::Value lo, mlir::Value hi) {
      auto branch = b_.create<mlir::scf::IfOp>(loc_, cmpi(mlir::arith::CmpIPredicate::slt, lo, hi), /*withElseRegion=*/false);
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(&branch.getThenRegion().front());
      clear_caches();
      auto splat = [&](mlir::Value v) { return b_.create<mlir::vector::BroadcastOp>(loc_, lane_index, v).getResult(); };
      mask_ = b_.create<mlir::arith::AndIOp>(loc_, cmpi(mlir::arith::CmpIPredicate::sge, lane_numbers, splat(lo)),
                                             cmpi(mlir::arith::CmpIPredicate::slt, lane_numbers, splat(hi)));
      emit_contiguous(i, lanes);
      mask_ = {};
      clear_caches();
    };
    // Before `aligned`: lanes [lanes - (aligned - begin), lanes) of the vector ending there.
    mlir::Value head = sub(aligned, i64(lanes));
    masked_vector(head, sub(begin, head), min_i64(i64(lanes), sub(end, head)));
    loop(aligned, vector_end, lanes, [&](mlir::Value i) {
      for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
        const Node& n = k_.body.node(k_.body.outputs[o].node);
        mlir::Value v = contiguous_value(k_.body.outputs[o].node, i, lanes);
        auto branch = b_.create<mlir::scf::IfOp>(loc_, streaming, /*withElseRegion=*/true);
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPointToStart(&branch.getThenRegion().front());
        store(output_slot_[o], n.dtype, i, v, lanes, true);
        b_.setInsertionPointToStart(&branch.getElseRegion().front());
        store(output_slot_[o], n.dtype, i, v, lanes, false);
      }
    });
    // After the last whole vector: lanes [0, end - vector_end), when the head did not cover them.
    masked_vector(vector_end, max_i64(i64(0), sub(begin, vector_end)), sub(end, vector_end));
  }

  mlir::Value contiguous_value(NodeId id, mlir::Value base, int lanes) {
    auto it = contiguous_cache_.find(id);
    if (it != contiguous_cache_.end()) return it->second;
    const Node& n = k_.body.node(id);
    mlir::Value v;
    if (n.kind == OpKind::BroadcastTo) {
      const Node& in = k_.body.node(n.inputs[0]);
      v = general_value(n.inputs[0], std::vector<mlir::Value>(in.shape.size(), i64(0)));
      if (lanes > 1) v = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(scalar_type(n.dtype), lanes), v);
    } else if (n.kind == OpKind::Elementwise) {
      std::vector<mlir::Value> args;
      for (NodeId in : n.inputs) args.push_back(contiguous_value(in, base, lanes));
      v = scalar_fn(n.as<ir::ElementwiseAttrs>().body, args, lanes);
    } else {
      v = load(input_slot_.at(id), n.dtype, base, lanes);
    }
    contiguous_cache_[id] = v;
    return v;
  }

  // Outputs may differ in shape from the space (same element count, e.g. x.T and its reshape):
  // each is evaluated at its own index of the same row-major position.
  void emit_general(mlir::Value linear) {
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      const Node& n = k_.body.node(k_.body.outputs[o].node);
      store(output_slot_[o], n.dtype, linear, general_value(k_.body.outputs[o].node, delinearize(linear, n.shape)), 1);
    }
  }

  // The value of node `id` at multi-index `idx` of its shape, following views as index maps.
  mlir::Value general_value(NodeId id, const std::vector<mlir::Value>& idx) {
    std::vector<const void*> key{reinterpret_cast<const void*>(static_cast<intptr_t>(id))};
    for (mlir::Value v : idx) key.push_back(v.getAsOpaquePointer());
    auto it = general_cache_.find(key);
    if (it != general_cache_.end()) return it->second;
    const Node& n = k_.body.node(id);
    auto operand = [&](const std::vector<mlir::Value>& in_idx) { return general_value(n.inputs[0], in_idx); };
    mlir::Value v;
    switch (n.kind) {
      case OpKind::Input:
      case OpKind::Constant: v = load(input_slot_.at(id), n.dtype, linearize(idx, n.shape), 1); break;
      case OpKind::Elementwise: {
        std::vector<mlir::Value> args;
        for (NodeId in : n.inputs) args.push_back(general_value(in, idx));
        v = scalar_fn(n.as<ir::ElementwiseAttrs>().body, args, 1);
        break;
      }
      case OpKind::BroadcastTo:
      case OpKind::Permute:
      case OpKind::ExpandDims:
      case OpKind::Squeeze:
      case OpKind::Reshape: v = operand(operand_index(n, idx)); break;
      case OpKind::Reduce:
      case OpKind::Matmul: v = reduced_.at(id); break;  // this row's (element's) result, computed before
      case OpKind::Arange: v = idx[0]; break;
      case OpKind::Rand: v = philox_uniform(linearize(idx, n.shape), n.as<ir::RandAttrs>().seed); break;
      default: throw ir::Error(fail_text(std::string(ir::op_kind_name(n.kind)) + " in an elementwise kernel"));
    }
    general_cache_[key] = v;
    return v;
  }

  // A view's operand index for its own index `idx` (views as index maps).
  std::vector<mlir::Value> operand_index(const Node& n, const std::vector<mlir::Value>& idx) {
    const ir::Shape& from = k_.body.node(n.inputs[0]).shape;
    return scalar_.view_operand_index(n, from, idx, [&](const std::vector<mlir::Value>& i) {
      return delinearize(linearize(i, n.shape), from);
    });
  }

  // ---- elementwise kernels row by row: the innermost dim as the loop, views as strides ----
  // Where operands are broadcast along some dims or permuted (bias rows, x.T), the element at
  // (outer..., c) of an operand is base(outer) + c * stride, stride 0 (constant along the row),
  // 1 (contiguous) or larger. Rows whose operands all have stride 0 or 1 are SIMD loops; any
  // larger stride (a transpose) makes the kernel walk 16x16 tiles of rows x columns so that
  // both the rows read and the rows written stay in cache.

  enum class Inner { Constant, Unit, Strided, Unsupported };  // worse is larger

  // How node `id`'s value varies along the innermost index when that index sits on `axis` of
  // its shape (-1: it does not reach this node).
  Inner inner_access(NodeId id, int axis) const {
    if (axis < 0) return Inner::Constant;
    auto key = std::make_pair(id, axis);
    auto it = inner_memo_.find(key);
    if (it != inner_memo_.end()) return it->second;
    return inner_memo_[key] = inner_access_uncached(id, axis);  // (a DAG: shared operands once)
  }
  Inner inner_access_uncached(NodeId id, int axis) const {
    const Node& n = k_.body.node(id);
    const ir::Shape& from = n.inputs.empty() ? n.shape : k_.body.node(n.inputs[0]).shape;
    switch (n.kind) {
      case OpKind::Input:
      case OpKind::Constant: return axis + 1 == static_cast<int>(n.shape.size()) ? Inner::Unit : Inner::Strided;
      case OpKind::Elementwise: {
        Inner worst = Inner::Constant;
        for (NodeId in : n.inputs) worst = std::max(worst, inner_access(in, axis));
        return worst;
      }
      case OpKind::BroadcastTo: {
        int in_axis = axis - static_cast<int>(n.shape.size() - from.size());
        return inner_access(n.inputs[0], in_axis >= 0 && !(from[in_axis] == ir::Dim(1)) ? in_axis : -1);
      }
      case OpKind::Permute: return inner_access(n.inputs[0], n.as<ir::PermuteAttrs>().perm[axis]);
      case OpKind::ExpandDims: {
        int a = n.as<ir::ExpandDimsAttrs>().axis;
        return inner_access(n.inputs[0], axis == a ? -1 : axis > a ? axis - 1 : axis);
      }
      case OpKind::Squeeze: {
        const std::vector<int>& axes = n.as<ir::SqueezeAttrs>().axes;
        int seen = -1;
        for (int d = 0; d < static_cast<int>(from.size()); ++d)
          if (std::find(axes.begin(), axes.end(), d) == axes.end() && ++seen == axis) return inner_access(n.inputs[0], d);
        return Inner::Unsupported;
      }
      case OpKind::Reshape:
        // Only a reshape that keeps the innermost dim keeps a row a row.
        if (axis + 1 == static_cast<int>(n.shape.size()) && !from.empty() && from.back() == n.shape.back())
          return inner_access(n.inputs[0], static_cast<int>(from.size()) - 1);
        return Inner::Unsupported;
      case OpKind::Matmul: return axis + 1 == static_cast<int>(n.shape.size()) ? Inner::Unit : Inner::Unsupported;
      default: return Inner::Unsupported;
    }
  }

  // The axis of view `n`'s operand that carries the innermost index (-1: none).
  int operand_axis(const Node& n, int axis) const {
    if (axis < 0) return -1;
    const ir::Shape& from = k_.body.node(n.inputs[0]).shape;
    switch (n.kind) {
      case OpKind::BroadcastTo: {
        int in_axis = axis - static_cast<int>(n.shape.size() - from.size());
        return in_axis >= 0 && !(from[in_axis] == ir::Dim(1)) ? in_axis : -1;
      }
      case OpKind::Permute: return n.as<ir::PermuteAttrs>().perm[axis];
      case OpKind::ExpandDims: {
        int a = n.as<ir::ExpandDimsAttrs>().axis;
        return axis == a ? -1 : axis > a ? axis - 1 : axis;
      }
      case OpKind::Squeeze: {
        const std::vector<int>& axes = n.as<ir::SqueezeAttrs>().axes;
        int seen = -1;
        for (int d = 0; d < static_cast<int>(from.size()); ++d)
          if (std::find(axes.begin(), axes.end(), d) == axes.end() && ++seen == axis) return d;
        return -1;
      }
      case OpKind::Reshape: return static_cast<int>(from.size()) - 1;
      default: return -1;
    }
  }

  // The worst access of the kernel's outputs along the space's innermost dim; Unsupported when
  // the rows form does not apply (rank < 2, outputs shaped unlike the space).
  Inner kernel_inner_access() const {
    if (k_.space.size() < 2) return Inner::Unsupported;
    Inner worst = Inner::Constant;
    for (const ir::GraphOutput& o : k_.body.outputs) {
      if (!(k_.body.node(o.node).shape == k_.space)) return Inner::Unsupported;
      worst = std::max(worst, inner_access(o.node, static_cast<int>(k_.space.size()) - 1));
    }
    return worst;
  }

  // Value of `id` at columns [c, c + lanes) of the row whose index (with the innermost index 0
  // on `axis`) is `idx0`. Only for nodes whose inner_access is Constant or Unit.
  mlir::Value lane_value(NodeId id, const std::vector<mlir::Value>& idx0, int axis, mlir::Value c, int lanes) {
    // Keyed by index too: one node can be read at several indices (x broadcast two ways).
    std::vector<const void*> key{reinterpret_cast<const void*>(static_cast<intptr_t>(id)),
                                 reinterpret_cast<const void*>(static_cast<intptr_t>(axis)), c.getAsOpaquePointer()};
    for (mlir::Value v : idx0) key.push_back(v.getAsOpaquePointer());
    auto it = lane_cache_.find(key);
    if (it != lane_cache_.end()) return it->second;
    const Node& n = k_.body.node(id);
    mlir::Value v;
    if (n.kind == OpKind::Matmul) {
      v = matmul_strip_;  // this strip of C (emit_matmul_strips)
    } else if (axis < 0 || inner_access(id, axis) == Inner::Constant) {
      v = general_value(id, idx0);
      if (lanes > 1) v = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(scalar_type(n.dtype), lanes), v);
    } else if (n.kind == OpKind::Input || n.kind == OpKind::Constant) {
      v = load(input_slot_.at(id), n.dtype, add(linearize(idx0, n.shape), c), lanes);
    } else if (n.kind == OpKind::Elementwise) {
      std::vector<mlir::Value> args;
      for (NodeId in : n.inputs) args.push_back(lane_value(in, idx0, axis, c, lanes));
      v = scalar_fn(n.as<ir::ElementwiseAttrs>().body, args, lanes);
    } else {  // a view
      v = lane_value(n.inputs[0], operand_index(n, idx0), operand_axis(n, axis), c, lanes);
    }
    lane_cache_[key] = v;
    return v;
  }

  // Stores every output at columns [c, c + lanes) of the row `row` (its index `outer`).
  void emit_lanes(const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value c, int lanes) {
    std::vector<mlir::Value> idx0 = outer;
    idx0.push_back(i64(0));
    int axis = static_cast<int>(k_.space.size()) - 1;
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      NodeId out = k_.body.outputs[o].node;
      store(output_slot_[o], k_.body.node(out).dtype, add(row_start, c), lane_value(out, idx0, axis, c, lanes), lanes);
    }
  }

  // One element at column c of a row, through general_value (any strides).
  void emit_element(const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value c) {
    std::vector<mlir::Value> idx = outer;
    idx.push_back(c);
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      NodeId out = k_.body.outputs[o].node;
      store(output_slot_[o], k_.body.node(out).dtype, add(row_start, c), general_value(out, idx), 1);
    }
  }

  // The end of the whole steps of `step` from `from` that fit before `to`.
  mlir::Value whole_steps_end(mlir::Value from, mlir::Value to, int64_t step) {
    return add(from, mul(b_.create<mlir::arith::DivSIOp>(loc_, sub(to, from), i64(step)), i64(step)));
  }

  // Flattened positions [begin, end) of rows of `width` (of shape outer_shape x width), row by
  // row: body(outer index, row start, first column, end column). A thread's range may start or
  // end in the middle of a row.
  template <class Body>
  void for_each_row_piece(mlir::Value begin, mlir::Value end, const ir::Dim& row_width, const ir::Shape& outer_shape,
                          Body body) {
    mlir::Value width = max_i64(dim(row_width), i64(1));  // (an empty row has no elements)
    mlir::Value first = b_.create<mlir::arith::DivSIOp>(loc_, begin, width);
    mlir::Value last = b_.create<mlir::arith::DivSIOp>(loc_, add(end, sub(width, i64(1))), width);
    loop(first, last, 1, [&](mlir::Value row) {
      std::vector<mlir::Value> outer = delinearize(row, outer_shape);
      mlir::Value row_start = mul(row, width);
      body(outer, row_start, max_i64(sub(begin, row_start), i64(0)), min_i64(sub(end, row_start), width));
    });
  }

  mlir::Value min_i64(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::MinSIOp>(loc_, a, c); }
  mlir::Value max_i64(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::MaxSIOp>(loc_, a, c); }

  // Elements [begin, end) row by row: SIMD columns and a scalar tail in each row.
  void emit_rows(mlir::Value begin, mlir::Value end, int lanes) {
    ir::Shape outer_shape(k_.space.begin(), k_.space.end() - 1);
    for_each_row_piece(begin, end, k_.space.back(), outer_shape,
                       [&](const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value from, mlir::Value to) {
                         mlir::Value vector_end = from;
                         if (lanes > 1) {
                           vector_end = whole_steps_end(from, to, lanes);
                           loop(from, vector_end, lanes, [&](mlir::Value c) { emit_lanes(outer, row_start, c, lanes); });
                         }
                         loop(vector_end, to, 1, [&](mlir::Value c) { emit_lanes(outer, row_start, c, 1); });
                       });
  }

  // Elements [begin, end) with strided operands: the partial rows at either end element by
  // element, the whole rows between in tiles of kTile rows x kTile columns.
  static constexpr int64_t kTile = 16;
  void emit_tiled(mlir::Value begin, mlir::Value end) {
    ir::Shape outer_shape(k_.space.begin(), k_.space.end() - 1);
    mlir::Value width = max_i64(dim(k_.space.back()), i64(1));
    mlir::Value full_first = b_.create<mlir::arith::DivSIOp>(loc_, add(begin, sub(width, i64(1))), width);
    mlir::Value full_last = max_i64(b_.create<mlir::arith::DivSIOp>(loc_, end, width), full_first);
    mlir::Value head_end = min_i64(end, mul(full_first, width));
    mlir::Value tail_begin = max_i64(head_end, mul(full_last, width));
    loop(begin, head_end, 1, [&](mlir::Value i) { emit_general(i); });
    loop(full_first, full_last, kTile, [&](mlir::Value row_block) {
      mlir::Value rows_end = min_i64(add(row_block, i64(kTile)), full_last);
      loop(i64(0), width, kTile, [&](mlir::Value column_block) {
        mlir::Value columns_end = min_i64(add(column_block, i64(kTile)), width);
        loop(row_block, rows_end, 1, [&](mlir::Value row) {
          std::vector<mlir::Value> outer = delinearize(row, outer_shape);
          mlir::Value row_start = mul(row, width);
          loop(column_block, columns_end, 1, [&](mlir::Value c) { emit_element(outer, row_start, c); });
        });
      });
    });
    loop(tail_begin, end, 1, [&](mlir::Value i) { emit_general(i); });
  }

  // ---- reductions: one parallel iteration per row of kept dims ----

  // Splits the space into the kept dims (the rows, iterated in parallel) and the reduced ones.
  ir::Shape kept_dims() const {
    ir::Shape kept;
    for (size_t d = 0; d < k_.space.size(); ++d)
      if (std::find(k_.axes.begin(), k_.axes.end(), static_cast<int>(d)) == k_.axes.end()) kept.push_back(k_.space[d]);
    return kept;
  }
  ir::Shape reduced_dims() const {
    ir::Shape reduced;
    for (int a : k_.axes) reduced.push_back(k_.space[a]);
    return reduced;
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

  // A row: every reduction in order (a later one may use an earlier one's result, as softmax's
  // sum uses its max), then the outputs: reduced-space ones once, full-space ones over the row.
  void emit_reduction_row(mlir::Value row) {
    std::vector<mlir::Value> kept = delinearize(row, kept_dims());
    ir::Dim row_length = ir::num_elements(reduced_dims());
    int lanes = std::max(1, k_.schedule.cpu.vector_width);
    mlir::Value row_base = mul(row, dim(row_length));
    mlir::Value vector_end = mul(b_.create<mlir::arith::DivSIOp>(loc_, dim(row_length), i64(lanes)), i64(lanes));
    // Reductions in groups that read the row once each: a group ends where a reduction needs an
    // earlier one's result (softmax's sum needs its max).
    std::vector<NodeId> group;
    auto flush = [&] {
      std::vector<mlir::Value> accs = accumulate(group, kept, row_base, i64(0), dim(row_length), lanes);
      for (size_t q = 0; q < group.size(); ++q) reduced_[group[q]] = finish(group[q], accs[q], row_length);
      group.clear();
    };
    for (NodeId id : reduce_nodes()) {
      for (NodeId earlier : group)
        if (depends_on(id, earlier)) {
          flush();
          break;
        }
      group.push_back(id);
    }
    if (!group.empty()) flush();
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      const Node& n = k_.body.node(k_.body.outputs[o].node);
      NodeId out = k_.body.outputs[o].node;
      if (n.shape == k_.space) {
        // SIMD over the row where its values allow, then scalar for the rest (the tail).
        mlir::Value scalar_from = i64(0);
        if (row_access(out) == RowAccess::Contiguous && trailing_axes()) {
          loop(i64(0), vector_end, lanes, [&](mlir::Value j) {
            store(output_slot_[o], n.dtype, add(row_base, j), row_value(out, kept, row_base, j, lanes), lanes);
          });
          scalar_from = vector_end;
        }
        loop(scalar_from, dim(row_length), 1, [&](mlir::Value j) {
          std::vector<mlir::Value> full = full_index(kept, delinearize(j, reduced_dims()));
          store(output_slot_[o], n.dtype, linearize(full, k_.space), general_value(out, full), 1);
        });
        continue;
      }
      if (!(ir::num_elements(n.shape) == ir::num_elements(kept_dims()))) {
        // Laid out like the space in another shape (a generator's output, never downstream of
        // the reduction): element by element at its row-major position.
        loop(i64(0), dim(row_length), 1, [&](mlir::Value j) {
          mlir::Value linear = linearize(full_index(kept, delinearize(j, reduced_dims())), k_.space);
          store(output_slot_[o], n.dtype, linear, general_value(out, delinearize(linear, n.shape)), 1);
        });
        continue;
      }
      // A reduced-space output: element `row` (cpu_compiles() keeps rows in order up to here).
      store(output_slot_[o], n.dtype, row, general_value(out, delinearize(row, n.shape)), 1);
    }
  }

  // ---- SIMD over a row, for reductions over trailing axes ----
  // Element j of a row is element row*L + j of every value laid out like the space; a value
  // broadcast from the row's own shape (a reduction's result, a per-row input) is one scalar for
  // the whole row; an input broadcast along the rows (a layernorm's gamma) is element j of it.

  enum class RowAccess { Contiguous, PerRow, RowLocal, Invalid };

  bool trailing_axes() const {
    for (size_t i = 0; i < k_.axes.size(); ++i)
      if (k_.axes[i] != static_cast<int>(k_.space.size() - k_.axes.size() + i)) return false;
    return !k_.axes.empty();
  }

  RowAccess row_access(NodeId id) {
    auto it = access_.find(id);
    if (it != access_.end()) return it->second;
    const Node& n = k_.body.node(id);
    RowAccess a = RowAccess::Invalid;
    size_t kept = k_.space.size() - k_.axes.size();
    if (n.kind == OpKind::Reduce) {
      a = RowAccess::PerRow;
    } else if (n.shape == k_.space && (n.kind == OpKind::Input || n.kind == OpKind::Constant)) {
      a = RowAccess::Contiguous;
    } else if (n.shape == k_.space && n.kind == OpKind::Elementwise) {
      a = RowAccess::Contiguous;
      for (NodeId in : n.inputs)
        if (row_access(in) == RowAccess::Invalid) a = RowAccess::Invalid;
    } else if (n.shape == k_.space && n.kind == OpKind::BroadcastTo) {
      const ir::Shape& from = k_.body.node(n.inputs[0]).shape;
      size_t offset = n.shape.size() - from.size();
      // RowLocal needs the operand to span every reduced dim, so that its own index is j.
      bool reduced_all_one = true, kept_all_one = true, reduced_full = offset <= kept;
      for (size_t p = 0; p < from.size(); ++p) {
        bool is_kept = p + offset < kept;
        if (is_kept) kept_all_one = kept_all_one && from[p] == ir::Dim(1);
        else {
          reduced_all_one = reduced_all_one && from[p] == ir::Dim(1);
          reduced_full = reduced_full && from[p] == k_.space[p + offset];
        }
      }
      OpKind leaf = k_.body.node(n.inputs[0]).kind;
      if (reduced_all_one) a = RowAccess::PerRow;
      else if (kept_all_one && reduced_full && (leaf == OpKind::Input || leaf == OpKind::Constant)) a = RowAccess::RowLocal;
    }
    access_[id] = a;
    return a;
  }

  bool row_vectorizable(NodeId reduce_id) {
    const Node& n = k_.body.node(reduce_id);
    const ir::ReduceAttrs& r = n.as<ir::ReduceAttrs>();
    return trailing_axes() && r.kind != ir::ReduceKind::Custom && row_access(n.inputs[0]) == RowAccess::Contiguous;
  }

  // The value of `id` at elements [j, j + lanes) of the row starting at `row_base`.
  mlir::Value row_value(NodeId id, const std::vector<mlir::Value>& kept, mlir::Value row_base, mlir::Value j, int lanes) {
    auto it = row_cache_.find(id);
    if (it != row_cache_.end()) return it->second;
    const Node& n = k_.body.node(id);
    mlir::Value v;
    if (n.kind == OpKind::Input || n.kind == OpKind::Constant) {
      v = load(input_slot_.at(id), n.dtype, add(row_base, j), lanes);
    } else if (n.kind == OpKind::Reduce) {  // reduced over size-1 axes: already the row's value
      v = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(scalar_type(n.dtype), lanes), reduced_.at(id));
    } else if (n.kind == OpKind::Elementwise) {
      std::vector<mlir::Value> args;
      for (NodeId in : n.inputs) args.push_back(row_value(in, kept, row_base, j, lanes));
      v = scalar_fn(n.as<ir::ElementwiseAttrs>().body, args, lanes);
    } else if (row_access(id) == RowAccess::RowLocal) {
      NodeId leaf = n.inputs[0];
      v = load(input_slot_.at(leaf), k_.body.node(leaf).dtype, j, lanes);
    } else {  // PerRow: one value for the whole row, splat
      const ir::Shape& from = k_.body.node(n.inputs[0]).shape;
      size_t offset = n.shape.size() - from.size();
      std::vector<mlir::Value> idx;
      // A dim of size 1 is broadcast along the rows too (a total's [1, 1] read by every row).
      for (size_t p = 0; p < from.size(); ++p)
        idx.push_back(p + offset < kept.size() && !(from[p] == ir::Dim(1)) ? kept[p + offset] : i64(0));
      v = general_value(n.inputs[0], idx);
      v = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(scalar_type(n.dtype), lanes), v);
    }
    row_cache_[id] = v;
    return v;
  }

  // ---- one reduction over a range of its row ----
  // accumulate() folds elements [from, to) of the row into an accumulator of the interpreter's
  // accumulation type: floats (and every mean) in f64 (max/min in the float's own type: exact), integers in i64 (wrapping to the result's
  // width at the end), any/all in i1, user combiners in the node's dtype. finish() turns an
  // accumulator into the result (mean's division, the cast). A row is one range; a split
  // reduction combines the accumulators of several ranges with combine().

  DType accumulator_type(NodeId id) { return ScalarLowering::reduce_accumulator_type(k_.body, id); }
  mlir::Value accumulator_identity(NodeId id, int lanes) { return scalar_.reduce_identity(k_.body, id, lanes); }
  mlir::Value combine(NodeId id, mlir::Value acc, mlir::Value x) { return scalar_.reduce_combine(k_.body, id, acc, x); }
  mlir::Value to_accumulator(NodeId id, mlir::Value x, int lanes) { return scalar_.reduce_input(k_.body, id, x, lanes); }
  mlir::Value finish(NodeId id, mlir::Value acc, const ir::Dim& row_length) {
    return scalar_.reduce_finish(k_.body, id, acc, dim(row_length));
  }

  // The horizontal (across lanes) form of a reduction's combine.
  mlir::vector::CombiningKind lane_combining_kind(NodeId id) {
    using Kind = mlir::vector::CombiningKind;
    bool floating = ir::is_float(accumulator_type(id));
    switch (k_.body.node(id).as<ir::ReduceAttrs>().kind) {
      case ir::ReduceKind::Prod: return Kind::MUL;
      case ir::ReduceKind::Max: return floating ? Kind::MAXIMUMF : Kind::MAXSI;
      case ir::ReduceKind::Min: return floating ? Kind::MINIMUMF : Kind::MINSI;
      case ir::ReduceKind::Any: return Kind::OR;
      case ir::ReduceKind::All: return Kind::AND;
      default: return Kind::ADD;
    }
  }

  // Elements [from, to) of the row folded into one accumulator per reduction in `ids` (none may
  // depend on another), all in the same loops so that they share their loads: SIMD with two
  // independent vector accumulators each (two dependency chains in flight) for those
  // row_vectorizable(), then one scalar loop for the rest and the SIMD loop's tail.
  std::vector<mlir::Value> accumulate(const std::vector<NodeId>& ids, const std::vector<mlir::Value>& kept,
                                      mlir::Value row_base, mlir::Value from, mlir::Value to, int lanes) {
    std::vector<NodeId> vectorized, scalar;
    for (NodeId id : ids) (lanes > 1 && row_vectorizable(id) ? vectorized : scalar).push_back(id);
    std::map<NodeId, mlir::Value> result;
    if (!vectorized.empty()) {
      int64_t step = 2 * lanes;
      mlir::Value vector_end = whole_steps_end(from, to, step);
      std::vector<mlir::Value> init;
      for (NodeId id : vectorized) init.insert(init.end(), 2, accumulator_identity(id, lanes));
      auto vector_loop = b_.create<mlir::scf::ForOp>(loc_, from, vector_end, i64(step), init);
      {
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPointToStart(vector_loop.getBody());
        std::vector<mlir::Value> next(init.size());
        for (int half = 0; half < 2; ++half) {
          clear_caches();
          mlir::Value j = add(vector_loop.getInductionVar(), i64(half * lanes));
          for (size_t q = 0; q < vectorized.size(); ++q) {
            NodeId id = vectorized[q];
            mlir::Value x = to_accumulator(id, row_value(k_.body.node(id).inputs[0], kept, row_base, j, lanes), lanes);
            next[2 * q + half] = combine(id, vector_loop.getRegionIterArgs()[2 * q + half], x);
          }
        }
        b_.create<mlir::scf::YieldOp>(loc_, next);
        clear_caches();
      }
      std::vector<mlir::Value> partial;
      for (size_t q = 0; q < vectorized.size(); ++q) {
        NodeId id = vectorized[q];
        mlir::Value both = combine(id, vector_loop.getResult(2 * q), vector_loop.getResult(2 * q + 1));
        partial.push_back(b_.create<mlir::vector::ReductionOp>(loc_, lane_combining_kind(id), both));
      }
      std::vector<mlir::Value> tail = accumulate_scalar(vectorized, partial, kept, vector_end, to);
      for (size_t q = 0; q < vectorized.size(); ++q) result[vectorized[q]] = tail[q];
    }
    if (!scalar.empty()) {
      std::vector<mlir::Value> init;
      for (NodeId id : scalar) init.push_back(accumulator_identity(id, 1));
      std::vector<mlir::Value> accs = accumulate_scalar(scalar, init, kept, from, to);
      for (size_t q = 0; q < scalar.size(); ++q) result[scalar[q]] = accs[q];
    }
    std::vector<mlir::Value> ordered;
    for (NodeId id : ids) ordered.push_back(result.at(id));
    return ordered;
  }

  // One element at a time, each element's index taken apart into the reduced dims.
  std::vector<mlir::Value> accumulate_scalar(const std::vector<NodeId>& ids, const std::vector<mlir::Value>& init,
                                             const std::vector<mlir::Value>& kept, mlir::Value from, mlir::Value to) {
    auto loop = b_.create<mlir::scf::ForOp>(loc_, from, to, i64(1), init);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(loop.getBody());
    clear_caches();
    std::vector<mlir::Value> full = full_index(kept, delinearize(loop.getInductionVar(), reduced_dims()));
    std::vector<mlir::Value> next;
    for (size_t q = 0; q < ids.size(); ++q) {
      mlir::Value x = to_accumulator(ids[q], general_value(k_.body.node(ids[q]).inputs[0], full), 1);
      next.push_back(combine(ids[q], loop.getRegionIterArgs()[q], x));
    }
    b_.create<mlir::scf::YieldOp>(loc_, next);
    clear_caches();
    b_.setInsertionPointAfter(loop);
    return {loop.getResults().begin(), loop.getResults().end()};
  }

  // Whether node `id` reads the result of reduction `reduce` (directly or through other nodes).
  bool depends_on(NodeId id, NodeId reduce) const {
    auto it = computed_from_memo_.find(reduce);
    if (it == computed_from_memo_.end()) it = computed_from_memo_.emplace(reduce, ir::computed_from(k_.body, reduce)).first;
    return it->second[id];
  }

  // ---- reductions over leading axes: SIMD across the kept innermost dim ----
  // sum(x, axis=0) of [R, C]: lanes are adjacent outputs (columns), each reduced down its
  // column; every element is read once, a vector at a time. For Reduction kernels whose reduced
  // axes lead, whose reductions are independent, built-in and read operands contiguous or
  // constant along the innermost dim, and whose outputs are reductions or elementwise functions
  // of reductions only.

  bool columns_form() const {
    if (k_.kind != ir::KernelKind::Reduction || split_reduction(k_) || k_.space.size() < 2) return false;
    for (size_t i = 0; i < k_.axes.size(); ++i)
      if (k_.axes[i] != static_cast<int>(i)) return false;
    if (k_.axes.empty() || k_.axes.size() >= k_.space.size()) return false;
    int last = static_cast<int>(k_.space.size()) - 1;
    std::vector<bool> from_reduces(k_.body.nodes.size(), false);
    for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id) {
      const Node& n = k_.body.node(id);
      if (n.kind == OpKind::Reduce) {
        if (n.as<ir::ReduceAttrs>().kind == ir::ReduceKind::Custom || inner_access(n.inputs[0], last) > Inner::Unit ||
            !(k_.body.node(n.inputs[0]).shape == k_.space))
          return false;
        for (NodeId other : reduce_nodes())
          if (other != id && depends_on(id, other)) return false;
        from_reduces[id] = true;
      } else if (n.kind == OpKind::Elementwise) {
        bool all = !n.inputs.empty();
        for (NodeId in : n.inputs) all = all && from_reduces[in];
        from_reduces[id] = all;
      }
    }
    ir::Dim kept = ir::num_elements(kept_dims());
    for (const ir::GraphOutput& o : k_.body.outputs)
      if (!from_reduces[o.node] || !(ir::num_elements(k_.body.node(o.node).shape) == kept)) return false;
    return true;
  }

  static constexpr int kColumnVectors = 4;
  void emit_columns(mlir::Value begin, mlir::Value end, int lanes) {
    ir::Shape kept = kept_dims();
    ir::Shape outer_shape(kept.begin(), kept.end() - 1);
    for_each_row_piece(begin, end, kept.back(), outer_shape,
                       [&](const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value from, mlir::Value to) {
                         mlir::Value vector_end = from;
                         if (lanes > 1) {
                           // Blocks of kColumnVectors vectors, then single vectors, then single columns.
                           int64_t block = lanes * kColumnVectors;
                           mlir::Value block_end = whole_steps_end(from, to, block);
                           loop(from, block_end, block,
                                [&](mlir::Value c) { emit_column_lanes(outer, row_start, c, lanes, kColumnVectors); });
                           vector_end = whole_steps_end(block_end, to, lanes);
                           loop(block_end, vector_end, lanes, [&](mlir::Value c) { emit_column_lanes(outer, row_start, c, lanes); });
                         }
                         loop(vector_end, to, 1, [&](mlir::Value c) { emit_column_lanes(outer, row_start, c, 1); });
                       });
  }

  // Outputs at kept positions [row_start + c, + lanes * vectors): every reduction down its
  // columns, `vectors` adjacent vectors at a time (a row then supplies whole cache lines).
  void emit_column_lanes(const std::vector<mlir::Value>& outer, mlir::Value row_start, mlir::Value c, int lanes,
                         int vectors = 1) {
    std::vector<NodeId> ids = reduce_nodes();
    int last = static_cast<int>(k_.space.size()) - 1;
    std::vector<mlir::Value> init;
    for (int v = 0; v < vectors; ++v)
      for (NodeId id : ids) init.push_back(accumulator_identity(id, lanes));
    ir::Dim column_length = ir::num_elements(reduced_dims());
    auto down = b_.create<mlir::scf::ForOp>(loc_, i64(0), dim(column_length), i64(1), init);
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(down.getBody());
      std::vector<mlir::Value> kept0 = outer;
      kept0.push_back(i64(0));
      std::vector<mlir::Value> next;
      for (int v = 0; v < vectors; ++v) {
        clear_caches();
        std::vector<mlir::Value> idx0 = full_index(kept0, delinearize(down.getInductionVar(), reduced_dims()));
        mlir::Value column = add(c, i64(static_cast<int64_t>(v) * lanes));
        for (size_t q = 0; q < ids.size(); ++q) {
          mlir::Value x = to_accumulator(ids[q], lane_value(k_.body.node(ids[q]).inputs[0], idx0, last, column, lanes), lanes);
          next.push_back(combine(ids[q], down.getRegionIterArgs()[v * ids.size() + q], x));
        }
      }
      b_.create<mlir::scf::YieldOp>(loc_, next);
      clear_caches();
    }
    for (int v = 0; v < vectors; ++v) {
      std::map<NodeId, mlir::Value> values;
      for (size_t q = 0; q < ids.size(); ++q) {
        NodeId id = ids[q];
        const Node& n = k_.body.node(id);
        mlir::Value acc = down.getResult(v * ids.size() + q);
        DType acc_type = accumulator_type(id);
        if (n.as<ir::ReduceAttrs>().kind == ir::ReduceKind::Mean) {
          mlir::Value count = b_.create<mlir::arith::SIToFPOp>(loc_, b_.getF64Type(), dim(column_length));
          if (lanes > 1) count = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(b_.getF64Type(), lanes), count);
          acc = b_.create<mlir::arith::DivFOp>(loc_, acc, count);
        }
        values[id] = acc_type == n.dtype ? acc : cast(acc, acc_type, n.dtype, lanes);
      }
      // The epilogue: elementwise functions of the reductions (columns_form()).
      for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id) {
        const Node& n = k_.body.node(id);
        if (n.kind != OpKind::Elementwise || values.count(id)) continue;
        std::vector<mlir::Value> args;
        for (NodeId in : n.inputs) {
          if (!values.count(in)) break;
          args.push_back(values.at(in));
        }
        if (args.size() == n.inputs.size()) values[id] = scalar_fn(n.as<ir::ElementwiseAttrs>().body, args, lanes);
      }
      mlir::Value column = add(c, i64(static_cast<int64_t>(v) * lanes));
      for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
        NodeId out = k_.body.outputs[o].node;
        store(output_slot_[o], k_.body.node(out).dtype, add(row_start, column), values.at(out), lanes);
      }
    }
  }

  // ---- matmul: one parallel iteration per row of C (batch dims and M) ----

  // Rows [begin, end) of C. Where B's rows can be read as vectors along N (B, its prologue and
  // the epilogue are contiguous or constant along N: inner_access), kMatmulRows rows of C at a
  // time share each vector of B: for every `lanes`-wide strip of columns, accumulators for
  // those rows (f64 or i64 lanes, like the interpreter) take A[i,k] * B[k, strip] over k, and
  // the epilogue runs on the strip. The columns past the last whole strip, and kernels whose B
  // is strided (A @ B.T), take one dot product per element.
  static constexpr int64_t kMatmulRows = 4;
  void emit_matmul(mlir::Value begin, mlir::Value end) {
    NodeId mm = matmul_node();
    const Node& n = k_.body.node(mm);
    int lanes = std::max(1, k_.schedule.cpu.vector_width);
    if (blocked_matmul()) {
      emit_matmul_blocked(begin, end);
      return;
    }
    int c_axis = static_cast<int>(k_.space.size()) - 1;
    bool strips = lanes > 1 && inner_access(n.inputs[1], static_cast<int>(k_.body.node(n.inputs[1]).shape.size()) - 1) <= Inner::Unit;
    for (const ir::GraphOutput& o : k_.body.outputs)
      strips = strips && k_.body.node(o.node).shape == k_.space && inner_access(o.node, c_axis) <= Inner::Unit &&
               strip_safe(o.node, c_axis, mm);
    if (!strips) {
      loop(begin, end, 1, [&](mlir::Value row) { emit_matmul_columns(row, i64(0)); });
      return;
    }
    // Several rows per block only without batch dims: rows of a block then share B.
    int64_t block = k_.space.size() == 2 ? kMatmulRows : 1;
    mlir::Value blocks_end = whole_steps_end(begin, end, block);
    loop(begin, blocks_end, block, [&](mlir::Value row) { emit_matmul_strips(row, block, lanes); });
    loop(blocks_end, end, 1, [&](mlir::Value row) { emit_matmul_strips(row, 1, lanes); });
  }

  // ---- blocked matmul (BLIS-style): packing, cache blocking, a register-tiled micro-kernel ----
  //
  // A task's rows [begin, end) of C (flattened batch x M) are computed batch by batch:
  //   for jc (nc columns): for pc (kc of K): pack B[pc:, jc:] into nr-wide panels
  //     for ic (mc rows): pack A[ic:, pc:]; for each mr x nr tile: the micro-kernel
  // The micro-kernel keeps the tile in mr x (nr / lanes) vector accumulators and adds one
  // outer product per k (vector.fma of a broadcast element of A and vectors of B). Partial
  // sums over K blocks live in C's buffer (or a task-local one when no output can hold them);
  // after the last K block the epilogue runs on the tile in registers and the outputs are
  // stored. Packing reads operands through their index maps, so transposes, broadcasts and
  // elementwise prologues cost nothing in the loops that matter, and panels are padded to
  // whole tiles (padding lanes are computed and never stored).

  struct MatmulTiling {
    int64_t mr, nr, kc, mc, nc;  // nr and kc multiples of lanes; mc a multiple of mr; nc of nr
    int lanes;
  };

  // The blocked form takes float and integer matmuls whose result the epilogue reads one
  // vector along the columns at a time; accumulation happens in the matmul's own dtype (BLAS
  // does the same for floats; integer sums wrap exactly as the interpreter's i64 sums cast back).
  bool blocked_matmul() const {
    NodeId mm = matmul_node();
    const Node& n = k_.body.node(mm);
    const ir::CpuSchedule& s = k_.schedule.cpu;
    if (s.mr <= 0 || s.nr <= 0 || s.kc <= 0 || s.mc <= 0 || s.nc <= 0 || s.vector_width < 2) return false;
    if (!(n.dtype == DType::F32 || n.dtype == DType::F64 || n.dtype == DType::I32 || n.dtype == DType::I64)) return false;
    int c_axis = static_cast<int>(k_.space.size()) - 1;
    for (const ir::GraphOutput& o : k_.body.outputs)
      if (!(k_.body.node(o.node).shape == k_.space) || inner_access(o.node, c_axis) > Inner::Unit ||
          !strip_safe(o.node, c_axis, mm))
        return false;
    return true;
  }

  MatmulTiling matmul_tiling() const {
    const ir::CpuSchedule& s = k_.schedule.cpu;
    MatmulTiling t;
    t.lanes = s.vector_width;
    t.mr = s.mr;
    t.nr = (s.nr + t.lanes - 1) / t.lanes * t.lanes;
    t.kc = (s.kc + t.lanes - 1) / t.lanes * t.lanes;
    t.mc = std::max<int64_t>(t.mr, s.mc / t.mr * t.mr);
    t.nc = std::max<int64_t>(t.nr, s.nc / t.nr * t.nr);
    return t;
  }

  // An llvm.call to a C library function (declared in the module on first use).
  mlir::Value call_c(const std::string& name, mlir::Type result, mlir::ValueRange args) {
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

  // A 64-byte aligned heap buffer of `bytes` (rounded up to whole 64-byte lines, as
  // aligned_alloc wants), registered as a new slot.
  int allocate_slot(mlir::Value bytes) {
    mlir::Value rounded = mul(b_.create<mlir::arith::DivSIOp>(loc_, add(bytes, i64(63)), i64(64)), i64(64));
    base_.push_back(call_c("aligned_alloc", ptr_type(), mlir::ValueRange{i64(64), rounded}));
    return static_cast<int>(base_.size()) - 1;
  }

  mlir::Value lanes_below(mlir::Value count, int lanes) {
    mlir::Type lane_index = mlir::VectorType::get({lanes}, b_.getI64Type());
    std::vector<mlir::Attribute> iota;
    for (int l = 0; l < lanes; ++l) iota.push_back(b_.getI64IntegerAttr(l));
    mlir::Value numbers = b_.create<mlir::arith::ConstantOp>(
        loc_, mlir::DenseElementsAttr::get(mlir::cast<mlir::ShapedType>(lane_index), iota));
    return cmpi(mlir::arith::CmpIPredicate::slt, numbers, b_.create<mlir::vector::BroadcastOp>(loc_, lane_index, count));
  }

  // Runs `body` with vector loads and stores masked to the lanes below `count` (when count <
  // lanes; the mask is a no-op otherwise).
  template <class Body>
  void masked(mlir::Value count, int lanes, Body body) {
    mlir::Value saved = mask_;
    mask_ = lanes_below(count, lanes);
    body();
    mask_ = saved;
  }

  struct MatmulPlan {
    NodeId mm;
    DType t;
    MatmulTiling tiling;
    mlir::Value m, n, k;         // C is (batch x) m x n, the depth k
    int pack_a = -1, pack_b = -1, acc = -1;
    mlir::Value acc_origin;      // the global row whose partial sums sit at the start of `acc`
    bool a_by_columns = false;   // packed A holds columns of mc (A is unit-stride along M)
    std::vector<mlir::Value> batch;  // this batch's index
  };

  void emit_matmul_blocked(mlir::Value begin, mlir::Value end) {
    MatmulPlan p;
    p.mm = matmul_node();
    const Node& n = k_.body.node(p.mm);
    p.t = n.dtype;
    p.tiling = matmul_tiling();
    const MatmulTiling& t = p.tiling;
    int rank = static_cast<int>(k_.space.size());
    p.m = dim(k_.space[rank - 2]);
    p.n = dim(k_.space[rank - 1]);
    p.k = dim(k_.body.node(n.inputs[0]).shape.back());
    int64_t elem = static_cast<int64_t>(ir::dtype_size(p.t));
    NodeId a_id = n.inputs[0];
    p.a_by_columns = inner_access(a_id, rank - 1) > Inner::Unit && inner_access(a_id, rank - 2) <= Inner::Unit;
    // Packing buffers as large as this problem needs (a full nc x kc panel of B is megabytes).
    mlir::Value kc_used = min_i64(i64(t.kc), max_i64(p.k, i64(1)));
    mlir::Value mc_used = min_i64(i64(t.mc), round_up(max_i64(p.m, i64(1)), t.mr));
    mlir::Value nc_used = min_i64(i64(t.nc), round_up(max_i64(p.n, i64(1)), t.nr));
    // (packed A's rows are kc apart, or its columns mc apart: see pack_a)
    mlir::Value a_elements = p.a_by_columns ? mul(i64(t.mc), kc_used) : mul(mc_used, i64(t.kc));
    p.pack_a = allocate_slot(mul(add(a_elements, i64(t.lanes)), i64(elem)));
    p.pack_b = allocate_slot(mul(add(mul(nc_used, kc_used), i64(t.lanes)), i64(elem)));
    // Partial sums over K blocks: in an output of the matmul's dtype (overwritten by its final
    // value at the last K block), else in a task-local buffer of the task's rows.
    int acc_output = -1;
    for (size_t o = 0; o < k_.body.outputs.size(); ++o)
      if (k_.body.node(k_.body.outputs[o].node).dtype == p.t) acc_output = static_cast<int>(o);
    mlir::Value many_k_blocks = cmpi(mlir::arith::CmpIPredicate::sgt, p.k, i64(t.kc));
    if (acc_output >= 0) {
      p.acc = output_slot_[acc_output];
      p.acc_origin = i64(0);
    } else {
      // Only needed with several K blocks: one element when K fits one block.
      mlir::Value rows = b_.create<mlir::arith::SelectOp>(loc_, many_k_blocks, sub(end, begin), i64(1));
      p.acc = allocate_slot(mul(mul(rows, max_i64(p.n, i64(1))), i64(elem)));
      p.acc_origin = begin;
    }
    int first_alloc = p.pack_a;
    ir::Shape batch_shape(k_.space.begin(), k_.space.end() - 2);
    mlir::Value m_rows = max_i64(p.m, i64(1));
    mlir::Value first_batch = b_.create<mlir::arith::DivSIOp>(loc_, begin, m_rows);
    mlir::Value last_batch = b_.create<mlir::arith::DivSIOp>(loc_, add(end, sub(m_rows, i64(1))), m_rows);
    loop(first_batch, last_batch, 1, [&](mlir::Value batch) {
      p.batch = delinearize(batch, batch_shape);
      mlir::Value batch_row = mul(batch, p.m);
      mlir::Value r0 = sub(max_i64(begin, batch_row), batch_row);
      mlir::Value r1 = sub(min_i64(end, add(batch_row, p.m)), batch_row);
      loop(i64(0), p.n, t.nc, [&](mlir::Value jc) {
        mlir::Value nb = min_i64(i64(t.nc), sub(p.n, jc));
        // At least one K block, so that K = 0 still writes the (empty-sum) result.
        loop(i64(0), max_i64(p.k, i64(1)), t.kc, [&](mlir::Value pc) {
          mlir::Value kb = max_i64(min_i64(i64(t.kc), sub(p.k, pc)), i64(0));
          mlir::Value first = cmpi(mlir::arith::CmpIPredicate::eq, pc, i64(0));
          mlir::Value last = cmpi(mlir::arith::CmpIPredicate::sge, add(pc, kb), p.k);
          pack_b(p, pc, kb, jc, nb);
          loop(r0, r1, t.mc, [&](mlir::Value ic) {
            mlir::Value mb = min_i64(i64(t.mc), sub(r1, ic));
            pack_a(p, ic, mb, pc, kb);
            loop(i64(0), nb, t.nr, [&](mlir::Value jr) {
              loop(i64(0), mb, t.mr, [&](mlir::Value ir) {
                mlir::Value rows = min_i64(i64(t.mr), sub(mb, ir));
                mlir::Value cols = min_i64(i64(t.nr), sub(nb, jr));
                mlir::Value whole = b_.create<mlir::arith::AndIOp>(loc_, cmpi(mlir::arith::CmpIPredicate::eq, rows, i64(t.mr)),
                                                                   cmpi(mlir::arith::CmpIPredicate::eq, cols, i64(t.nr)));
                auto branch = b_.create<mlir::scf::IfOp>(loc_, whole, /*withElseRegion=*/true);
                mlir::OpBuilder::InsertionGuard guard(b_);
                b_.setInsertionPointToStart(&branch.getThenRegion().front());
                micro_kernel(p, add(batch_row, add(ic, ir)), add(jc, jr), ir, jr, kb, first, last, {}, {});
                b_.setInsertionPointToStart(&branch.getElseRegion().front());
                micro_kernel(p, add(batch_row, add(ic, ir)), add(jc, jr), ir, jr, kb, first, last, rows, cols);
              });
            });
          });
        });
      });
    });
    for (int slot = first_alloc; slot < static_cast<int>(base_.size()); ++slot)
      call_c("free", mlir::LLVM::LLVMVoidType::get(b_.getContext()), mlir::ValueRange{base_[slot]});
  }

  // Rounds x up to a multiple of `to`.
  mlir::Value round_up(mlir::Value x, int64_t to) {
    return mul(b_.create<mlir::arith::DivSIOp>(loc_, add(x, i64(to - 1)), i64(to)), i64(to));
  }

  // B[pc : pc + kb, jc : jc + nb] into panels of nr columns: panel q holds, for each k, the
  // columns [q*nr, q*nr + nr) contiguously. The last panel's columns past nb are padding: they
  // are written too (masked-off lanes or a copy of the last column), because the micro-kernel
  // computes whole tiles, and a lane read from never-written memory is undefined in LLVM: once
  // such a lane reached a branch (the f32 patch test of sigmoid), LLVM proved the tile loop
  // unreachable and compiled it to a jump to itself.
  void pack_b(const MatmulPlan& p, mlir::Value pc, mlir::Value kb, mlir::Value jc, mlir::Value nb) {
    const MatmulTiling& t = p.tiling;
    NodeId b_id = k_.body.node(p.mm).inputs[1];
    int rank = static_cast<int>(k_.space.size());
    auto packed_offset = [&](mlir::Value kk, mlir::Value jj) {  // jj relative to jc
      mlir::Value panel = b_.create<mlir::arith::DivSIOp>(loc_, jj, i64(t.nr));
      return add(mul(panel, mul(kb, i64(t.nr))), add(mul(kk, i64(t.nr)), sub(jj, mul(panel, i64(t.nr)))));
    };
    mlir::Value padded = round_up(nb, t.nr);
    if (inner_access(b_id, rank - 1) <= Inner::Unit) {
      loop(i64(0), kb, 1, [&](mlir::Value kk) {
        std::vector<mlir::Value> idx0 = p.batch;
        idx0.push_back(add(pc, kk));
        idx0.push_back(i64(0));
        loop(i64(0), padded, t.lanes, [&](mlir::Value jj) {
          mlir::Value v;
          masked(sub(nb, jj), t.lanes, [&] { v = lane_value(b_id, idx0, rank - 1, add(jc, jj), t.lanes); });
          store(p.pack_b, p.t, packed_offset(kk, jj), v, t.lanes);  // whole vectors: padding included
        });
      });
      return;
    }
    // Strided along the columns (a transposed B): element by element, k innermost so that the
    // reads of B follow its unit stride.
    mlir::Value last = sub(nb, i64(1));
    loop(i64(0), padded, 1, [&](mlir::Value jj) {
      loop(i64(0), kb, 1, [&](mlir::Value kk) {
        std::vector<mlir::Value> idx = p.batch;
        idx.push_back(add(pc, kk));
        idx.push_back(add(jc, min_i64(jj, last)));
        store(p.pack_b, p.t, packed_offset(kk, jj), general_value(b_id, idx), 1);
      });
    });
  }

  // A[ic : ic + mb, pc : pc + kb] (rows of this batch) into packed A: row r at r * kc (A unit
  // along K, or any other layout, element by element), or column k at k * mc (A unit along M).
  // Rows up to the next whole mr tile are written too (copies of the last row, or masked-off
  // lanes): the micro-kernel reads whole tiles, and never-written lanes are undefined (pack_b).
  void pack_a(const MatmulPlan& p, mlir::Value ic, mlir::Value mb, mlir::Value pc, mlir::Value kb) {
    const MatmulTiling& t = p.tiling;
    NodeId a_id = k_.body.node(p.mm).inputs[0];
    int rank = static_cast<int>(k_.space.size());
    auto index = [&](mlir::Value row, mlir::Value kk) {
      std::vector<mlir::Value> idx = p.batch;
      idx.push_back(row);
      idx.push_back(kk);
      return idx;
    };
    mlir::Value padded = round_up(mb, t.mr);
    mlir::Value last = sub(mb, i64(1));
    if (inner_access(a_id, rank - 1) <= Inner::Unit) {
      loop(i64(0), padded, 1, [&](mlir::Value r) {
        std::vector<mlir::Value> idx0 = index(add(ic, min_i64(r, last)), i64(0));
        loop(i64(0), kb, t.lanes, [&](mlir::Value kk) {
          masked(sub(kb, kk), t.lanes, [&] {
            mlir::Value v = lane_value(a_id, idx0, rank - 1, add(pc, kk), t.lanes);
            store(p.pack_a, p.t, add(mul(r, i64(t.kc)), kk), v, t.lanes);
          });
        });
      });
    } else if (p.a_by_columns) {
      loop(i64(0), kb, 1, [&](mlir::Value kk) {
        std::vector<mlir::Value> idx0 = index(i64(0), add(pc, kk));
        loop(i64(0), padded, t.lanes, [&](mlir::Value r) {
          mlir::Value v;
          masked(sub(mb, r), t.lanes, [&] { v = lane_value(a_id, idx0, rank - 2, add(ic, r), t.lanes); });
          // Whole vectors: padding included; a store past this column's end lands in the next
          // column (written after it) or in the buffer's slack of one vector.
          store(p.pack_a, p.t, add(mul(kk, i64(t.mc)), r), v, t.lanes);
        });
      });
    } else {
      loop(i64(0), padded, 1, [&](mlir::Value r) {
        loop(i64(0), kb, 1, [&](mlir::Value kk) {
          store(p.pack_a, p.t, add(mul(r, i64(t.kc)), kk),
                general_value(a_id, index(add(ic, min_i64(r, last)), add(pc, kk))), 1);
        });
      });
    }
  }

  mlir::Value fma(mlir::Value a, mlir::Value b, mlir::Value acc) {
    if (mlir::isa<mlir::FloatType>(mlir::getElementTypeOrSelf(acc.getType())))
      return b_.create<mlir::vector::FMAOp>(loc_, a, b, acc);
    return add(acc, mul(a, b));
  }

  // One mr x nr tile of C at global row `row` (flattened batch x M) and column `col`, from
  // packed A rows [ir, ir + mr) and packed B columns [jr, jr + nr) over kb. `rows`/`cols`
  // null: a whole tile; else an edge tile (rows and columns past them are not stored).
  void micro_kernel(const MatmulPlan& p, mlir::Value row, mlir::Value col, mlir::Value ir, mlir::Value jr, mlir::Value kb,
                    mlir::Value first, mlir::Value last, mlir::Value rows, mlir::Value cols) {
    const MatmulTiling& t = p.tiling;
    int64_t vectors = t.nr / t.lanes;
    mlir::Type vec = lane_type(scalar_type(p.t), t.lanes);
    int64_t tile = t.mr * vectors;
    // Partial sums of tile row `r` (a Value: edge tiles clamp it), vector `v`.
    auto acc_offset = [&](mlir::Value r, int64_t v) {
      return add(mul(sub(add(row, r), p.acc_origin), p.n), add(col, i64(v * t.lanes)));
    };
    // Runs body for each row r of the tile that exists, under each vector's column mask.
    auto each_stored = [&](auto body) {
      for (int64_t r = 0; r < t.mr; ++r) {
        mlir::OpBuilder::InsertionGuard guard(b_);
        if (rows) {
          auto exists = b_.create<mlir::scf::IfOp>(loc_, cmpi(mlir::arith::CmpIPredicate::slt, i64(r), rows), false);
          b_.setInsertionPointToStart(&exists.getThenRegion().front());
        }
        clear_caches();
        for (int64_t v = 0; v < vectors; ++v) {
          if (cols) masked(sub(cols, i64(v * t.lanes)), t.lanes, [&] { body(r, v); });
          else body(r, v);
        }
        clear_caches();
      }
    };
    // The initial tile: zero for the first K block, else the partial sums.
    auto init = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange(std::vector<mlir::Type>(tile, vec)), first, true);
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(&init.getThenRegion().front());
      b_.create<mlir::scf::YieldOp>(loc_, std::vector<mlir::Value>(tile, constant(p.t, 0, 0, t.lanes)));
      b_.setInsertionPointToStart(&init.getElseRegion().front());
      std::vector<mlir::Value> partial;
      for (int64_t r = 0; r < t.mr; ++r)
        for (int64_t v = 0; v < vectors; ++v) {
          // Rows past an edge tile's end read row `row` again (in bounds; never stored).
          mlir::Value offset = acc_offset(rows ? min_i64(i64(r), sub(rows, i64(1))) : i64(r), v);
          if (cols) {
            mlir::Value x;
            masked(sub(cols, i64(v * t.lanes)), t.lanes, [&] { x = load(p.acc, p.t, offset, t.lanes); });
            partial.push_back(x);
          } else {
            partial.push_back(load(p.acc, p.t, offset, t.lanes));
          }
        }
      b_.create<mlir::scf::YieldOp>(loc_, partial);
    }
    // The K loop: one outer product of a column of packed A and a row of packed B per k.
    mlir::Value a_base = p.a_by_columns ? ir : mul(ir, i64(t.kc));
    int64_t a_row_stride = p.a_by_columns ? 1 : t.kc;
    int64_t a_k_stride = p.a_by_columns ? t.mc : 1;
    mlir::Value b_base = mul(jr, kb);  // panel jr / nr starts at jr * kb
    auto k_loop = b_.create<mlir::scf::ForOp>(loc_, i64(0), kb, i64(1), init.getResults());
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(k_loop.getBody());
      mlir::Value kk = k_loop.getInductionVar();
      std::vector<mlir::Value> bv;
      for (int64_t v = 0; v < vectors; ++v)
        bv.push_back(load(p.pack_b, p.t, add(b_base, add(mul(kk, i64(t.nr)), i64(v * t.lanes))), t.lanes));
      mlir::Value a_k = add(a_base, mul(kk, i64(a_k_stride)));
      std::vector<mlir::Value> next;
      for (int64_t r = 0; r < t.mr; ++r) {
        mlir::Value a = load(p.pack_a, p.t, add(a_k, i64(r * a_row_stride)), 1);
        a = b_.create<mlir::vector::BroadcastOp>(loc_, vec, a);
        for (int64_t v = 0; v < vectors; ++v) next.push_back(fma(a, bv[v], k_loop.getRegionIterArgs()[r * vectors + v]));
      }
      b_.create<mlir::scf::YieldOp>(loc_, next);
    }
    // Done with K: the epilogue and the outputs; else the partial sums back.
    auto finish = b_.create<mlir::scf::IfOp>(loc_, last, true);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&finish.getThenRegion().front());
    int c_axis = static_cast<int>(k_.space.size()) - 1;
    each_stored([&](int64_t r, int64_t v) {
      matmul_strip_ = k_loop.getResult(r * vectors + v);
      std::vector<mlir::Value> idx0 = delinearize(add(row, i64(r)), ir::Shape(k_.space.begin(), k_.space.end() - 1));
      idx0.push_back(i64(0));
      mlir::Value c = add(col, i64(v * t.lanes));
      for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
        NodeId out = k_.body.outputs[o].node;
        store(output_slot_[o], k_.body.node(out).dtype, add(mul(add(row, i64(r)), p.n), c),
              lane_value(out, idx0, c_axis, c, t.lanes), t.lanes);
      }
      lane_cache_.clear();
      matmul_strip_ = {};
    });
    b_.setInsertionPointToStart(&finish.getElseRegion().front());
    each_stored([&](int64_t r, int64_t v) { store(p.acc, p.t, acc_offset(i64(r), v), k_loop.getResult(r * vectors + v), t.lanes); });
  }

  // Whether the epilogue reads the matmul only along its columns (a strip of C is one vector),
  // not through a view that makes it constant along them (expand_dims on the last axis).
  bool strip_safe(NodeId id, int axis, NodeId mm) const {
    auto key = std::make_tuple(id, axis, mm);
    auto it = strip_safe_memo_.find(key);
    if (it != strip_safe_memo_.end()) return it->second;
    return strip_safe_memo_[key] = strip_safe_uncached(id, axis, mm);  // (a DAG: shared operands once)
  }
  bool strip_safe_uncached(NodeId id, int axis, NodeId mm) const {
    if (!depends_on(id, mm)) return true;
    if (id == mm) return axis + 1 == static_cast<int>(k_.body.node(mm).shape.size());
    if (axis < 0) return false;
    const Node& n = k_.body.node(id);
    if (n.kind == OpKind::Elementwise) {
      for (NodeId in : n.inputs)
        if (!strip_safe(in, axis, mm)) return false;
      return true;
    }
    bool view = n.kind == OpKind::BroadcastTo || n.kind == OpKind::Permute || n.kind == OpKind::ExpandDims ||
                n.kind == OpKind::Squeeze || n.kind == OpKind::Reshape;
    return view && strip_safe(n.inputs[0], operand_axis(n, axis), mm);
  }

  NodeId matmul_node() const {
    for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
      if (k_.body.node(id).kind == OpKind::Matmul) return id;
    throw ir::Error(fail_text("a matmul kernel without a matmul"));
  }

  void emit_matmul_strips(mlir::Value first_row, int64_t rows, int lanes) {
    NodeId mm = matmul_node();
    const Node& n = k_.body.node(mm);
    const ir::Shape& b_shape = k_.body.node(n.inputs[1]).shape;
    ir::Shape rows_shape(k_.space.begin(), k_.space.end() - 1);
    DType acc_type = ir::is_float(n.dtype) ? DType::F64 : DType::I64;
    bool floating = acc_type == DType::F64;
    mlir::Value width = dim(k_.space.back());
    std::vector<std::vector<mlir::Value>> row_idx;
    for (int64_t q = 0; q < rows; ++q) row_idx.push_back(delinearize(add(first_row, i64(q)), rows_shape));
    mlir::Value strips_end = mul(b_.create<mlir::arith::DivSIOp>(loc_, width, i64(lanes)), i64(lanes));
    loop(i64(0), strips_end, lanes, [&](mlir::Value j) {
      std::vector<mlir::Value> init(rows, constant(acc_type, 0, 0, lanes));
      auto dot = b_.create<mlir::scf::ForOp>(loc_, i64(0), dim(k_.body.node(n.inputs[0]).shape.back()), i64(1), init);
      {
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPointToStart(dot.getBody());
        clear_caches();
        mlir::Value kk = dot.getInductionVar();
        // B's row k for row 0's batch (every row of a block has the same batch: no batch dims).
        std::vector<mlir::Value> b_idx(row_idx[0].begin(), row_idx[0].end() - 1);
        b_idx.push_back(kk);
        b_idx.push_back(i64(0));
        mlir::Value b = cast(lane_value(n.inputs[1], b_idx, static_cast<int>(b_shape.size()) - 1, j, lanes), n.dtype,
                             acc_type, lanes);
        std::vector<mlir::Value> next;
        for (int64_t q = 0; q < rows; ++q) {
          std::vector<mlir::Value> a_idx = row_idx[q];
          a_idx.push_back(kk);
          mlir::Value a = cast(general_value(n.inputs[0], a_idx), n.dtype, acc_type, 1);
          a = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(scalar_type(acc_type), lanes), a);
          mlir::Value acc = dot.getRegionIterArgs()[q];
          next.push_back(floating ? mlir::Value(b_.create<mlir::arith::AddFOp>(loc_, acc, b_.create<mlir::arith::MulFOp>(loc_, a, b)))
                                  : add(acc, mul(a, b)));
        }
        b_.create<mlir::scf::YieldOp>(loc_, next);
        clear_caches();
      }
      for (int64_t q = 0; q < rows; ++q) {
        clear_caches();
        matmul_strip_ = cast(dot.getResult(q), acc_type, n.dtype, lanes);
        std::vector<mlir::Value> idx0 = row_idx[q];
        idx0.push_back(i64(0));
        mlir::Value row_start = mul(add(first_row, i64(q)), width);
        for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
          NodeId out = k_.body.outputs[o].node;
          store(output_slot_[o], k_.body.node(out).dtype, add(row_start, j),
                lane_value(out, idx0, static_cast<int>(k_.space.size()) - 1, j, lanes), lanes);
        }
      }
      matmul_strip_ = {};
    });
    for (int64_t q = 0; q < rows; ++q) emit_matmul_columns(add(first_row, i64(q)), strips_end);
  }

  // Columns [first_column, N) of one row of C: a dot product per element, operands and
  // prologues read through index maps, the epilogue applied to each element. Any shape, dtype
  // and view.
  void emit_matmul_columns(mlir::Value row, mlir::Value first_column) {
    NodeId mm = matmul_node();
    const Node& n = k_.body.node(mm);
    const ir::Shape& a_shape = k_.body.node(n.inputs[0]).shape;
    ir::Shape rows(k_.space.begin(), k_.space.end() - 1);
    std::vector<mlir::Value> row_idx = delinearize(row, rows);
    DType acc_type = ir::is_float(n.dtype) ? DType::F64 : DType::I64;
    auto columns = b_.create<mlir::scf::ForOp>(loc_, first_column, dim(k_.space.back()), i64(1));
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(columns.getBody());
    clear_caches();
    mlir::Value j = columns.getInductionVar();
    auto dot = b_.create<mlir::scf::ForOp>(loc_, i64(0), dim(a_shape.back()), i64(1),
                                           mlir::ValueRange{constant(acc_type, 0, 0, 1)});
    {
      mlir::OpBuilder::InsertionGuard inner(b_);
      b_.setInsertionPointToStart(dot.getBody());
      clear_caches();
      mlir::Value kk = dot.getInductionVar();
      std::vector<mlir::Value> a_idx(row_idx), b_idx(row_idx.begin(), row_idx.end() - 1);
      a_idx.push_back(kk);
      b_idx.push_back(kk);
      b_idx.push_back(j);
      mlir::Value a = cast(general_value(n.inputs[0], a_idx), n.dtype, acc_type, 1);
      mlir::Value b = cast(general_value(n.inputs[1], b_idx), n.dtype, acc_type, 1);
      mlir::Value acc = dot.getRegionIterArgs()[0];
      mlir::Value next = ir::is_float(n.dtype)
                             ? mlir::Value(b_.create<mlir::arith::AddFOp>(loc_, acc, b_.create<mlir::arith::MulFOp>(loc_, a, b)))
                             : add(acc, mul(a, b));
      b_.create<mlir::scf::YieldOp>(loc_, next);
      clear_caches();
    }
    reduced_[mm] = cast(dot.getResult(0), acc_type, n.dtype, 1);
    std::vector<mlir::Value> c_idx(row_idx);
    c_idx.push_back(j);
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      const Node& out = k_.body.node(k_.body.outputs[o].node);
      store(output_slot_[o], out.dtype, linearize(c_idx, k_.space), general_value(k_.body.outputs[o].node, c_idx), 1);
    }
    clear_caches();
  }

  // Scalar functions and ops: codegen/scalar_lowering.h (shared with the CUDA backend).
  mlir::Value philox_uniform(mlir::Value i, uint64_t seed) { return scalar_.philox_uniform(i, seed); }
  mlir::Value scalar_fn(const ir::ScalarFn& fn, const std::vector<mlir::Value>& params, int lanes) {
    return scalar_.scalar_fn(fn, params, lanes);
  }
  mlir::Value cmpf(mlir::arith::CmpFPredicate p, mlir::Value a, mlir::Value c) { return scalar_.cmpf(p, a, c); }
  mlir::Value cmpi(mlir::arith::CmpIPredicate p, mlir::Value a, mlir::Value c) { return scalar_.cmpi(p, a, c); }
  mlir::Value select(mlir::Value c, mlir::Value a, mlir::Value d) { return scalar_.select(c, a, d); }
  mlir::Value cast(mlir::Value x, DType from, DType to, int lanes) { return scalar_.cast(x, from, to, lanes); }

  mlir::OpBuilder& b_;
  mlir::Location loc_;
  const ir::Kernel& k_;
  const std::map<std::string, int>& symbols_;
  const CpuOptions& options_;
  std::vector<ir::HostArray>& constants_;
  mlir::Value buffers_, symbols_arg_;
  int slot_count_ = 0;
  std::vector<mlir::Value> base_;             // each slot's address
  std::map<std::string, mlir::Value> dims_;   // by Dim::str()
  std::map<NodeId, int> input_slot_;
  std::vector<int> output_slot_;
  std::map<std::vector<const void*>, mlir::Value> general_cache_;
  std::map<NodeId, mlir::Value> reduced_;  // Reduce/Matmul node -> this row's (element's) result
  std::map<NodeId, RowAccess> access_;
  std::map<NodeId, mlir::Value> row_cache_;
  std::map<NodeId, mlir::Value> contiguous_cache_;
  std::map<std::vector<const void*>, mlir::Value> lane_cache_;
  mutable std::map<std::pair<NodeId, int>, Inner> inner_memo_;
  mutable std::map<NodeId, std::vector<bool>> computed_from_memo_;  // depends_on, by source
  mutable std::map<std::tuple<NodeId, int, NodeId>, bool> strip_safe_memo_;
  mlir::Value matmul_strip_;
  mlir::Block* entry_ = nullptr;  // the function's entry block
  ScalarLowering scalar_;
  mlir::Value mask_;              // while set, vector loads and stores are masked by it  // while emitting a matmul strip's epilogue: the strip of C
};

std::unique_ptr<mlir::MLIRContext> make_context() {
  auto context = std::make_unique<mlir::MLIRContext>();
  context->loadDialect<mlir::func::FuncDialect, mlir::arith::ArithDialect, mlir::math::MathDialect,
                       mlir::scf::SCFDialect, mlir::vector::VectorDialect, mlir::LLVM::LLVMDialect,
                       mlir::cf::ControlFlowDialect>();
  mlir::registerBuiltinDialectTranslation(*context);
  mlir::registerLLVMDialectTranslation(*context);
  return context;
}

// The kernels of `p` that the backend compiles, as functions named after the kernels.
mlir::OwningOpRef<mlir::ModuleOp> build_module(mlir::MLIRContext& context, const ir::Program& p,
                                               const CpuOptions& options, CpuObject& object) {
  object.symbols = program_symbols(p);
  const std::vector<std::string>& symbol_names = object.symbols;
  std::map<std::string, int> symbols;
  for (size_t i = 0; i < symbol_names.size(); ++i) symbols[symbol_names[i]] = static_cast<int>(i);
  mlir::OpBuilder b(&context);
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(b.getUnknownLoc());
  mlir::Type ptr = mlir::LLVM::LLVMPointerType::get(&context);
  object.compiled.assign(p.kernels.size(), false);
  object.constants.assign(p.kernels.size(), {});
  object.split_chunks.assign(p.kernels.size(), 0);
  object.scratch_bytes.assign(p.kernels.size(), 0);
  for (size_t ki = 0; ki < p.kernels.size(); ++ki) {
    const ir::Kernel& k = p.kernels[ki];
    if (!cpu_compiles(k)) continue;
    object.compiled[ki] = true;
    b.setInsertionPointToEnd(module->getBody());
    auto func = b.create<mlir::func::FuncOp>(b.getUnknownLoc(), k.name,
                                             b.getFunctionType({ptr, ptr, b.getI64Type(), b.getI64Type()}, {}));
    KernelEmitter(b, k, symbols, options, object.constants[ki]).emit(func);
    if (split_reduction(k)) {
      b.setInsertionPointToEnd(module->getBody());
      auto finish = b.create<mlir::func::FuncOp>(b.getUnknownLoc(), k.name + "_finish",
                                                 b.getFunctionType({ptr, ptr, b.getI64Type(), b.getI64Type()}, {}));
      std::vector<ir::HostArray> same_constants;
      KernelEmitter(b, k, symbols, options, same_constants).emit_split_finish(finish);
      object.split_chunks[ki] = kSplitChunks;
      object.scratch_bytes[ki] = split_scratch_bytes(k);
    }
  }
  return module;
}

void lower_to_llvm(mlir::ModuleOp module) {
  mlir::MLIRContext* context = module.getContext();
  // Polynomial approximations first: they turn math.exp/log/sin/cos/tanh on f32 into
  // arithmetic that vectorizes, instead of scalar libm calls.
  mlir::RewritePatternSet approximations(context);
  mlir::populateMathPolynomialApproximationPatterns(approximations, {});
  if (mlir::failed(mlir::applyPatternsAndFoldGreedily(module, std::move(approximations))))
    throw ir::Error(fail_text("polynomial approximation did not converge"));

  // Keep MLIR's diagnostics for the error message: a failure here is a bug in fuse.
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(context, [&](mlir::Diagnostic& d) {
    diagnostics += "\n  " + d.str();
    return mlir::success();
  });
  mlir::PassManager pm(context);
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  pm.addPass(mlir::createConvertSCFToCFPass());
  // LLVM intrinsics first (fma, sqrt, floor: single instructions); libm only for what has none
  // (tan, f64 tanh), which unrolls vectors into vector ops, lowered next.
  pm.addPass(mlir::createConvertMathToLLVMPass());
  pm.addPass(mlir::createConvertMathToLibmPass());
  pm.addPass(mlir::createConvertVectorToLLVMPass());
  pm.addPass(mlir::createArithToLLVMConversionPass());
  pm.addPass(mlir::createConvertFuncToLLVMPass());
  pm.addPass(mlir::createConvertControlFlowToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
  if (mlir::failed(pm.run(module))) throw ir::Error(fail_text("lowering to the LLVM dialect failed:" + diagnostics));
}

void initialize_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

std::string to_text(mlir::Operation* op) {
  std::string text;
  llvm::raw_string_ostream out(text);
  op->print(out);
  return text;
}

}  // namespace

std::string emit_cpu_mlir(const ir::Program& p, const CpuOptions& options) {
  auto context = make_context();
  CpuObject object;
  auto module = build_module(*context, p, options, object);
  return to_text(module.get());
}

namespace {

// The kernels of `p` as LLVM IR (lowered, not yet optimized by LLVM).
std::unique_ptr<llvm::Module> to_llvm_ir(const ir::Program& p, const CpuOptions& options, llvm::LLVMContext& llvm_context,
                                         CpuObject& object) {
  initialize_llvm();
  auto context = make_context();
  auto module = build_module(*context, p, options, object);
  lower_to_llvm(module.get());
  std::unique_ptr<llvm::Module> llvm_module = mlir::translateModuleToLLVMIR(module.get(), llvm_context);
  if (!llvm_module) throw ir::Error(fail_text("translation to LLVM IR failed"));
  if (options.fast_math) {
    // LLVM's fast flags on every float instruction: reassociation (vectorized reductions),
    // reciprocals, no NaN/inf. Function attributes let the backend act on them too.
    for (llvm::Function& f : *llvm_module) {
      f.addFnAttr("unsafe-fp-math", "true");
      f.addFnAttr("no-nans-fp-math", "true");
      f.addFnAttr("no-infs-fp-math", "true");
      f.addFnAttr("no-signed-zeros-fp-math", "true");
      for (llvm::BasicBlock& block : f)
        for (llvm::Instruction& inst : block)
          if (llvm::isa<llvm::FPMathOperator>(inst)) inst.setFast(true);
    }
  }
  return llvm_module;
}

std::unique_ptr<llvm::TargetMachine> host_target_machine() {
  // LLVM vectorizes and schedules for this very CPU only when it knows it.
  auto host = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!host) throw ir::Error(fail_text("cannot detect the host CPU: " + llvm::toString(host.takeError())));
  host->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  // Position-independent, small code model: the JIT links one object at a time, its code and
  // constants close together (the default for JITs, the large model, costs a movabs per constant).
  host->setRelocationModel(llvm::Reloc::PIC_);
  host->setCodeModel(llvm::CodeModel::Small);
  auto machine = host->createTargetMachine();
  if (!machine) throw ir::Error(fail_text("cannot create a target machine for the host: " + llvm::toString(machine.takeError())));
  return std::move(*machine);
}

}  // namespace

std::string emit_cpu_llvm(const ir::Program& p, const CpuOptions& options) {
  llvm::LLVMContext llvm_context;
  CpuObject object;
  std::unique_ptr<llvm::Module> llvm_module = to_llvm_ir(p, options, llvm_context, object);
  std::string text;
  llvm::raw_string_ostream out(text);
  llvm_module->print(out, nullptr);
  return text;
}

CpuObject compile_cpu_object(const ir::Program& p, const CpuOptions& options, ObjectKind kind) {
  llvm::LLVMContext llvm_context;
  CpuObject object;
  std::unique_ptr<llvm::Module> llvm_module = to_llvm_ir(p, options, llvm_context, object);
  std::unique_ptr<llvm::TargetMachine> machine = host_target_machine();
  llvm_module->setDataLayout(machine->createDataLayout());
  llvm_module->setTargetTriple(machine->getTargetTriple().str());
  auto optimize = mlir::makeOptimizingTransformer(2, 0, machine.get());
  if (llvm::Error e = optimize(llvm_module.get()))
    throw ir::Error(fail_text("LLVM optimization failed: " + llvm::toString(std::move(e))));
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream out(buffer);
  llvm::legacy::PassManager codegen;
  auto file_type = kind == ObjectKind::Object ? llvm::CodeGenFileType::ObjectFile : llvm::CodeGenFileType::AssemblyFile;
  if (machine->addPassesToEmitFile(codegen, out, nullptr, file_type))
    throw ir::Error(fail_text("the host target cannot emit this file type"));
  codegen.run(*llvm_module);
  object.bytes.assign(buffer.begin(), buffer.end());
  return object;
}

const char* codegen_build_stamp() { return __DATE__ " " __TIME__; }

std::string emit_cpu_asm(const ir::Program& p, const CpuOptions& options) {
  return compile_cpu_object(p, options, ObjectKind::Assembly).bytes;
}

std::string emit_cpu_object(const ir::Program& p, const CpuOptions& options) {
  return compile_cpu_object(p, options, ObjectKind::Object).bytes;
}

}  // namespace fuse::codegen
