#include "codegen/emitter.h"

#include "ir/index_check.h"

#include <algorithm>
#include <limits>
#include <set>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace fuse::codegen {

std::vector<std::string> program_symbols(const ir::Program& p) {
  std::set<std::string> names;
  for (const ir::Buffer& b : p.buffers)
    for (const ir::Dim& d : b.shape) for (const std::string& s : d.symbol_names()) names.insert(s);
  for (const ir::Kernel& k : p.kernels)
    for (const ir::Node& n : k.body.nodes)
      for (const ir::Dim& d : n.shape) for (const std::string& s : d.symbol_names()) names.insert(s);
  return {names.begin(), names.end()};
}

KernelEmitterBase::KernelEmitterBase(mlir::OpBuilder& b, const ir::Kernel& k, bool fast_math, bool libdevice,
                                     const std::string& target_name)
    : b_(b),
      loc_(b.getUnknownLoc()),
      k_(k),
      target_name_(target_name),
      scalar_(b, fast_math, libdevice, "internal error in " + target_name + " codegen: "),
      access_(k) {}

mlir::Value KernelEmitterBase::result_at(NodeId id, const std::vector<mlir::Value>&) { return reduced_.at(id); }

void KernelEmitterBase::clear_caches() {
  general_cache_.clear();
  linear_memo_.clear();
  scalar_.forget_made_values();
}

int KernelEmitterBase::assign_slots(const std::function<void(NodeId)>& on_constant) {
  int slot = 0;
  for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
    if (k_.body.node(id).kind == OpKind::Input) input_slot_[id] = slot++;
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) output_slot_.push_back(slot++);
  for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
    if (k_.body.node(id).kind == OpKind::Constant) {
      input_slot_[id] = slot++;
      on_constant(id);
    }
  return slot;
}

mlir::Type KernelEmitterBase::ptr_type(unsigned address_space) {
  return mlir::LLVM::LLVMPointerType::get(b_.getContext(), address_space);
}
mlir::Value KernelEmitterBase::i64(int64_t v) { return b_.create<mlir::arith::ConstantIntOp>(loc_, v, 64); }
mlir::Value KernelEmitterBase::add(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::AddIOp>(loc_, a, c); }
mlir::Value KernelEmitterBase::sub(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::SubIOp>(loc_, a, c); }
mlir::Value KernelEmitterBase::mul(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::MulIOp>(loc_, a, c); }
mlir::Value KernelEmitterBase::div(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::DivSIOp>(loc_, a, c); }
mlir::Value KernelEmitterBase::rem(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::RemSIOp>(loc_, a, c); }
mlir::Value KernelEmitterBase::min_i64(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::MinSIOp>(loc_, a, c); }
mlir::Value KernelEmitterBase::max_i64(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::MaxSIOp>(loc_, a, c); }
mlir::Value KernelEmitterBase::whole_steps_end(mlir::Value from, mlir::Value to, int64_t step) {
  return add(from, mul(div(sub(to, from), i64(step)), i64(step)));
}

mlir::Value KernelEmitterBase::dim(const ir::Dim& d) {
  std::string key = d.str();
  auto cached = dims_.find(key);
  if (cached != dims_.end()) return cached->second;
  // At the function's entry, wherever it is first asked for: it is cached for every later use
  // (it depends only on the symbols).
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(entry_);
  mlir::Value v = dim_here(d);
  dims_[key] = v;
  return v;
}

// Not cached: a dim cached later sits before an earlier one at the entry's start, so a dim built
// from cached parts could use a value before it is defined.
mlir::Value KernelEmitterBase::dim_here(const ir::Dim& d) {
  mlir::Value v = i64(0);
  for (const ir::DimTerm& t : d.terms) {
    mlir::Value term = i64(t.coef);
    for (const ir::DimAtom& a : t.atoms) term = mul(term, dim_atom(a));
    v = add(v, term);
  }
  return v;
}

