// The emitter core both code generators share (internal to codegen/): a kernel's buffer slots,
// dims and index arithmetic, views as index maps, the value of any node at any index with its
// caches, and the reductions' accumulators. A target's emitter (codegen/cpu/emitter.h,
// codegen/cuda/emitter.h) derives from it, supplies how a slot's element is loaded and how a
// shape symbol is read, and emits its loop forms (ir::LoopForm) on top.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "codegen/scalar_lowering.h"
#include "ir/kernel_forms.h"
#include "ir/program.h"

#include "mlir/IR/Builders.h"

namespace fuse::codegen {

/// Every shape symbol a program's buffers and kernel bodies name, sorted: the kernels' symbol
/// arguments in this order.
std::vector<std::string> program_symbols(const ir::Program& p);

/// The type histogram/bincount `n` adds its bins up in (CPU and CUDA scatter kernels): i64
/// counts and integer sums, f64 float sums (cast to the node's dtype at the end).
inline ir::DType scatter_bin_type(const ir::Graph& body, const ir::Node& n) {
  if (n.kind == ir::OpKind::Bincount && n.inputs.size() == 2 && ir::is_float(body.node(n.inputs[1]).dtype)) return ir::DType::F64;
  return ir::DType::I64;
}

class KernelEmitterBase {
 public:
  virtual ~KernelEmitterBase() = default;
  KernelEmitterBase(const KernelEmitterBase&) = delete;
  KernelEmitterBase& operator=(const KernelEmitterBase&) = delete;
  /// The program-wide number of this kernel's first index check (ir::first_index_check): its
  /// checked nodes report first_check + their position in ir::checked_nodes(body).
  void set_first_index_check(int first_check) { first_check_ = first_check; }

 protected:
  using DType = ir::DType;
  using Node = ir::Node;
  using NodeId = ir::NodeId;
  using OpKind = ir::OpKind;

  /// `target_name` ("CPU", "CUDA") prefixes internal errors.
  KernelEmitterBase(mlir::OpBuilder& b, const ir::Kernel& k, bool fast_math, bool libdevice, const std::string& target_name);

  // ---- what a target supplies ----
  /// The size of shape symbol `name`, read at the function's entry (the insertion point is there).
  virtual mlir::Value symbol_value(const std::string& name) = 0;
  /// One element (lanes = 1) of the input or constant node `id` at linear `offset`.
  virtual mlir::Value load_element(NodeId id, mlir::Value offset) = 0;
  /// A Reduce or Matmul node's value at `idx`: by default this row's result, computed before.
  virtual mlir::Value result_at(NodeId id, const std::vector<mlir::Value>& idx);
  /// Forgets the values cached while emitting one region (they are defined inside it).
  virtual void clear_caches();

  /// The kernel's argument slots: its inputs (body Input nodes in order), outputs, constants.
  /// Fills input_slot_ and output_slot_ and calls `on_constant` for each constant node in slot
  /// order; returns the number of slots.
  int assign_slots(const std::function<void(NodeId)>& on_constant);

  std::string fail_text(const std::string& what) const { return "internal error in " + target_name_ + " codegen: " + what; }

  // ---- integers ----
  mlir::Type i64_type() { return b_.getI64Type(); }
  mlir::Type ptr_type(unsigned address_space = 0);
  mlir::Value i64(int64_t v);
  mlir::Value add(mlir::Value a, mlir::Value c);
  mlir::Value sub(mlir::Value a, mlir::Value c);
  mlir::Value mul(mlir::Value a, mlir::Value c);
  mlir::Value div(mlir::Value a, mlir::Value c);
  mlir::Value rem(mlir::Value a, mlir::Value c);
  mlir::Value min_i64(mlir::Value a, mlir::Value c);
  mlir::Value max_i64(mlir::Value a, mlir::Value c);
  /// The end of the whole steps of `step` from `from` that fit before `to`.
  mlir::Value whole_steps_end(mlir::Value from, mlir::Value to, int64_t step);

