#include "codegen/scalar_lowering.h"

#include <iterator>
#include <map>
#include <numbers>
#include <optional>
#include <tuple>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/LoopLikeInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace fuse::codegen {

using ir::DType;
using ir::ScalarOp;

mlir::Type ScalarLowering::scalar_type(ir::DType t) {
  switch (t) {
    case ir::DType::Bool: return b_.getI1Type();
    case ir::DType::I32: return b_.getI32Type();
    case ir::DType::I64: return b_.getI64Type();
    case ir::DType::F32: return b_.getF32Type();
    case ir::DType::F64: return b_.getF64Type();
  }
  return {};
}

mlir::Value ScalarLowering::constant(ir::DType t, double f, int64_t i, int lanes) {
  mlir::Type s = scalar_type(t);
  mlir::TypedAttr attr = ir::is_float(t) ? mlir::TypedAttr(b_.getFloatAttr(s, f)) : mlir::TypedAttr(b_.getIntegerAttr(s, i));
  if (lanes > 1) attr = mlir::DenseElementsAttr::get(mlir::cast<mlir::ShapedType>(lane_type(s, lanes)), attr);
  return b_.create<mlir::arith::ConstantOp>(loc_, attr);
}

mlir::Value ScalarLowering::philox_uniform(mlir::Value i, uint64_t seed) {
  auto u32 = [&](uint32_t v) { return b_.create<mlir::arith::ConstantIntOp>(loc_, static_cast<int64_t>(v), 32).getResult(); };
  auto mulhilo = [&](uint32_t m, mlir::Value x) {
    mlir::Value wide = b_.create<mlir::arith::MulIOp>(loc_, i64(m), b_.create<mlir::arith::ExtUIOp>(loc_, i64_type(), x));
    mlir::Value hi = b_.create<mlir::arith::TruncIOp>(loc_, b_.getI32Type(), b_.create<mlir::arith::ShRUIOp>(loc_, wide, i64(32)));
    mlir::Value lo = b_.create<mlir::arith::TruncIOp>(loc_, b_.getI32Type(), wide);
    return std::make_pair(hi, lo);
  };
  mlir::Value c[4] = {b_.create<mlir::arith::TruncIOp>(loc_, b_.getI32Type(), i),
                      b_.create<mlir::arith::TruncIOp>(loc_, b_.getI32Type(), b_.create<mlir::arith::ShRUIOp>(loc_, i, i64(32))),
                      u32(0), u32(0)};
  uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += 0x9E3779B9u;
      key[1] += 0xBB67AE85u;
    }
    auto [hi0, lo0] = mulhilo(0xD2511F53u, c[0]);
    auto [hi1, lo1] = mulhilo(0xCD9E8D57u, c[2]);
    mlir::Value x0 = b_.create<mlir::arith::XOrIOp>(loc_, b_.create<mlir::arith::XOrIOp>(loc_, hi1, c[1]), u32(key[0]));
    mlir::Value x2 = b_.create<mlir::arith::XOrIOp>(loc_, b_.create<mlir::arith::XOrIOp>(loc_, hi0, c[3]), u32(key[1]));
    c[0] = x0;
    c[1] = lo1;
    c[2] = x2;
    c[3] = lo0;
  }
  mlir::Value bits = b_.create<mlir::arith::ShRUIOp>(loc_, c[0], u32(8));
  mlir::Value f = b_.create<mlir::arith::UIToFPOp>(loc_, b_.getF32Type(), bits);
  return b_.create<mlir::arith::MulFOp>(loc_, f, constant(DType::F32, 0x1p-24, 0, 1));
}

mlir::Value ScalarLowering::scalar_fn(const ir::ScalarFn& fn, const std::vector<mlir::Value>& params, int lanes,
                                      const std::vector<std::pair<int, int>>& ordered) {
  std::vector<mlir::Value> values(fn.nodes.size());
  for (size_t i = 0; i < fn.nodes.size(); ++i) {
    const ir::ScalarNode& s = fn.nodes[i];
    if (s.op == ScalarOp::Param) values[i] = params[s.param];
    else if (s.op == ScalarOp::Literal) values[i] = constant(s.dtype, s.value.f, s.value.i, lanes);
    else {
      std::vector<mlir::Value> args;
      for (int a = 0; a < s.arity(); ++a) args.push_back(values[s.args[a]]);
      DType operand = fn.nodes[s.args[s.op == ScalarOp::Select ? 1 : 0]].dtype;
      values[i] = scalar_op(s.op, operand, s.dtype, args, lanes);
      if (s.op == ScalarOp::Sub && ir::is_float(s.dtype)) {
        const ir::ScalarNode& x = fn.nodes[s.args[0]];
        const ir::ScalarNode& m = fn.nodes[s.args[1]];
        if (x.op == ScalarOp::Param && m.op == ScalarOp::Param &&
            std::find(ordered.begin(), ordered.end(), std::pair<int, int>{x.param, m.param}) != ordered.end())
          at_most_zero_.push_back(values[i]);
      }
    }
  }
  return values[fn.results[0]];
}

bool ScalarLowering::at_most_zero(mlir::Value v) const {
  return std::find(at_most_zero_.begin(), at_most_zero_.end(), v) != at_most_zero_.end();
}