mlir::Value KernelEmitterBase::dim_atom(const ir::DimAtom& a) {
  switch (a.kind) {
    case ir::DimAtom::Kind::Symbol: return symbol_value(a.name);
    case ir::DimAtom::Kind::FloorDiv: {
      // floor(x / c) for c > 0: the truncating quotient, less one when x is negative and inexact.
      mlir::Value x = dim_here(a.args[0]);
      mlir::Value c = i64(a.divisor);
      mlir::Value negative_remainder =
          b_.create<mlir::arith::CmpIOp>(loc_, mlir::arith::CmpIPredicate::slt, rem(x, c), i64(0));
      return sub(div(x, c), b_.create<mlir::arith::ExtUIOp>(loc_, b_.getI64Type(), negative_remainder));
    }
    case ir::DimAtom::Kind::Min:
    case ir::DimAtom::Kind::Max: {
      mlir::Value v = dim_here(a.args[0]);
      for (size_t i = 1; i < a.args.size(); ++i)
        v = a.kind == ir::DimAtom::Kind::Min ? min_i64(v, dim_here(a.args[i])) : max_i64(v, dim_here(a.args[i]));
      return v;
    }
  }
  return i64(0);
}

static std::pair<std::string, std::vector<const void*>> memo_key(const std::vector<mlir::Value>& idx, const ir::Shape& shape) {
  std::vector<const void*> values;
  for (mlir::Value v : idx) values.push_back(v.getAsOpaquePointer());
  return {ir::shape_str(shape), values};
}

mlir::Value KernelEmitterBase::linearize(const std::vector<mlir::Value>& idx, const ir::Shape& shape) {
  auto known = linear_memo_.find(memo_key(idx, shape));
  if (known != linear_memo_.end()) return known->second;
  mlir::Value lin = i64(0);
  for (size_t d = 0; d < shape.size(); ++d) lin = add(mul(lin, dim(shape[d])), idx[d]);
  return lin;
}

std::vector<mlir::Value> KernelEmitterBase::delinearize(mlir::Value lin, const ir::Shape& shape) {
  mlir::Value whole = lin;
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
  if (!shape.empty()) linear_memo_[memo_key(idx, shape)] = whole;  // (a rank-0 index is position 0)
  return idx;
}

std::vector<mlir::Value> KernelEmitterBase::full_index(const std::vector<mlir::Value>& kept,
                                                       const std::vector<mlir::Value>& reduced) {
  std::vector<mlir::Value> full;
  size_t next_kept = 0, next_reduced = 0;
  for (size_t d = 0; d < k_.space.size(); ++d) {
    bool is_reduced = std::find(k_.axes.begin(), k_.axes.end(), static_cast<int>(d)) != k_.axes.end();
    full.push_back(is_reduced ? reduced[next_reduced++] : kept[next_kept++]);
  }
  return full;
}

std::vector<std::pair<int, int>> KernelEmitterBase::ordered_inputs(NodeId id) const {
  std::vector<std::pair<int, int>> pairs;
  const Node& n = k_.body.node(id);
  for (size_t j = 0; j < n.inputs.size(); ++j) {
    const Node& b = k_.body.node(n.inputs[j]);
    if (b.kind != OpKind::BroadcastTo) continue;
    const Node& r = k_.body.node(b.inputs[0]);
    if (r.kind != OpKind::Reduce) continue;
    const ir::ReduceAttrs& attrs = r.as<ir::ReduceAttrs>();
    // Kept dims line the broadcast up with x: each element meets the max of its own set.
    if (attrs.kind != ir::ReduceKind::Max || !attrs.keepdims || b.shape != k_.body.node(r.inputs[0]).shape) continue;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i] == r.inputs[0]) pairs.emplace_back(static_cast<int>(i), static_cast<int>(j));
  }
  return pairs;
}