  // ---- scalar ops (codegen/scalar_lowering.h) ----
  mlir::Value scalar_fn(const ir::ScalarFn& fn, const std::vector<mlir::Value>& params, int lanes) {
    return scalar_.scalar_fn(fn, params, lanes);
  }
  // Elementwise node `id` from its inputs' values (in the order of its inputs).
  mlir::Value elementwise(NodeId id, const std::vector<mlir::Value>& args, int lanes) {
    return scalar_.scalar_fn(k_.body.node(id).as<ir::ElementwiseAttrs>().body, args, lanes, ordered_inputs(id));
  }
  // Pairs (i, j) of node `id`'s inputs where input j is the max of a set holding each element of
  // input i: broadcast_to(max(x, axes, keepdims)) back to x's shape.
  std::vector<std::pair<int, int>> ordered_inputs(NodeId id) const;
  mlir::Value cmpf(mlir::arith::CmpFPredicate p, mlir::Value a, mlir::Value c) { return scalar_.cmpf(p, a, c); }
  mlir::Value cmpi(mlir::arith::CmpIPredicate p, mlir::Value a, mlir::Value c) { return scalar_.cmpi(p, a, c); }
  mlir::Value select(mlir::Value c, mlir::Value a, mlir::Value d) { return scalar_.select(c, a, d); }
  mlir::Value cast(mlir::Value x, DType from, DType to, int lanes) { return scalar_.cast(x, from, to, lanes); }
  mlir::Type scalar_type(DType t) { return scalar_.scalar_type(t); }
  /// The memory type of one element: bool is i1 in registers, i8 in memory.
  mlir::Type memory_type(DType t) { return t == DType::Bool ? b_.getI8Type() : scalar_type(t); }
  mlir::Type lane_type(mlir::Type scalar, int lanes) { return scalar_.lane_type(scalar, lanes); }
  mlir::Value constant(DType t, double f, int64_t i, int lanes) { return scalar_.constant(t, f, i, lanes); }

  // ---- dims and indices ----
  /// A dim's value from the symbols' sizes (computed once, at the function's entry).
  mlir::Value dim(const ir::Dim& d);
  /// The same, emitted at the insertion point, and one factor of a dim term.
  mlir::Value dim_here(const ir::Dim& d);
  mlir::Value dim_atom(const ir::DimAtom& a);
  /// Row-major position of `idx` in `shape`. An index delinearize() took apart is put back
  /// together as the value it came from (the division and remainder then go unused and are
  /// removed): an operand laid out like the space is read at the loop's own position.
  mlir::Value linearize(const std::vector<mlir::Value>& idx, const ir::Shape& shape);
  /// (The outermost index is what is left: no remainder, and a rank-1 index is the position.)
  std::vector<mlir::Value> delinearize(mlir::Value lin, const ir::Shape& shape);
  /// The space's index from a row's kept index and its reduced index.
  std::vector<mlir::Value> full_index(const std::vector<mlir::Value>& kept, const std::vector<mlir::Value>& reduced);
  ir::Shape kept_dims() const { return ir::kept_dims(k_); }
  ir::Shape reduced_dims() const { return ir::reduced_dims(k_); }
  std::vector<NodeId> reduce_nodes() const { return ir::reduce_nodes(k_); }

  // ---- values ----
  /// The value of node `id` at multi-index `idx` of its shape, following views as index maps.
  mlir::Value general_value(NodeId id, const std::vector<mlir::Value>& idx);
  /// A view's operand index for its own index `idx`.
  std::vector<mlir::Value> operand_index(const Node& n, const std::vector<mlir::Value>& idx);
  // ---- np-views: index maps with more than one case ----
  /// np.pad at `idx`: the operand at the mapped index (edge: clamped; reflect: mirrored), or
  /// for mode constant the value outside (branching, so nothing out of bounds is read).
  mlir::Value pad_value(const Node& n, const std::vector<mlir::Value>& idx);
  /// np.concatenate at `idx`: the operand whose range along the axis holds idx[axis], from
  /// `first` on (a chain of branches).
  mlir::Value concatenate_value(const Node& n, const std::vector<mlir::Value>& idx, size_t first, const ir::Dim& offset);
  /// then_value() if `condition` else else_value(), each in its own region (own caches).
  mlir::Value if_else(mlir::Value condition, mlir::Type type, const std::function<mlir::Value()>& then_value,
                      const std::function<mlir::Value()>& else_value);