mlir::Value ScalarLowering::scalar_op(ScalarOp op, DType operand, DType result, const std::vector<mlir::Value>& a, int lanes) {
  using mlir::arith::CmpFPredicate;
  using mlir::arith::CmpIPredicate;
  auto zero = [&](DType t) { return constant(t, 0, 0, lanes); };
  auto one = [&](DType t) { return constant(t, 1, 1, lanes); };
  if (op == ScalarOp::Select) return select(a[0], a[1], a[2]);
  if (op == ScalarOp::Cast) return cast(a[0], operand, result, lanes);
  if (op == ScalarOp::Not) return b_.create<mlir::arith::XOrIOp>(loc_, a[0], one(DType::Bool));
  if (op == ScalarOp::And) return b_.create<mlir::arith::AndIOp>(loc_, a[0], a[1]);
  if (op == ScalarOp::Or) return b_.create<mlir::arith::OrIOp>(loc_, a[0], a[1]);
  if (ir::is_float(operand)) {
    if (libdevice_ && !fast_math_ && operand == DType::F32 && ir::scalar_op_info(op).gpu_f64) {
      std::vector<mlir::Value> wide;
      for (mlir::Value v : a) wide.push_back(cast(v, DType::F32, DType::F64, lanes));
      return cast(scalar_op(op, DType::F64, DType::F64, wide, lanes), DType::F64, DType::F32, lanes);
    }
    if (mlir::Value v = sleef_op(op, operand, a, lanes)) return v;
    mlir::Value x = a[0];
    switch (op) {
      case ScalarOp::Neg: return b_.create<mlir::arith::NegFOp>(loc_, x);
      case ScalarOp::Abs: return b_.create<mlir::math::AbsFOp>(loc_, x);
      case ScalarOp::Exp:
        // MLIR's f32 exp flushes results below FLT_MIN to 0: those lanes take the f64 path.
        return patch_f32(operand, x, b_.create<mlir::math::ExpOp>(loc_, x), CmpFPredicate::OLT, -87.33654,
                         [&](mlir::Value x64) { return b_.create<mlir::math::ExpOp>(loc_, x64); }, lanes);
      case ScalarOp::Exp2: return b_.create<mlir::math::Exp2Op>(loc_, x);
      case ScalarOp::Log:
        // MLIR's f32 log and log2 read a subnormal x as if its exponent were -126.
        return patch_f32(operand, x, b_.create<mlir::math::LogOp>(loc_, x), CmpFPredicate::OLT, 1.17549435e-38,
                         [&](mlir::Value x64) { return b_.create<mlir::math::LogOp>(loc_, x64); }, lanes);
      case ScalarOp::Log2:
        return patch_f32(operand, x, b_.create<mlir::math::Log2Op>(loc_, x), CmpFPredicate::OLT, 1.17549435e-38,
                         [&](mlir::Value x64) { return b_.create<mlir::math::Log2Op>(loc_, x64); }, lanes);
      case ScalarOp::Sqrt: return sqrt(x);
      case ScalarOp::Rsqrt: return b_.create<mlir::arith::DivFOp>(loc_, one(operand), sqrt(x));
      case ScalarOp::Sin:
      case ScalarOp::Cos: {
        bool want_sin = op == ScalarOp::Sin;
        auto libm = [&](mlir::Value x64) -> mlir::Value {
          return want_sin ? mlir::Value(b_.create<mlir::math::SinOp>(loc_, x64)) : mlir::Value(b_.create<mlir::math::CosOp>(loc_, x64));
        };
        if (operand != DType::F32 || fast_math_ || libdevice_) return libm(x);
        // The f64 reduction by pi/2 is exact up to |x| ~ 1e5 (tested); beyond, f64 libm.
        mlir::Value magnitude = b_.create<mlir::math::AbsFOp>(loc_, x);
        mlir::Value r = patch_f32(operand, magnitude, sin_cos_f32(x, want_sin, lanes), CmpFPredicate::UGT, 1e5,
                                  libm, lanes, /*argument=*/x);
        // sin(-0) is -0.
        return want_sin ? select(cmpf(CmpFPredicate::OEQ, x, zero(operand)), x, r) : r;
      }
      case ScalarOp::Tan: return b_.create<mlir::math::TanOp>(loc_, x);
      case ScalarOp::Tanh: return b_.create<mlir::math::TanhOp>(loc_, x);
      case ScalarOp::Sigmoid: {
        // 1 / (1 + exp(-x)): three roundings around exp's own error (f32 2 ulp, f64 4), left for
        // --fast-math; else sigmoid_inline (1 ulp), which needs nothing of SLEEF.
        auto quick = [&](mlir::Value v, DType t, int n) -> mlir::Value {
          mlir::Value e = exp(b_.create<mlir::arith::NegFOp>(loc_, v), t, n);
          mlir::Value one_t = constant(t, 1, 1, n);
          return b_.create<mlir::arith::DivFOp>(loc_, one_t, b_.create<mlir::arith::AddFOp>(loc_, one_t, e));
        };
        bool own = !fast_math_;
        if (operand == DType::F64) {
          if (!own) return quick(x, operand, lanes);
          // Beyond x = -708 e^{-x} overflows where the result is e^x (subnormal from -708.4).
          mlir::Value far = cmpf(CmpFPredicate::OLT, x, constant(DType::F64, -708, 0, lanes));
          return patch_lanes(DType::F64, far, sigmoid_inline(x, DType::F64, lanes), {x},
                             [&](const std::vector<mlir::Value>& v) { return b_.create<mlir::math::ExpOp>(loc_, v[0]); }, lanes);
        }
        // In f32, e^{-x} overflows below x = -88.7 while the result is still a subnormal.
        return patch_f32(operand, x, own ? sigmoid_inline(x, DType::F32, lanes) : quick(x, operand, lanes), CmpFPredicate::OLT,
                         -87.0, [&](mlir::Value x64) { return quick(x64, DType::F64, 1); }, lanes);
      }
      case ScalarOp::Relu: return b_.create<mlir::arith::MaximumFOp>(loc_, x, zero(operand));
      case ScalarOp::Floor: return b_.create<mlir::math::FloorOp>(loc_, x);
      case ScalarOp::Ceil: return b_.create<mlir::math::CeilOp>(loc_, x);
      case ScalarOp::Round: return b_.create<mlir::math::RoundEvenOp>(loc_, x);
      case ScalarOp::Log1p: return libdevice_ ? mlir::Value(b_.create<mlir::math::Log1pOp>(loc_, x)) : log1p(x, operand, lanes);
      case ScalarOp::Expm1: return libdevice_ ? mlir::Value(b_.create<mlir::math::ExpM1Op>(loc_, x)) : expm1(x, operand, lanes);
      case ScalarOp::Erf:  // MLIR's f32 erf (5 ulp) gives +0 for -0
        return select(cmpf(CmpFPredicate::OEQ, x, zero(operand)), x, b_.create<mlir::math::ErfOp>(loc_, x));
      case ScalarOp::Atan:
        return f32_in_f64(operand, a, lanes, [&](const std::vector<mlir::Value>& v) { return b_.create<mlir::math::AtanOp>(loc_, v[0]); });
      case ScalarOp::Asin:
        if (libdevice_) return libdevice_call("asin", x);
        return f32_in_f64(operand, a, lanes, [&](const std::vector<mlir::Value>& v) { return b_.create<mlir::math::AsinOp>(loc_, v[0]); });
      case ScalarOp::Acos: return libdevice_ ? libdevice_call("acos", x) : mlir::Value(b_.create<mlir::math::AcosOp>(loc_, x));
      case ScalarOp::Sinh: return libdevice_ ? libdevice_call("sinh", x) : mlir::Value(b_.create<mlir::math::SinhOp>(loc_, x));
      case ScalarOp::Cosh: return libdevice_ ? libdevice_call("cosh", x) : mlir::Value(b_.create<mlir::math::CoshOp>(loc_, x));
      case ScalarOp::Sign: {  // NumPy: 1, -1, +0 for both zeros, NaN for NaN
        mlir::Value r = select(cmpf(CmpFPredicate::OEQ, x, zero(operand)), zero(operand), x);
        r = select(cmpf(CmpFPredicate::OLT, x, zero(operand)), constant(operand, -1, -1, lanes), r);
        return select(cmpf(CmpFPredicate::OGT, x, zero(operand)), one(operand), r);
      }
      case ScalarOp::IsNan: return cmpf(CmpFPredicate::UNO, x, x);
      case ScalarOp::IsInf:
        return cmpf(CmpFPredicate::OEQ, b_.create<mlir::math::AbsFOp>(loc_, x), constant(operand, kInf, 0, lanes));
      case ScalarOp::IsFinite:
        return cmpf(CmpFPredicate::OLT, b_.create<mlir::math::AbsFOp>(loc_, x), constant(operand, kInf, 0, lanes));
      case ScalarOp::Atan2:
        return f32_in_f64(operand, a, lanes,
                          [&](const std::vector<mlir::Value>& v) { return b_.create<mlir::math::Atan2Op>(loc_, v[0], v[1]); });
      case ScalarOp::Add: return b_.create<mlir::arith::AddFOp>(loc_, x, a[1]);
      case ScalarOp::Sub: return b_.create<mlir::arith::SubFOp>(loc_, x, a[1]);
      case ScalarOp::Mul: return b_.create<mlir::arith::MulFOp>(loc_, x, a[1]);
      case ScalarOp::Div: return divide(x, a[1], operand, lanes);
      case ScalarOp::FloorDiv:
        // In f64 for f32 on both targets, as the interpreter: an f32 quotient can round up to the
        // next integer (1.0f // 0.1f is 9, but 1.0f / 0.1f rounds to 10.0f).
        if (operand == DType::F32 && !fast_math_) {
          mlir::Value q = b_.create<mlir::arith::DivFOp>(loc_, cast(x, DType::F32, DType::F64, lanes),
                                                         cast(a[1], DType::F32, DType::F64, lanes));
          return cast(b_.create<mlir::math::FloorOp>(loc_, q), DType::F64, DType::F32, lanes);
        }
        return b_.create<mlir::math::FloorOp>(loc_, b_.create<mlir::arith::DivFOp>(loc_, x, a[1]));
      case ScalarOp::Mod: {  // Python: the result takes the divisor's sign
        mlir::Value r = b_.create<mlir::arith::RemFOp>(loc_, x, a[1]);
        mlir::Value differ = b_.create<mlir::arith::XOrIOp>(loc_, cmpf(CmpFPredicate::OLT, r, zero(operand)),
                                                           cmpf(CmpFPredicate::OLT, a[1], zero(operand)));
        mlir::Value fix = b_.create<mlir::arith::AndIOp>(loc_, cmpf(CmpFPredicate::ONE, r, zero(operand)), differ);
        return select(fix, b_.create<mlir::arith::AddFOp>(loc_, r, a[1]), r);
      }
      case ScalarOp::Pow: return b_.create<mlir::math::PowFOp>(loc_, x, a[1]);
      case ScalarOp::Minimum: return b_.create<mlir::arith::MinimumFOp>(loc_, x, a[1]);
      case ScalarOp::Maximum: return b_.create<mlir::arith::MaximumFOp>(loc_, x, a[1]);
      case ScalarOp::Eq: return cmpf(CmpFPredicate::OEQ, x, a[1]);
      case ScalarOp::Ne: return cmpf(CmpFPredicate::UNE, x, a[1]);
      case ScalarOp::Lt: return cmpf(CmpFPredicate::OLT, x, a[1]);
      case ScalarOp::Le: return cmpf(CmpFPredicate::OLE, x, a[1]);
      case ScalarOp::Gt: return cmpf(CmpFPredicate::OGT, x, a[1]);
      case ScalarOp::Ge: return cmpf(CmpFPredicate::OGE, x, a[1]);
      default: break;
    }
    throw ir::Error(fail("float op " + std::string(ir::scalar_op_name(op))));
  }
  // Integers (and bool comparisons, unsigned so that true > false).
  bool is_bool = operand == DType::Bool;
  mlir::Value x = a[0];
  switch (op) {
    case ScalarOp::Neg: return sub(zero(operand), x);
    case ScalarOp::Abs: return select(cmpi(CmpIPredicate::slt, x, zero(operand)), sub(zero(operand), x), x);
    case ScalarOp::Relu: return b_.create<mlir::arith::MaxSIOp>(loc_, x, zero(operand));
    case ScalarOp::Floor: case ScalarOp::Ceil: case ScalarOp::Round: return x;
    case ScalarOp::Sign:
      return select(cmpi(CmpIPredicate::sgt, x, zero(operand)), one(operand),
                    select(cmpi(CmpIPredicate::slt, x, zero(operand)), constant(operand, -1, -1, lanes), zero(operand)));
    case ScalarOp::Add: return add(x, a[1]);
    case ScalarOp::Sub: return sub(x, a[1]);
    case ScalarOp::Mul: return mul(x, a[1]);
    case ScalarOp::FloorDiv:
    case ScalarOp::Mod: return int_floordiv_mod(op, operand, x, a[1], lanes);
    case ScalarOp::Pow: return int_pow(operand, x, a[1], lanes);
    case ScalarOp::Minimum: return b_.create<mlir::arith::MinSIOp>(loc_, x, a[1]);
    case ScalarOp::Maximum: return b_.create<mlir::arith::MaxSIOp>(loc_, x, a[1]);
    case ScalarOp::Eq: return cmpi(CmpIPredicate::eq, x, a[1]);
    case ScalarOp::Ne: return cmpi(CmpIPredicate::ne, x, a[1]);
    case ScalarOp::Lt: return cmpi(is_bool ? CmpIPredicate::ult : CmpIPredicate::slt, x, a[1]);
    case ScalarOp::Le: return cmpi(is_bool ? CmpIPredicate::ule : CmpIPredicate::sle, x, a[1]);
    case ScalarOp::Gt: return cmpi(is_bool ? CmpIPredicate::ugt : CmpIPredicate::sgt, x, a[1]);
    case ScalarOp::Ge: return cmpi(is_bool ? CmpIPredicate::uge : CmpIPredicate::sge, x, a[1]);
    default: break;
  }
  throw ir::Error(fail("integer op " + std::string(ir::scalar_op_name(op))));
}

mlir::Value ScalarLowering::sin_cos_f32(mlir::Value x, bool want_sin, int lanes) {
  using mlir::arith::CmpFPredicate;
  auto f64 = [&](double v) { return constant(DType::F64, v, 0, lanes); };
  auto fadd = [&](mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::AddFOp>(loc_, a, c).getResult(); };
  auto fmul = [&](mlir::Value a, mlir::Value c) { return b_.create<mlir::arith::MulFOp>(loc_, a, c).getResult(); };
  auto poly = [&](mlir::Value z, std::initializer_list<double> coefficients) {  // highest degree last
    std::vector<double> c(coefficients);
    mlir::Value acc = f64(c.back());
    for (size_t i = c.size() - 1; i-- > 0;) acc = fadd(f64(c[i]), fmul(z, acc));
    return acc;
  };
  mlir::Value xd = b_.create<mlir::arith::ExtFOp>(loc_, lane_type(b_.getF64Type(), lanes), x);
  mlir::Value k = b_.create<mlir::math::RoundEvenOp>(loc_, fmul(xd, f64(0.63661977236758134308)));
  mlir::Value r = fadd(fadd(xd, fmul(k, f64(-1.57079632673412561417e+00))), fmul(k, f64(-6.07710050650619224932e-11)));
  mlir::Value z = fmul(r, r);
  mlir::Value sin_r = fadd(r, fmul(fmul(z, r), poly(z, {-1.66666666666666324348e-01, 8.33333333332248946124e-03,
                                                       -1.98412698298579493134e-04, 2.75573137070700676789e-06,
                                                       -2.50507602534068634195e-08, 1.58969099521155010221e-10})));
  mlir::Value cos_r = fadd(fadd(f64(1.0), fmul(z, f64(-0.5))),
                           fmul(fmul(z, z), poly(z, {4.16666666666666019037e-02, -1.38888888888741095749e-03,
                                                     2.48015872894767294178e-05, -2.75573143513906633035e-07,
                                                     2.08757232129817482790e-09, -1.13596475577881948265e-11})));
  // The quadrant: k mod 4, with k = 0 where it is not finite (the result is NaN there anyway).
  mlir::Value finite = cmpf(CmpFPredicate::OLT, b_.create<mlir::math::AbsFOp>(loc_, k), f64(9.0e15));
  mlir::Type i64s = lane_type(b_.getI64Type(), lanes);
  mlir::Value q = b_.create<mlir::arith::FPToSIOp>(loc_, i64s, select(finite, k, f64(0)));
  auto constant_i64 = [&](int64_t v) { return constant(DType::I64, 0, v, lanes); };
  q = b_.create<mlir::arith::AndIOp>(loc_, q, constant_i64(3));
  if (!want_sin) q = add(q, constant_i64(1));  // cos(x) = sin(x + pi/2)
  mlir::Value use_cos = cmpi(mlir::arith::CmpIPredicate::ne, b_.create<mlir::arith::AndIOp>(loc_, q, constant_i64(1)), constant_i64(0));
  mlir::Value negate = cmpi(mlir::arith::CmpIPredicate::ne, b_.create<mlir::arith::AndIOp>(loc_, q, constant_i64(2)), constant_i64(0));
  mlir::Value v = select(use_cos, cos_r, sin_r);
  v = select(negate, b_.create<mlir::arith::NegFOp>(loc_, v), v);
  return b_.create<mlir::arith::TruncFOp>(loc_, lane_type(b_.getF32Type(), lanes), v);
}

