// Accuracy of every float op the CPU backend compiles, in ulps of the reference interpreter:
// for each unary float op (and pow, atan2) and each float dtype, a one-op graph is compiled and run on
// 2^20 inputs (2^18 under the sanitizers): dense grids over the op's interesting ranges, random
// bit patterns over the whole finite range, and the special values 0, -0, subnormals, +-inf, NaN
// and the largest finite values; each compared with ir::interpret. NaN must give NaN, infinities
// the same infinity, zeros the same sign; everything else must lie within the op's ulp bound. The
// measured maxima are printed (WARN) and tabled in docs/testing.md.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/cpu_codegen.h"
#include "frontends/compile.h"
#include "tests/random_graph.h"

using namespace fuse;
using ir::ScalarOp;

namespace {

/// Distance in units in the last place between two values of T: the number of representable
/// values between them, +0 and -0 being the same point. NaN is 0 from NaN; NaN against a number
/// is the maximum distance.
template <class T>
uint64_t ulp_distance(T a, T b) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : UINT64_MAX;
  // Bit patterns ordered like the values: negatives mirrored below zero.
  auto key = [](T v) -> __int128 {
    Bits bits = std::bit_cast<Bits>(v);
    Bits magnitude = bits & (std::numeric_limits<Bits>::max() >> 1);
    return bits == magnitude ? static_cast<__int128>(magnitude) : -static_cast<__int128>(magnitude);
  };
  __int128 d = key(a) - key(b);
  return static_cast<uint64_t>(d < 0 ? -d : d);
}

TEST_CASE("ulp_distance: neighbours, signs, zeros, infinities and NaN", "[cpu][accuracy]") {
  CHECK(ulp_distance(1.0f, 1.0f) == 0);
  CHECK(ulp_distance(1.0f, std::nextafter(1.0f, 2.0f)) == 1);
  CHECK(ulp_distance(1.0, std::nextafter(std::nextafter(1.0, 0.0), 0.0)) == 2);
  CHECK(ulp_distance(0.0f, -0.0f) == 0);
  CHECK(ulp_distance(-std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::denorm_min()) == 2);
  CHECK(ulp_distance(-1.0, -std::nextafter(1.0, 2.0)) == 1);
  CHECK(ulp_distance(std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity()) == 1);
  CHECK(ulp_distance(-1.0f, 1.0f) == 2 * uint64_t{0x3f800000});
  CHECK(ulp_distance(-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()) ==
        2 * uint64_t{0x7ff0000000000000});
  CHECK(ulp_distance<double>(NAN, NAN) == 0);
  CHECK(ulp_distance<float>(-NAN, NAN) == 0);
  CHECK(ulp_distance<double>(NAN, 1.0) == UINT64_MAX);
  CHECK(ulp_distance<float>(1.0f, NAN) == UINT64_MAX);
}

/// A uniform grid of `weight` parts of the sweep over [lo, hi].
struct Grid {
  double lo, hi;
  int weight;
};

/// How one op is swept, per dtype.
struct Sweep {
  std::vector<Grid> grids;
  bool random_bits;  // a quarter of the sweep random bit patterns of every finite value
};

/// The values 0, -0, denormals, the smallest and largest normals, infinities, NaN and a few
/// ordinary numbers, each with both signs.
template <class T>
std::vector<T> special_values() {
  using L = std::numeric_limits<T>;
  std::vector<T> v;
  for (T x : {T(0), L::denorm_min(), T(2 * L::denorm_min()), T(L::min() - L::denorm_min()), L::min(),
              L::epsilon(), T(0.5), T(1), T(2), T(3.14159265358979), T(1e10), T(L::max() / 2), L::max(),
              L::infinity(), L::quiet_NaN()}) {
    v.push_back(x);
    v.push_back(-x);
  }
  return v;
}

/// `count` inputs: the special values first and last (so that they go through the SIMD loop and
/// its scalar tail), random finite bit patterns, and the grids.
template <class T>
std::vector<T> sweep_inputs(const Sweep& s, int64_t count, uint64_t seed) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  std::vector<T> specials = special_values<T>();
  std::vector<T> v = specials;
  testing::detail::Rng rng(seed);
  int64_t body = count - 2 * static_cast<int64_t>(specials.size());
  for (int64_t wide = s.random_bits ? body / 4 : 0; wide > 0;) {
    T x = std::bit_cast<T>(static_cast<Bits>(rng.next()));
    if (!std::isfinite(x)) continue;
    v.push_back(x);
    --wide;
  }
  int total_weight = 0;
  for (const Grid& g : s.grids) total_weight += g.weight;
  int64_t grid_points = count - static_cast<int64_t>(v.size() + specials.size());
  for (size_t gi = 0; gi < s.grids.size(); ++gi) {
    const Grid& g = s.grids[gi];
    int64_t n = gi + 1 < s.grids.size() ? grid_points * g.weight / total_weight
                                        : count - static_cast<int64_t>(v.size() + specials.size());
    for (int64_t i = 0; i < n; ++i)
      v.push_back(static_cast<T>(g.lo + (g.hi - g.lo) * static_cast<double>(i) / static_cast<double>(std::max<int64_t>(1, n - 1))));
  }
  v.insert(v.end(), specials.begin(), specials.end());
  return v;
}

/// Where an element lies: its checks are kept apart because the backend's known weaknesses are
/// confined to some of them (see kKnownFindings).
enum Region {
  kNormal,     // inputs and result normal numbers, zeros, infinities or NaN
  kSubnormal,  // an input or the interpreter's result is subnormal (gradual underflow)
  kHuge,       // the periodic ops beyond |x| = 1e5, the range the f32 sin/cos reduction is documented for
  kRegions
};
const char* const kRegionNames[kRegions] = {"normal", "subnormal", "|x| > 1e5"};
constexpr double kDocumentedReductionRange = 1e5;

/// The worst disagreements of compiled code with the interpreter in one region.
struct RegionStats {
  int64_t count = 0;
  uint64_t max_ulp = 0;
  std::string worst;                // "op(x) = expected, got actual" at max_ulp
  int64_t special_mismatches = 0;   // NaN for non-NaN, an infinity for a finite value or the other infinity
  int64_t zero_sign_mismatches = 0; // +0 for -0 or the reverse
  std::string first_special, first_zero_sign;
};

/// The code paths an op is measured on: the SIMD loop on this machine's widest vectors (16 f32 or
/// 8 f64 lanes with AVX-512: SLEEF's avx512f build), the SIMD loop scheduled for AVX2 (8 or 4
/// lanes: SLEEF's avx2 build) and the scalar path (one element at a time: SLEEF's scalar build),
/// which also serves what the SIMD loops cannot vectorize.
enum Path { kVector, kVectorAvx2, kScalar, kPaths };
const char* const kPathNames[kPaths] = {"vector", "avx2 vector", "scalar"};

struct Measured {
  RegionStats regions[kPaths][kRegions];
  int compiled_kernels = 0;
};

std::string show(double v) { return testing::detail::format_double(v); }

template <class T>
bool subnormal(T v) {
  return v != 0 && std::fabs(v) < std::numeric_limits<T>::min();
}

bool periodic(ScalarOp op) { return op == ScalarOp::Sin || op == ScalarOp::Cos || op == ScalarOp::Tan; }