mlir::Value KernelEmitterBase::general_value(NodeId id, const std::vector<mlir::Value>& idx) {
  std::vector<const void*> key{reinterpret_cast<const void*>(static_cast<intptr_t>(id))};
  for (mlir::Value v : idx) key.push_back(v.getAsOpaquePointer());
  auto it = general_cache_.find(key);
  if (it != general_cache_.end()) return it->second;
  const Node& n = k_.body.node(id);
  mlir::Value v;
  switch (n.kind) {
    case OpKind::Input:
    case OpKind::Constant: v = load_element(id, linearize(idx, n.shape)); break;
    case OpKind::Elementwise: {
      std::vector<mlir::Value> args;
      for (NodeId in : n.inputs) args.push_back(general_value(in, idx));
      v = elementwise(id, args, 1);
      break;
    }
    case OpKind::BroadcastTo:
    case OpKind::Permute:
    case OpKind::ExpandDims:
    case OpKind::Squeeze:
    case OpKind::Slice:  // np-views
    case OpKind::Reshape: v = general_value(n.inputs[0], operand_index(n, idx)); break;
    case OpKind::Take:
    case OpKind::TakeAlongAxis: v = gather_value(id, idx); break;  // issue 16: indexed loads
    case OpKind::Pad: v = pad_value(n, idx); break;  // np-views
    case OpKind::Concatenate: v = concatenate_value(n, idx, 0, ir::Dim(0)); break;  // np-views
    case OpKind::Reduce:
    case OpKind::Matmul: v = result_at(id, idx); break;
    case OpKind::Scan: v = reduced_.at(id); break;  // np-scan: this step's prefix (scan_range)
    case OpKind::Arange: v = idx[0]; break;
    case OpKind::Rand: v = scalar_.philox_uniform(linearize(idx, n.shape), n.as<ir::RandAttrs>().seed); break;
    default: throw ir::Error(fail_text(std::string(ir::op_kind_name(n.kind)) + " in a kernel body"));
  }
  general_cache_[key] = v;
  return v;
}

std::vector<mlir::Value> KernelEmitterBase::operand_index(const Node& n, const std::vector<mlir::Value>& idx) {
  const ir::Shape& from = k_.body.node(n.inputs[0]).shape;
  if (n.kind == OpKind::Slice) {  // np-views: in = start + step * out, per axis
    const ir::SliceAttrs& a = n.as<ir::SliceAttrs>();
    std::vector<mlir::Value> in_idx;
    for (size_t d = 0; d < idx.size(); ++d)
      in_idx.push_back(a.steps[d] == 1 ? add(dim(a.starts[d]), idx[d]) : add(dim(a.starts[d]), mul(idx[d], i64(a.steps[d]))));
    return in_idx;
  }
  return scalar_.view_operand_index(n, from, idx, [&](const std::vector<mlir::Value>& i) {
    return delinearize(linearize(i, n.shape), from);
  });
}

// ---- np-views

mlir::Value KernelEmitterBase::if_else(mlir::Value condition, mlir::Type type, const std::function<mlir::Value()>& then_value,
                                       const std::function<mlir::Value()>& else_value) {
  auto branch = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange{type}, condition, /*withElseRegion=*/true);
  mlir::OpBuilder::InsertionGuard guard(b_);
  {
    CacheScope scope(*this);
    b_.setInsertionPointToStart(&branch.getThenRegion().front());
    b_.create<mlir::scf::YieldOp>(loc_, then_value());
  }
  {
    CacheScope scope(*this);
    b_.setInsertionPointToStart(&branch.getElseRegion().front());
    b_.create<mlir::scf::YieldOp>(loc_, else_value());
  }
  return branch.getResult(0);
}