mlir::Value ScalarLowering::log1p(mlir::Value x, DType t, int lanes) {
  using mlir::arith::CmpFPredicate;
  mlir::Value one = constant(t, 1, 1, lanes);
  mlir::Value u = b_.create<mlir::arith::AddFOp>(loc_, one, x);
  mlir::Value correction = b_.create<mlir::arith::DivFOp>(loc_, x, b_.create<mlir::arith::SubFOp>(loc_, u, one));
  mlir::Value r = b_.create<mlir::arith::MulFOp>(loc_, b_.create<mlir::math::LogOp>(loc_, u), correction);
  r = select(cmpf(CmpFPredicate::OEQ, u, one), x, r);  // |x| below half an ulp of 1, and -0
  return select(cmpf(CmpFPredicate::OEQ, u, constant(t, kInf, 0, lanes)), u, r);  // inf / inf
}

mlir::Value ScalarLowering::expm1(mlir::Value x, DType t, int lanes) {
  using mlir::arith::CmpFPredicate;
  mlir::Value one = constant(t, 1, 1, lanes), minus_one = constant(t, -1, -1, lanes);
  mlir::Value u = b_.create<mlir::math::ExpOp>(loc_, x);
  mlir::Value u_minus_1 = b_.create<mlir::arith::SubFOp>(loc_, u, one);
  mlir::Value correction = b_.create<mlir::arith::DivFOp>(loc_, x, b_.create<mlir::math::LogOp>(loc_, u));
  mlir::Value r = b_.create<mlir::arith::MulFOp>(loc_, u_minus_1, correction);
  r = select(cmpf(CmpFPredicate::OEQ, u, one), x, r);                   // tiny x, and -0
  r = select(cmpf(CmpFPredicate::OEQ, u_minus_1, minus_one), minus_one, r);  // u = 0 gives x / -inf
  return select(cmpf(CmpFPredicate::OEQ, u, constant(t, kInf, 0, lanes)), u, r);  // inf / inf
}

mlir::Value ScalarLowering::int_floordiv_mod(ScalarOp op, DType t, mlir::Value x, mlir::Value y, int lanes) {
  using mlir::arith::CmpIPredicate;
  mlir::Value zero = constant(t, 0, 0, lanes), one = constant(t, 1, 1, lanes), minus_one = constant(t, -1, -1, lanes);
  mlir::Value y_zero = cmpi(CmpIPredicate::eq, y, zero), y_minus_one = cmpi(CmpIPredicate::eq, y, minus_one);
  mlir::Value safe_y = select(b_.create<mlir::arith::OrIOp>(loc_, y_zero, y_minus_one), one, y);
  mlir::Value q = b_.create<mlir::arith::DivSIOp>(loc_, x, safe_y);
  mlir::Value r = b_.create<mlir::arith::RemSIOp>(loc_, x, safe_y);
  mlir::Value differ = b_.create<mlir::arith::XOrIOp>(loc_, cmpi(CmpIPredicate::slt, r, zero), cmpi(CmpIPredicate::slt, y, zero));
  mlir::Value fix = b_.create<mlir::arith::AndIOp>(loc_, cmpi(CmpIPredicate::ne, r, zero), differ);
  if (op == ScalarOp::FloorDiv) {
    mlir::Value floor_q = select(fix, sub(q, one), q);
    return select(y_zero, zero, select(y_minus_one, sub(zero, x), floor_q));
  }
  mlir::Value floor_r = select(fix, add(r, y), r);
  return select(b_.create<mlir::arith::OrIOp>(loc_, y_zero, y_minus_one), zero, floor_r);
}

mlir::Value ScalarLowering::int_pow(DType t, mlir::Value x, mlir::Value e, int lanes) {
  using mlir::arith::CmpIPredicate;
  int bits = t == DType::I32 ? 32 : 64;
  mlir::Value zero = constant(t, 0, 0, lanes), one = constant(t, 1, 1, lanes);
  mlir::Value result = one, base = x, rest = e;
  for (int i = 0; i < bits - 1; ++i) {
    mlir::Value bit = cmpi(CmpIPredicate::ne, b_.create<mlir::arith::AndIOp>(loc_, rest, one), zero);
    result = select(bit, mul(result, base), result);
    base = mul(base, base);
    rest = b_.create<mlir::arith::ShRUIOp>(loc_, rest, one);
  }
  mlir::Value minus_one = constant(t, -1, -1, lanes);
  mlir::Value odd = cmpi(CmpIPredicate::ne, b_.create<mlir::arith::AndIOp>(loc_, e, one), zero);
  mlir::Value negative = select(cmpi(CmpIPredicate::eq, x, one), one,
                                select(cmpi(CmpIPredicate::eq, x, minus_one), select(odd, minus_one, one), zero));
  return select(cmpi(CmpIPredicate::slt, e, zero), negative, result);
}

mlir::Value ScalarLowering::cast(mlir::Value x, DType from, DType to, int lanes) {
  using mlir::arith::CmpFPredicate;
  using mlir::arith::CmpIPredicate;
  mlir::Type to_type = lane_type(scalar_type(to), lanes);
  if (from == to) return x;
  if (to == DType::Bool)
    return ir::is_float(from) ? cmpf(CmpFPredicate::UNE, x, constant(from, 0, 0, lanes))
                              : cmpi(CmpIPredicate::ne, x, constant(from, 0, 0, lanes));
  if (ir::is_float(from) && ir::is_float(to))
    return to == DType::F64 ? mlir::Value(b_.create<mlir::arith::ExtFOp>(loc_, to_type, x))
                            : mlir::Value(b_.create<mlir::arith::TruncFOp>(loc_, to_type, x));
  if (ir::is_float(to))
    return from == DType::Bool ? mlir::Value(b_.create<mlir::arith::UIToFPOp>(loc_, to_type, x))
                               : mlir::Value(b_.create<mlir::arith::SIToFPOp>(loc_, to_type, x));
  if (ir::is_float(from)) {
    double limit = to == DType::I32 ? 2147483648.0 : 9223372036854775808.0;
    int64_t max = to == DType::I32 ? INT32_MAX : INT64_MAX, min = to == DType::I32 ? INT32_MIN : INT64_MIN;
    mlir::Value too_big = cmpf(CmpFPredicate::OGE, x, constant(from, limit, 0, lanes));
    mlir::Value too_small = cmpf(CmpFPredicate::OLT, x, constant(from, -limit, 0, lanes));
    mlir::Value nan = cmpf(CmpFPredicate::UNO, x, x);
    mlir::Value out_of_range = b_.create<mlir::arith::OrIOp>(loc_, b_.create<mlir::arith::OrIOp>(loc_, too_big, too_small), nan);
    mlir::Value safe = select(out_of_range, constant(from, 0, 0, lanes), x);
    mlir::Value v = b_.create<mlir::arith::FPToSIOp>(loc_, to_type, safe);
    v = select(too_big, constant(to, 0, max, lanes), v);
    return select(too_small, constant(to, 0, min, lanes), v);
  }
  if (from == DType::Bool) return b_.create<mlir::arith::ExtUIOp>(loc_, to_type, x);
  return ir::dtype_size(to) > ir::dtype_size(from) ? mlir::Value(b_.create<mlir::arith::ExtSIOp>(loc_, to_type, x))
                                                   : mlir::Value(b_.create<mlir::arith::TruncIOp>(loc_, to_type, x));
}

DType ScalarLowering::reduce_accumulator_type(const ir::Graph& body, ir::NodeId id) {
  const ir::Node& n = body.node(id);
  const ir::ReduceAttrs& r = n.as<ir::ReduceAttrs>();
  DType in = body.node(n.inputs[0]).dtype;
  if (r.kind == ir::ReduceKind::Custom) return n.dtype;
  if (r.kind == ir::ReduceKind::Any || r.kind == ir::ReduceKind::All) return DType::Bool;
  if (ir::is_float(in) && (r.kind == ir::ReduceKind::Max || r.kind == ir::ReduceKind::Min)) return in;
  return ir::is_float(in) || r.kind == ir::ReduceKind::Mean ? DType::F64 : DType::I64;
}

mlir::Value ScalarLowering::reduce_identity(const ir::Graph& body, ir::NodeId id, int lanes) {
  const ir::Node& n = body.node(id);
  const ir::ReduceAttrs& r = n.as<ir::ReduceAttrs>();
  DType in = body.node(n.inputs[0]).dtype;
  DType acc = reduce_accumulator_type(body, id);
  constexpr double inf = std::numeric_limits<double>::infinity();
  int64_t int_low = in == DType::I32 ? INT32_MIN : in == DType::Bool ? 0 : INT64_MIN;
  int64_t int_high = in == DType::I32 ? INT32_MAX : in == DType::Bool ? 1 : INT64_MAX;
  switch (r.kind) {
    case ir::ReduceKind::Prod: return constant(acc, 1, 1, lanes);
    case ir::ReduceKind::Max: return constant(acc, -inf, int_low, lanes);
    case ir::ReduceKind::Min: return constant(acc, inf, int_high, lanes);
    case ir::ReduceKind::All: return constant(acc, 1, 1, lanes);
    case ir::ReduceKind::Custom: return constant(acc, r.identity.f, r.identity.i, lanes);
    default: return constant(acc, 0, 0, lanes);
  }
}

mlir::Value ScalarLowering::reduce_combine(const ir::Graph& body, ir::NodeId id, mlir::Value acc, mlir::Value x) {
  const ir::ReduceAttrs& r = body.node(id).as<ir::ReduceAttrs>();
  bool floating = ir::is_float(reduce_accumulator_type(body, id));
  switch (r.kind) {
    case ir::ReduceKind::Custom: return scalar_fn(r.combiner, {acc, x}, 1);
    case ir::ReduceKind::Any: return b_.create<mlir::arith::OrIOp>(loc_, acc, x);
    case ir::ReduceKind::All: return b_.create<mlir::arith::AndIOp>(loc_, acc, x);
    case ir::ReduceKind::Prod: return floating ? mlir::Value(b_.create<mlir::arith::MulFOp>(loc_, acc, x)) : mul(acc, x);
    case ir::ReduceKind::Max:
      return floating ? mlir::Value(b_.create<mlir::arith::MaximumFOp>(loc_, acc, x))
                      : mlir::Value(b_.create<mlir::arith::MaxSIOp>(loc_, acc, x));
    case ir::ReduceKind::Min:
      return floating ? mlir::Value(b_.create<mlir::arith::MinimumFOp>(loc_, acc, x))
                      : mlir::Value(b_.create<mlir::arith::MinSIOp>(loc_, acc, x));
    default: return floating ? mlir::Value(b_.create<mlir::arith::AddFOp>(loc_, acc, x)) : add(acc, x);
  }
}

mlir::Value ScalarLowering::reduce_input(const ir::Graph& body, ir::NodeId id, mlir::Value x, int lanes) {
  const ir::Node& n = body.node(id);
  if (n.as<ir::ReduceAttrs>().kind == ir::ReduceKind::Custom) return x;
  return cast(x, body.node(n.inputs[0]).dtype, reduce_accumulator_type(body, id), lanes);
}

mlir::Value ScalarLowering::reduce_finish(const ir::Graph& body, ir::NodeId id, mlir::Value acc, mlir::Value row_length) {
  const ir::Node& n = body.node(id);
  DType acc_type = reduce_accumulator_type(body, id);
  if (n.as<ir::ReduceAttrs>().kind == ir::ReduceKind::Mean)
    acc = b_.create<mlir::arith::DivFOp>(loc_, acc, b_.create<mlir::arith::SIToFPOp>(loc_, b_.getF64Type(), row_length));
  return acc_type == n.dtype ? acc : cast(acc, acc_type, n.dtype, 1);
}