  // ---- reductions ----
  // An accumulator has the interpreter's accumulation type: floats (and every mean) in f64
  // (max/min in the float's own type: exact), integers in i64 (wrapping to the result's width
  // at the end), any/all in i1, user combiners in the node's dtype. finish() turns one into the
  // result (mean's division, the cast).
  DType accumulator_type(NodeId id) { return ScalarLowering::reduce_accumulator_type(k_.body, id); }
  mlir::Value accumulator_identity(NodeId id, int lanes = 1) { return scalar_.reduce_identity(k_.body, id, lanes); }
  mlir::Value combine(NodeId id, mlir::Value acc, mlir::Value x) { return scalar_.reduce_combine(k_.body, id, acc, x); }
  mlir::Value to_accumulator(NodeId id, mlir::Value x, int lanes = 1) { return scalar_.reduce_input(k_.body, id, x, lanes); }
  mlir::Value finish(NodeId id, mlir::Value acc, const ir::Dim& row_length) {
    return scalar_.reduce_finish(k_.body, id, acc, dim(row_length));
  }

  // ---- argmax/argmin and scans ----
  /// Argmax/argmin node `id`'s (value, index) fold over elements from, from + step, ... < to,
  /// element(j) giving element j (in row-major order of the reduced axes), from (the extreme's
  /// identity, 0): in order, the first extreme and the first NaN winning (the interpreter's
  /// fold_arg). Values are compared in the input's float type, integers and bool as i64.
  std::pair<mlir::Value, mlir::Value> fold_arg(NodeId id, mlir::Value from, mlir::Value to, mlir::Value step,
                                               const std::function<mlir::Value(mlir::Value)>& element);
  /// The winner of two (value, index) partials of argmax/argmin `id`: the more extreme value, a
  /// NaN over any number, the smaller index on a tie. Commutative, so partials of any grouping
  /// (threads, warps) combine to the in-order fold's result.
  std::pair<mlir::Value, mlir::Value> arg_pick(NodeId id, std::pair<mlir::Value, mlir::Value> a,
                                               std::pair<mlir::Value, mlir::Value> c);
  // ---- np-scan: scans with an epilogue, whole rows or chunks of them ----
  /// Where a scan's steps put the kernel's outputs: store(output index, linear position in that
  /// output, value in its dtype).
  using ScanStore = std::function<void(size_t, mlir::Value, mlir::Value)>;
  /// A Scan kernel's scan node. Its elementwise producers are the prologue; the kernel's outputs
  /// are its elementwise consumers (the epilogue) and the scan itself when read elsewhere.
  NodeId scan_node() const;
  /// The scan's accumulation as the interpreter's: f64 for floats, wrapping i64 for integers and
  /// bool; its identity (0 or 1) and its step (+ or *). Both are associative on integers, so
  /// chunks combine exactly; on floats chunking changes only the order of the f64 roundings.
  DType scan_accumulator_type() const;
  mlir::Value scan_identity();
  mlir::Value scan_combine(mlir::Value acc, mlir::Value x);
  /// Elements [from, to) of row `row` along the scan axis (rows: the space without that axis,
  /// row-major) folded in order onto `start` (an accumulator); with `store`, after each step the
  /// kernel's outputs at that element (the epilogue reading this step's prefix) go to it.
  /// Returns the prefix after the last step.
  mlir::Value scan_range(mlir::Value row, mlir::Value from, mlir::Value to, mlir::Value start, const ScanStore* store);
  /// A whole row from the identity, every step stored.
  void scan_row(mlir::Value row, const ScanStore& store);
  /// The pieces of a step, for scans that combine elements in another order (CUDA block scans):
  /// the space index of element j of row `row`; the scanned value there as an accumulator (the
  /// prologue); and the outputs stored there once `prefix` (an accumulator) is that element's.
  std::vector<mlir::Value> scan_index(mlir::Value row, mlir::Value j);
  mlir::Value scan_element(const std::vector<mlir::Value>& idx);
  void scan_store_step(const std::vector<mlir::Value>& idx, mlir::Value prefix, const ScanStore& store);