mlir::Value KernelEmitterBase::pad_value(const Node& n, const std::vector<mlir::Value>& idx) {
  const ir::PadAttrs& a = n.as<ir::PadAttrs>();
  const Node& in = k_.body.node(n.inputs[0]);
  std::vector<mlir::Value> in_idx;
  mlir::Value inside;
  for (size_t d = 0; d < idx.size(); ++d) {
    mlir::Value j = sub(idx[d], dim(a.before[d]));
    mlir::Value size = dim(in.shape[d]);
    if (a.before[d] == ir::Dim(0) && a.after[d] == ir::Dim(0)) {
      in_idx.push_back(j);
      continue;
    }
    switch (a.mode) {
      case ir::PadMode::Constant: {
        mlir::Value here = b_.create<mlir::arith::AndIOp>(loc_, cmpi(mlir::arith::CmpIPredicate::sge, j, i64(0)),
                                                          cmpi(mlir::arith::CmpIPredicate::slt, j, size));
        inside = inside ? b_.create<mlir::arith::AndIOp>(loc_, inside, here).getResult() : here;
        in_idx.push_back(j);
        break;
      }
      case ir::PadMode::Edge: in_idx.push_back(min_i64(max_i64(j, i64(0)), sub(size, i64(1)))); break;
      case ir::PadMode::Reflect: {
        // Mirror without repeating the edges: period 2(n - 1) (1 when n is 1: every index is 0).
        mlir::Value period = max_i64(mul(sub(size, i64(1)), i64(2)), i64(1));
        mlir::Value m = rem(add(rem(j, period), period), period);
        in_idx.push_back(select(cmpi(mlir::arith::CmpIPredicate::slt, m, size), m, sub(period, m)));
        break;
      }
    }
  }
  if (!inside) return general_value(n.inputs[0], in_idx);
  return if_else(
      inside, scalar_type(n.dtype), [&] { return general_value(n.inputs[0], in_idx); },
      [&] { return constant(n.dtype, a.value.f, a.value.i, 1); });
}

mlir::Value KernelEmitterBase::concatenate_value(const Node& n, const std::vector<mlir::Value>& idx, size_t first,
                                                 const ir::Dim& offset) {
  int axis = n.as<ir::ConcatenateAttrs>().axis;
  auto operand_at = [&](size_t k, const ir::Dim& at) {
    std::vector<mlir::Value> in_idx = idx;
    if (!(at == ir::Dim(0))) in_idx[axis] = sub(idx[axis], dim(at));
    return general_value(n.inputs[k], in_idx);
  };
  if (first + 1 == n.inputs.size()) return operand_at(first, offset);
  ir::Dim end = offset + k_.body.node(n.inputs[first]).shape[axis];
  return if_else(
      cmpi(mlir::arith::CmpIPredicate::slt, idx[axis], dim(end)), scalar_type(n.dtype), [&] { return operand_at(first, offset); },
      [&] { return concatenate_value(n, idx, first + 1, end); });
}

// ---- gather/scatter (issue 16)

std::pair<mlir::Value, mlir::Value> KernelEmitterBase::check_index(NodeId id, mlir::Value index, mlir::Value size,
                                                                   bool wrap_negative) {
  using P = mlir::arith::CmpIPredicate;
  std::vector<NodeId> checked = ir::checked_nodes(k_.body);
  auto position = std::find(checked.begin(), checked.end(), id);
  if (position == checked.end() || !error_record_)
    throw ir::Error(fail_text("node %" + std::to_string(id) + " of kernel " + k_.name + " has no index check"));
  int64_t check = first_check_ + (position - checked.begin());
  mlir::Value j = wrap_negative ? select(cmpi(P::slt, index, i64(0)), add(index, size), index) : index;
  mlir::Value in_range = cmpi(P::ult, j, size);  // unsigned: a negative j is out of range too
  mlir::Value bad = b_.create<mlir::arith::XOrIOp>(loc_, in_range, b_.create<mlir::arith::ConstantIntOp>(loc_, 1, 1));
  auto report = b_.create<mlir::scf::IfOp>(loc_, bad, /*withElseRegion=*/false);
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(&report.getThenRegion().front());
  // The first report wins the record's check word; only the winner writes the index.
  auto won_record = b_.create<mlir::LLVM::AtomicCmpXchgOp>(loc_, error_record_, i64(0), i64(check + 1),
                                                           mlir::LLVM::AtomicOrdering::monotonic,
                                                           mlir::LLVM::AtomicOrdering::monotonic);
  mlir::Value won = b_.create<mlir::LLVM::ExtractValueOp>(loc_, won_record, llvm::ArrayRef<int64_t>{1});
  auto write = b_.create<mlir::scf::IfOp>(loc_, won, /*withElseRegion=*/false);
  b_.setInsertionPointToStart(&write.getThenRegion().front());
  mlir::Value at = b_.create<mlir::LLVM::GEPOp>(loc_, error_record_.getType(), i64_type(), error_record_,
                                                mlir::ArrayRef<mlir::LLVM::GEPArg>{ir::kErrorIndex});
  b_.create<mlir::LLVM::StoreOp>(loc_, index, at, 8);
  return {in_range, j};
}