/// Compares compiled results with the interpreter's, element by element; `args[i][j]` is
/// operand i of element j.
template <class T>
void measure(ScalarOp op, const std::vector<std::vector<T>>& args, const T* e, const T* a, int64_t n, RegionStats* regions) {
  for (int64_t i = 0; i < n; ++i) {
    bool tiny = subnormal(e[i]);
    for (const std::vector<T>& arg : args) tiny = tiny || subnormal(arg[i]);
    Region region = tiny ? kSubnormal
                    : periodic(op) && std::fabs(args[0][i]) > kDocumentedReductionRange ? kHuge
                                                                                        : kNormal;
    RegionStats& r = regions[region];
    ++r.count;
    auto text = [&] {
      std::string s = std::string(ir::scalar_op_name(op)) + "(" + show(args[0][i]);
      if (args.size() > 1) s += ", " + show(args[1][i]);
      return s + ") = " + show(e[i]) + ", got " + show(a[i]);
    };
    if (std::isnan(e[i]) != std::isnan(a[i]) || std::isinf(e[i]) != std::isinf(a[i]) ||
        (std::isinf(e[i]) && e[i] != a[i])) {
      if (r.special_mismatches++ == 0) r.first_special = text();
      continue;
    }
    if (e[i] == 0 && a[i] == 0 && std::signbit(e[i]) != std::signbit(a[i])) {
      if (r.zero_sign_mismatches++ == 0) r.first_zero_sign = text();
      continue;
    }
    uint64_t d = ulp_distance(e[i], a[i]);
    if (d > r.max_ulp) {
      r.max_ulp = d;
      r.worst = text();
    }
  }
}

/// Compiles op(x...) for inputs of dtype T and runs it on `args` through the SIMD path (inputs
/// laid out like the output), for this machine and for AVX2, then on their first and last 2^15
/// values through the scalar path (the inputs reach the op through a transpose, so the kernel
/// follows views element by element).
template <class T>
Measured run_op(ScalarOp op, const std::vector<std::vector<T>>& args) {
  DType t = ir::dtype_of<T>();
  Measured m;
  auto run = [&](Path path, const std::vector<std::vector<T>>& values) {
    bool through_view = path == kScalar;
    constexpr int64_t kCols = 64;
    Graph g;
    std::vector<Operand> operands;
    ir::TensorMap inputs;
    int64_t n = static_cast<int64_t>(values[0].size());
    for (size_t i = 0; i < values.size(); ++i) {
      std::string input = "x" + std::to_string(i);
      if (through_view) {
        operands.push_back(transpose(g.input(input, t, {sym("C"), sym("R")})));
        inputs[input] = ir::HostArray::from<T>({kCols, n / kCols}, values[i]);
      } else {
        operands.push_back(g.input(input, t, {sym("N")}));
        inputs[input] = ir::HostArray::from<T>({n}, values[i]);
      }
    }
    Tensor y = fuse::apply(op, operands);
    g.output("y", y.dtype() == DType::Bool ? cast(y, t) : y);  // isnan and co. as 0 and 1
    runtime::Executable exe = path == kVectorAvx2 ? compile(g, Target::cpu("avx2")) : compile(g);
    m.compiled_kernels += exe.compiled_kernel_count();
    ir::HostArray expected = ir::interpret(g.ir(), inputs).at("y");
    ir::HostArray actual = exe.run(inputs).at("y");
    REQUIRE(expected.dtype == t);
    REQUIRE(actual.dtype == t);
    REQUIRE(actual.shape == expected.shape);
    // Through the transpose, output element (r, c) is input element c*R + r.
    std::vector<std::vector<T>> in_output_order = values;
    if (through_view) {
      int64_t rows = n / kCols;
      for (size_t i = 0; i < values.size(); ++i)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < kCols; ++c) in_output_order[i][r * kCols + c] = values[i][c * rows + r];
    }
    measure<T>(op, in_output_order, expected.as<T>(), actual.as<T>(), n, m.regions[path]);
  };
  run(kVector, args);
  run(kVectorAvx2, args);
  std::vector<std::vector<T>> ends;
  for (const std::vector<T>& a : args) {
    std::vector<T> s(a.begin(), a.begin() + (1 << 15));
    s.insert(s.end(), a.end() - (1 << 15), a.end());
    ends.push_back(std::move(s));
  }
  run(kScalar, ends);
  return m;
}

/// Values per sweep: the sanitizer build checks memory, not accuracy, and runs several times slower.
constexpr int64_t kSweepSize = FUSE_SANITIZED ? 1 << 18 : 1 << 20;

/// One op's sweeps and ulp bounds (in every region but the known findings) for f32 and f64.
struct OpAccuracy {
  ScalarOp op;
  Sweep f32, f64;
  uint64_t f32_bound, f64_bound;
};