  // ---- gather/scatter (issue 16): run-time index checks (ir/index_check.h) ----
  /// Checks data-dependent `index` (i64) of checked node `id` against `size` (i64): a negative
  /// index counts from the end when `wrap_negative` (NumPy), else it is out of range (bincount).
  /// A bad one is reported in the run's error record (the first report wins; the index as the
  /// user wrote it). Returns {in range (i1), the index wrapped into [0, size) when in range}:
  /// the caller must not touch memory at the index unless in range (if_else on it).
  /// Targets set error_record_ (the record's address) at the function's entry when
  /// ir::checked_nodes(body) is not empty.
  std::pair<mlir::Value, mlir::Value> check_index(NodeId id, mlir::Value index, mlir::Value size, bool wrap_negative = true);
  /// take / take_along_axis at `idx`: idx's element at the output position, checked, then x at
  /// the gathered position (0 when the index is bad: nothing is read out of bounds).
  mlir::Value gather_value(NodeId id, const std::vector<mlir::Value>& idx);
  /// np-gaps (issue 16): every index of each take whose result is empty at this run, checked
  /// in order as the interpreter checks them (no element of such a take is loaded, so the loop
  /// forms would check none). `once` (i1) is true on one thread of the launch. Emitted at the
  /// function's entry, after error_record_ is set.
  void check_indices_of_empty_takes(mlir::Value once);
  /// Histogram node `id`'s bin for x value `v` (as f64), `bins` (i64) its bin count: the
  /// interpreter's edges and NumPy's float guess corrected against them; -1 when v is outside
  /// the range or NaN. (Shared by the CPU and CUDA scatter kernels.)
  mlir::Value histogram_bin(NodeId id, mlir::Value v, mlir::Value bins);
  /// Histogram or bincount node `id`'s bin for the element of its x at `idx`: {counts (i1),
  /// bin (i64)}. A histogram value outside the range (or NaN) counts nowhere; a bincount value
  /// outside [0, bins) counts nowhere and is reported in the run's error record (no negative
  /// wrap). (Shared by the CPU and CUDA scatter kernels.)
  std::pair<mlir::Value, mlir::Value> scatter_bin(NodeId id, const std::vector<mlir::Value>& idx, mlir::Value bins);

  /// A nested region: the caches start empty in it, and what they held before it comes back
  /// after it (those values were defined before the region, so they dominate what follows it;
  /// what the region defined is forgotten).
  class CacheScope {
   public:
    explicit CacheScope(KernelEmitterBase& e);
    ~CacheScope();
    CacheScope(const CacheScope&) = delete;
    CacheScope& operator=(const CacheScope&) = delete;

   private:
    KernelEmitterBase& e_;
    std::map<std::vector<const void*>, mlir::Value> general_;
    std::map<std::pair<std::string, std::vector<const void*>>, mlir::Value> linear_;
  };

  mlir::OpBuilder& b_;
  mlir::Location loc_;
  const ir::Kernel& k_;
  const std::string target_name_;
  ScalarLowering scalar_;
  ir::KernelAccess access_;                  // memoized facts about the body
  mlir::Block* entry_ = nullptr;             // the function's entry block (dims are read there)
  std::vector<mlir::Value> base_;            // each slot's address
  std::map<std::string, mlir::Value> dims_;  // by Dim::str()
  std::map<NodeId, int> input_slot_;         // Input and Constant nodes
  std::vector<int> output_slot_;             // by output
  std::map<NodeId, mlir::Value> reduced_;    // Reduce/Matmul node -> this row's (element's) result
  std::map<std::vector<const void*>, mlir::Value> general_cache_;
  std::map<std::pair<std::string, std::vector<const void*>>, mlir::Value> linear_memo_;  // see linearize
  // gather/scatter (issue 16): the run's error record (null: the kernel checks nothing) and the
  // number of this kernel's first check.
  mlir::Value error_record_;
  int first_check_ = 0;
};

}  // namespace fuse::codegen