// ---- SLEEF ----

mlir::Value ScalarLowering::sleef_op(ScalarOp op, DType t, const std::vector<mlir::Value>& a, int lanes) {
  using mlir::arith::CmpFPredicate;
  if (!sleef_on_ || (t != DType::F32 && t != DType::F64)) return {};
  switch (op) {
    // f32 exp and tanh vectors are inlined: a call to SLEEF made softmax about 20% and
    // hidden_layer (tanh) about 45% slower (bench/README.md, "SLEEF"). exp inlines SLEEF's own
    // algorithm (exp_f32_inline, 1 ulp); tanh an algorithm of its own (tanh_f32_inline, 0.77
    // ulp: SLEEF's call is 5x slower, MLIR's polynomial 4 ulp, left for --fast-math). f32 sin and cos
    // take SLEEF's sincos with cheaper sums (sin_cos_f32_inline: polar_distance 30% faster than
    // with SLEEF's own inlined, which was 8-10% faster than its call).
    case ScalarOp::Exp:
      if (t == DType::F32 && lanes > 1) return exp_f32_inline(a[0], lanes);
      return sleef("exp", t, a, lanes);
    case ScalarOp::Exp2: return sleef("exp2", t, a, lanes);
    case ScalarOp::Log: return sleef("log", t, a, lanes);
    case ScalarOp::Log2: return sleef("log2", t, a, lanes);
    case ScalarOp::Log1p: {
      // SLEEF's log1p overflows to inf from about 1e38 (f32) or 1e307 (f64); there 1 + x rounds
      // to x, so log(x) is log1p(x).
      mlir::Value r = sleef("log1p", t, a, lanes);
      if (!r) return r;
      mlir::Value huge = cmpf(CmpFPredicate::OGT, a[0], constant(t, t == DType::F32 ? 1e30 : 1e300, 0, lanes));
      return patch_lanes(t, huge, r, a, [&](const std::vector<mlir::Value>& v) { return sleef("log", DType::F64, v, 1); }, lanes);
    }
    case ScalarOp::Expm1: return sleef("expm1", t, a, lanes);
    case ScalarOp::Tan: return sleef("tan", t, a, lanes);
    case ScalarOp::Tanh:
      if (t == DType::F32 && !fast_math_ && inlines_f32(lanes)) return tanh_f32_inline(a[0], lanes);
      return t == DType::F32 && lanes > 1 ? mlir::Value() : sleef("tanh", t, a, lanes);
    case ScalarOp::Erf: return sleef("erf", t, a, lanes);
    case ScalarOp::Sinh:
    case ScalarOp::Cosh: {
      // SLEEF's sinh and cosh give inf beyond |x| = 88.5 (f32) or 709 (f64), short of where they
      // overflow (89.4, 710.5): those lanes take libm's in f64.
      bool sinh = op == ScalarOp::Sinh;
      mlir::Value r = sleef(sinh ? "sinh" : "cosh", t, a, lanes);
      if (!r) return r;
      mlir::Value near_overflow = cmpf(CmpFPredicate::OGT, b_.create<mlir::math::AbsFOp>(loc_, a[0]),
                                       constant(t, t == DType::F32 ? 88.0 : 709.0, 0, lanes));
      return patch_lanes(t, near_overflow, r, a, [&](const std::vector<mlir::Value>& v) {
        return sinh ? sinh_near_overflow(v[0]) : mlir::Value(b_.create<mlir::math::CoshOp>(loc_, v[0]));
      }, lanes);
    }
    case ScalarOp::Pow: {
      // SLEEF's pow overflows a little early (pow(DBL_MAX, 1) is inf): an infinite result of
      // finite operands is checked against libm's.
      mlir::Value r = sleef("pow", t, a, lanes);
      if (!r) return r;
      mlir::Value inf = constant(t, kInf, 0, lanes);
      auto finite = [&](mlir::Value v) { return cmpf(CmpFPredicate::OLT, b_.create<mlir::math::AbsFOp>(loc_, v), inf); };
      mlir::Value suspect = b_.create<mlir::arith::AndIOp>(
          loc_, cmpf(CmpFPredicate::OEQ, b_.create<mlir::math::AbsFOp>(loc_, r), inf),
          b_.create<mlir::arith::AndIOp>(loc_, finite(a[0]), finite(a[1])));
      return patch_lanes(t, suspect, r, a, [&](const std::vector<mlir::Value>& v) {
        return b_.create<mlir::math::PowFOp>(loc_, v[0], v[1]);
      }, lanes);
    }
    case ScalarOp::Sin:
    case ScalarOp::Cos:
      if (t == DType::F32 && !fast_math_ && inlines_f32(lanes)) {
        auto [sine, cosine] = sin_cos_f32(a[0], lanes);
        return op == ScalarOp::Sin ? sine : cosine;
      }
      return sleef(op == ScalarOp::Sin ? "sin" : "cos", t, a, lanes);  // share_sleef_sincos pairs them
    case ScalarOp::Asin:
    case ScalarOp::Acos:
    case ScalarOp::Atan:
    case ScalarOp::Atan2: {
      const char* name = op == ScalarOp::Asin ? "asin" : op == ScalarOp::Acos ? "acos" : op == ScalarOp::Atan ? "atan" : "atan2";
      if (t == DType::F64 || fast_math_) return sleef(name, t, a, lanes);
      // f32 in f64 and rounded once (0 ulp, as the libm calls these replace), still vectorized.
      if (lanes > 1 && sleef_width(DType::F64, lanes) == 0) return {};
      std::vector<mlir::Value> wide;
      for (mlir::Value v : a) wide.push_back(cast(v, DType::F32, DType::F64, lanes));
      return cast(sleef(name, DType::F64, wide, lanes), DType::F64, DType::F32, lanes);
    }
    default: return {};
  }
}

int ScalarLowering::sleef_width(DType t, int lanes) const {
  int bits = t == DType::F32 ? 32 : 64;
  for (int width : {sleef_.avx512f ? 512 / bits : 0, sleef_.avx2 ? 256 / bits : 0})
    if (width > 0 && lanes % width == 0) return width;
  return 0;
}

std::string ScalarLowering::sleef_accuracy(std::string_view function) const {
  // SLEEF has no u35 exp, expm1, log1p, pow or erf.
  for (std::string_view f : {"sin", "cos", "sincos", "tan", "tanh", "log", "log2", "exp2", "asin", "acos", "atan", "atan2", "sinh", "cosh"})
    if (fast_math_ && f == function) return "_u35";
  return "_u10";
}

mlir::Value ScalarLowering::sleef(std::string_view function, DType t, const std::vector<mlir::Value>& a, int lanes) {
  if (!sleef_on_ || (t != DType::F32 && t != DType::F64)) return {};
  bool f32 = t == DType::F32;
  std::string name = "Sleef_" + std::string(function);
  mlir::Type scalar = scalar_type(t);
  if (lanes == 1) {
    std::string symbol = sleef_.fma ? name + (f32 ? "f1" : "d1") + sleef_accuracy(function) + "purecfma"
                                    : name + (f32 ? "f" : "") + sleef_accuracy(function);
    auto fn = sleef_declaration(symbol, scalar, std::vector<mlir::Type>(a.size(), scalar));
    return b_.create<mlir::LLVM::CallOp>(loc_, fn, a).getResult();
  }
  int width = sleef_width(t, lanes);
  if (width == 0) return {};
  mlir::Type chunk_type = lane_type(scalar, width);
  std::string symbol = name + (f32 ? "f" : "d") + std::to_string(width) + sleef_accuracy(function) +
                       (width * (f32 ? 32 : 64) == 512 ? "avx512f" : "avx2");
  auto fn = sleef_declaration(symbol, chunk_type, std::vector<mlir::Type>(a.size(), chunk_type));
  // Wider than the build: chunk by chunk.
  return by_chunks(t, width, lanes, a, [&](const std::vector<mlir::Value>& chunk) {
    return b_.create<mlir::LLVM::CallOp>(loc_, fn, chunk).getResult();
  });
}

mlir::Value ScalarLowering::by_chunks(DType t, int width, int lanes, const std::vector<mlir::Value>& a,
                                      const std::function<mlir::Value(const std::vector<mlir::Value>&)>& f) {
  if (width == lanes) return f(a);
  mlir::Value result = constant(t, 0, 0, lanes);
  for (int at = 0; at < lanes; at += width) {
    std::vector<mlir::Value> chunk;
    for (mlir::Value v : a)
      chunk.push_back(b_.create<mlir::vector::ExtractStridedSliceOp>(loc_, v, llvm::ArrayRef<int64_t>{at},
                                                                     llvm::ArrayRef<int64_t>{width}, llvm::ArrayRef<int64_t>{1}));
    result = b_.create<mlir::vector::InsertStridedSliceOp>(loc_, f(chunk), result, llvm::ArrayRef<int64_t>{at},
                                                           llvm::ArrayRef<int64_t>{1});
  }
  return result;
}

namespace {

// The SLEEF function `symbol` declared in `module` (once): readnone, or writing only its first
// argument (`sret`, a struct of two results).
mlir::LLVM::LLVMFuncOp declare_sleef(mlir::OpBuilder& b, mlir::Operation* module, const std::string& symbol, mlir::Type result,
                                     const std::vector<mlir::Type>& params, mlir::Type sret = {}) {
  if (auto fn = mlir::dyn_cast_or_null<mlir::LLVM::LLVMFuncOp>(mlir::SymbolTable::lookupSymbolIn(module, symbol))) return fn;
  mlir::OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&module->getRegion(0).front());
  auto fn = b.create<mlir::LLVM::LLVMFuncOp>(b.getUnknownLoc(), symbol, mlir::LLVM::LLVMFunctionType::get(result, params));
  // Pure functions (LLVM may hoist them out of loops and merge equal calls); sincos writes only
  // its result slot.
  using mlir::LLVM::ModRefInfo;
  fn.setMemoryAttr(mlir::LLVM::MemoryEffectsAttr::get(
      b.getContext(), {ModRefInfo::NoModRef, sret ? ModRefInfo::Mod : ModRefInfo::NoModRef, ModRefInfo::NoModRef}));
  fn.setNoUnwind(true);
  fn.setWillReturn(true);
  if (sret) {
    fn.setArgAttr(0, mlir::LLVM::LLVMDialect::getStructRetAttrName(), mlir::TypeAttr::get(sret));
    fn.setArgAttr(0, mlir::LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());
  }
  return fn;
}

}  // namespace

mlir::LLVM::LLVMFuncOp ScalarLowering::sleef_declaration(const std::string& symbol, mlir::Type result,
                                                         const std::vector<mlir::Type>& params) {
  mlir::Operation* module = mlir::SymbolTable::getNearestSymbolTable(b_.getInsertionBlock()->getParentOp());
  return declare_sleef(b_, module, symbol, result, params);
}