mlir::Value KernelEmitterBase::gather_value(NodeId id, const std::vector<mlir::Value>& idx) {
  const Node& n = k_.body.node(id);
  int axis = n.as<ir::GatherAttrs>().axis;
  const Node& x = k_.body.node(n.inputs[0]);
  const Node& indices = k_.body.node(n.inputs[1]);
  std::vector<mlir::Value> x_idx, i_idx;
  if (n.kind == OpKind::Take) {  // out index: x's leading axes, idx's axes, x's trailing axes
    size_t q = indices.shape.size();
    x_idx.assign(idx.begin(), idx.begin() + axis);
    i_idx.assign(idx.begin() + axis, idx.begin() + axis + q);
    x_idx.push_back(mlir::Value());
    x_idx.insert(x_idx.end(), idx.begin() + axis + q, idx.end());
  } else {  // take_along_axis: the dims of size 1 of x (but `axis`) and of idx broadcast
    for (size_t d = 0; d < idx.size(); ++d) {
      i_idx.push_back(indices.shape[d] == ir::Dim(1) ? i64(0) : idx[d]);
      x_idx.push_back(static_cast<int>(d) == axis ? mlir::Value() : x.shape[d] == ir::Dim(1) ? i64(0) : idx[d]);
    }
  }
  mlir::Value index = cast(general_value(n.inputs[1], i_idx), indices.dtype, DType::I64, 1);
  auto [in_range, j] = check_index(id, index, dim(x.shape[axis]));
  x_idx[axis] = j;
  return if_else(
      in_range, scalar_type(n.dtype), [&] { return general_value(n.inputs[0], x_idx); },
      [&] { return constant(n.dtype, 0, 0, 1); });
}

// np-gaps (issue 16). take_along_axis is left out: the interpreter checks only the indices that
// reach an output element (NumPy 1.24 too, with a DeprecationWarning for the rest).
void KernelEmitterBase::check_indices_of_empty_takes(mlir::Value once) {
  for (NodeId id : ir::checked_nodes(k_.body)) {
    const Node& n = k_.body.node(id);
    if (n.kind != OpKind::Take) continue;
    const Node& indices = k_.body.node(n.inputs[1]);
    ir::Dim elements = ir::num_elements(n.shape), count = ir::num_elements(indices.shape);
    if (elements.constant().value_or(0) > 0 || count.constant().value_or(1) == 0) continue;  // never needed
    mlir::Value empty = cmpi(mlir::arith::CmpIPredicate::eq, dim(elements), i64(0));
    auto when = b_.create<mlir::scf::IfOp>(loc_, b_.create<mlir::arith::AndIOp>(loc_, once, empty), /*withElseRegion=*/false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&when.getThenRegion().front());
    auto each = b_.create<mlir::scf::ForOp>(loc_, i64(0), dim(count), i64(1));
    b_.setInsertionPointToStart(each.getBody());
    CacheScope scope(*this);
    std::vector<mlir::Value> at = delinearize(each.getInductionVar(), indices.shape);
    mlir::Value index = cast(general_value(n.inputs[1], at), indices.dtype, DType::I64, 1);
    check_index(id, index, dim(k_.body.node(n.inputs[0]).shape[n.as<ir::GatherAttrs>().axis]));
  }
}