// The grids cover where each op changes behaviour: overflow and underflow thresholds, poles, 1 for
// the logarithms, the range the f32 sin/cos reduction is documented for; the random bit patterns
// cover every finite value.
//
// Bounds: every op without a rounding of its own beyond IEEE's (neg, abs, sqrt, floor, sign, ...)
// must be bit-exact: 0 ulp; isnan, isinf and isfinite are compared as 0 and 1. The transcendentals
// call SLEEF's u10 functions (codegen/scalar_lowering.cpp: <= 1 ulp of the true value, on each path:
// avx512 and avx2 vectors, scalar), against the interpreter's libm (f64; tanh, sinh and sigmoid
// in long double, glibc's tanh and sinh being up to 2 ulp off) or libm in f64 rounded once (f32):
// 1 ulp apart on every path. sigmoid is fuse's own in f32 and f64 (sigmoid_inline; 1 / (1 +
// exp(-x)) was 2 and 4 ulp off). f32 asin, acos, atan and atan2 are SLEEF's f64 functions rounded
// once: 0. rsqrt is sqrt then a division, two roundings: 1 in f32. The lanes SLEEF gets wrong
// take libm's path (sinh and cosh near overflow, log1p beyond 1e30, pow overflowing early; f64
// sinh there as e^{|x| - 1} e / 2, glibc's being 2 ulp off). Each bound is the measured maximum
// (docs/testing.md). ir/scalar_ops.def's columns also cover the lowering for vectors no SLEEF
// build fits (MLIR's polynomials, e.g. f32 tanh 4 ulp); f32 exp vectors inline SLEEF's expf
// algorithm: 1 ulp on every path.
const std::vector<OpAccuracy>& unary_ops() {
  static const std::vector<OpAccuracy> ops = {
      {ScalarOp::Exp, {{{-104, 89, 4}, {88.5, 88.8, 1}, {-104, -87, 1}, {-1, 1, 1}}, true},
       {{{-746, 710, 4}, {709.5, 709.9, 1}, {-746, -708, 1}, {-1, 1, 1}}, true}, 1, 1},
      {ScalarOp::Exp2, {{{-150, 128.5, 4}, {127.5, 128.5, 1}, {-150, -125, 1}, {-1, 1, 1}}, true},
       {{{-1075, 1024.5, 4}, {1023.5, 1024.5, 1}, {-1075, -1021, 1}, {-1, 1, 1}}, true}, 1, 1},
      {ScalarOp::Log, {{{0, 4, 4}, {0.5, 2, 2}, {0.999, 1.001, 1}}, true},
       {{{0, 4, 4}, {0.5, 2, 2}, {0.999, 1.001, 1}}, true}, 1, 1},
      {ScalarOp::Log2, {{{0, 4, 4}, {0.5, 2, 2}, {0.999, 1.001, 1}}, true},
       {{{0, 4, 4}, {0.5, 2, 2}, {0.999, 1.001, 1}}, true}, 1, 1},
      {ScalarOp::Sqrt, {{{0, 4, 1}}, true}, {{{0, 4, 1}}, true}, 0, 0},
      {ScalarOp::Rsqrt, {{{0, 4, 1}}, true}, {{{0, 4, 1}}, true}, 1, 0},
      {ScalarOp::Sin, {{{-7, 7, 2}, {-1e5, 1e5, 1}}, true}, {{{-7, 7, 2}, {-1e5, 1e5, 1}}, true}, 1, 1},
      {ScalarOp::Cos, {{{-7, 7, 2}, {-1e5, 1e5, 1}}, true}, {{{-7, 7, 2}, {-1e5, 1e5, 1}}, true}, 1, 1},
      {ScalarOp::Tan, {{{-7, 7, 2}, {1.5, 1.6, 1}, {-1e5, 1e5, 1}}, true},
       {{{-7, 7, 2}, {1.5, 1.6, 1}, {-1e5, 1e5, 1}}, true}, 1, 1},
      {ScalarOp::Tanh, {{{-20, 20, 2}, {-1, 1, 1}, {-1e-3, 1e-3, 1}}, true},
       {{{-20, 20, 2}, {-1, 1, 1}, {-1e-3, 1e-3, 1}}, true}, 1, 1},
      {ScalarOp::Sigmoid, {{{-110, 110, 2}, {-20, 20, 2}}, true}, {{{-750, 750, 2}, {-40, 40, 2}}, true}, 1, 1},
      {ScalarOp::Neg, {{{-10, 10, 1}}, true}, {{{-10, 10, 1}}, true}, 0, 0},
      {ScalarOp::Abs, {{{-10, 10, 1}}, true}, {{{-10, 10, 1}}, true}, 0, 0},
      {ScalarOp::Relu, {{{-10, 10, 1}}, true}, {{{-10, 10, 1}}, true}, 0, 0},
      {ScalarOp::Floor, {{{-10, 10, 1}, {-0.5, 0.5, 1}}, true}, {{{-10, 10, 1}, {-0.5, 0.5, 1}}, true}, 0, 0},
      {ScalarOp::Ceil, {{{-10, 10, 1}, {-0.5, 0.5, 1}}, true}, {{{-10, 10, 1}, {-0.5, 0.5, 1}}, true}, 0, 0},
      {ScalarOp::Round, {{{-10, 10, 1}, {-0.5, 0.5, 1}}, true}, {{{-10, 10, 1}, {-0.5, 0.5, 1}}, true}, 0, 0},
      {ScalarOp::Log1p, {{{-1, 4, 4}, {-1e-3, 1e-3, 1}, {-1, -0.99, 1}}, true},
       {{{-1, 4, 4}, {-1e-3, 1e-3, 1}, {-1, -0.99, 1}}, true}, 1, 1},
      {ScalarOp::Expm1, {{{-20, 89, 4}, {-1e-3, 1e-3, 1}, {88, 88.8, 1}}, true},
       {{{-40, 710, 4}, {-1e-3, 1e-3, 1}, {709, 709.8, 1}}, true}, 1, 1},
      {ScalarOp::Erf, {{{-6, 6, 4}, {-1e-3, 1e-3, 1}}, true}, {{{-7, 7, 4}, {-1e-3, 1e-3, 1}}, true}, 1, 1},
      {ScalarOp::Asin, {{{-1, 1, 4}, {0.99, 1, 1}, {-1e-3, 1e-3, 1}}, true},
       {{{-1, 1, 4}, {0.99, 1, 1}, {-1e-3, 1e-3, 1}}, true}, 0, 1},
      {ScalarOp::Acos, {{{-1, 1, 4}, {0.99, 1, 1}, {-1, -0.99, 1}}, true},
       {{{-1, 1, 4}, {0.99, 1, 1}, {-1, -0.99, 1}}, true}, 0, 1},
      {ScalarOp::Atan, {{{-20, 20, 2}, {-1.5, 1.5, 2}, {-1e-3, 1e-3, 1}}, true},
       {{{-20, 20, 2}, {-1.5, 1.5, 2}, {-1e-3, 1e-3, 1}}, true}, 0, 1},
      {ScalarOp::Sinh, {{{-90, 90, 2}, {-1, 1, 2}, {-1e-3, 1e-3, 1}}, true},
       {{{-711, 711, 2}, {-1, 1, 2}, {-1e-3, 1e-3, 1}}, true}, 1, 1},
      {ScalarOp::Cosh, {{{-90, 90, 2}, {-1, 1, 2}, {-1e-3, 1e-3, 1}}, true},
       {{{-711, 711, 2}, {-1, 1, 2}, {-1e-3, 1e-3, 1}}, true}, 1, 1},
      {ScalarOp::Sign, {{{-10, 10, 1}}, true}, {{{-10, 10, 1}}, true}, 0, 0},
      {ScalarOp::IsNan, {{{-10, 10, 1}}, true}, {{{-10, 10, 1}}, true}, 0, 0},
      {ScalarOp::IsInf, {{{-10, 10, 1}}, true}, {{{-10, 10, 1}}, true}, 0, 0},
      {ScalarOp::IsFinite, {{{-10, 10, 1}}, true}, {{{-10, 10, 1}}, true}, 0, 0},
  };
  return ops;
}
/// A binary op's sweeps of its first and second operands (the same for f32 and f64) and bounds.
struct BinaryAccuracy {
  ScalarOp op;
  Sweep x, y;
  double integer_share;  // the share of y rounded to integers (pow of negative x needs them)
  uint64_t f32_bound, f64_bound;
};

// pow: x over grids and every finite value, y over [-8, 8]; atan2(y, x): both operands over the
// four quadrants, near the axes and every finite value. The bounds as for the unary ops.
const std::vector<BinaryAccuracy>& binary_ops() {
  static const std::vector<BinaryAccuracy> ops = {
      {ScalarOp::Pow, {{{0, 4, 2}, {-4, 4, 1}}, true}, {{{-8, 8, 2}, {-2, 2, 1}}, false}, 0.25, 1, 1},
      {ScalarOp::Atan2, {{{-4, 4, 2}, {-1e-3, 1e-3, 1}}, true}, {{{-4, 4, 2}, {-1e-3, 1e-3, 1}}, true}, 0, 0, 1},
  };
  return ops;
}

uint64_t bound_of(ScalarOp op, DType t) {
  for (const BinaryAccuracy& a : binary_ops())
    if (a.op == op) return t == DType::F32 ? a.f32_bound : a.f64_bound;
  for (const OpAccuracy& a : unary_ops())
    if (a.op == op) return t == DType::F32 ? a.f32_bound : a.f64_bound;
  return 0;
}

/// A binary op's operands: x and y over their sweeps, paired at random; plus every pair of
/// special values.
template <class T>
std::vector<std::vector<T>> binary_inputs(const BinaryAccuracy& a) {
  int64_t count = kSweepSize;
  std::vector<T> x = sweep_inputs<T>(a.x, count, 2);
  std::vector<T> y = sweep_inputs<T>(a.y, count, 3);
  testing::detail::Rng rng(4);
  for (int64_t i = count - 1; i > 0; --i) std::swap(y[i], y[rng.next() % static_cast<uint64_t>(i + 1)]);
  for (T& v : y)
    if (rng.chance(a.integer_share)) v = std::round(v);
  std::vector<T> specials = special_values<T>();
  size_t at = 0;
  for (T a : specials)
    for (T b : specials) x[at] = a, y[at] = b, ++at;
  return {x, y};
}