void share_sleef_sincos(mlir::Operation* module) {
  // Calls of Sleef_sin<width>_<accuracy><isa> and Sleef_cos<...> by (block, operand, the rest of
  // the name): the vector builds only (the scalar sincos returns its pair in registers).
  struct Pair {
    mlir::LLVM::CallOp sin, cos;
  };
  std::map<std::tuple<mlir::Block*, const void*, std::string>, Pair> pairs;  // the operand by address
  module->walk([&](mlir::LLVM::CallOp call) {
    std::optional<llvm::StringRef> callee = call.getCallee();
    if (!callee || call.getNumOperands() != 1 || !mlir::isa<mlir::VectorType>(call.getOperand(0).getType())) return;
    bool sin = callee->starts_with("Sleef_sin"), cos = callee->starts_with("Sleef_cos");
    std::string rest = callee->drop_front(9).str();  // "f16_u10avx512f"
    if ((!sin && !cos) || rest.empty() || (rest[0] != 'f' && rest[0] != 'd')) return;  // not sinh, cosh
    Pair& p = pairs[{call->getBlock(), call.getOperand(0).getAsOpaquePointer(), rest}];
    (sin ? p.sin : p.cos) = call;
  });
  mlir::OpBuilder b(module->getContext());
  mlir::MLIRContext* context = module->getContext();
  for (auto& [key, p] : pairs) {
    if (!p.sin || !p.cos) continue;
    mlir::LLVM::CallOp first = p.sin->isBeforeInBlock(p.cos) ? p.sin : p.cos;
    mlir::Value x = first.getOperand(0);
    mlir::Type vector = x.getType();
    mlir::Type pair = mlir::LLVM::LLVMStructType::getLiteral(context, {vector, vector});
    mlir::Type ptr = mlir::LLVM::LLVMPointerType::get(context);
    auto fn = declare_sleef(b, module, "Sleef_sincos" + std::get<2>(key), mlir::LLVM::LLVMVoidType::get(context), {ptr, vector}, pair);
    // The slot in the entry block, so that a call in a loop does not grow the stack each iteration.
    mlir::Operation* func = first->getParentOfType<mlir::FunctionOpInterface>();
    b.setInsertionPointToStart(&func->getRegion(0).front());
    mlir::Location loc = first.getLoc();
    mlir::Value one = b.create<mlir::LLVM::ConstantOp>(loc, b.getI64Type(), b.getI64IntegerAttr(1));
    mlir::Value slot = b.create<mlir::LLVM::AllocaOp>(loc, ptr, pair, one, /*alignment=*/64);
    b.setInsertionPoint(first);
    b.create<mlir::LLVM::CallOp>(loc, fn, mlir::ValueRange{slot, x});
    mlir::Value both = b.create<mlir::LLVM::LoadOp>(loc, pair, slot, /*alignment=*/64);
    p.sin.getResult().replaceAllUsesWith(b.create<mlir::LLVM::ExtractValueOp>(loc, both, 0).getResult());
    p.cos.getResult().replaceAllUsesWith(b.create<mlir::LLVM::ExtractValueOp>(loc, both, 1).getResult());
    p.sin->erase();
    p.cos->erase();
  }
}

namespace {
// exp_f32_inline's constants, in the order of the table exp_constant() reads.
constexpr float kExpConstants[] = {87.f, -104.f, 104.f, 1.442695040888963407359924681001892137f, -0.693145751953125f,
                                   -1.428606765330187045e-06f, 0.00139304355252534151077271f,
                                   0.0416664853692054748535156f, 0.5f, 0.000198527617612853646278381f,
                                   0.00833336077630519866943359f, 0.166666671633720397949219f, 1.f,
                                   static_cast<float>(0x1.8p23 + 127)};
constexpr int kExpTableLanes = 8;
}  // namespace

mlir::Value ScalarLowering::exp_constant(float v, int lanes) {
  const float* at = std::find(std::begin(kExpConstants), std::end(kExpConstants), v);
  if (!sleef_on_ || lanes != kExpTableLanes || at == std::end(kExpConstants)) return constant(DType::F32, v, 0, lanes);
  auto index = static_cast<int32_t>((at - std::begin(kExpConstants)) * kExpTableLanes);
  mlir::Type vector = lane_type(b_.getF32Type(), lanes);
  mlir::Value address = b_.create<mlir::LLVM::GEPOp>(loc_, mlir::LLVM::LLVMPointerType::get(b_.getContext()), b_.getF32Type(),
                                                     constant_table(), mlir::ArrayRef<mlir::LLVM::GEPArg>{index});
  return b_.create<mlir::LLVM::LoadOp>(loc_, vector, address, /*alignment=*/32);
}

mlir::Value ScalarLowering::constant_table() {
  mlir::Operation* func = b_.getInsertionBlock()->getParentOp();
  if (!mlir::isa<mlir::FunctionOpInterface>(func)) func = func->getParentOfType<mlir::FunctionOpInterface>();
  auto known = constant_tables_.find(func);
  if (known != constant_tables_.end()) return known->second;
  mlir::MLIRContext* context = b_.getContext();
  mlir::Operation* module = mlir::SymbolTable::getNearestSymbolTable(func->getParentOp());
  const char* name = "fuse_exp_f32x8_constants";
  auto table = mlir::dyn_cast_or_null<mlir::LLVM::GlobalOp>(mlir::SymbolTable::lookupSymbolIn(module, name));
  constexpr int64_t count = std::size(kExpConstants) * kExpTableLanes;
  if (!table) {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&module->getRegion(0).front());
    std::vector<float> values;
    for (float v : kExpConstants) values.insert(values.end(), kExpTableLanes, v);
    auto shape = mlir::RankedTensorType::get({count}, b_.getF32Type());
    table = b_.create<mlir::LLVM::GlobalOp>(loc_, mlir::LLVM::LLVMArrayType::get(b_.getF32Type(), count), /*isConstant=*/true,
                                            mlir::LLVM::Linkage::Private, name,
                                            mlir::DenseElementsAttr::get(shape, llvm::ArrayRef<float>(values)), /*alignment=*/32);
  }
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(&func->getRegion(0).front());
  mlir::Type ptr = mlir::LLVM::LLVMPointerType::get(context);
  mlir::Value address = b_.create<mlir::LLVM::AddressOfOp>(loc_, ptr, name);
  // An empty asm that returns its operand: LLVM no longer knows what the pointer points to, so
  // it keeps the loads (and folds them into their users) instead of making them splats again.
  mlir::Value opaque = b_.create<mlir::LLVM::InlineAsmOp>(loc_, ptr, mlir::ValueRange{address}, "", "=r,0",
                                                          /*has_side_effects=*/false, /*is_align_stack=*/false,
                                                          mlir::LLVM::AsmDialectAttr(), mlir::ArrayAttr())
                           .getResult(0);
  constant_tables_[func] = opaque;
  return opaque;
}

// SLEEF's f32 exp (xexpf in sleefsimdsp.c, the u10 algorithm: q = rint(x / ln 2), s = x - q ln 2
// in two FMA steps, a degree-6 polynomial), inlined for vectors (1 ulp measured). x is clamped to
// [-104, 104] (exp is 0 below, inf above) so that s stays small for huge |x| and q within
// [-150, 150]; compare-and-select lets NaN through. The scaling by 2^q rounds subnormal results
// once and overflows to inf by itself, so results below FLT_MIN need no f64 fix-up (the form
// MLIR's polynomial needs): on AVX-512 one vscalefps, elsewhere two exact power-of-two products
// (scale_by_power_of_two). 13 vector ops on AVX-512, 23 on AVX2: as many as MLIR's polynomial,
// which also needs a test for lanes to fix up, and is 6 ulp near overflow.
// In a loop that defers its patches (ScalarLowering::defer_patches), AVX2 takes a shorter form
// for |x| <= 87, where 2^q is a normal float (|q| <= 126): no clamp, and u * 2^q as one product
// (the same exact value rounded once, so the same bits); lanes with |x| > 87 (or inf) are
// deferred, and the loop's rerun computes them in the full form. The clamp's 4 ops go, the
// scaling takes 3 instead of 9, and the test of |x| takes 2 (shared with a paired exp(-x)). NaN
// takes the short form: u is NaN.
// The polynomial is evaluated as its even and odd halves in s (as many FMAs as Horner's rule),
// so that exp(-x) is the same halves put together with -s and scaled by 2^-q: every step above
// is odd in x (the clamp is symmetric, rint rounds half to even, an FMA of negated operands
// rounds to the negated result), so the pair's exp(-x) is bit for bit exp_f32_inline(-x).
// ln 2 in two parts, SLEEF's L2Uf and L2Lf: q L2Uf is exact for the q of f32 exps.
constexpr float kLn2HighF = 0.693145751953125f, kLn2LowF = 1.428606765330187045e-06f;

ScalarLowering::ExpReduction ScalarLowering::exp_steps(mlir::Value x, int lanes) {
  auto c = [&](float v) { return exp_constant(v, lanes); };
  auto fma = [&](mlir::Value a, mlir::Value m, mlir::Value d) { return b_.create<mlir::math::FmaOp>(loc_, a, m, d).getResult(); };
  ExpReduction r;
  r.q = b_.create<mlir::math::RoundEvenOp>(loc_, b_.create<mlir::arith::MulFOp>(loc_, x, c(1.442695040888963407359924681001892137f)));
  r.s_high = fma(r.q, c(-kLn2HighF), x);  // exact
  r.s = fma(r.q, c(-kLn2LowF), r.s_high);
  r.t = b_.create<mlir::arith::MulFOp>(loc_, r.s, r.s);
  // SLEEF's coefficients from s^5 down to s^0, taken two apart.
  r.even = fma(fma(c(0.00139304355252534151077271f), r.t, c(0.0416664853692054748535156f)), r.t, c(0.5f));
  r.odd = fma(fma(c(0.000198527617612853646278381f), r.t, c(0.00833336077630519866943359f)), r.t, c(0.166666671633720397949219f));
  return r;
}

mlir::Value ScalarLowering::exp_f32_inline(mlir::Value x, int lanes) {
  using mlir::arith::CmpFPredicate;
  auto c = [&](float v) { return exp_constant(v, lanes); };
  auto fma = [&](mlir::Value a, mlir::Value m, mlir::Value d) { return b_.create<mlir::math::FmaOp>(loc_, a, m, d).getResult(); };
  auto neg = [&](mlir::Value v) { return b_.create<mlir::arith::NegFOp>(loc_, v).getResult(); };
  // A reduction made for x itself, or for -x: keyed by the value it was made for.
  auto negation_of = [](mlir::Value v) {
    auto negation = v.getDefiningOp<mlir::arith::NegFOp>();
    return negation ? negation.getOperand() : mlir::Value();
  };
  // The short form (see above): where vscalefps is missing and the loop's rerun patches lanes.
  const bool short_form = deferred_masks_ && lanes > 1 && !has_scalef(lanes);
  const ExpReduction* reduction = nullptr;
  bool negated = false;
  for (const auto& [key, r] : exp_reductions_) {
    if (!(key == x || negation_of(x) == key || negation_of(key) == x) || !made_before_here(r.odd)) continue;
    if (r.short_form != short_form) continue;
    reduction = &r;
    negated = key != x;
    break;
  }
  ExpReduction made;
  if (!reduction) {
    mlir::Value key = x;
    if (short_form) {
      // Symmetric in x, so a paired exp(-x) needs no mask of its own.
      mlir::Value large = cmpf(CmpFPredicate::OGT, b_.create<mlir::math::AbsFOp>(loc_, x), c(87.f));
      deferred_masks_->push_back(b_.create<mlir::LLVM::FreezeOp>(loc_, large));
    } else {
      // x at most zero (x - max(x): softmax) needs no clamp from above: one instruction fewer
      // per vector (softmax over rows of 64 f32 in cache, one thread: 0.124 ms against 0.131).
      // The clamped x is the same, so a paired exp(-x) keeps its bits.
      bool at_most_zero_x = at_most_zero(x);
      x = select(cmpf(CmpFPredicate::OLT, x, c(-104.f)), c(-104.f), x);
      if (!at_most_zero_x) x = select(cmpf(CmpFPredicate::OGT, x, c(104.f)), c(104.f), x);
    }
    made = exp_steps(x, lanes);
    made.short_form = short_form;
    exp_reductions_.emplace_back(key, made);
    reduction = &made;
  }
  mlir::Value q = negated ? neg(reduction->q) : reduction->q;
  mlir::Value s = negated ? neg(reduction->s) : reduction->s;
  mlir::Value u = fma(s, reduction->odd, reduction->even);
  u = b_.create<mlir::arith::AddFOp>(loc_, c(1.f), fma(reduction->t, u, s));
  return reduction->short_form ? scale_by_normal_power_of_two(u, q, lanes) : scale_by_power_of_two(u, q, lanes);
}