KernelEmitterBase::CacheScope::CacheScope(KernelEmitterBase& e)
    : e_(e), general_(e.general_cache_), linear_(e.linear_memo_) {
  e_.clear_caches();
}

KernelEmitterBase::CacheScope::~CacheScope() {
  e_.general_cache_ = std::move(general_);
  e_.linear_memo_ = std::move(linear_);
}

// ---- argmax/argmin and scans ----

std::pair<mlir::Value, mlir::Value> KernelEmitterBase::arg_pick(NodeId id, std::pair<mlir::Value, mlir::Value> a,
                                                                std::pair<mlir::Value, mlir::Value> c) {
  bool is_max = k_.body.node(id).as<ir::ReduceAttrs>().kind == ir::ReduceKind::ArgMax;
  auto and_ = [&](mlir::Value x, mlir::Value y) { return b_.create<mlir::arith::AndIOp>(loc_, x, y).getResult(); };
  auto or_ = [&](mlir::Value x, mlir::Value y) { return b_.create<mlir::arith::OrIOp>(loc_, x, y).getResult(); };
  auto not_ = [&](mlir::Value x) {
    return b_.create<mlir::arith::XOrIOp>(loc_, x, b_.create<mlir::arith::ConstantIntOp>(loc_, 1, 1)).getResult();
  };
  mlir::Value earlier = cmpi(mlir::arith::CmpIPredicate::slt, c.second, a.second);
  mlir::Value wins;
  if (mlir::isa<mlir::FloatType>(a.first.getType())) {
    using P = mlir::arith::CmpFPredicate;
    mlir::Value a_nan = cmpf(P::UNO, a.first, a.first), c_nan = cmpf(P::UNO, c.first, c.first);
    mlir::Value better = or_(cmpf(is_max ? P::OGT : P::OLT, c.first, a.first),
                             and_(cmpf(P::OEQ, c.first, a.first), earlier));  // false when either is NaN
    wins = or_(and_(c_nan, or_(not_(a_nan), earlier)), and_(not_(a_nan), better));
  } else {
    using P = mlir::arith::CmpIPredicate;
    wins = or_(cmpi(is_max ? P::sgt : P::slt, c.first, a.first), and_(cmpi(P::eq, c.first, a.first), earlier));
  }
  return {select(wins, c.first, a.first), select(wins, c.second, a.second)};
}

std::pair<mlir::Value, mlir::Value> KernelEmitterBase::fold_arg(NodeId id, mlir::Value from, mlir::Value to, mlir::Value step,
                                                                const std::function<mlir::Value(mlir::Value)>& element) {
  const Node& n = k_.body.node(id);
  bool is_max = n.as<ir::ReduceAttrs>().kind == ir::ReduceKind::ArgMax;
  DType in = k_.body.node(n.inputs[0]).dtype;
  DType value_type = ir::is_float(in) ? in : DType::I64;  // compared exactly; bool as 0/1
  constexpr double inf = std::numeric_limits<double>::infinity();
  int64_t int_start = is_max ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  // (identity, 0) loses to every element but an equal one at index 0, and when the extreme is
  // the identity every element equals it, so the answer is 0 anyway.
  mlir::Value start = constant(value_type, is_max ? -inf : inf, int_start, 1);
  auto fold = b_.create<mlir::scf::ForOp>(loc_, from, to, step, mlir::ValueRange{start, i64(0)});
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(fold.getBody());
    CacheScope scope(*this);
    mlir::Value j = fold.getInductionVar();
    auto best = arg_pick(id, {fold.getRegionIterArgs()[0], fold.getRegionIterArgs()[1]}, {cast(element(j), in, value_type, 1), j});
    b_.create<mlir::scf::YieldOp>(loc_, mlir::ValueRange{best.first, best.second});
  }
  return {fold.getResult(0), fold.getResult(1)};
}

