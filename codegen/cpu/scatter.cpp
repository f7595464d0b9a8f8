// The CPU Scatter form (issue 16): histogram, bincount and index_add with their elementwise
// prologues. Results never depend on the thread count:
//  - histogram/bincount split the input's elements into ir::scatter_chunks(B) chunks (a number
//    fixed by B alone); each chunk counts into its own B bins in the scratch slot, and a second
//    function adds the chunks' bins in chunk order. Counts and integer sums are exact (wrapping
//    as the interpreter's); float weights are summed in f64 per chunk, then the chunks in order,
//    rounded once (the interpreter sums in f64 in index order: f64 weights may differ in the
//    last bits from it, never between runs).
// bincount values and index_add indices are checked (KernelEmitterBase::check_index): a bad one
// is reported in the run's error record and touches no memory.
//  - index_add runs one output column (every index but the axis) per iteration: the column is
//    copied from x, then values are added in index order, exactly as the interpreter does.
#include "codegen/cpu/emitter.h"

#include <tuple>

#include "mlir/Dialect/Math/IR/Math.h"

namespace fuse::codegen {

using ir::DType;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

namespace {

DType bin_type(const ir::Graph& body, const Node& n) { return scatter_bin_type(body, n); }

}  // namespace

bool CpuKernelEmitter::takes_scratch() const {
  return k_.schedule.form == ir::LoopForm::SplitReduction || ir::shares_packed_b(k_) || column_split_ ||
         (k_.schedule.form == ir::LoopForm::Scatter && !(ir::scatter_bins(k_) == ir::Dim(0)));
}

mlir::Value CpuKernelEmitter::scatter_chunk_count(mlir::Value bins) {
  // ir::scatter_chunks, computed from the run's B.
  return min_i64(max_i64(div(i64(int64_t{1} << 22), max_i64(bins, i64(1))), i64(1)), i64(64));
}

void CpuKernelEmitter::emit_scatter(mlir::Value begin, mlir::Value end) {
  NodeId id = ir::scatter_node(k_);
  if (id < 0 || k_.body.outputs.size() != 1 || k_.body.outputs[0].node != id)
    throw ir::Error(fail_text("scatter kernel " + k_.name + " must write exactly its scatter's result"));
  if (k_.body.node(id).kind == OpKind::IndexAdd) {
    loop(begin, end, 1, [&](mlir::Value column) { emit_index_add_column(column); });
    return;
  }
  mlir::Value bins = dim(ir::scatter_bins(k_));
  mlir::Value chunks = scatter_chunk_count(bins);
  loop(begin, end, 1, [&](mlir::Value chunk) { emit_scatter_chunk(chunk, chunks, bins); });
}

void CpuKernelEmitter::emit_scatter_chunk(mlir::Value chunk, mlir::Value chunks, mlir::Value bins) {
  NodeId id = ir::scatter_node(k_);
  const Node& n = k_.body.node(id);
  DType t = bin_type(k_.body, n);
  int scratch = slot_count_;
  mlir::Value first_bin = mul(chunk, bins);
  loop(i64(0), bins, 1, [&](mlir::Value b) { store(scratch, t, add(first_bin, b), constant(t, 0, 0, 1), 1); });
  mlir::Value elements = dim(ir::num_elements(k_.space));
  mlir::Value from = div(mul(chunk, elements), chunks);
  mlir::Value to = div(mul(add(chunk, i64(1)), elements), chunks);
  loop(from, to, 1, [&](mlir::Value i) {
    std::vector<mlir::Value> idx = delinearize(i, k_.space);
    mlir::Value inside, bin;
    std::tie(inside, bin) = scatter_bin(id, idx, bins);
    auto if_op = b_.create<mlir::scf::IfOp>(loc_, inside, /*withElseRegion=*/false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPoint(if_op.thenBlock()->getTerminator());
    CacheScope scope(*this);
    mlir::Value weight = constant(t, 1, 1, 1);
    if (n.kind == OpKind::Bincount && n.inputs.size() == 2) {
      NodeId w = n.inputs[1];
      weight = cast(general_value(w, idx), k_.body.node(w).dtype, t, 1);
    }
    mlir::Value at = add(first_bin, bin);
    mlir::Value count = load(scratch, t, at, 1);
    mlir::Value sum = t == DType::F64 ? mlir::Value(b_.create<mlir::arith::AddFOp>(loc_, count, weight))
                                      : mlir::Value(b_.create<mlir::arith::AddIOp>(loc_, count, weight));
    store(scratch, t, at, sum, 1);
  });
}

std::pair<mlir::Value, mlir::Value> KernelEmitterBase::scatter_bin(NodeId id, const std::vector<mlir::Value>& idx,
                                                                    mlir::Value bins) {
  const Node& n = k_.body.node(id);
  const NodeId x = n.inputs[0];
  const DType xt = k_.body.node(x).dtype;
  if (n.kind == OpKind::Histogram) {
    mlir::Value bin = histogram_bin(id, cast(general_value(x, idx), xt, DType::F64, 1), bins);
    return {cmpi(mlir::arith::CmpIPredicate::sge, bin, i64(0)), bin};
  }
  return check_index(id, cast(general_value(x, idx), xt, DType::I64, 1), bins, /*wrap_negative=*/false);
}

mlir::Value KernelEmitterBase::histogram_bin(NodeId id, mlir::Value v, mlir::Value bins) {
  using mlir::arith::CmpFPredicate;
  using mlir::arith::CmpIPredicate;
  const Node& n = k_.body.node(id);
  const ir::HistogramAttrs& h = n.as<ir::HistogramAttrs>();
  bool f32 = k_.body.node(n.inputs[0]).dtype == DType::F32;
  mlir::Type f64 = b_.getF64Type();
  auto f64_constant = [&](double c) { return constant(DType::F64, c, 0, 1); };
  // Edges as the interpreter's histogram_edges: e[i] = T(i * ((hi - lo) / B) + lo), e[B] = T(hi).
  auto in_t = [&](mlir::Value e) {
    if (!f32) return e;
    mlir::Value narrow = b_.create<mlir::arith::TruncFOp>(loc_, b_.getF32Type(), e);
    return mlir::Value(b_.create<mlir::arith::ExtFOp>(loc_, f64, narrow));
  };
  mlir::Value bins_f = b_.create<mlir::arith::SIToFPOp>(loc_, f64, bins);
  mlir::Value step = b_.create<mlir::arith::DivFOp>(loc_, f64_constant(h.hi - h.lo), bins_f);
  mlir::Value last_edge = in_t(f64_constant(h.hi));
  auto edge = [&](mlir::Value i) {
    mlir::Value at = b_.create<mlir::arith::AddFOp>(
        loc_, b_.create<mlir::arith::MulFOp>(loc_, b_.create<mlir::arith::SIToFPOp>(loc_, f64, i), step), f64_constant(h.lo));
    return select(cmpi(CmpIPredicate::eq, i, bins), last_edge, in_t(at));
  };
  mlir::Value valid = b_.create<mlir::arith::AndIOp>(loc_, cmpf(CmpFPredicate::OGE, v, in_t(f64_constant(h.lo))),
                                                     cmpf(CmpFPredicate::OLE, v, last_edge));
  mlir::Value safe = select(valid, v, f64_constant(h.lo));  // (NaN never reaches the conversion)
  // NumPy's float guess, clamped to the bins, then corrected against the edges.
  mlir::Value scaled = b_.create<mlir::arith::MulFOp>(
      loc_, b_.create<mlir::arith::DivFOp>(loc_, b_.create<mlir::arith::SubFOp>(loc_, safe, f64_constant(h.lo)), f64_constant(h.hi - h.lo)),
      bins_f);
  mlir::Value guess = b_.create<mlir::math::FloorOp>(loc_, scaled);
  mlir::Value top = b_.create<mlir::arith::SubFOp>(loc_, bins_f, f64_constant(1));
  guess = select(cmpf(CmpFPredicate::OLT, guess, f64_constant(0)), f64_constant(0), guess);
  guess = select(cmpf(CmpFPredicate::OGT, guess, top), top, guess);
  mlir::Value b0 = b_.create<mlir::arith::FPToSIOp>(loc_, i64_type(), guess);
  auto down = b_.create<mlir::scf::WhileOp>(
      loc_, mlir::TypeRange{i64_type()}, mlir::ValueRange{b0},
      [&](mlir::OpBuilder&, mlir::Location, mlir::ValueRange args) {
        mlir::Value more = b_.create<mlir::arith::AndIOp>(loc_, cmpi(CmpIPredicate::sgt, args[0], i64(0)),
                                                          cmpf(CmpFPredicate::OLT, safe, edge(args[0])));
        b_.create<mlir::scf::ConditionOp>(loc_, more, args);
      },
      [&](mlir::OpBuilder&, mlir::Location, mlir::ValueRange args) {
        b_.create<mlir::scf::YieldOp>(loc_, mlir::ValueRange{sub(args[0], i64(1))});
      });
  auto up = b_.create<mlir::scf::WhileOp>(
      loc_, mlir::TypeRange{i64_type()}, mlir::ValueRange{down.getResult(0)},
      [&](mlir::OpBuilder&, mlir::Location, mlir::ValueRange args) {
        mlir::Value more = b_.create<mlir::arith::AndIOp>(
            loc_, cmpi(CmpIPredicate::slt, args[0], sub(bins, i64(1))),
            cmpf(CmpFPredicate::OGE, safe, edge(add(args[0], i64(1)))));
        b_.create<mlir::scf::ConditionOp>(loc_, more, args);
      },
      [&](mlir::OpBuilder&, mlir::Location, mlir::ValueRange args) {
        b_.create<mlir::scf::YieldOp>(loc_, mlir::ValueRange{add(args[0], i64(1))});
      });
  return select(valid, up.getResult(0), i64(-1));
}

void CpuKernelEmitter::emit_index_add_column(mlir::Value column) {
  NodeId id = ir::scatter_node(k_);
  const Node& n = k_.body.node(id);
  int axis = n.as<ir::GatherAttrs>().axis;
  NodeId x = n.inputs[0], indices = n.inputs[1], values = n.inputs[2];
  std::vector<mlir::Value> kept = delinearize(column, kept_dims());
  auto at_row = [&](mlir::Value r) {
    std::vector<mlir::Value> full = kept;
    full.insert(full.begin() + axis, r);
    return full;
  };
  mlir::Value size = dim(n.shape[axis]);
  int out = output_slot_[0];
  loop(i64(0), size, 1, [&](mlir::Value r) {
    std::vector<mlir::Value> idx = at_row(r);
    store(out, n.dtype, linearize(idx, n.shape), general_value(x, idx), 1);
  });
  DType it = k_.body.node(indices).dtype;
  loop(i64(0), dim(k_.space[axis]), 1, [&](mlir::Value j) {
    // An index outside [-size, size) is reported in the run's error record and adds nowhere.
    // Every column checks every index in order, so the first bad one is the interpreter's.
    auto [inside, row] = check_index(id, cast(general_value(indices, {j}), it, DType::I64, 1), size);
    auto if_op = b_.create<mlir::scf::IfOp>(loc_, inside, /*withElseRegion=*/false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPoint(if_op.thenBlock()->getTerminator());
    CacheScope scope(*this);
    mlir::Value at = linearize(at_row(row), n.shape);
    mlir::Value current = load(out, n.dtype, at, 1);
    mlir::Value v = general_value(values, at_row(j));
    // Each add rounds to the dtype (an f32 sum of two f32 is what the interpreter's f64 add
    // rounds to); integers wrap.
    mlir::Value sum = ir::is_float(n.dtype) ? mlir::Value(b_.create<mlir::arith::AddFOp>(loc_, current, v))
                                            : mlir::Value(b_.create<mlir::arith::AddIOp>(loc_, current, v));
    store(out, n.dtype, at, sum, 1);
  });
}

void CpuKernelEmitter::emit_scatter_finish(mlir::func::FuncOp func) {
  enter(func);
  NodeId id = ir::scatter_node(k_);
  const Node& n = k_.body.node(id);
  DType t = bin_type(k_.body, n);
  mlir::Value bins = dim(ir::scatter_bins(k_));
  mlir::Value chunks = scatter_chunk_count(bins);
  int scratch = slot_count_;
  loop(i64(0), bins, 1, [&](mlir::Value bin) {
    auto sum = b_.create<mlir::scf::ForOp>(loc_, i64(0), chunks, i64(1), mlir::ValueRange{constant(t, 0, 0, 1)});
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(sum.getBody());
      mlir::Value acc = sum.getRegionIterArgs()[0];
      mlir::Value part = load(scratch, t, add(mul(sum.getInductionVar(), bins), bin), 1);
      mlir::Value next = t == DType::F64 ? mlir::Value(b_.create<mlir::arith::AddFOp>(loc_, acc, part))
                                         : mlir::Value(b_.create<mlir::arith::AddIOp>(loc_, acc, part));
      b_.create<mlir::scf::YieldOp>(loc_, next);
    }
    store(output_slot_[0], n.dtype, bin, cast(sum.getResult(0), t, n.dtype, 1), 1);
  });
  b_.create<mlir::func::ReturnOp>(loc_);
}

}  // namespace fuse::codegen