// f32 sin and cos of one value, inlined for vectors: SLEEF's u10 sincos (xsincosf_u1 in
// sleefsimdsp.c) with cheaper sums. A call cost polar_distance its registers (every vector
// register is caller-saved, so the loop's live values went to the stack around each call) and
// kept LLVM from interleaving two sincos of different angles. x = q pi/2 + s with pi/2 in three
// parts, s as a double-float (s.x + s.y) as SLEEF has it (exact for |x| < 125, SLEEF's
// TRIGRANGEMAX2f), then SLEEF's polynomials for sin and cos on [-pi/4, pi/4], swapped and negated
// by q mod 4. Where SLEEF adds the polynomials' terms as double-floats, here one FMA each:
// sin = s.x + (s.x s^2 p(s^2) + s.y), cos = 1 + s^2 r(s^2) (the square still a double-float's),
// and q comes from one FMA (x 2/pi + 1.5 2^23) instead of a product and a rounding. 37 vector
// instructions against SLEEF's 53; every float in (-125, 125) swept: at most 0.888 ulp for sin,
// 0.886 for cos, against SLEEF's 0.882 and 0.886 (0.05% of the results differ from SLEEF's by
// an ulp). Lanes at or beyond 125 (or inf, NaN) take SLEEF's own sin and cos (which
// share_sleef_sincos pairs), called only for the vectors that have such a lane, and blended in
// lane by lane: a lane's result does not depend on its neighbours.
// Made once per x (kept until forget_made_values): sin and cos of one x share everything.
std::pair<mlir::Value, mlir::Value> ScalarLowering::sin_cos_f32_inline(mlir::Value d, int lanes) {
  using mlir::arith::CmpFPredicate;
  for (const auto& [x, pair] : sin_cos_made_)
    if (x == d && made_before_here(pair.first)) return pair;
  auto c = [&](float v) { return constant(DType::F32, v, 0, lanes); };
  auto fma = [&](mlir::Value a, mlir::Value m, mlir::Value s) { return b_.create<mlir::math::FmaOp>(loc_, a, m, s).getResult(); };
  auto add = [&](mlir::Value a, mlir::Value s) { return b_.create<mlir::arith::AddFOp>(loc_, a, s).getResult(); };
  auto sub = [&](mlir::Value a, mlir::Value s) { return b_.create<mlir::arith::SubFOp>(loc_, a, s).getResult(); };
  auto mulf = [&](mlir::Value a, mlir::Value s) { return b_.create<mlir::arith::MulFOp>(loc_, a, s).getResult(); };
  constexpr float kPiA = 3.1414794921875f, kPiB = 0.00011315941810607910156f, kPiC = 1.9841872589410058936e-09f;
  // q = round(x 2/pi) in the low bits of x 2/pi + 1.5 * 2^23 (|q| < 2^22), rounded once.
  mlir::Value shifted = fma(d, c(static_cast<float>(2 * std::numbers::inv_pi)), c(0x1.8p23f));
  mlir::Value u = sub(shifted, c(0x1.8p23f));
  // s = x - u pi/2 as a double-float: u pi_a/2 and u pi_b/2 are exact (u < 2^7, the parts' few
  // bits), v is exact, v + w a two-sum; u pi_c/2 only shifts the small part.
  mlir::Value v = fma(u, c(-kPiA * 0.5f), d);
  mlir::Value w = mulf(u, c(-kPiB * 0.5f));
  mlir::Value sx = add(v, w);
  mlir::Value vv = sub(sx, v);
  mlir::Value sy = add(sub(v, sub(sx, vv)), sub(w, vv));
  sy = fma(u, c(-kPiC * 0.5f), sy);
  mlir::Value cross = mulf(sx, sy);
  mlir::Value square = fma(sx, sx, add(cross, cross));  // s^2, with s.y's share
  // sin(s) = s + s^3 p(s^2).
  mlir::Value p = fma(fma(c(-0.000195169282960705459117889f), square, c(0.00833215750753879547119141f)), square,
                      c(-0.166666537523269653320312f));
  mlir::Value sine = add(sx, fma(mulf(sx, square), p, sy));
  sine = select(cmpf(CmpFPredicate::OEQ, d, c(0.f)), d, sine);  // sin(-0) is -0
  // cos(s) = 1 + s^2 r(s^2).
  mlir::Value r = c(-2.71811842367242206819355e-07f);
  for (float k : {2.47990446951007470488548e-05f, -0.00138888787478208541870117f, 0.0416666641831398010253906f, -0.5f})
    r = fma(r, square, c(k));
  mlir::Value cosine = fma(square, r, c(1.f));
  // Odd q swaps sin and cos, bit 1 of q negates sin, bit 1 of q + 1 cos.
  mlir::Type int_lanes = lane_type(b_.getI32Type(), lanes);
  auto int_constant = [&](int32_t k) { return constant(DType::I32, 0, k, lanes); };
  auto bit = [&](mlir::Value bits, int32_t which) { return b_.create<mlir::arith::AndIOp>(loc_, bits, int_constant(which)).getResult(); };
  mlir::Value q = b_.create<mlir::arith::BitcastOp>(loc_, int_lanes, shifted);
  mlir::Value odd = cmpi(mlir::arith::CmpIPredicate::ne, bit(q, 1), int_constant(0));
  auto negate_by = [&](mlir::Value value, mlir::Value bits) {  // value with its sign flipped where bit 1 of `bits` is set
    mlir::Value sign = b_.create<mlir::arith::ShLIOp>(loc_, bit(bits, 2), int_constant(30));
    mlir::Value flipped = b_.create<mlir::arith::XOrIOp>(loc_, b_.create<mlir::arith::BitcastOp>(loc_, int_lanes, value), sign);
    return b_.create<mlir::arith::BitcastOp>(loc_, d.getType(), flipped).getResult();
  };
  mlir::Value fast_sine = negate_by(select(odd, cosine, sine), q);
  mlir::Value fast_cosine = negate_by(select(odd, sine, cosine), b_.create<mlir::arith::AddIOp>(loc_, q, int_constant(1)));
  // Frozen: a lane no one computed (padding) must not make the branch undefined behaviour.
  mlir::Value out_of_range = b_.create<mlir::LLVM::FreezeOp>(
      loc_, cmpf(CmpFPredicate::UGE, b_.create<mlir::math::AbsFOp>(loc_, d), c(125.f)));
  mlir::Value any = lanes == 1 ? out_of_range : b_.create<mlir::vector::ReductionOp>(loc_, mlir::vector::CombiningKind::OR, out_of_range).getResult();
  mlir::Type type = d.getType();
  auto branch = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange{type, type}, any, /*withElseRegion=*/true);
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&branch.getThenRegion().front());
    mlir::Value library_sine = sleef("sin", DType::F32, {d}, lanes), library_cosine = sleef("cos", DType::F32, {d}, lanes);
    b_.create<mlir::scf::YieldOp>(loc_, mlir::ValueRange{select(out_of_range, library_sine, fast_sine),
                                                         select(out_of_range, library_cosine, fast_cosine)});
    b_.setInsertionPointToStart(&branch.getElseRegion().front());
    b_.create<mlir::scf::YieldOp>(loc_, mlir::ValueRange{fast_sine, fast_cosine});
  }
  sin_cos_made_.emplace_back(d, std::pair{branch.getResult(0), branch.getResult(1)});
  return sin_cos_made_.back().second;
}

// Outside loops (the masked vectors before and after a loop, a kernel's single elements) one
// copy of sin_cos_f32_inline per module and width, called (internal, never inlined): the loops'
// bits at a fraction of the compile time. polar_distance with those four copies inlined: warm
// compile 34 ms against 24.
std::pair<mlir::Value, mlir::Value> ScalarLowering::sin_cos_f32(mlir::Value d, int lanes) {
  mlir::Operation* around = b_.getInsertionBlock()->getParentOp();
  if (mlir::isa<mlir::scf::ForOp>(around) || around->getParentOfType<mlir::scf::ForOp>()) return sin_cos_f32_inline(d, lanes);
  for (const auto& [x, pair] : sin_cos_made_)  // sin and cos of one x: one call
    if (x == d && made_before_here(pair.first)) return pair;
  mlir::Operation* module = mlir::SymbolTable::getNearestSymbolTable(around);
  std::string name = "fuse_sincosf" + std::to_string(lanes);
  mlir::Type type = d.getType();
  auto fn = mlir::dyn_cast_or_null<mlir::func::FuncOp>(mlir::SymbolTable::lookupSymbolIn(module, name));
  if (!fn) {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToEnd(&module->getRegion(0).front());
    fn = b_.create<mlir::func::FuncOp>(loc_, name, b_.getFunctionType({type}, {type, type}));
    fn->setAttr("llvm.linkage", mlir::LLVM::LinkageAttr::get(b_.getContext(), mlir::LLVM::Linkage::Internal));
    fn->setAttr("no_inline", b_.getUnitAttr());
    mlir::Block* entry = fn.addEntryBlock();
    b_.setInsertionPointToStart(entry);
    auto [sine, cosine] = sin_cos_f32_inline(entry->getArgument(0), lanes);
    b_.create<mlir::func::ReturnOp>(loc_, mlir::ValueRange{sine, cosine});
  }
  auto call = b_.create<mlir::func::CallOp>(loc_, fn, mlir::ValueRange{d});
  sin_cos_made_.emplace_back(d, std::pair{call.getResult(0), call.getResult(1)});
  return sin_cos_made_.back().second;
}

std::pair<mlir::Value, mlir::Value> ScalarLowering::exp_f32_split(mlir::Value x, bool reduction_error, int lanes) {
  auto c = [&](float v) { return constant(DType::F32, v, 0, lanes); };
  auto fma = [&](mlir::Value a, mlir::Value m, mlir::Value s) { return b_.create<mlir::math::FmaOp>(loc_, a, m, s).getResult(); };
  auto add = [&](mlir::Value a, mlir::Value s) { return b_.create<mlir::arith::AddFOp>(loc_, a, s).getResult(); };
  auto sub = [&](mlir::Value a, mlir::Value s) { return b_.create<mlir::arith::SubFOp>(loc_, a, s).getResult(); };
  // (1 + v) 2^q as SLEEF's expf computes it (exp_f32_inline), 1 + v split exactly.
  ExpReduction steps = exp_steps(x, lanes);
  mlir::Value v = fma(steps.t, fma(steps.s, steps.odd, steps.even), steps.s);
  mlir::Value high = add(c(1.f), v);
  mlir::Value low = add(sub(c(1.f), high), v);
  if (reduction_error) {
    // s's rounding, s_err = (s_high - q L2L) - s, is up to a third of an ulp of e^s:
    // e^{s + s_err} = (1 + v)(1 + s_err) to 2^-40.
    mlir::Value s_err = fma(steps.q, c(-kLn2LowF), sub(steps.s_high, steps.s));
    low = add(low, fma(s_err, v, s_err));
  }
  return {scale_by_normal_power_of_two(high, steps.q, lanes), scale_by_normal_power_of_two(low, steps.q, lanes)};
}