/// The checks made in each region.
enum Check : unsigned { kUlps = 1, kNanInf = 2, kZeroSign = 4 };

/// A bug the sweep found, confined to one op, dtype, region and some of the checks: the main test
/// skips those checks and "known findings" runs them, tagged [!mayfail] until the backend is fixed
/// (then the finding goes).
struct Finding {
  ScalarOp op;
  DType dtype;
  Region region;
  unsigned checks;
  const char* bug;
};
// Empty since the fixes (f32 exp/log/log2/sigmoid with subnormal results or arguments, f32
// sin/cos beyond |x| = 1e5, sin(-0)); a new finding goes here with its reproducer.
const std::vector<Finding> kKnownFindings = {};

/// The finding that covers these checks, if any.
const Finding* known_finding(ScalarOp op, DType t, Region r, Check c) {
  for (const Finding& f : kKnownFindings)
    if (f.op == op && f.dtype == t && f.region == r && (f.checks & c)) return &f;
  return nullptr;
}

/// The checks of one region (those in `checks`): ulps within `bound`, NaN and infinities
/// exactly, zeros' signs.
void check_region(ScalarOp op, DType t, Path path, Region region, const RegionStats& r, uint64_t bound, unsigned checks) {
  INFO(ir::scalar_op_name(op) << " " << ir::dtype_name(t) << ", " << kPathNames[path] << " path, " << kRegionNames[region]
                              << " region, " << r.count << " values");
  INFO("worst: " << r.worst);
  INFO("first NaN/infinity mismatch: " << r.first_special);
  INFO("first zero-sign mismatch: " << r.first_zero_sign);
  if (checks & kUlps) CHECK(r.max_ulp <= bound);
  if (checks & kNanInf) CHECK(r.special_mismatches == 0);
  if (checks & kZeroSign) CHECK(r.zero_sign_mismatches == 0);
}

template <class T>
Measured measure_op(ScalarOp op) {
  for (const BinaryAccuracy& a : binary_ops())
    if (a.op == op) return run_op<T>(op, binary_inputs<T>(a));
  for (const OpAccuracy& a : unary_ops())
    if (a.op == op) return run_op<T>(op, {sweep_inputs<T>(sizeof(T) == 4 ? a.f32 : a.f64, kSweepSize, 1)});
  FAIL("no sweep for " << ir::scalar_op_name(op));
  return {};
}

/// Measures op on dtype T, checks every region but the known findings, and prints the table row.
template <class T>
void check_op(ScalarOp op) {
  DType t = ir::dtype_of<T>();
  uint64_t bound = bound_of(op, t);
  Measured m = measure_op<T>(op);
  std::ostringstream row;
  row << ir::scalar_op_name(op) << " " << ir::dtype_name(t) << " (bound " << bound << " ulp):";
  for (int path = 0; path < kPaths; ++path) {
    row << "\n  " << kPathNames[path] << ":";
    for (int region = 0; region < kRegions; ++region) {
      const RegionStats& r = m.regions[path][region];
      if (r.count == 0) continue;
      row << " " << kRegionNames[region] << " " << r.max_ulp << " ulp";
      if (r.max_ulp) row << " (" << r.worst << ")";
      if (r.special_mismatches) row << " + " << r.special_mismatches << " NaN/inf mismatches";
      if (r.zero_sign_mismatches) row << " + " << r.zero_sign_mismatches << " zero-sign mismatches";
      row << ";";
      unsigned checks = 0;
      for (Check c : {kUlps, kNanInf, kZeroSign}) {
        if (!known_finding(op, t, static_cast<Region>(region), c)) checks |= c;
        else row << " [known finding]";
      }
      check_region(op, t, static_cast<Path>(path), static_cast<Region>(region), r,
                   bound, checks);
    }
  }
  WARN(row.str());
  CHECK(m.compiled_kernels == kPaths);
}

}  // namespace

TEST_CASE("float ops: compiled f32 and f64 within their ulp bounds of the interpreter", "[cpu][accuracy]") {
  for (const OpAccuracy& a : unary_ops()) {
    SECTION(std::string(ir::scalar_op_name(a.op))) {
      check_op<float>(a.op);
      check_op<double>(a.op);
    }
  }
  for (const BinaryAccuracy& a : binary_ops()) {
    SECTION(std::string(ir::scalar_op_name(a.op))) {
      check_op<float>(a.op);
      check_op<double>(a.op);
    }
  }
}

