#include "ir/scalar.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "ir/error.h"
#include "ir/host_array.h"

namespace fuse::ir {

const ScalarOpInfo& scalar_op_info(ScalarOp op) {
  static constexpr ScalarOpInfo kInfo[] = {
#define FUSE_SCALAR_OP(Enum, spelling, arity, Category, Typing, cost, gpu_f64, ulps_f32, ulps_f64) \
  {spelling, arity, ScalarOpCategory::Category, ScalarTyping::Typing, cost, gpu_f64, false, ulps_f32, ulps_f64},
#define FUSE_NAMED_SCALAR_OP(Enum, identifier, arity, Category, Typing, cost, gpu_f64, ulps_f32, ulps_f64) \
  {#identifier, arity, ScalarOpCategory::Category, ScalarTyping::Typing, cost, gpu_f64, true, ulps_f32, ulps_f64},
#include "ir/scalar_ops.def"
  };
  return kInfo[static_cast<size_t>(op)];
}

ScalarValue ScalarValue::of(double v, DType t) {
  ScalarValue s;
  if (t == DType::F32) s.f = static_cast<float>(v);
  else if (t == DType::F64) s.f = v;
  else s.i = saturating_to_int(v, t);
  return s;
}

static int64_t wrap_int(int64_t v, DType t) {
  if (t == DType::I32) return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
  if (t == DType::Bool) return v != 0;
  return v;
}

ScalarValue ScalarValue::of_int(int64_t v, DType t) {
  ScalarValue s;
  if (is_float(t)) s.f = t == DType::F32 ? static_cast<float>(v) : static_cast<double>(v);
  else s.i = wrap_int(v, t);
  return s;
}

int ScalarFn::cost() const {
  int total = 0;
  for (const ScalarNode& n : nodes) total += scalar_op_info(n.op).cost;
  return total;
}

bool ScalarFn::operator==(const ScalarFn& other) const {
  if (params != other.params || results != other.results || nodes.size() != other.nodes.size()) return false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ScalarNode &a = nodes[i], &b = other.nodes[i];
    if (a.op != b.op || a.dtype != b.dtype || a.param != b.param || a.weak != b.weak ||
        !(a.value == b.value) || std::memcmp(a.args, b.args, sizeof a.args) != 0)
      return false;
  }
  return true;
}

// ---------------------------------------------------------------- evaluation

static int64_t int_pow(int64_t base, int64_t exp, DType t) {
  if (exp < 0) {  // the integer part of 1 / base^-exp
    if (base == 1) return 1;
    if (base == -1) return (exp % 2) ? -1 : 1;
    return 0;
  }
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  while (exp > 0) {
    if (exp & 1) result *= b;
    b *= b;
    exp >>= 1;
  }
  return wrap_int(static_cast<int64_t>(result), t);
}

static double round_half_even(double v) { return std::nearbyint(v); }  // default FE_TONEAREST

// f(x) in long double for an f64 result, else in double: for tanh, sinh and sigmoid, whose
// double forms are up to 2 (glibc's tanh, sinh) or 3 (1 / (1 + exp(-x))) ulp off, so that the
// reference is the exact value rounded (long double's are within 2^-60 or so of it).
template <class F>
static double exact_for(DType result, double x, F f) {
  return result == DType::F64 ? static_cast<double>(f(static_cast<long double>(x))) : f(x);
}

static ScalarValue eval_float(ScalarOp op, DType result, const ScalarValue* a) {
  double x = a[0].f, y = scalar_op_arity(op) > 1 ? a[1].f : 0.0;
  double r = 0;
  switch (op) {
    case ScalarOp::Neg: r = -x; break;
    case ScalarOp::Abs: r = std::fabs(x); break;
    case ScalarOp::Exp: r = std::exp(x); break;
    case ScalarOp::Exp2: r = std::exp2(x); break;
    case ScalarOp::Log: r = std::log(x); break;
    case ScalarOp::Log2: r = std::log2(x); break;
    case ScalarOp::Sqrt: r = std::sqrt(x); break;
    case ScalarOp::Rsqrt: r = 1.0 / std::sqrt(x); break;
    case ScalarOp::Sin: r = std::sin(x); break;
    case ScalarOp::Cos: r = std::cos(x); break;
    case ScalarOp::Tan: r = std::tan(x); break;
    case ScalarOp::Tanh: r = exact_for(result, x, [](auto v) { return std::tanh(v); }); break;
    case ScalarOp::Sigmoid: r = exact_for(result, x, [](auto v) { return 1 / (1 + std::exp(-v)); }); break;
    case ScalarOp::Relu: r = std::isnan(x) ? x : (x > 0 ? x : 0.0); break;
    case ScalarOp::Floor: r = std::floor(x); break;
    case ScalarOp::Ceil: r = std::ceil(x); break;
    case ScalarOp::Round: r = round_half_even(x); break;
    case ScalarOp::Log1p: r = std::log1p(x); break;
    case ScalarOp::Expm1: r = std::expm1(x); break;
    case ScalarOp::Erf: r = std::erf(x); break;
    case ScalarOp::Asin: r = std::asin(x); break;
    case ScalarOp::Acos: r = std::acos(x); break;
    case ScalarOp::Atan: r = std::atan(x); break;
    case ScalarOp::Sinh: r = exact_for(result, x, [](auto v) { return std::sinh(v); }); break;
    case ScalarOp::Cosh: r = std::cosh(x); break;
    case ScalarOp::Sign: r = x > 0 ? 1.0 : x < 0 ? -1.0 : x == 0 ? 0.0 : x; break;  // NumPy: sign(-0) = +0, NaN stays
    case ScalarOp::Add: r = x + y; break;
    case ScalarOp::Sub: r = x - y; break;
    case ScalarOp::Mul: r = x * y; break;
    case ScalarOp::Div: r = x / y; break;
    case ScalarOp::FloorDiv: r = std::floor(x / y); break;
    case ScalarOp::Mod: {  // Python: the result has the divisor's sign
      r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      break;
    }
    case ScalarOp::Pow: r = std::pow(x, y); break;
    case ScalarOp::Atan2: r = std::atan2(x, y); break;
    case ScalarOp::Minimum: r = (std::isnan(x) || std::isnan(y)) ? NAN : std::fmin(x, y); break;
    case ScalarOp::Maximum: r = (std::isnan(x) || std::isnan(y)) ? NAN : std::fmax(x, y); break;
    default: break;
  }
  return ScalarValue::of(r, result);
}

static ScalarValue eval_int(ScalarOp op, DType t, const ScalarValue* a) {
  int64_t x = a[0].i, y = scalar_op_arity(op) > 1 ? a[1].i : 0;
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  int64_t r = 0;
  switch (op) {
    case ScalarOp::Neg: r = static_cast<int64_t>(0 - u(x)); break;
    case ScalarOp::Abs: r = x < 0 ? static_cast<int64_t>(0 - u(x)) : x; break;
    case ScalarOp::Relu: r = x > 0 ? x : 0; break;
    case ScalarOp::Floor: case ScalarOp::Ceil: case ScalarOp::Round: r = x; break;
    case ScalarOp::Sign: r = (x > 0) - (x < 0); break;
    case ScalarOp::Add: r = static_cast<int64_t>(u(x) + u(y)); break;
    case ScalarOp::Sub: r = static_cast<int64_t>(u(x) - u(y)); break;
    case ScalarOp::Mul: r = static_cast<int64_t>(u(x) * u(y)); break;
    case ScalarOp::FloorDiv:
      if (y == 0) r = 0;
      else if (y == -1) r = static_cast<int64_t>(0 - u(x));
      else {
        r = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --r;
      }
      break;
    case ScalarOp::Mod:
      if (y == 0 || y == -1) r = 0;
      else {
        r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
      }
      break;
    case ScalarOp::Pow: r = int_pow(x, y, t); break;
    case ScalarOp::Minimum: r = std::min(x, y); break;
    case ScalarOp::Maximum: r = std::max(x, y); break;
    default: break;
  }
  return ScalarValue::of_int(r, t);
}

ScalarValue evaluate_scalar_op(ScalarOp op, DType operand, DType result, const ScalarValue* args) {
  if (op == ScalarOp::Select) return args[0].i ? args[1] : args[2];
  if (op == ScalarOp::Cast) {
    if (is_float(operand)) return ScalarValue::of(args[0].f, result);
    return ScalarValue::of_int(result == DType::Bool ? args[0].i != 0 : args[0].i, result);
  }
  if (scalar_op_info(op).typing == ScalarTyping::Compare) {
    bool r = false;
    if (is_float(operand)) {
      double x = args[0].f, y = args[1].f;
      switch (op) {
        case ScalarOp::Eq: r = x == y; break;
        case ScalarOp::Ne: r = x != y; break;
        case ScalarOp::Lt: r = x < y; break;
        case ScalarOp::Le: r = x <= y; break;
        case ScalarOp::Gt: r = x > y; break;
        default: r = x >= y; break;
      }
    } else {
      int64_t x = args[0].i, y = args[1].i;
      switch (op) {
        case ScalarOp::Eq: r = x == y; break;
        case ScalarOp::Ne: r = x != y; break;
        case ScalarOp::Lt: r = x < y; break;
        case ScalarOp::Le: r = x <= y; break;
        case ScalarOp::Gt: r = x > y; break;
        default: r = x >= y; break;
      }
    }
    return ScalarValue::of_int(r, DType::Bool);
  }
  if (op == ScalarOp::IsNan) return ScalarValue::of_int(std::isnan(args[0].f), DType::Bool);
  if (op == ScalarOp::IsInf) return ScalarValue::of_int(std::isinf(args[0].f), DType::Bool);
  if (op == ScalarOp::IsFinite) return ScalarValue::of_int(std::isfinite(args[0].f), DType::Bool);
  if (op == ScalarOp::Not) return ScalarValue::of_int(args[0].i == 0, DType::Bool);
  if (op == ScalarOp::And) return ScalarValue::of_int(args[0].i && args[1].i, DType::Bool);
  if (op == ScalarOp::Or) return ScalarValue::of_int(args[0].i || args[1].i, DType::Bool);
  if (is_float(operand)) return eval_float(op, result, args);
  return eval_int(op, result, args);
}

std::vector<ScalarValue> evaluate_scalar_fn(const ScalarFn& fn, const std::vector<ScalarValue>& params) {
  std::vector<ScalarValue> values(fn.nodes.size());
  for (size_t i = 0; i < fn.nodes.size(); ++i) {
    const ScalarNode& n = fn.nodes[i];
    if (n.op == ScalarOp::Param) { values[i] = params[n.param]; continue; }
    if (n.op == ScalarOp::Literal) { values[i] = n.value; continue; }
    ScalarValue args[3];
    for (int k = 0; k < n.arity(); ++k) args[k] = values[n.args[k]];
    DType operand = fn.nodes[n.args[n.op == ScalarOp::Select ? 1 : 0]].dtype;
    values[i] = evaluate_scalar_op(n.op, operand, n.dtype, args);
  }
  std::vector<ScalarValue> out;
  for (ScalarId r : fn.results) out.push_back(values[r]);
  return out;
}

// ---------------------------------------------------------------- building

static std::string node_key(const ScalarNode& n) {
  std::string k;
  k.reserve(64);
  k += std::to_string(static_cast<int>(n.op)) + ":" + std::to_string(static_cast<int>(n.dtype)) + ":" +
       std::to_string(n.args[0]) + "," + std::to_string(n.args[1]) + "," + std::to_string(n.args[2]) +
       ":" + std::to_string(n.param) + ":" + std::to_string(n.weak);
  uint64_t bits;
  std::memcpy(&bits, &n.value.f, sizeof bits);
  k += ":" + std::to_string(bits) + ":" + std::to_string(n.value.i);
  return k;
}

ScalarId ScalarBuilder::add(ScalarNode node) {
  bool all_literal = node.arity() > 0;
  for (int k = 0; k < node.arity(); ++k)
    all_literal = all_literal && fn_.nodes[node.args[k]].op == ScalarOp::Literal;
  if (all_literal) {
    ScalarValue args[3];
    for (int k = 0; k < node.arity(); ++k) args[k] = fn_.nodes[node.args[k]].value;
    DType operand = fn_.nodes[node.args[node.op == ScalarOp::Select ? 1 : 0]].dtype;
    ScalarNode lit;
    lit.op = ScalarOp::Literal;
    lit.dtype = node.dtype;
    lit.value = evaluate_scalar_op(node.op, operand, node.dtype, args);
    node = lit;
  }
  std::string key = node_key(node);
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  ScalarId id = static_cast<ScalarId>(fn_.nodes.size());
  fn_.nodes.push_back(node);
  memo_.emplace(std::move(key), id);
  return id;
}

ScalarId ScalarBuilder::param(DType t) {
  ScalarNode n;
  n.op = ScalarOp::Param;
  n.dtype = t;
  n.param = static_cast<int>(fn_.params.size());
  fn_.params.push_back(t);
  return add(n);
}

// A weak literal keeps its exact value in both representations; its dtype is the default
// (f32 for floats, i32 for integers, bool) used when nothing else decides.
static ScalarNode weak_literal(double f, int64_t i, DType t) {
  ScalarNode n;
  n.op = ScalarOp::Literal;
  n.dtype = t;
  n.weak = true;
  n.value.f = f;
  n.value.i = i;
  return n;
}

ScalarId ScalarBuilder::literal(double v) {
  return add(weak_literal(v, saturating_to_int(v, DType::I64), DType::F32));
}
// Integers beyond i32 default to i64, so `output y = 10000000000` is exact.
ScalarId ScalarBuilder::literal_int(int64_t v) {
  bool fits_i32 = v >= INT32_MIN && v <= INT32_MAX;
  return add(weak_literal(static_cast<double>(v), v, fits_i32 ? DType::I32 : DType::I64));
}
ScalarId ScalarBuilder::literal_bool(bool v) { return add(weak_literal(v, v, DType::Bool)); }

ScalarId ScalarBuilder::typed_literal(ScalarValue v, DType t) {
  ScalarNode n;
  n.op = ScalarOp::Literal;
  n.dtype = t;
  n.value = v;
  return add(n);
}

ScalarId ScalarBuilder::to_dtype(ScalarId x, DType t) {
  const ScalarNode& n = fn_.nodes[x];
  if (n.weak && n.dtype != DType::F32 && t == DType::I32 &&
      (n.value.i < INT32_MIN || n.value.i > INT32_MAX))  // as NumPy 2: no silent wrap-around
    throw Error("integer literal " + std::to_string(n.value.i) + " does not fit i32");
  if (n.weak) {
    ScalarValue v = is_float(t) ? ScalarValue::of(n.value.f, t)
                    : (n.dtype == DType::F32 ? ScalarValue::of(n.value.f, t) : ScalarValue::of_int(n.value.i, t));
    return typed_literal(v, t);
  }
  if (n.dtype == t) return x;
  ScalarNode c;
  c.op = ScalarOp::Cast;
  c.dtype = t;
  c.args[0] = x;
  return add(c);
}

// What a weak literal of default dtype `weak` becomes next to a typed value of dtype `strong`:
// the typed side decides, except that a float literal makes integers f32 and an integer
// literal makes bool i32 (i64 when the literal needs it).
static DType weak_meets(DType weak, DType strong) {
  if (weak == DType::F32 && !is_float(strong)) return DType::F32;
  if (is_integer(weak) && strong == DType::Bool) return weak;
  return strong;
}

DType ScalarBuilder::common_type(ScalarId a, ScalarId b) const {
  const ScalarNode &na = fn_.nodes[a], &nb = fn_.nodes[b];
  if (na.weak && !nb.weak) return weak_meets(na.dtype, nb.dtype);
  if (nb.weak && !na.weak) return weak_meets(nb.dtype, na.dtype);
  return promote(na.dtype, nb.dtype);
}

// Folds an op whose operands are all weak literals into a weak literal, computed exactly
// (f64 for floats, i64 for integers) so `1 / 3` stays precise until it meets a typed value.
static ScalarNode fold_weak(ScalarOp op, DType result, DType operand, const ScalarNode* const* args, int arity) {
  ScalarValue vals[3];
  DType exact_operand = is_float(operand) ? DType::F64 : (operand == DType::Bool ? DType::Bool : DType::I64);
  DType exact_result = is_float(result) ? DType::F64 : (result == DType::Bool ? DType::Bool : DType::I64);
  for (int k = 0; k < arity; ++k) {
    const ScalarNode& a = *args[k];
    DType t = (op == ScalarOp::Select && k == 0) ? DType::Bool : exact_operand;
    vals[k] = is_float(t) ? ScalarValue::of(a.value.f, t)
                          : ScalarValue::of_int(a.value.i, t);
  }
  ScalarValue r = evaluate_scalar_op(op, exact_operand, exact_result, vals);
  return is_float(result) ? weak_literal(r.f, saturating_to_int(r.f, DType::I64), result)
                          : weak_literal(static_cast<double>(r.i), r.i, result);
}

// The operand and result dtypes of `op` on operands whose common dtype is `t`.
static std::pair<DType, DType> op_dtypes(ScalarOp op, DType t) {
  switch (scalar_op_info(op).typing) {
    case ScalarTyping::Arithmetic: return {arithmetic_type(t), arithmetic_type(t)};
    case ScalarTyping::Float: return {float_type(t), float_type(t)};
    case ScalarTyping::Compare: return {t, DType::Bool};
    case ScalarTyping::Logical: return {DType::Bool, DType::Bool};
    case ScalarTyping::FloatTest: return {float_type(t), DType::Bool};
    default: return {t, t};
  }
}

ScalarId ScalarBuilder::unary(ScalarOp op, ScalarId x) {
  DType in = dtype(x);
  if (op == ScalarOp::Neg && in == DType::Bool)
    throw Error("'neg' is not defined for bool (use 'not')");
  auto [operand, result] = op_dtypes(op, in);
  if (fn_.nodes[x].weak) {
    const ScalarNode* args[] = {&fn_.nodes[x]};
    return add(fold_weak(op, result, operand, args, 1));
  }
  ScalarNode n;
  n.op = op;
  n.dtype = result;
  n.args[0] = to_dtype(x, operand);
  return add(n);
}

ScalarId ScalarBuilder::binary(ScalarOp op, ScalarId a, ScalarId b) {
  auto [operand, result] = op_dtypes(op, common_type(a, b));
  if (fn_.nodes[a].weak && fn_.nodes[b].weak) {
    const ScalarNode* args[] = {&fn_.nodes[a], &fn_.nodes[b]};
    return add(fold_weak(op, result, operand, args, 2));
  }
  ScalarNode n;
  n.op = op;
  n.dtype = result;
  n.args[0] = to_dtype(a, operand);
  n.args[1] = to_dtype(b, operand);
  return add(n);
}

ScalarId ScalarBuilder::select(ScalarId cond, ScalarId a, ScalarId b) {
  DType common = common_type(a, b);
  if (fn_.nodes[cond].weak && fn_.nodes[a].weak && fn_.nodes[b].weak) {
    const ScalarNode* args[] = {&fn_.nodes[cond], &fn_.nodes[a], &fn_.nodes[b]};
    return add(fold_weak(ScalarOp::Select, common, common, args, 3));
  }
  ScalarNode n;
  n.op = ScalarOp::Select;
  n.dtype = common;
  n.args[0] = to_dtype(cond, DType::Bool);
  n.args[1] = to_dtype(a, common);
  n.args[2] = to_dtype(b, common);
  return add(n);
}

ScalarId ScalarBuilder::cast(ScalarId x, DType to) { return to_dtype(x, to); }

std::vector<ScalarId> ScalarBuilder::inline_call(const ScalarFn& fn, const std::vector<ScalarId>& args) {
  if (args.size() != fn.params.size())
    throw Error("function takes " + std::to_string(fn.params.size()) + " arguments but " +
                std::to_string(args.size()) + " were given");
  std::vector<ScalarId> map(fn.nodes.size());
  for (size_t i = 0; i < fn.nodes.size(); ++i) {
    ScalarNode n = fn.nodes[i];
    if (n.op == ScalarOp::Param) { map[i] = to_dtype(args[n.param], n.dtype); continue; }
    for (int k = 0; k < n.arity(); ++k) n.args[k] = map[n.args[k]];
    map[i] = add(n);
  }
  std::vector<ScalarId> out;
  for (ScalarId r : fn.results) out.push_back(map[r]);
  return out;
}

ScalarFn ScalarBuilder::finish(std::vector<ScalarId> results) {
  for (ScalarId& r : results)
    if (fn_.nodes[r].weak) r = to_dtype(r, fn_.nodes[r].dtype);
  // Keep params (their order defines the signature) and what the results reach.
  std::vector<bool> live(fn_.nodes.size(), false);
  for (ScalarId r : results) live[r] = true;
  for (size_t i = fn_.nodes.size(); i-- > 0;) {
    if (fn_.nodes[i].op == ScalarOp::Param) live[i] = true;
    if (!live[i]) continue;
    for (int k = 0; k < fn_.nodes[i].arity(); ++k) live[fn_.nodes[i].args[k]] = true;
  }
  ScalarFn out;
  out.params = fn_.params;
  std::vector<ScalarId> remap(fn_.nodes.size(), -1);
  for (size_t i = 0; i < fn_.nodes.size(); ++i) {
    if (!live[i]) continue;
    ScalarNode n = fn_.nodes[i];
    for (int k = 0; k < n.arity(); ++k) n.args[k] = remap[n.args[k]];
    remap[i] = static_cast<ScalarId>(out.nodes.size());
    out.nodes.push_back(n);
  }
  for (ScalarId r : results) out.results.push_back(remap[r]);
  fn_ = {};
  memo_.clear();
  return out;
}

ScalarFn make_op_fn(ScalarOp op, const std::vector<DType>& params) {
  ScalarBuilder b;
  std::vector<ScalarId> p;
  for (DType t : params) p.push_back(b.param(t));
  ScalarId r;
  if (op == ScalarOp::Select) r = b.select(p.at(0), p.at(1), p.at(2));
  else if (scalar_op_arity(op) == 2) r = b.binary(op, p.at(0), p.at(1));
  else r = b.unary(op, p.at(0));
  return b.finish({r});
}

// ---------------------------------------------------------------- printing

static std::string literal_str(const ScalarNode& n) {
  if (n.dtype == DType::Bool) return n.value.i ? "true" : "false";
  if (is_integer(n.dtype)) return std::to_string(n.value.i);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", n.value.f);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string to_string(const ScalarFn& fn) {
  std::vector<int> uses(fn.nodes.size(), 0);
  for (const ScalarNode& n : fn.nodes)
    for (int k = 0; k < n.arity(); ++k) ++uses[n.args[k]];
  std::vector<std::string> text(fn.nodes.size());
  std::string lets;
  int next_let = 0;
  for (size_t i = 0; i < fn.nodes.size(); ++i) {
    const ScalarNode& n = fn.nodes[i];
    std::string s;
    if (n.op == ScalarOp::Param) s = "p" + std::to_string(n.param);
    else if (n.op == ScalarOp::Literal) s = literal_str(n) + ":" + std::string(dtype_name(n.dtype));
    else if (n.op == ScalarOp::Cast) s = std::string(dtype_name(n.dtype)) + "(" + text[n.args[0]] + ")";
    else {
      s = std::string(scalar_op_name(n.op)) + "(";
      for (int k = 0; k < n.arity(); ++k) s += (k ? ", " : "") + text[n.args[k]];
      s += ")";
    }
    bool shared = uses[i] > 1 && n.op != ScalarOp::Param && n.op != ScalarOp::Literal;
    if (shared) {
      std::string name = "t" + std::to_string(next_let++);
      lets += "let " + name + " = " + s + "; ";
      s = name;
    }
    text[i] = s;
  }
  std::string head = "(";
  for (size_t i = 0; i < fn.params.size(); ++i)
    head += (i ? ", " : "") + std::string("p") + std::to_string(i) + ": " + std::string(dtype_name(fn.params[i]));
  head += ") -> ";
  std::string body;
  if (fn.results.size() == 1) body = text[fn.results[0]];
  else {
    body = "(";
    for (size_t i = 0; i < fn.results.size(); ++i) body += (i ? ", " : "") + text[fn.results[i]];
    body += ")";
  }
  return head + (lets.empty() ? body : "{ " + lets + body + " }");
}

}  // namespace fuse::ir