std::pair<mlir::Value, mlir::Value> ScalarLowering::exp_f64_split(mlir::Value x, int lanes) {
  auto c = [&](double v) { return constant(DType::F64, v, 0, lanes); };
  auto fma = [&](mlir::Value a, mlir::Value m, mlir::Value s) { return b_.create<mlir::math::FmaOp>(loc_, a, m, s).getResult(); };
  // SLEEF's f64 exp (xexp in sleefsimddp.c, its FMA form): the reduction by ln 2 in two parts and
  // its polynomial, here by Horner's rule; its last step 1 + s w split exactly (1 - high is exact
  // for high in [0.7, 1.5], and the FMA rounds the rest once).
  mlir::Value q = b_.create<mlir::math::RoundEvenOp>(loc_, b_.create<mlir::arith::MulFOp>(loc_, x, c(1.442695040888963407359924681001892137)));
  mlir::Value s = fma(q, c(-.69314718055966295651160180568695068359375), x);
  s = fma(q, c(-.28235290563031577122588448175013436025525412068e-12), s);
  mlir::Value w = c(0.2081276378237164457e-8);
  for (double k : {0.2511210703042288022e-7, 0.2755762628169491192e-6, 0.2755723402025388239e-5, 0.2480158687479686264e-4,
                   0.1984126989855865850e-3, 0.1388888888914497797e-2, 0.8333333333314938210e-2, 0.4166666666666602598e-1,
                   0.1666666666666669072e+0, 0.5, 1.0})
    w = fma(w, s, c(k));
  mlir::Value high = fma(w, s, c(1));
  mlir::Value low = fma(w, s, b_.create<mlir::arith::SubFOp>(loc_, c(1), high));
  return {scale_f64_by_normal_power_of_two(high, q, lanes), scale_f64_by_normal_power_of_two(low, q, lanes)};
}

ScalarLowering::Quotient ScalarLowering::quotient_by_one_plus(double n, mlir::Value high, mlir::Value low, DType t, int lanes) {
  auto c = [&](double v) { return constant(t, v, 0, lanes); };
  auto fma = [&](mlir::Value a, mlir::Value m, mlir::Value s) { return b_.create<mlir::math::FmaOp>(loc_, a, m, s).getResult(); };
  auto add = [&](mlir::Value a, mlir::Value s) { return b_.create<mlir::arith::AddFOp>(loc_, a, s).getResult(); };
  auto sub = [&](mlir::Value a, mlir::Value s) { return b_.create<mlir::arith::SubFOp>(loc_, a, s).getResult(); };
  auto neg = [&](mlir::Value v) { return b_.create<mlir::arith::NegFOp>(loc_, v).getResult(); };
  // d = e + 1 (high >= 1, so Fast2Sum is exact).
  mlir::Value d_high = add(high, c(1));
  mlir::Value d_low = add(sub(c(1), sub(d_high, high)), low);
  // n / d = q0 + r q0 / n with r = n - q0 d; 1 - n / d = (1 - q0) - r q0 / n, 1 - q0 as a double-float.
  Quotient q;
  q.rounded = b_.create<mlir::arith::DivFOp>(loc_, c(n), d_high);
  q.residual = fma(neg(q.rounded), d_low, fma(neg(q.rounded), d_high, c(n)));
  mlir::Value one_minus = sub(c(1), q.rounded);
  mlir::Value one_minus_low = sub(sub(c(1), one_minus), q.rounded);
  mlir::Value scaled = n == 1 ? neg(q.rounded) : b_.create<mlir::arith::MulFOp>(loc_, q.rounded, c(-1 / n)).getResult();
  q.one_minus = add(one_minus, fma(q.residual, scaled, one_minus_low));
  return q;
}

// f32 tanh, inlined (every path: loops, masked vectors, single elements, so a value's tanh is
// the same bits wherever it sits), at most 0.768 ulp: every positive float swept against libm's
// f64 tanh (tanh is odd and computed on |x|, the sign put back). SLEEF's u10 tanhf carries
// everything as double-floats (its call made gelu over 10M f32 5x slower than MLIR's rational
// polynomial, which is 4 ulp off). Here:
// - |x| < 0.55: |x| + |x|^3 p(x^2), p of degree 4 fitted for tanh's relative error (2^-27.8 with
//   its coefficients in f32);
// - beyond: 1 - 2 / (e^{2|x|} + 1), with e^{2|x|} from SLEEF's expf steps kept as a double-float
//   (1 + v split exactly, scaled by 2^q), e^{2|x|} + 1 a double-float (Fast2Sum), the quotient
//   2 / (e^{2|x|} + 1) one division corrected by its residual and subtracted from 1 as a
//   double-float; |x| is clamped to 9.5, where tanh rounds to 1 (a NaN goes through as NaN).
// The division runs on the divider beside the rest (about 45 vector instructions for 16 lanes).
mlir::Value ScalarLowering::tanh_f32_inline(mlir::Value x, int lanes) {
  using mlir::arith::CmpFPredicate;
  auto c = [&](float v) { return constant(DType::F32, v, 0, lanes); };
  auto fma = [&](mlir::Value a, mlir::Value m, mlir::Value s) { return b_.create<mlir::math::FmaOp>(loc_, a, m, s).getResult(); };
  auto mulf = [&](mlir::Value a, mlir::Value s) { return b_.create<mlir::arith::MulFOp>(loc_, a, s).getResult(); };
  mlir::Value a = b_.create<mlir::math::AbsFOp>(loc_, x);
  mlir::Value square = mulf(a, a);
  mlir::Value p = c(-0.006274233106523752f);
  for (float k : {0.021071674302220345f, -0.05385230854153633f, 0.13332585990428925f, -0.33333316445350647f})
    p = fma(p, square, c(k));
  mlir::Value near_zero = fma(mulf(a, square), p, a);
  mlir::Value clamped = select(cmpf(CmpFPredicate::OGT, a, c(9.5f)), c(9.5f), a);
  mlir::Value twice = b_.create<mlir::arith::AddFOp>(loc_, clamped, clamped);
  auto [power_high, power_low] = exp_f32_split(twice, /*reduction_error=*/false, lanes);  // (q <= 28)
  mlir::Value away = quotient_by_one_plus(2, power_high, power_low, DType::F32, lanes).one_minus;
  mlir::Value magnitude = select(cmpf(CmpFPredicate::OLT, a, c(0.55f)), near_zero, away);
  return b_.create<mlir::math::CopySignOp>(loc_, magnitude, x);
}

// sigmoid, inlined for f32 and f64 on every path (CUDA's too), within 1 ulp where 1 / (1 +
// exp(-x)) is 2 (f32) and 4 (f64) off: exp's error and two more roundings. Here with a = |x|
// (clamped: 87 for f32, 708 for f64; the lanes beyond on the negative side are patched by the
// caller), e^a = (1 + v) 2^q from SLEEF's exp steps with 1 + v kept as a double-float, d = e^a +
// 1 by Fast2Sum (e^a >= 1), and 1 / d from one division corrected by its residual: for x < 0
// that is the result, for x >= 0 the result is 1 - 1 / d, subtracted as a double-float (as
// tanh_f32_inline does). NaN goes through (the comparisons fail); -0 gives 0.5.
mlir::Value ScalarLowering::sigmoid_inline(mlir::Value x, DType t, int lanes) {
  using mlir::arith::CmpFPredicate;
  auto c = [&](double v) { return constant(t, v, 0, lanes); };
  bool single = t == DType::F32;
  double limit = single ? 87 : 708;  // e^a and 2^q stay normal
  mlir::Value a = b_.create<mlir::math::AbsFOp>(loc_, x);
  a = select(cmpf(CmpFPredicate::OGT, a, c(limit)), c(limit), a);
  auto [power_high, power_low] = single ? exp_f32_split(a, /*reduction_error=*/true, lanes) : exp_f64_split(a, lanes);
  Quotient q = quotient_by_one_plus(1, power_high, power_low, t, lanes);
  mlir::Value below = b_.create<mlir::math::FmaOp>(loc_, q.residual, q.rounded, q.rounded);  // q0 (1 + r)
  return select(cmpf(CmpFPredicate::OLT, x, c(0)), below, q.one_minus);
}

mlir::Value ScalarLowering::scale_f64_by_normal_power_of_two(mlir::Value u, mlir::Value q, int lanes) {
  // As the f32 form: the bits of q + 1.5 * 2^52 + 1023 shifted left by 52 are q + 1023, the
  // exponent field (|q| <= 1022).
  mlir::Value biased = b_.create<mlir::arith::BitcastOp>(
      loc_, lane_type(b_.getI64Type(), lanes), b_.create<mlir::arith::AddFOp>(loc_, q, constant(DType::F64, 0x1.8p52 + 1023, 0, lanes)));
  mlir::Value field = b_.create<mlir::arith::ShLIOp>(loc_, biased, constant(DType::I64, 0, 52, lanes));
  return b_.create<mlir::arith::MulFOp>(loc_, u, b_.create<mlir::arith::BitcastOp>(loc_, u.getType(), field));
}

mlir::Value ScalarLowering::scale_by_normal_power_of_two(mlir::Value u, mlir::Value q, int lanes) {
  // 2^q from the bits of q + 1.5 * 2^23 + 127: shifted left by 23 they are q + 127, the exponent
  // field, and the rest is shifted out. (For -q LLVM makes the sum one subtraction.)
  mlir::Value biased = b_.create<mlir::arith::BitcastOp>(
      loc_, lane_type(b_.getI32Type(), lanes), b_.create<mlir::arith::AddFOp>(loc_, q, exp_constant(0x1.8p23 + 127, lanes)));
  mlir::Value field = b_.create<mlir::arith::ShLIOp>(loc_, biased, constant(DType::I32, 0, 23, lanes));
  return b_.create<mlir::arith::MulFOp>(loc_, u, b_.create<mlir::arith::BitcastOp>(loc_, u.getType(), field));
}