namespace {

/// The LLVM IR the CPU backend emits for `g` (before LLVM's optimizations).
std::string llvm_ir(const Graph& g, const Target& target, bool fast_math = false) {
  CompileOptions options;
  options.pipeline.simplify.fast_math = fast_math;
  return emit(run_passes(g.ir(), target, options), Stage::Llvm);
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

/// How many calls of `symbol` the IR makes (its declaration may stay behind when none does).
int count_calls(const std::string& ir, const std::string& symbol) {
  int n = 0;
  std::istringstream lines(ir);
  for (std::string line; std::getline(lines, line);) n += has(line, "call ") && has(line, "@" + symbol + "(");
  return n;
}

bool calls(const std::string& ir, const std::string& symbol) { return count_calls(ir, symbol) > 0; }

/// SLEEF's vector width suffix for this machine's f32 and f64 vectors ("f16"/"d8" and avx512f
/// with AVX-512, "f8"/"d4" and avx2 without).
std::string sleef_suffix(DType t, const char* accuracy) {
  bool avx512 = Target::host().vector_bits >= 512;
  std::string width = t == DType::F32 ? (avx512 ? "f16" : "f8") : (avx512 ? "d8" : "d4");
  return width + "_" + accuracy + (avx512 ? "avx512f" : "avx2");
}

}  // namespace

TEST_CASE("SLEEF: vector bodies call its vector builds and sin and cos of one value share a sincos", "[cpu][accuracy]") {
  for (DType t : {DType::F32, DType::F64}) {
    INFO(ir::dtype_name(t));
    Graph g;
    Tensor x = g.input("x", t, {sym("N")});
    g.output("y", sin(x) * cos(x) + log(x * x + 1.0) + atan2(x, x + 1.0));
    std::string ir = llvm_ir(g, Target::host());
    CHECK(calls(ir, "Sleef_sincos" + sleef_suffix(t, "u10")));
    CHECK(calls(ir, "Sleef_log" + sleef_suffix(t, "u10")));
    // f32 atan2 is computed in f64 (0 ulp): SLEEF's f64 build.
    CHECK(calls(ir, "Sleef_atan2" + sleef_suffix(DType::F64, "u10")));
    CHECK_FALSE(calls(ir, "Sleef_sin" + sleef_suffix(t, "u10")));  // not a separate sin and cos
    CHECK_FALSE(calls(ir, "Sleef_cos" + sleef_suffix(t, "u10")));
    // AVX2 vectors (8 f32, 4 f64 lanes) take the avx2 build; fast math the u35 functions where
    // SLEEF has them (not exp).
    std::string avx2 = llvm_ir(g, Target::cpu("avx2"));
    CHECK(calls(avx2, std::string("Sleef_sincos") + (t == DType::F32 ? "f8" : "d4") + "_u10avx2"));
    std::string fast = llvm_ir(g, Target::host(), /*fast_math=*/true);
    CHECK(calls(fast, "Sleef_sincos" + sleef_suffix(t, "u35")));
    CHECK(calls(fast, "Sleef_log" + sleef_suffix(t, "u35")));
    if (t == DType::F64) {  // SLEEF has no u35 exp (f64 here: f32 vectors inline its algorithm)
      Graph e;
      e.output("y", exp(e.input("x", t, {sym("N")})));
      CHECK(calls(llvm_ir(e, Target::host(), /*fast_math=*/true), "Sleef_exp" + sleef_suffix(t, "u10")));
    }
    CHECK(calls(fast, "Sleef_atan2" + sleef_suffix(t, "u35")));  // fast math keeps f32 in f32

    // The results, on odd sizes (the masked vector loop's ends) and through a transpose (the
    // scalar build, one element at a time), for the host and AVX2, against the interpreter.
    for (int64_t n : {1, 7, 1023}) {
      INFO("N = " << n);
      std::vector<double> values;
      for (int64_t i = 0; i < n; ++i) values.push_back(-3.0 + 6.0 * static_cast<double>(i) / static_cast<double>(n));
      ir::TensorMap inputs{{"x", ir::HostArray::from<double>({n}, values).cast(t)}};
      ir::HostArray expected = ir::interpret(g.ir(), inputs).at("y");
      for (const Target& target : {Target::host(), Target::cpu("avx2")}) {
        runtime::Executable exe = compile(g, target);
        CHECK(exe.compiled_kernel_count() == 1);
        ir::HostArray actual = exe.run(inputs).at("y");
        for (int64_t i = 0; i < n; ++i) {
          double e = expected.get_f64(i), a = actual.get_f64(i);
          INFO("y[" << i << "] = " << a << ", expected " << e);
          CHECK(std::fabs(a - e) <= (t == DType::F32 ? 1e-5 : 1e-13) * std::max(1.0, std::fabs(e)));
        }
      }
    }
  }
  // One element at a time (a transposed input): SLEEF's scalar build.
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
  g.output("y", exp(transpose(x)));
  CHECK(has(llvm_ir(g, Target::host()), "Sleef_expf"));
}

// f32 sin and cos vectors compute SLEEF's u10 sincos with cheaper sums, inlined, exact in its
// reduction for |x| < 125; a vector with any lane at or beyond, inf or NaN calls SLEEF for those
// lanes. Vectors all in range, and vectors mixing such lanes at every position, against the
// interpreter: 1 ulp, NaN for NaN and the infinities, sin(-0) = -0, on both vector widths.
TEST_CASE("f32 sin and cos vectors: inlined below |x| = 125, SLEEF's call for the rest", "[cpu][accuracy]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  g.output("s", sin(x));
  g.output("c", cos(x));
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> beyond = {125.f, -125.f, std::nextafter(125.f, 0.f), 125.5f, -3000.25f, 1e4f, 98765.4f, 1e30f,
                                     kInf, -kInf, std::numeric_limits<float>::quiet_NaN()};
  for (int64_t n : {1, 7, 1023, 4099}) {
    INFO("N = " << n);
    std::vector<float> values;
    int64_t in_range = n / 2;  // the first half: whole vectors in range (quadrant edges, zeros)
    for (int64_t i = 0; i < in_range; ++i) values.push_back(-124.9f + 249.8f * static_cast<float>(i) / static_cast<float>(in_range));
    if (in_range > 2) values[0] = -0.f, values[1] = 0.f, values[2] = static_cast<float>(std::numbers::pi / 2);
    for (int64_t i = in_range; i < n; ++i)  // the rest: every 7th lane beyond, the others in range
      values.push_back(i % 7 == 0 ? beyond[static_cast<size_t>(i / 7) % beyond.size()] : -3.f + 0.37f * static_cast<float>(i % 17));
    ir::TensorMap inputs{{"x", ir::HostArray::from<float>({n}, values)}};
    ir::TensorMap expected = ir::interpret(g.ir(), inputs);
    for (const Target& target : {Target::host(), Target::cpu("avx2")}) {
      INFO("vector bits " << target.vector_bits);
      runtime::Executable exe = compile(g, target);
      CHECK(exe.compiled_kernel_count() == 1);
      ir::TensorMap actual = exe.run(inputs);
      for (const char* name : {"s", "c"}) {
        const float* e = expected.at(name).as<float>();
        const float* a = actual.at(name).as<float>();
        uint64_t worst = 0;
        int64_t worst_at = 0, zero_signs = 0;
        for (int64_t i = 0; i < n; ++i) {
          if (ulp_distance(a[i], e[i]) > worst) worst = ulp_distance(a[i], e[i]), worst_at = i;
          zero_signs += e[i] == 0 && std::signbit(a[i]) != std::signbit(e[i]);
        }
        INFO(name << "(" << values[worst_at] << ") = " << a[worst_at] << ", interpreter " << e[worst_at]);
        CHECK(worst <= 1);
        CHECK(zero_signs == 0);
      }
    }
  }
  // SLEEF's vector build stays in the IR, for the vectors out of range: one sincos per call site.
  std::string ir = llvm_ir(g, Target::host());
  CHECK(calls(ir, "Sleef_sincos" + sleef_suffix(DType::F32, "u10")));
  CHECK_FALSE(calls(ir, "Sleef_sin" + sleef_suffix(DType::F32, "u10")));
}

namespace {

using UnaryOp = Tensor (*)(const Tensor&);

/// Runs each of `ops` (named by its output) over `values` at every position of a loop, its masked
/// tail and 8-lane vectors (x[N]: N = 7, the values' count, 1023), and element by element (down
/// the columns of a transposed input). Each input must give the same bits everywhere, within 1 ulp
/// of the interpreter and with its zero's sign. Returns the bits seen, by output and input bits.
std::map<std::string, std::map<uint32_t, uint32_t>> same_bits_everywhere(const std::vector<std::pair<std::string, UnaryOp>>& ops,
                                                                         const std::vector<float>& values) {
  std::map<std::string, std::map<uint32_t, uint32_t>> seen;
  auto record = [&](const std::string& name, float x, float y, const std::string& where) {
    auto [it, first] = seen[name].emplace(std::bit_cast<uint32_t>(x), std::bit_cast<uint32_t>(y));
    INFO(where << ": " << name << "(" << x << ") = " << y);
    CHECK(it->second == std::bit_cast<uint32_t>(y));
  };
  const int64_t period = static_cast<int64_t>(values.size());
  Graph flat, walked;
  Tensor x = flat.input("x", DType::F32, {sym("N")});
  Tensor m = walked.input("m", DType::F32, {sym("R"), sym("C")});
  for (const auto& [name, op] : ops) {
    flat.output(name, op(x));
    walked.output(name, op(transpose(m)));
  }
  for (const Target& target : {Target::host(), Target::cpu("avx2")}) {
    runtime::Executable exe = compile(flat, target);
    for (int64_t n : {int64_t{7}, period, int64_t{1023}}) {
      std::vector<float> in;
      for (int64_t i = 0; i < n; ++i) in.push_back(values[static_cast<size_t>((i + n) % period)]);
      ir::TensorMap inputs{{"x", ir::HostArray::from<float>({n}, in)}};
      ir::TensorMap expected = ir::interpret(flat.ir(), inputs), actual = exe.run(inputs);
      for (const auto& [name, op] : ops)
        for (int64_t i = 0; i < n; ++i) {
          float e = expected.at(name).as<float>()[i], a = actual.at(name).as<float>()[i];
          std::string where = "vector bits " + std::to_string(target.vector_bits) + ", N = " + std::to_string(n) + " at " + std::to_string(i);
          record(name, in[static_cast<size_t>(i)], a, where);
          INFO(where << ": " << name << "(" << in[static_cast<size_t>(i)] << ") = " << a << ", interpreter " << e);
          CHECK(ulp_distance(a, e) <= 1);
          if (e == 0) CHECK(std::signbit(a) == std::signbit(e));
        }
    }
  }
  std::vector<float> grid;
  for (int64_t i = 0; i < 3 * period; ++i) grid.push_back(values[static_cast<size_t>(i % period)]);
  ir::TensorMap actual = compile(walked, Target::host()).run({{"m", ir::HostArray::from<float>({3, period}, grid)}});
  for (const auto& [name, op] : ops)
    for (int64_t c = 0; c < period; ++c)
      for (int64_t r = 0; r < 3; ++r)
        record(name, grid[static_cast<size_t>(r * period + c)], actual.at(name).as<float>()[c * 3 + r], "transposed");
  for (const auto& [name, op] : ops) CHECK(seen[name].size() == values.size());
  return seen;
}

// SLEEF's scalar FMA build of sincos (libsleef, linked through fuse_codegen; sleef.h declares it
// only for code compiled with FMA). Sleef_float_2's layout.
struct SleefFloatPair {
  float x, y;
};
extern "C" SleefFloatPair Sleef_sincosf1_u10purecfma(float);

}  // namespace

// Where fuse's f32 sincos and SLEEF's differ by an ulp (one result in 2000), a value's sin and
// cos must not depend on where it sits: in a loop's vectors, the masked vector after the loop (a
// call of the module's one copy), a vector with a lane beyond 125 (SLEEF's call for that lane
// only), one element at a time, 8-lane vectors. Each of `differ` comes out otherwise from
// SLEEF's sincos; the sweep's worst cases (tests/f32_sweep.py, every float in (-125, 125): at
// most 0.888 ulp for sin, 0.886 for cos) are checked against the interpreter too.
TEST_CASE("f32 sin and cos give a value the same bits wherever it sits in a kernel", "[cpu][accuracy]") {
  const std::vector<float> differ = {0x1.92ca4ep-1f, 0x1.93082p-1f,   0x1.9345dap-1f, 0x1.93c1aep-1f, 0x1.943d64p-1f,
                                     0x1.94b908p-1f, 0x1.2da032p+1f, 0x1.2da03ep+1f, 0x1.2e59d8p+1f, 0x1.2e97dap+1f,
                                     0x1.2f13b4p+1f, 0x1.300b02p+1f, -0x1.92ca4ep-1f, -0x1.2da032p+1f};
  std::vector<float> values = differ;
  for (float v : {104.457458f, 0.778917551f, 2.35594869f, 1e4f}) values.push_back(v);  // 1e4: beyond, SLEEF's lane
  auto seen = same_bits_everywhere({{"sin", [](const Tensor& t) { return sin(t); }}, {"cos", [](const Tensor& t) { return cos(t); }}},
                                   values);
  // Each of `differ` is a value where SLEEF's own sincos gives other bits, else the comparisons
  // could not catch a path calling it: SLEEF's scalar FMA build (the vector builds' bits).
  if (__builtin_cpu_supports("fma")) {
    int differing = 0;
    for (float v : differ) {
      SleefFloatPair library = Sleef_sincosf1_u10purecfma(v);
      uint32_t bits = std::bit_cast<uint32_t>(v);
      differing += std::bit_cast<uint32_t>(library.x) != seen["sin"].at(bits) || std::bit_cast<uint32_t>(library.y) != seen["cos"].at(bits);
    }
    CHECK(differing == static_cast<int>(differ.size()));
  }
}

// f32 tanh: fuse's own algorithm (tanh_f32_inline; every float swept by tests/f32_sweep.py: at
// most 0.768 ulp) on every path, so a value's tanh is the same bits in a loop, a masked tail,
// 8-lane vectors and element by element; within 1 ulp of the interpreter at the seams (0.55,
// where the polynomial hands over; 9.5, the clamp; where tanh first rounds to 1), the sweep's
// worst case, subnormals, +-0, +-inf and NaN.
TEST_CASE("f32 tanh within 1 ulp and the same bits wherever a value sits in a kernel", "[cpu][accuracy]") {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  same_bits_everywhere({{"tanh", [](const Tensor& t) { return tanh(t); }}},
                       {0.f, -0.f, 1e-45f, -1e-38f, 1e-4f, 0.1f, 0.5314555168151855f, std::nextafter(0.55f, 0.f), 0.55f,
                        std::nextafter(0.55f, 1.f), -0.55f, 1.f, 2.f, 4.5f, 8.664339742f, 8.7f, 9.f, std::nextafter(9.5f, 0.f), 9.5f,
                        9.75f, -20.f, 88.f, 1e30f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN()});
  // --fast-math keeps MLIR's rational polynomial (4 ulp, about half the instructions): no clamp
  // at 9.5 there.
  Graph g;
  g.output("y", tanh(g.input("x", DType::F32, {sym("N")})));
  CHECK(has(llvm_ir(g, Target::host()), "9.500000e+00"));
  CHECK_FALSE(has(llvm_ir(g, Target::host(), true), "9.500000e+00"));
}

// f32 sigmoid: fuse's own (sigmoid_inline; every float swept by tests/f32_sweep.py: at most 0.841
// ulp) on every path, so a value's sigmoid is the same bits in a loop, a masked tail, 8-lane
// vectors and element by element; within 1 ulp of the interpreter at the seams (0; -87, below
// which lanes take the f64 path; the clamp at |x| = 87; where the result rounds to 1 or 0), the
// worst cases found (-5.2017169, -61.825497), subnormal results, +-0, +-inf and NaN.
TEST_CASE("f32 sigmoid within 1 ulp and the same bits wherever a value sits in a kernel", "[cpu][accuracy]") {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  same_bits_everywhere({{"sigmoid", [](const Tensor& t) { return sigmoid(t); }}},
                       {0.f, -0.f, 1e-45f, -1e-45f, 1e-8f, -0.3653365f, 0.5f, -5.201716899871826f, 16.f, 17.33f, 17.4f,
                        -61.825496673583984f, std::nextafter(-87.f, 0.f), -87.f, std::nextafter(-87.f, -88.f), -87.33f, -88.7f,
                        -100.f, -103.9f, -104.f, -200.f, 87.f, 88.f, 1e30f, -1e30f, kInf, -kInf,
                        std::numeric_limits<float>::quiet_NaN()});
}

// x / d where d is the same in every iteration of the loop (a scalar input, a row's max): the
// loop multiplies by d's reciprocal and corrects the quotient with two FMAs (ScalarLowering::
// divide), and vectors with a lane outside the range where that is exact branch to the division.
// Both give the correctly rounded quotient, so every element must have the interpreter's bits:
// dividends at and beyond the range's edges (2^-100, 2^100 in f32; 2^-900, 2^900 in f64), zeros,
// subnormals, infinities, NaN and random bit patterns; divisors in range, at its edges (2^-24,
// 2^24; 2^-53, 2^53) and beyond them, zeros, infinities, NaN; loops, masked tails, 8 lanes.
namespace {

// divide()'s range check in the IR: the bits of 2^100 less those of 2^-100 (f32), of 2^900 less
// those of 2^-900 (f64).
constexpr const char* kF32ReciprocalCheck = "1677721600";
constexpr const char* kF64ReciprocalCheck = "8106479329266892800";

template <class T>
void check_division_by_invariant() {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  constexpr bool f32 = sizeof(T) == 4;
  constexpr T kInf = std::numeric_limits<T>::infinity(), kNaN = std::numeric_limits<T>::quiet_NaN();
  const T x_edge = std::ldexp(T(1), f32 ? 100 : 900), d_edge = std::ldexp(T(1), f32 ? 24 : 53);
  std::vector<T> values = {T(0), -T(0), std::numeric_limits<T>::denorm_min(), -std::numeric_limits<T>::min(),
                           1 / x_edge, std::nextafter(1 / x_edge, T(0)), -std::nextafter(1 / x_edge, T(1)), x_edge,
                           std::nextafter(x_edge, kInf), -x_edge, T(1), T(3), T(1) / 3, T(-7.5), T(0.1),
                           std::nextafter(T(2), T(0)), std::numeric_limits<T>::max(), kInf, -kInf, kNaN};
  testing::detail::Rng rng(11);
  while (values.size() < 200) {
    T v = std::bit_cast<T>(static_cast<Bits>(rng.next()));
    if (std::isfinite(v)) values.push_back(v);
  }
  const DType t = ir::dtype_of<T>();
  auto same = [](T a, T b) { return std::isnan(a) ? std::isnan(b) : std::bit_cast<Bits>(a) == std::bit_cast<Bits>(b); };
  // y = x / s, s a scalar input.
  Graph by_scalar;
  by_scalar.output("y", by_scalar.input("x", t, {sym("N")}) / by_scalar.input("s", t));
  std::vector<T> divisors = {T(1), T(-1), T(3), T(-3), T(0.1), std::nextafter(T(2), T(0)), 1 / d_edge, d_edge, -d_edge,
                             std::nextafter(1 / d_edge, T(0)), std::nextafter(d_edge, kInf), T(1e-30), T(1e30), T(0), -T(0),
                             std::numeric_limits<T>::denorm_min(), kInf, kNaN};
  for (const Target& target : {Target::host(), Target::cpu("avx2")}) {
    runtime::Executable exe = compile(by_scalar, target);
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{1023}}) {
      std::vector<T> in;
      for (int64_t i = 0; i < n; ++i) in.push_back(values[static_cast<size_t>(i) % values.size()]);
      for (T d : divisors) {
        ir::TensorMap inputs{{"x", ir::HostArray::from<T>({n}, in)}, {"s", ir::HostArray::scalar<T>(d)}};
        ir::TensorMap expected = ir::interpret(by_scalar.ir(), inputs), actual = exe.run(inputs);
        int wrong = 0;
        for (int64_t i = 0; i < n; ++i) {
          T e = expected.at("y").as<T>()[i], a = actual.at("y").as<T>()[i];
          if (same(a, e)) continue;
          if (wrong++ == 0) {
            INFO("vector bits " << target.vector_bits << ", N = " << n << ": " << show(in[static_cast<size_t>(i)]) << " / "
                                << show(d) << " = " << show(a) << ", interpreter " << show(e));
            CHECK(same(a, e));
          }
        }
        CHECK(wrong == 0);
      }
    }
  }
  // y = x / max(x, axis=1): each row's output pass divides by the row's max, one row per rank of
  // divisor: in range (1, 2^24 and just under 2^-24's reciprocal range), beyond it, 0 (0 / 0 and
  // x / 0), NaN.
  Graph by_row;
  Tensor m = by_row.input("m", t, {sym("R"), sym("C")});
  by_row.output("y", m / max(m, 1, true));
  std::vector<T> row_max = {T(1), d_edge, 1 / d_edge, std::nextafter(1 / d_edge, T(0)), d_edge * 2, T(0), kNaN};
  const int64_t columns = 1023, rows = static_cast<int64_t>(row_max.size());
  std::vector<T> grid;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < columns; ++c) {
      T v = std::abs(values[static_cast<size_t>(c) % values.size()]);
      T top = row_max[static_cast<size_t>(r)];
      // Finite values scaled into [0, top]; the row's max placed mid-row.
      v = c == columns / 2 ? top : std::isfinite(v) ? (v > T(1) ? T(1) / v : v) * (std::isnan(top) ? T(1) : top) : T(0);
      if (std::isnan(top) && c == 3) v = kNaN;
      grid.push_back(v);
    }
  ir::TensorMap inputs{{"m", ir::HostArray::from<T>({rows, columns}, grid)}};
  ir::TensorMap expected = ir::interpret(by_row.ir(), inputs), actual = compile(by_row, Target::host()).run(inputs);
  int wrong = 0;
  for (int64_t i = 0; i < rows * columns; ++i) {
    T e = expected.at("y").as<T>()[i], a = actual.at("y").as<T>()[i];
    if (same(a, e)) continue;
    if (wrong++ == 0) {
      INFO("row " << i / columns << ": " << show(grid[static_cast<size_t>(i)]) << " / its max = " << show(a)
                  << ", interpreter " << show(e));
      CHECK(same(a, e));
    }
  }
  CHECK(wrong == 0);
  // The reciprocal form is what the loops use (its range check's constant, 2^100 / 2^-100's bits
  // apart), and only there: not for a divisor that changes along the loop, nor under fast math.
  const std::string span = f32 ? kF32ReciprocalCheck : kF64ReciprocalCheck;
  CHECK(has(llvm_ir(by_scalar, Target::host()), span));
  CHECK(has(llvm_ir(by_row, Target::host()), span));
  CHECK_FALSE(has(llvm_ir(by_scalar, Target::host(), true), span));
  Graph elementwise;
  elementwise.output("y", elementwise.input("x", t, {sym("N")}) / elementwise.input("z", t, {sym("N")}));
  CHECK_FALSE(has(llvm_ir(elementwise, Target::host()), span));
}

}  // namespace

