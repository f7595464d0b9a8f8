// Scalar-expression lowering shared by the CPU and CUDA code generators: user `fn`s and ops
// (ir::ScalarFn) to arith/math/scf on scalars or vector<lanes x T> values, with the exact
// semantics of ir::evaluate_scalar_op (casts that saturate, Python's // and %, integer pow,
// Philox for rand). Internal to codegen/: it includes MLIR headers. The longer functions are in
// scalar_lowering.cpp; adding a scalar op touches scalar_op() there (and ir/scalar_ops.def).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/dtype.h"
#include "ir/error.h"
#include "ir/graph.h"
#include "ir/scalar.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"

namespace fuse::codegen {

class ScalarLowering {
  using DType = ir::DType;
  using ScalarOp = ir::ScalarOp;
 public:
  /// `fast_math`: f32 transcendentals take the fast path as it is (no f64 fix-ups).
  /// `libdevice`: the target lowers math ops to CUDA's libdevice (the GPU). Its f32 functions
  /// are 1 to 4 ulp from the correctly rounded result and its __nv_sqrtf is sqrt.approx unless
  /// __CUDA_PREC_SQRT is set, which MLIR does not; the interpreter computes f32 ops in f64 and
  /// rounds once. So, fast math aside, f32 transcendentals are computed in f64 by libdevice
  /// (within 1 ulp of f64) and rounded once, like the interpreter; f32 sqrt is sqrt.rn.
  ScalarLowering(mlir::OpBuilder& b, bool fast_math, bool libdevice, std::string fail_prefix)
      : b_(b), loc_(b.getUnknownLoc()), fast_math_(fast_math), libdevice_(libdevice), fail_prefix_(std::move(fail_prefix)) {}
  /// The builds of SLEEF (libsleef, the vector math library) the host can run. With any, the CPU's
  /// f32 and f64 transcendentals call SLEEF: its u10 functions (<= 1 ulp; NaN, infinities and -0
  /// exact), or under fast math its u35 ones where SLEEF has them. Vectors go to the widest build
  /// whose width divides their lanes (16 f32 / 8 f64 on AVX-512, 8 / 4 on AVX2, in chunks);
  /// single lanes to the scalar build. Vectors no build fits keep the lowering below. Inlined
  /// instead (calls measured slower: bench/README.md): f32 exp vectors as SLEEF's own algorithm
  /// (exp_f32_inline); f32 sin and cos as SLEEF's sincos with cheaper sums (sin_cos_f32_inline,
  /// calling SLEEF for lanes it does not cover) and f32 tanh as fuse's own (tanh_f32_inline), on
  /// every path; under fast math f32 tanh vectors keep MLIR's polynomial.
  struct SleefIsa {
    bool avx512f = false;  // Sleef_<fn>f16_u10avx512f, Sleef_<fn>d8_u10avx512f
    bool avx2 = false;     // Sleef_<fn>f8_u10avx2, Sleef_<fn>d4_u10avx2 (AVX2 with FMA)
    bool fma = false;      // scalar Sleef_<fn>f1_u10purecfma, else Sleef_<fn>f_u10
  };
  /// Drops what was kept for reuse by later ops (exp_f32_inline's reductions, sin_cos_f32_inline's
  /// pairs): the emitter's caches are cleared at the same points (a new loop body, a new branch).
  void forget_made_values() {
    exp_reductions_.clear();
    sin_cos_made_.clear();
    at_most_zero_.clear();
  }
  /// Turns SLEEF on (the CPU backend does, for the host; the GPU keeps libdevice).
  void use_sleef(SleefIsa isa) {
    sleef_ = isa;
    sleef_on_ = !libdevice_;
  }
  // The register type of one lane: bool is i1 in registers, i8 in memory.
  mlir::Type scalar_type(ir::DType t);
  mlir::Type lane_type(mlir::Type scalar, int lanes) {
    return lanes > 1 ? mlir::Type(mlir::VectorType::get({lanes}, scalar)) : scalar;
  }
  mlir::Value constant(ir::DType t, double f, int64_t i, int lanes);
  // ir::rand_uniform: Philox-4x32-10 with counter {lo(i), hi(i), 0, 0}, key {lo(seed), hi(seed)}.
  mlir::Value philox_uniform(mlir::Value i, uint64_t seed);
  bool at_most_zero(mlir::Value v) const;
  /// `ordered`: pairs (i, j) of parameters with params[i] <= params[j] wherever neither is NaN
  /// (x and the max of a set holding x): sub(p_i, p_j) is then at most zero, and an exp of it needs
  /// no clamp from above (exp_f32_inline).
  mlir::Value scalar_fn(const ir::ScalarFn& fn, const std::vector<mlir::Value>& params, int lanes,
                        const std::vector<std::pair<int, int>>& ordered = {});
  mlir::Value cmpf(mlir::arith::CmpFPredicate p, mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::CmpFOp>(loc_, p, a, c); }
  mlir::Value cmpi(mlir::arith::CmpIPredicate p, mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::CmpIOp>(loc_, p, a, c); }
  mlir::Value select(mlir::Value c, mlir::Value a, mlir::Value d) { return b_.create<mlir::arith::SelectOp>(loc_, c, a, d); }
  // `fast`, an f32 result, except in lanes where `test` `predicate` `bound` holds (inputs the
  // fast path gets wrong): there `slow` of `argument` (default: test) in f64, rounded to f32. The slow path
  // runs only when some lane needs it. Other dtypes and fast math take `fast` as it is.
  template <class Slow>
  mlir::Value patch_f32(DType operand, mlir::Value test, mlir::Value fast, mlir::arith::CmpFPredicate predicate, double bound,
                        Slow slow, int lanes, mlir::Value argument = {}) {
    if (!argument) argument = test;  // what `slow` takes, when it is not what is tested
    if (operand != DType::F32 || fast_math_) return fast;
    mlir::Value mask = cmpf(predicate, test, constant(DType::F32, bound, 0, lanes));
    return patch_lanes(DType::F32, mask, fast, {argument}, [&](const std::vector<mlir::Value>& v) { return slow(v[0]); }, lanes);
  }
  // `fast` (of dtype t) except in the lanes of `mask`: there `slow` of the `arguments`' lanes as
  // f64 scalars, its f64 result rounded to t. The slow path runs only when some lane needs it.
  template <class Slow>
  mlir::Value patch_lanes(DType t, mlir::Value mask, mlir::Value fast, const std::vector<mlir::Value>& arguments, Slow slow,
                          int lanes) {
    // Frozen: a lane that is undefined (padding no one computed) must not make the branch
    // below undefined behaviour, which LLVM may compile into anything, an endless loop included.
    mask = b_.create<mlir::LLVM::FreezeOp>(loc_, mask);
    if (deferred_masks_ && lanes > 1) {
      deferred_masks_->push_back(mask);
      return fast;
    }
    mlir::Value any = lanes > 1 ? b_.create<mlir::vector::ReductionOp>(loc_, mlir::vector::CombiningKind::OR, mask).getResult()
                                : mask;
    auto branch = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange{fast.getType()}, any, /*withElseRegion=*/true);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&branch.getThenRegion().front());
    auto wide = [&](mlir::Value x) { return cast(x, t, DType::F64, 1); };
    mlir::Value exact;
    if (lanes == 1) {
      std::vector<mlir::Value> args;
      for (mlir::Value a : arguments) args.push_back(wide(a));
      exact = cast(slow(args), DType::F64, t, 1);
    } else {
      // Lane by lane in a loop: one call site instead of one per lane (compile time).
      auto each = b_.create<mlir::scf::ForOp>(loc_, i64(0), i64(lanes), i64(1), mlir::ValueRange{fast});
      mlir::OpBuilder::InsertionGuard inner(b_);
      b_.setInsertionPointToStart(each.getBody());
      mlir::Value lane = each.getInductionVar();
      std::vector<mlir::Value> args;
      for (mlir::Value a : arguments) args.push_back(wide(b_.create<mlir::vector::ExtractElementOp>(loc_, a, lane)));
      mlir::Value y = cast(slow(args), DType::F64, t, 1);
      b_.create<mlir::scf::YieldOp>(loc_, b_.create<mlir::vector::InsertElementOp>(loc_, y, each.getRegionIterArgs()[0], lane).getResult());
      b_.setInsertionPointAfter(each);
      exact = each.getResult(0);
    }
    b_.create<mlir::scf::YieldOp>(loc_, select(mask, exact, fast));
    b_.setInsertionPointToStart(&branch.getElseRegion().front());
    b_.create<mlir::scf::YieldOp>(loc_, fast);
    return branch.getResult(0);
  }
  // Deferred patches, for a reduction's SIMD loop: while `masks` is set, patch_lanes() of vectors
  // returns `fast` and appends the mask of lanes it would have patched to *masks, and the caller
  // reruns the loop undeferred when any lane of any mask was set. The slow path is a call, and a
  // call in a loop, even one never taken, makes LLVM keep the loop's vector accumulators and
  // constants on the stack across iterations (every vector register is caller-saved).
  void defer_patches(std::vector<mlir::Value>* masks) { deferred_masks_ = masks; }
  // Whether divide() may take the reciprocal of a loop-invariant divisor (on by default): a row
  // kernel turns it off for rows of a few vectors, where the reciprocal's own division lengthens
  // each row's chain more than it saves.
  void allow_reciprocal_division(bool allow) { reciprocal_division_ = allow; }
  // Divisors that divide many values where none is loop-invariant (rows across lanes: a row's
  // sum divides each of its elements, one vector per element): divide() takes the reciprocal
  // of each (as for a loop-invariant one) once, where it first meets it, into `reciprocals`,
  // and reuses it. The caller clears both where those values go out of scope; null: none.
  void share_divisors(const std::set<const void*>* divisors, std::map<const void*, mlir::Value>* reciprocals) {
    shared_divisors_ = divisors;
    reciprocals_ = reciprocals;
  }
  // One op with the exact semantics of ir::evaluate_scalar_op.
  mlir::Value scalar_op(ScalarOp op, DType operand, DType result, const std::vector<mlir::Value>& a, int lanes);
  // sin or cos of f32 lanes, computed in f64 (so it vectorizes and stays within 1 ulp of the
  // correctly rounded result for |x| up to about 1e6, where MLIR's f32 approximation loses
  // digits): x = k*pi/2 + r with pi/2 split in two parts (fdlibm's rem_pio2 for small k),
  // then fdlibm's sin and cos kernels on [-pi/4, pi/4], chosen by k mod 4.
  mlir::Value sin_cos_f32(mlir::Value x, bool want_sin, int lanes);
  // `op` of the operands `a`, for the ops whose MLIR f32 approximations are off (atan 41 ulp,
  // asin 1e6 ulp at 1, atan2 the wrong quadrant for zeros): on the CPU, f32 computes in f64
  // (libm, one call per lane) and rounds once, like the interpreter. Fast math keeps f32.
  template <class Op>
  mlir::Value f32_in_f64(DType operand, const std::vector<mlir::Value>& a, int lanes, Op op) {
    if (operand != DType::F32 || fast_math_ || libdevice_) return op(a);
    std::vector<mlir::Value> wide;
    for (mlir::Value v : a) wide.push_back(cast(v, DType::F32, DType::F64, lanes));
    return cast(op(wide), DType::F64, DType::F32, lanes);
  }
  // log1p and expm1 on the CPU, where MLIR lowers f64 math.log1p and math.expm1 to log(1 + x) and
  // exp(x) - 1, which lose every digit near 0. With u = 1 + x or u = exp(x) as rounded,
  // log1p(x) = log(u) * (x / (u - 1)) and expm1(x) = (u - 1) * (x / log(u)): the quotient cancels
  // u's rounding error (Goldberg, "What every computer scientist should know about floating-point
  // arithmetic", theorem 4; Kahan). Both vectorize (MLIR approximates f32 math.log1p and
  // math.expm1 with the same formulas).
  mlir::Value log1p(mlir::Value x, DType t, int lanes);
  mlir::Value expm1(mlir::Value x, DType t, int lanes);
  // Python's // and % on integers; x // 0 and x % 0 are 0, and x // -1 wraps (never traps).
  mlir::Value int_floordiv_mod(ScalarOp op, DType t, mlir::Value x, mlir::Value y, int lanes);
  // x / d of f32 or f64 lanes, correctly rounded; by the reciprocal of d where d is the same in
  // every iteration of the loop around the insertion point (see the definition).
  mlir::Value divide(mlir::Value x, mlir::Value d, DType t, int lanes);
  // Integer power by squaring over every exponent bit (branch-free, so it vectorizes);
  // negative exponents give the integer part of 1 / x^-e.
  mlir::Value int_pow(DType t, mlir::Value x, mlir::Value e, int lanes);
  // Casts as ir::evaluate_scalar_op: float->int truncates and saturates, NaN gives 0;
  // anything->bool is x != 0 (NaN is true).
  mlir::Value cast(mlir::Value x, DType from, DType to, int lanes);
  // ---- Reductions and views: what both generators do the same way ----
  /// The type a Reduce node `id` of `body` accumulates in: the interpreter's (f64 for float
  /// sums, products and means; i64 for integers, wrapping at the end; i1 for any/all; the
  /// combiner's type for custom ones). Max and min of floats are exact in their own type.
  static DType reduce_accumulator_type(const ir::Graph& body, ir::NodeId id);
  /// The identity of the reduction (`lanes` of it).
  mlir::Value reduce_identity(const ir::Graph& body, ir::NodeId id, int lanes);
  /// acc (op) x, both already of the accumulator type (scalars or vectors alike).
  mlir::Value reduce_combine(const ir::Graph& body, ir::NodeId id, mlir::Value acc, mlir::Value x);
  /// An input element converted to the accumulator type (custom combiners take it as it is).
  mlir::Value reduce_input(const ir::Graph& body, ir::NodeId id, mlir::Value x, int lanes);
  /// The result from the accumulator: means divided by the row length, then the node's dtype.
  mlir::Value reduce_finish(const ir::Graph& body, ir::NodeId id, mlir::Value acc, mlir::Value row_length);
  /// A view's operand index for its own index `idx` (views as index maps); `from` is the
  /// operand's shape, `reshape(idx)` the operand index of a reshape (linearize, delinearize).
  template <class Reshape>
  std::vector<mlir::Value> view_operand_index(const ir::Node& n, const ir::Shape& from, const std::vector<mlir::Value>& idx,
                                              Reshape reshape) {
    std::vector<mlir::Value> in_idx;
    switch (n.kind) {
      case ir::OpKind::BroadcastTo: {
        size_t offset = n.shape.size() - from.size();
        for (size_t d = 0; d < from.size(); ++d) in_idx.push_back(from[d] == ir::Dim(1) ? i64(0) : idx[d + offset]);
        return in_idx;
      }
      case ir::OpKind::Permute: {
        const std::vector<int>& perm = n.as<ir::PermuteAttrs>().perm;
        in_idx.resize(perm.size());
        for (size_t d = 0; d < perm.size(); ++d) in_idx[perm[d]] = idx[d];
        return in_idx;
      }
      case ir::OpKind::ExpandDims:
        in_idx = idx;
        in_idx.erase(in_idx.begin() + n.as<ir::ExpandDimsAttrs>().axis);
        return in_idx;
      case ir::OpKind::Squeeze: {
        const std::vector<int>& axes = n.as<ir::SqueezeAttrs>().axes;
        size_t next = 0;
        for (size_t d = 0; d < from.size(); ++d)
          in_idx.push_back(std::find(axes.begin(), axes.end(), static_cast<int>(d)) != axes.end() ? i64(0) : idx[next++]);
        return in_idx;
      }
      case ir::OpKind::Reshape: return reshape(idx);
      default: throw ir::Error(fail("operand_index of a non-view"));
    }
  }
 private:
  std::string fail(const std::string& what) const { return fail_prefix_ + what; }
  // ---- SLEEF (see use_sleef) ----
  // `function` ("exp", "atan2") of `a` (dtype t, `lanes` lanes) through SLEEF; null when SLEEF is
  // off or no vector build fits the lanes (the caller lowers it the old way).
  mlir::Value sleef(std::string_view function, DType t, const std::vector<mlir::Value>& a, int lanes);
  // f of `a` (vectors of `lanes`) taken `width` lanes at a time, the results put back together.
  mlir::Value by_chunks(DType t, int width, int lanes, const std::vector<mlir::Value>& a,
                        const std::function<mlir::Value(const std::vector<mlir::Value>&)>& f);
  // The widest SLEEF vector width (lanes) for `lanes` lanes of t, 0 for none.
  int sleef_width(DType t, int lanes) const;
  // "_u10", or "_u35" under fast math where SLEEF has it.
  std::string sleef_accuracy(std::string_view function) const;
  // The SLEEF function `symbol` declared in the module (once), readnone.
  mlir::LLVM::LLVMFuncOp sleef_declaration(const std::string& symbol, mlir::Type result, const std::vector<mlir::Type>& params);
  SleefIsa sleef_;
  bool sleef_on_ = false;
  // `op` through SLEEF (see use_sleef), null for the ops it does not take (or when it is off).
  mlir::Value sleef_op(ScalarOp op, DType t, const std::vector<mlir::Value>& a, int lanes);
  mlir::Value exp(mlir::Value x, DType t, int lanes);  // through SLEEF when on
  mlir::Value exp_f32_inline(mlir::Value x, int lanes);  // SLEEF's expf inlined
  // sin and cos of f32 values, SLEEF's u10 sincos with cheaper sums, inlined (see the definition).
  std::pair<mlir::Value, mlir::Value> sin_cos_f32_inline(mlir::Value x, int lanes);
  std::vector<std::pair<mlir::Value, std::pair<mlir::Value, mlir::Value>>> sin_cos_made_;  // by x, until forget_made_values()
  // tanh of f32 values, at most 0.77 ulp, inlined (see the definition).
  mlir::Value tanh_f32_inline(mlir::Value x, int lanes);
  // sigmoid of f32 or f64 values within 1 ulp, inlined (see the definition).
  mlir::Value sigmoid_inline(mlir::Value x, DType t, int lanes);
  // e^x as a double-float (high, low) for x in [0, 87] (f32: SLEEF's expf steps, `reduction_error`
  // adding back the rounding of the reduced argument) or [0, 708] (f64: SLEEF's exp steps).
  std::pair<mlir::Value, mlir::Value> exp_f32_split(mlir::Value x, bool reduction_error, int lanes);
  std::pair<mlir::Value, mlir::Value> exp_f64_split(mlir::Value x, int lanes);
  // n / (1 + e) for e = high + low >= 1 (a double-float, as the *_split functions give): `rounded`
  // from one division, `residual` = n - rounded (1 + e) (so n / (1 + e) = rounded (1 + residual /
  // n) to about 2^-46), and `one_minus` = 1 - n / (1 + e) rounded once (tanh_f32_inline,
  // sigmoid_inline).
  struct Quotient {
    mlir::Value rounded, residual, one_minus;
  };
  Quotient quotient_by_one_plus(double n, mlir::Value high, mlir::Value low, DType t, int lanes);
  // f64 sinh of one element beyond |x| = 709 (sleef_op's patch; see the definition).
  mlir::Value sinh_near_overflow(mlir::Value x);
  // u * 2^q for f64 u, |q| <= 1022 (2^q normal): one product.
  mlir::Value scale_f64_by_normal_power_of_two(mlir::Value u, mlir::Value q, int lanes);
  // Whether `v` was made in the current block before the insertion point, so usable there (the
  // emitter may insert above what it emitted last, e.g. hoisting before a loop).
  bool made_before_here(mlir::Value v) const {
    mlir::Operation* def = v.getDefiningOp();
    return def && def->getBlock() == b_.getInsertionBlock() &&
           (b_.getInsertionPoint() == b_.getInsertionBlock()->end() || def->isBeforeInBlock(&*b_.getInsertionPoint()));
  }
  // Whether f32 sin, cos and tanh of `lanes` lanes take fuse's own inlined algorithms
  // (sin_cos_f32, tanh_f32_inline): wherever a SLEEF vector build takes them (its call is
  // sincos's fallback), and one lane at a time where FMA is (the algorithms rely on it). Every
  // path of a kernel then gives a value the same bits: the masked vectors before and after a
  // loop, the element-by-element ones, the loops.
  bool inlines_f32(int lanes) const { return lanes == 1 ? sleef_.fma : sleef_width(DType::F32, lanes) != 0; }
  // sin_cos_f32_inline in a loop; elsewhere a call of one copy of it per module and width.
  std::pair<mlir::Value, mlir::Value> sin_cos_f32(mlir::Value x, int lanes);
  // u * 2^q (q integral, |q| <= 150) rounded once, as SLEEF's vldexp2 (vscalefps on AVX-512).
  mlir::Value scale_by_power_of_two(mlir::Value u, mlir::Value q, int lanes);
  // The same for |q| <= 126, where 2^q is a normal float: one product (exp's short form).
  mlir::Value scale_by_normal_power_of_two(mlir::Value u, mlir::Value q, int lanes);
  // Whether `lanes` f32 lanes scale with vscalefps (AVX-512 on this host, whole zmm registers).
  bool has_scalef(int lanes) const { return sleef_.avx512f && lanes % 16 == 0; }
  // An f32 constant of exp_f32_inline. In 8-lane vectors on the CPU (AVX2: 16 vector registers)
  // a load from a table of them, through a pointer LLVM cannot see through (constant_table()),
  // where a constant would be a splat: exp's 13 constants do not fit in the registers a loop
  // also needs, and LLVM then reloads each with its own vbroadcastss in every iteration, which
  // no AVX2 instruction can take as an operand; a load from memory it folds into the FMA that
  // reads it, as GCC does (one instruction, not two). Softmax's exp pass on Zen 3 (two threads,
  // 4096 x 4096): 6-8% faster, as fast as the same loop compiled by GCC.
  mlir::Value exp_constant(float v, int lanes);
  // The table's address in the current function (made once, at the start of its entry block).
  mlir::Value constant_table();
  std::map<mlir::Operation*, mlir::Value> constant_tables_;  // by function
  // exp_f32_inline's range reduction and polynomial halves of a value (exp of it and exp of its
  // negation are both made from them), kept until forget_made_values(): a body with exp(v)
  // and exp(-v) (sinh, cosh, tanh written out) computes the second for a quarter of the first.
  struct ExpReduction {
    mlir::Value q, s, t, even, odd;  // s = x - q ln 2 (x clamped), t = s * s
    mlir::Value s_high;              // x - q L2U, exact (s is s_high - q L2L rounded)
    bool short_form = false;         // x not clamped: lanes with |x| > 87 are deferred patches
  };
  std::vector<std::pair<mlir::Value, ExpReduction>> exp_reductions_;  // by the x they were made for
  // SLEEF's expf steps for x (not clamped): q, s, t and the polynomial's halves (exp_f32_inline,
  // tanh_f32_inline).
  ExpReduction exp_steps(mlir::Value x, int lanes);
  // Values known to be at most zero or NaN (scalar_fn's `ordered`), until forget_made_values().
  std::vector<mlir::Value> at_most_zero_;
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  // A libdevice function called by name, for the math ops that convert-gpu-to-nvvm does not send
  // to libdevice in LLVM 19 (asin, acos, sinh, cosh); `__nv_<name>f` for f32 (fast math).
  mlir::Value libdevice_call(std::string_view name, mlir::Value x);
  mlir::Value sqrt(mlir::Value x);
  mlir::Type i64_type() { return b_.getI64Type(); }
  mlir::Value i64(int64_t v) { return b_.create<mlir::arith::ConstantIntOp>(loc_, v, 64); }
  mlir::Value add(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::AddIOp>(loc_, a, c); }
  mlir::Value sub(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::SubIOp>(loc_, a, c); }
  mlir::Value mul(mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::MulIOp>(loc_, a, c); }
  mlir::OpBuilder& b_;
  mlir::Location loc_;
  bool fast_math_, libdevice_;
  std::string fail_prefix_;
  std::vector<mlir::Value>* deferred_masks_ = nullptr;  // see defer_patches
  bool reciprocal_division_ = true;                     // see allow_reciprocal_division
  const std::set<const void*>* shared_divisors_ = nullptr;  // see share_divisors
  std::map<const void*, mlir::Value>* reciprocals_ = nullptr;
};

/// A peephole after CSE: SLEEF's vector sin(x) and cos(x) calls of the same x in one block become
/// one sincos call (SLEEF computes both for little more than one; its two vectors come back
/// through a stack slot in the function's entry block, the x86-64 ABI's sret).
void share_sleef_sincos(mlir::Operation* module);

}  // namespace fuse::codegen