mlir::Value ScalarLowering::scale_by_power_of_two(mlir::Value u, mlir::Value q, int lanes) {
  if (has_scalef(lanes)) {
    // vscalefps zmm, 16 lanes at a time (rounding: the current mode).
    mlir::Type chunk_type = lane_type(b_.getF32Type(), 16);
    mlir::Value all_lanes = b_.create<mlir::LLVM::ConstantOp>(loc_, b_.getI16Type(), b_.getI16IntegerAttr(-1));
    mlir::Value current_rounding = b_.create<mlir::LLVM::ConstantOp>(loc_, b_.getI32Type(), b_.getI32IntegerAttr(4));
    return by_chunks(DType::F32, 16, lanes, {u, q}, [&](const std::vector<mlir::Value>& v) {
      return b_.create<mlir::LLVM::CallIntrinsicOp>(loc_, chunk_type, "llvm.x86.avx512.mask.scalef.ps.512",
                                                    mlir::ValueRange{v[0], v[1], v[0], all_lanes, current_rounding})
          .getResult(0);
    });
  }
  // SLEEF's vldexp2: u * 2^h * 2^(q - h) with h = q >> 1. Both factors are normal for |q| <= 150,
  // and u * 2^h (u in [0.7, 1.5)) is exact, so the one rounding is the second product's, as
  // vscalefps rounds. q's integer comes from the bits of q + 1.5 * 2^23, which hold it in their
  // low 22 bits: defined for NaN too (where fptosi is poison), whose lanes u makes NaN anyway.
  // Shifted left by 23 those bits lose everything but q, so the exponent fields need no
  // subtraction of the magic number.
  mlir::Type int_lanes = lane_type(b_.getI32Type(), lanes);
  auto int_constant = [&](int32_t v) { return constant(DType::I32, 0, v, lanes); };
  auto shl = [&](mlir::Value v, int by) { return b_.create<mlir::arith::ShLIOp>(loc_, v, int_constant(by)).getResult(); };
  mlir::Value bits = b_.create<mlir::arith::BitcastOp>(
      loc_, int_lanes, b_.create<mlir::arith::AddFOp>(loc_, q, constant(DType::F32, 0x1.8p23, 0, lanes)));
  mlir::Value half = shl(b_.create<mlir::arith::ShRSIOp>(loc_, bits, int_constant(1)), 23);  // (q >> 1) << 23
  mlir::Value rest = b_.create<mlir::arith::SubIOp>(loc_, shl(bits, 23), half);               // (q - (q >> 1)) << 23
  mlir::Value one = int_constant(127 << 23);
  auto power = [&](mlir::Value field) {
    return b_.create<mlir::arith::BitcastOp>(loc_, u.getType(), b_.create<mlir::arith::AddIOp>(loc_, field, one)).getResult();
  };
  mlir::Value scaled = b_.create<mlir::arith::MulFOp>(loc_, u, power(half));
  return b_.create<mlir::arith::MulFOp>(loc_, scaled, power(rest));
}

namespace {

// Whether v has the same value in every iteration of `loop`: made outside it, or by a pure op of
// such values (a broadcast of a row's sum, `sigma * 2.5066`), looking `depth` ops deep.
bool invariant_in(mlir::Value v, mlir::LoopLikeOpInterface loop, int depth) {
  if (loop.isDefinedOutsideOfLoop(v)) return true;
  mlir::Operation* def = v.getDefiningOp();
  if (!def || depth == 0 || def->getNumRegions() != 0 || !mlir::isPure(def)) return false;
  return std::all_of(def->operand_begin(), def->operand_end(),
                     [&](mlir::Value operand) { return invariant_in(operand, loop, depth - 1); });
}

}  // namespace

// A vector division costs the divider's throughput: vdivps of 16 f32 lanes about 10 cycles on
// the Intel Xeon (bench/README.md), which bound softmax's output pass (e / sum of the row) in
// cache. Where d is the same in every iteration of the loop, z = RN(1/d) is computed once (the
// division is pure: LLVM's LICM hoists it) and each x / d takes a product and two FMAs:
//   q = RN(x z), r = x - q d (exact, by an FMA), RN(q + r z) = RN(x / d)
// (Markstein's correction of a faithful quotient; q = RN(x RN(1/d)) is faithful. Muller, Raina,
// Brisebarre, "Accelerating correctly rounded floating-point division when the divisor is known
// in advance", IEEE TC 53(8), 2004. Checked here on every f32 significand of x for 30,000
// divisors: bench/README.md.) The theorem needs no overflow or underflow: r is exact where the
// exponents of q and d add up to at least e_min + p - 1 (-103 in f32), and q must be normal.
// Vectors with a lane outside the range that ensures both (|x| in [2^-100, 2^100] in f32,
// [2^-900, 2^900] in f64, so zeros, subnormals, infinities and NaN are outside) or a divisor
// outside [2^-24, 2^24] ([2^-53, 2^53]) branch to the division; both paths give the correctly
// rounded quotient, so the result is the same bits either way.
mlir::Value ScalarLowering::divide(mlir::Value x, mlir::Value d, DType t, int lanes) {
  // The innermost loop around the insertion point (none above the function: it is the top).
  mlir::Operation* around = b_.getInsertionBlock()->getParentOp();
  auto loop = mlir::dyn_cast<mlir::LoopLikeOpInterface>(around);
  if (!loop) loop = around->getParentOfType<mlir::LoopLikeOpInterface>();
  bool shared = shared_divisors_ && shared_divisors_->count(d.getAsOpaquePointer()) > 0;
  bool by_reciprocal = !fast_math_ && !libdevice_ && sleef_.fma && lanes > 1 && (t == DType::F32 || t == DType::F64) &&
                       (shared || (reciprocal_division_ && loop && invariant_in(d, loop, 4)));
  if (!by_reciprocal) return b_.create<mlir::arith::DivFOp>(loc_, x, d);
  // A shared divisor's reciprocal, before the branch: computed once, where the first division
  // by it is, and reused by the others (share_divisors).
  mlir::Value z;
  if (shared) {
    mlir::Value& reciprocal = (*reciprocals_)[d.getAsOpaquePointer()];
    if (!reciprocal) reciprocal = b_.create<mlir::arith::DivFOp>(loc_, constant(t, 1, 1, lanes), d);
    z = reciprocal;
  }
  bool f32 = t == DType::F32;
  int bits = f32 ? 32 : 64, mantissa = f32 ? 23 : 52, bias = f32 ? 127 : 1023;
  int x_exponent = f32 ? 100 : 900, d_exponent = f32 ? 24 : 53;
  mlir::Type int_type = lane_type(b_.getIntegerType(bits), lanes);
  auto int_constant = [&](uint64_t v) { return constant(f32 ? DType::I32 : DType::I64, 0, static_cast<int64_t>(v), lanes); };
  // Lanes whose magnitude is outside [2^-e, 2^e], NaN included: one unsigned comparison of the
  // magnitude's bits, offset by 2^-e's.
  auto outside = [&](mlir::Value v, int e) {
    uint64_t low = static_cast<uint64_t>(bias - e) << mantissa, high = static_cast<uint64_t>(bias + e) << mantissa;
    mlir::Value magnitude = b_.create<mlir::arith::AndIOp>(loc_, b_.create<mlir::arith::BitcastOp>(loc_, int_type, v),
                                                           int_constant((uint64_t{1} << (bits - 1)) - 1));
    mlir::Value offset = b_.create<mlir::arith::SubIOp>(loc_, magnitude, int_constant(low));
    mlir::Value bad = cmpi(mlir::arith::CmpIPredicate::ugt, offset, int_constant(high - low));
    return b_.create<mlir::vector::ReductionOp>(loc_, mlir::vector::CombiningKind::OR, bad).getResult();
  };
  // Frozen: a padding lane no one computed must not make the branch undefined behaviour.
  mlir::Value slow = b_.create<mlir::arith::OrIOp>(loc_, outside(d, d_exponent), outside(x, x_exponent));
  slow = b_.create<mlir::LLVM::FreezeOp>(loc_, slow);
  auto branch = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange{x.getType()}, slow, /*withElseRegion=*/true);
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(&branch.getThenRegion().front());
  b_.create<mlir::scf::YieldOp>(loc_, mlir::ValueRange{b_.create<mlir::arith::DivFOp>(loc_, x, d).getResult()});
  b_.setInsertionPointToStart(&branch.getElseRegion().front());
  if (!z) z = b_.create<mlir::arith::DivFOp>(loc_, constant(t, 1, 1, lanes), d);
  mlir::Value q = b_.create<mlir::arith::MulFOp>(loc_, x, z);
  mlir::Value r = b_.create<mlir::math::FmaOp>(loc_, b_.create<mlir::arith::NegFOp>(loc_, q), d, x);
  b_.create<mlir::scf::YieldOp>(loc_, mlir::ValueRange{b_.create<mlir::math::FmaOp>(loc_, r, z, q).getResult()});
  return branch.getResult(0);
}

// f64 sinh of one element beyond |x| = 709 (SLEEF's overflows early; glibc's is 2 ulp off there):
// e^|x| / 2 (e^-|x| is below its last bit), as e^{|x| - 1} (the subtraction exact from |x| = 2)
// times e / 2 as a double-float: libm's exp (0.52 ulp) and one rounding.
mlir::Value ScalarLowering::sinh_near_overflow(mlir::Value x) {
  auto c = [&](double k) { return constant(DType::F64, k, 0, 1); };
  constexpr double kHalfE = 1.3591409142295225, kHalfELow = 7.228234458646251e-17;
  mlir::Value magnitude = b_.create<mlir::math::AbsFOp>(loc_, x);
  mlir::Value power = b_.create<mlir::math::ExpOp>(loc_, b_.create<mlir::arith::SubFOp>(loc_, magnitude, c(1)));
  mlir::Value high = b_.create<mlir::arith::MulFOp>(loc_, power, c(kHalfE));
  mlir::Value error = b_.create<mlir::math::FmaOp>(loc_, power, c(kHalfE), b_.create<mlir::arith::NegFOp>(loc_, high));
  mlir::Value low = b_.create<mlir::math::FmaOp>(loc_, power, c(kHalfELow), error);
  // (An infinite product would make the correction NaN.)
  mlir::Value sum = select(cmpf(mlir::arith::CmpFPredicate::OEQ, high, c(kInf)), high, b_.create<mlir::arith::AddFOp>(loc_, high, low));
  return b_.create<mlir::math::CopySignOp>(loc_, sum, x);
}

mlir::Value ScalarLowering::exp(mlir::Value x, DType t, int lanes) {
  if (mlir::Value v = sleef_op(ScalarOp::Exp, t, {x}, lanes)) return v;
  return b_.create<mlir::math::ExpOp>(loc_, x);
}

mlir::Value ScalarLowering::libdevice_call(std::string_view name, mlir::Value x) {
  mlir::Type t = x.getType();
  if (!t.isF32() && !t.isF64()) throw ir::Error(fail("libdevice call on a vector of lanes"));
  std::string symbol = "__nv_" + std::string(name) + (t.isF32() ? "f" : "");
  mlir::Operation* module = mlir::SymbolTable::getNearestSymbolTable(b_.getInsertionBlock()->getParentOp());
  auto fn = mlir::dyn_cast_or_null<mlir::LLVM::LLVMFuncOp>(mlir::SymbolTable::lookupSymbolIn(module, symbol));
  if (!fn) {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&module->getRegion(0).front());
    fn = b_.create<mlir::LLVM::LLVMFuncOp>(loc_, symbol, mlir::LLVM::LLVMFunctionType::get(t, {t}));
  }
  return b_.create<mlir::LLVM::CallOp>(loc_, fn, mlir::ValueRange{x})->getResult(0);
}

mlir::Value ScalarLowering::sqrt(mlir::Value x) {
  // Not __nv_sqrtf (see the constructor); llvm.sqrt is taken by the NVVM lowering too.
  if (libdevice_ && x.getType().isF32())
    return b_.create<mlir::LLVM::CallIntrinsicOp>(loc_, x.getType(), "llvm.nvvm.sqrt.rn.f", mlir::ValueRange{x}).getResult(0);
  return b_.create<mlir::math::SqrtOp>(loc_, x);
}

}  // namespace fuse::codegen