TEST_CASE("division by a divisor the loop does not change is correctly rounded on both of its paths", "[cpu][accuracy]") {
  SECTION("f32") { check_division_by_invariant<float>(); }
  SECTION("f64") { check_division_by_invariant<double>(); }
}

// Short rows specialized to their length (runtime::CpuCode::specialize) of fewer than 8 vectors
// divide by the row's sum directly in their loop over rows: the reciprocal's own division made
// softmax of rows of 64 f32 11% slower in cache. Rows of 8 vectors or more, and rows of a length
// known only at run time, take the reciprocal there (its range check's constant in the IR).
TEST_CASE("softmax's rows of a few vectors divide directly, longer ones by the reciprocal", "[cpu][accuracy]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), sym("M")});
  Tensor e = exp(x - max(x, 1, true));
  g.output("y", e / sum(e, 1, true));
  const ir::Program p = run_passes(g.ir(), Target::host()).result.program;
  const int64_t lanes = Target::host().vector_bits / 32;
  auto llvm_for = [&](int64_t m) {
    codegen::CpuOptions o;
    o.bound_symbols = {{"M", m}};
    return codegen::emit_cpu_llvm(p, o);
  };
  auto reciprocals = [](const std::string& ir) {
    int n = 0;
    for (size_t at = ir.find(kF32ReciprocalCheck); at != std::string::npos; at = ir.find(kF32ReciprocalCheck, at + 1)) ++n;
    return n;
  };
  // (Each site prints the constant once per lane. The one left in a kernel of short rows is
  // outside the loop over rows: the task's last row's output pass, once per task.)
  const int short_rows = reciprocals(llvm_for(4 * lanes)), below = reciprocals(llvm_for(8 * lanes - 1));
  const int long_rows = reciprocals(llvm_for(8 * lanes)), symbolic = reciprocals(codegen::emit_cpu_llvm(p));
  INFO("range checks' constants: " << short_rows << ", " << below << ", " << long_rows << ", " << symbolic);
  CHECK(short_rows <= lanes);
  CHECK(below <= lanes);
  CHECK(long_rows > lanes);
  CHECK(symbolic > lanes);
}