// ---- np-scan: scans with an epilogue ----

ir::NodeId KernelEmitterBase::scan_node() const {
  for (NodeId id = 0; id < static_cast<NodeId>(k_.body.nodes.size()); ++id)
    if (k_.body.node(id).kind == OpKind::Scan) return id;
  throw ir::Error(fail_text("scan kernel " + k_.name + " has no scan"));
}

ir::DType KernelEmitterBase::scan_accumulator_type() const {
  return ir::is_float(k_.body.node(k_.body.node(scan_node()).inputs[0]).dtype) ? DType::F64 : DType::I64;
}

mlir::Value KernelEmitterBase::scan_identity() {
  int one = k_.body.node(scan_node()).as<ir::ScanAttrs>().kind == ir::ReduceKind::Prod ? 1 : 0;
  return constant(scan_accumulator_type(), one, one, 1);
}

mlir::Value KernelEmitterBase::scan_combine(mlir::Value acc, mlir::Value x) {
  bool prod = k_.body.node(scan_node()).as<ir::ScanAttrs>().kind == ir::ReduceKind::Prod;
  if (scan_accumulator_type() == DType::F64)
    return prod ? mlir::Value(b_.create<mlir::arith::MulFOp>(loc_, acc, x)) : mlir::Value(b_.create<mlir::arith::AddFOp>(loc_, acc, x));
  return prod ? mul(acc, x) : add(acc, x);  // i64 arithmetic wraps, as the interpreter's u64
}

std::vector<mlir::Value> KernelEmitterBase::scan_index(mlir::Value row, mlir::Value j) {
  const Node& n = k_.body.node(scan_node());
  int axis = n.as<ir::ScanAttrs>().axis;
  ir::Shape outer_shape = n.shape;
  outer_shape.erase(outer_shape.begin() + axis);
  std::vector<mlir::Value> idx = delinearize(row, outer_shape);
  idx.insert(idx.begin() + axis, j);
  return idx;
}

mlir::Value KernelEmitterBase::scan_element(const std::vector<mlir::Value>& idx) {
  const Node& n = k_.body.node(scan_node());
  return cast(general_value(n.inputs[0], idx), k_.body.node(n.inputs[0]).dtype, scan_accumulator_type(), 1);
}

void KernelEmitterBase::scan_store_step(const std::vector<mlir::Value>& idx, mlir::Value prefix, const ScanStore& store) {
  NodeId id = scan_node();
  // The epilogue reads the scan only at this element (fusion keeps views off its path).
  reduced_[id] = cast(prefix, scan_accumulator_type(), k_.body.node(id).dtype, 1);
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    NodeId out = k_.body.outputs[o].node;
    store(o, linearize(idx, k_.body.node(out).shape), general_value(out, idx));
  }
}

mlir::Value KernelEmitterBase::scan_range(mlir::Value row, mlir::Value from, mlir::Value to, mlir::Value start,
                                          const ScanStore* store) {
  auto fold = b_.create<mlir::scf::ForOp>(loc_, from, to, i64(1), mlir::ValueRange{start});
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(fold.getBody());
    CacheScope scope(*this);
    std::vector<mlir::Value> idx = scan_index(row, fold.getInductionVar());
    mlir::Value acc = scan_combine(fold.getRegionIterArgs()[0], scan_element(idx));
    if (store) scan_store_step(idx, acc, *store);
    b_.create<mlir::scf::YieldOp>(loc_, acc);
  }
  return fold.getResult(0);
}

void KernelEmitterBase::scan_row(mlir::Value row, const ScanStore& store) {
  const Node& n = k_.body.node(scan_node());
  scan_range(row, i64(0), dim(n.shape[n.as<ir::ScanAttrs>().axis]), scan_identity(), &store);
}

}  // namespace fuse::codegen