// exp(x) and exp(-x) in one kernel share exp_f32_inline's range reduction and polynomial halves
// (f32 vectors): the second costs a few FMAs and its scaling, and its value is bit for bit what
// exp(-x) alone gives. Written out the way users write sinh, cosh and tanh (hidden_layer.expr).
TEST_CASE("exp of a value and of its negation share one range reduction", "[cpu][accuracy]") {
  Graph paired;
  Tensor x = paired.input("x", DType::F32, {sym("N")});
  paired.output("sinh2", exp(x) - exp(-x));
  paired.output("negated", exp(-x));
  Graph unpaired;  // exps of unrelated arguments, and exp(-x) on its own
  Tensor u = unpaired.input("x", DType::F32, {sym("N")});
  unpaired.output("sinh2", exp(u * 3.0) - exp(u * 2.0));
  unpaired.output("negated", exp(-u));
  // 16 lanes (scaled by vscalefps on an AVX-512 host, by two products elsewhere) and 8 lanes.
  for (auto [target, rounding] : {std::pair{"avx512", "llvm.roundeven.v16f32"}, std::pair{"avx2", "llvm.roundeven.v8f32"}}) {
    INFO(target);
    int rounds = count_calls(llvm_ir(paired, Target::cpu(target)), rounding);
    CHECK(rounds > 0);
    // One range reduction per copy of the loop body for the pair, three for the unrelated exps.
    CHECK(3 * rounds == count_calls(llvm_ir(unpaired, Target::cpu(target)), rounding));
  }
  // Where the code has no vscalefps (this host's ISA decides), the elementwise loop's first pass
  // takes the short form, deferring lanes with |x| > 87 to its rerun (exp_f32_inline).
  for (const char* target : {"avx512", "avx2"}) {
    std::string ir = llvm_ir(paired, Target::cpu(target));
    INFO(target);
    CHECK((ir.find("8.700000e+01") != std::string::npos) == (ir.find("scalef") == std::string::npos));
  }
  std::vector<double> specials{0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 87.0, -87.0, 87.5, -87.5, 88.7, -88.7, 89.0, -89.0,
                               100.0, -100.0, 103.5, -103.5, 104.0, -104.0, 110.0, -110.0, 1e30, -1e30,
                               std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN()};
  auto same = [](float a, float b) { return std::isnan(a) ? std::isnan(b) : std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); };
  // The host's vectors, and both widths on any host: the two forms of the scaling (vscalefps, two
  // products) round alike, so every target gives the same bits.
  std::vector<std::pair<runtime::Executable, runtime::Executable>> builds;
  for (const Target& target : {Target::host(), Target::cpu("avx512"), Target::cpu("avx2")}) {
    builds.emplace_back(compile(paired, target), compile(unpaired, target));
    CHECK(builds.back().first.compiled_kernel_count() == 1);
  }
  // N = 8192: specials only in the first 1024 elements and a ramp over [-87, 87] after them, so
  // that blocks of the loop with no lane to defer keep the short form's results.
  for (int64_t n : {1, 7, 1023, 4099, 8192}) {
    INFO("N = " << n);
    const bool plain_tail = n == 8192;
    const double from = plain_tail ? -87.0 : -12.0;
    std::vector<double> values;
    for (int64_t i = 0; i < n; ++i)
      values.push_back(i % 5 == 4 && (!plain_tail || i < 1024)
                           ? specials[static_cast<size_t>(i / 5) % specials.size()]
                           : from - 2.0 * from * static_cast<double>(i) / static_cast<double>(n));
    ir::TensorMap inputs{{"x", ir::HostArray::from<double>({n}, values).cast(DType::F32)}};
    ir::TensorMap expected = ir::interpret(paired.ir(), inputs);
    std::vector<ir::TensorMap> paired_results;
    for (auto& build : builds) paired_results.push_back(build.first.run(inputs));
    const ir::TensorMap& host = paired_results[0];
    for (size_t b = 0; b < builds.size(); ++b) {
      INFO("build " << b << " (host, avx512, avx2)");
      const ir::TensorMap& actual = paired_results[b];
      ir::TensorMap alone = builds[b].second.run(inputs);
      for (int64_t i = 0; i < n; ++i) {
        float v = inputs.at("x").as<float>()[i];
        float negated = actual.at("negated").as<float>()[i];
        INFO("x = " << v << ": exp(-x) " << negated << ", alone " << alone.at("negated").as<float>()[i] << ", interpreter "
                    << expected.at("negated").as<float>()[i] << ", host " << host.at("negated").as<float>()[i]);
        CHECK(same(negated, alone.at("negated").as<float>()[i]));
        CHECK(same(negated, host.at("negated").as<float>()[i]));
        CHECK(ulp_distance(negated, expected.at("negated").as<float>()[i]) <= 1);
        // exp(x) - exp(-x): each exp within 1 ulp, so within 1 ulp of the larger one's magnitude.
        float e = expected.at("sinh2").as<float>()[i], a = actual.at("sinh2").as<float>()[i];
        INFO("sinh2 " << a << ", interpreter " << e);
        if (std::isnan(e) || std::isinf(e)) CHECK(same(a, e));
        else CHECK(std::fabs(a - e) <= 2.5e-7 * std::max(1.0, std::exp(std::fabs(static_cast<double>(v)))));
      }
    }
  }
}

// (A finding in kKnownFindings gets a [!mayfail] test case here that runs the checks it takes
// out of the test above, so that the bug stays visible until it is fixed.)

TEST_CASE("the op table's ulp column covers every bound the sweep measures", "[cpu][accuracy]") {
  // ir/scalar_ops.def states each op's largest error; the rounding model (interpret_with_bounds)
  // allows it, so a sweep bound above it would be an error the model does not allow for.
  for (int i = 0; i < ir::kScalarOpCount; ++i) {
    ScalarOp op = static_cast<ScalarOp>(i);
    INFO(ir::scalar_op_name(op));
    CHECK(bound_of(op, DType::F32) <= static_cast<uint64_t>(ir::scalar_op_info(op).ulps_f32));
    CHECK(bound_of(op, DType::F64) <= static_cast<uint64_t>(ir::scalar_op_info(op).ulps_f64));
  }
}
