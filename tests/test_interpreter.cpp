// The reference interpreter against hand-written C++ loops: the Numba tutorial workloads, every
// reduction, matmul, views, integer and float corner cases, and input binding errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/philox.h"

using namespace fuse::ir;
using Catch::Contains;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

HostArray random_array(DType t, ConcreteShape shape, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  HostArray a(t, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int64_t> integer(-100, 100);
  for (int64_t i = 0; i < a.size(); ++i) {
    if (t == DType::Bool) a.set_i64(i, rng() % 2);
    else if (is_integer(t)) a.set_i64(i, integer(rng));
    else a.set_f64(i, real(rng));
  }
  return a;
}

std::vector<float> floats(const HostArray& a) {
  REQUIRE(a.dtype == DType::F32);
  return std::vector<float>(a.as<float>(), a.as<float>() + a.size());
}

// Element-by-element equality, NaN equal to NaN; reports the first difference.
void check_same(const HostArray& got, const HostArray& want) {
  REQUIRE(dtype_name(got.dtype) == dtype_name(want.dtype));
  REQUIRE(shape_str(got.shape) == shape_str(want.shape));
  for (int64_t i = 0; i < want.size(); ++i) {
    bool same = is_float(want.dtype)
                    ? (std::isnan(want.get_f64(i)) ? std::isnan(got.get_f64(i)) : got.get_f64(i) == want.get_f64(i))
                    : got.get_i64(i) == want.get_i64(i);
    if (!same) {
      INFO("element " << i << ": got " << got.get_f64(i) << ", want " << want.get_f64(i));
      REQUIRE(same);
    }
  }
}

// A ScalarFn over parameters of the given dtypes whose single result `body` builds.
ScalarFn make_fn(const std::vector<DType>& params,
                 const std::function<ScalarId(ScalarBuilder&, const std::vector<ScalarId>&)>& body) {
  ScalarBuilder b;
  std::vector<ScalarId> p;
  for (DType t : params) p.push_back(b.param(t));
  return b.finish({body(b, p)});
}

// Runs a graph with one output "y" and returns it.
HostArray run1(const Graph& g, const TensorMap& inputs) { return interpret(g, inputs).at("y"); }

float round_f32(double v) { return static_cast<float>(v); }

}  // namespace

// ------------------------------------------------------------------------------------- rand

TEST_CASE("philox4x32_10 matches the Random123 known-answer vectors", "[interpreter][rand]") {
  using Words = std::array<uint32_t, 4>;
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) == Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("rand_uniform takes word 0 of Philox at counter i and key seed", "[interpreter][rand]") {
  uint64_t seed = 0x0123456789abcdefULL, i = 0x0000000500000007ULL;
  uint32_t word = philox4x32_10({7, 5, 0, 0}, {0x89abcdef, 0x01234567})[0];
  CHECK(rand_uniform(seed, i) == static_cast<float>(word >> 8) / 16777216.0f);
  CHECK(rand_uniform(0, 0) == static_cast<float>(0x6627e8d5u >> 8) / 16777216.0f);
}

TEST_CASE("rand nodes give rand_uniform at each flat index", "[interpreter][rand]") {
  Graph g;
  add_output(g, "y", add_rand(g, {3, Dim::symbol("N")}, 42));
  add_output(g, "z", add_rand(g, {3, Dim::symbol("N")}, 43));
  add_output(g, "n", add_input(g, "n", DType::I32, {Dim::symbol("N")}));
  TensorMap out = interpret(g, {{"n", HostArray(DType::I32, {5})}});
  const HostArray& y = out.at("y");
  REQUIRE(y.dtype == DType::F32);
  REQUIRE(y.shape == ConcreteShape{3, 5});
  for (int64_t i = 0; i < y.size(); ++i) {
    CHECK(y.as<float>()[i] == rand_uniform(42, i));
    CHECK(y.as<float>()[i] >= 0.0f);
    CHECK(y.as<float>()[i] < 1.0f);
  }
  CHECK(floats(out.at("z")) != floats(y));
}

TEST_CASE("Monte-Carlo pi from two rand nodes over 10^6 samples", "[interpreter][rand][workload]") {
  Graph g;
  NodeId x = add_rand(g, {1000000}, 1);
  NodeId y = add_rand(g, {1000000}, 2);
  ScalarFn inside = make_fn({DType::F32, DType::F32}, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
    ScalarId r2 = b.binary(ScalarOp::Add, b.binary(ScalarOp::Mul, p[0], p[0]), b.binary(ScalarOp::Mul, p[1], p[1]));
    return b.cast(b.binary(ScalarOp::Le, r2, b.literal(1.0)), DType::F32);
  });
  NodeId hits = add_elementwise(g, {x, y}, inside);
  NodeId mean = add_reduce(g, hits, ReduceKind::Mean, kAllAxes, false);
  NodeId four = add_constant(g, HostArray::scalar<float>(4.0f));
  add_output(g, "y", add_scalar_op(g, ScalarOp::Mul, {four, mean}));
  HostArray pi = run1(g, {});
  REQUIRE(pi.shape.empty());
  CHECK(std::fabs(pi.get_f64(0) - M_PI) < 0.01);
  int64_t count = 0;
  for (uint64_t i = 0; i < 1000000; ++i) {
    float a = rand_uniform(1, i), b = rand_uniform(2, i);
    count += round_f32(double(round_f32(double(a) * a)) + double(round_f32(double(b) * b))) <= 1.0f;
  }
  CHECK(pi.as<float>()[0] == round_f32(4.0 * round_f32(count / 1e6)));
}

// ------------------------------------------------------------------------ tutorial workloads

TEST_CASE("hypot: as one fused body and as a chain of nodes", "[interpreter][workload]") {
  for (int64_t n : {0, 1, 7, 1023}) {
    Graph g;
    NodeId a = add_input(g, "a", DType::F32, {Dim::symbol("N")});
    NodeId b = add_input(g, "b", DType::F32, {Dim::symbol("N")});
    ScalarFn body = make_fn({DType::F32, DType::F32}, [](ScalarBuilder& s, const std::vector<ScalarId>& p) {
      return s.unary(ScalarOp::Sqrt,
                     s.binary(ScalarOp::Add, s.binary(ScalarOp::Mul, p[0], p[0]), s.binary(ScalarOp::Mul, p[1], p[1])));
    });
    add_output(g, "fused", add_elementwise(g, {a, b}, body));
    NodeId sum = add_scalar_op(g, ScalarOp::Add, {add_scalar_op(g, ScalarOp::Mul, {a, a}),
                                                  add_scalar_op(g, ScalarOp::Mul, {b, b})});
    add_output(g, "chain", add_scalar_op(g, ScalarOp::Sqrt, {sum}));
    HostArray av = random_array(DType::F32, {n}, 1, -10, 10), bv = random_array(DType::F32, {n}, 2, -10, 10);
    TensorMap out = interpret(g, {{"a", av}, {"b", bv}});
    HostArray want(DType::F32, {n});
    for (int64_t i = 0; i < n; ++i) {
      float x = av.as<float>()[i], y = bv.as<float>()[i];
      want.as<float>()[i] = std::sqrt(x * x + y * y);  // f32 ops: each correctly rounded, like the IR
    }
    check_same(out.at("fused"), want);
    check_same(out.at("chain"), want);
  }
}

TEST_CASE("gaussian_pdf with rank-0 mean and sigma", "[interpreter][workload]") {
  Graph g;
  NodeId x = add_input(g, "x", DType::F32, {Dim::symbol("N")});
  NodeId m = add_input(g, "m", DType::F32, {});
  NodeId s = add_input(g, "s", DType::F32, {});
  ScalarFn pdf = make_fn({DType::F32, DType::F32, DType::F32}, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
    ScalarId z = b.binary(ScalarOp::Div, b.binary(ScalarOp::Sub, p[0], p[1]), p[2]);
    ScalarId e = b.unary(ScalarOp::Exp, b.binary(ScalarOp::Mul, b.literal(-0.5), b.binary(ScalarOp::Pow, z, b.literal(2.0))));
    return b.binary(ScalarOp::Div, e, b.binary(ScalarOp::Mul, p[2], b.literal(2.5066282746)));
  });
  add_output(g, "y", add_elementwise(g, {x, m, s}, pdf));
  HostArray xv = random_array(DType::F32, {1023}, 3, -4, 4);
  HostArray y = run1(g, {{"x", xv}, {"m", HostArray::scalar<float>(0.5f)}, {"s", HostArray::scalar<float>(1.5f)}});
  REQUIRE(y.shape == ConcreteShape{1023});
  for (int64_t i = 0; i < 1023; ++i) {
    double z = (xv.as<float>()[i] - 0.5) / 1.5;
    double want = std::exp(-0.5 * z * z) / (1.5 * std::sqrt(2 * M_PI));
    CHECK(y.as<float>()[i] == Approx(want).epsilon(1e-6));
  }
}

TEST_CASE("polar_distance through a two-valued helper", "[interpreter][workload]") {
  // polar_to_cartesian(rho, theta) = (rho * cos(theta), rho * sin(theta)), inlined twice.
  ScalarFn to_cartesian;
  {
    ScalarBuilder b;
    ScalarId rho = b.param(DType::F32), theta = b.param(DType::F32);
    to_cartesian = b.finish({b.binary(ScalarOp::Mul, rho, b.unary(ScalarOp::Cos, theta)),
                             b.binary(ScalarOp::Mul, rho, b.unary(ScalarOp::Sin, theta))});
  }
  ScalarBuilder b;
  std::vector<ScalarId> p;
  for (int i = 0; i < 4; ++i) p.push_back(b.param(DType::F32));
  std::vector<ScalarId> c1 = b.inline_call(to_cartesian, {p[0], p[1]});
  std::vector<ScalarId> c2 = b.inline_call(to_cartesian, {p[2], p[3]});
  ScalarId dx = b.binary(ScalarOp::Sub, c1[0], c2[0]), dy = b.binary(ScalarOp::Sub, c1[1], c2[1]);
  ScalarFn distance = b.finish({b.unary(ScalarOp::Sqrt, b.binary(ScalarOp::Add, b.binary(ScalarOp::Mul, dx, dx),
                                                                  b.binary(ScalarOp::Mul, dy, dy)))});
  Graph g;
  std::vector<NodeId> ins;
  for (const char* name : {"rho1", "theta1", "rho2", "theta2"})
    ins.push_back(add_input(g, name, DType::F32, {Dim::symbol("N")}));
  add_output(g, "y", add_elementwise(g, ins, distance));
  TensorMap inputs;
  std::vector<const float*> v;
  for (const char* name : {"rho1", "theta1", "rho2", "theta2"}) {
    inputs[name] = random_array(DType::F32, {1023}, static_cast<uint32_t>(inputs.size() + 10), 0, 3);
    v.push_back(inputs[name].as<float>());
  }
  HostArray y = run1(g, inputs);
  for (int64_t i = 0; i < 1023; ++i) {
    double x1 = v[0][i] * std::cos(double(v[1][i])), y1 = v[0][i] * std::sin(double(v[1][i]));
    double x2 = v[2][i] * std::cos(double(v[3][i])), y2 = v[2][i] * std::sin(double(v[3][i]));
    CHECK(y.as<float>()[i] == Approx(std::hypot(x1 - x2, y1 - y2)).margin(1e-5).epsilon(1e-5));
  }
}

TEST_CASE("hidden layer: normalize, weigh, activate", "[interpreter][workload]") {
  // relu(((x - mean) / std) @ w + b)
  Dim batch = Dim::symbol("B");
  Graph g;
  NodeId x = add_input(g, "x", DType::F32, {batch, 7});
  NodeId mean = add_input(g, "mean", DType::F32, {7});
  NodeId std_dev = add_input(g, "std", DType::F32, {7});
  NodeId w = add_input(g, "w", DType::F32, {7, 5});
  NodeId bias = add_input(g, "b", DType::F32, {5});
  NodeId normalized = add_scalar_op(g, ScalarOp::Div, {add_scalar_op(g, ScalarOp::Sub, {x, mean}), std_dev});
  NodeId h = add_scalar_op(g, ScalarOp::Add, {add_matmul(g, normalized, w), bias});
  add_output(g, "y", add_scalar_op(g, ScalarOp::Relu, {h}));
  TensorMap in = {{"x", random_array(DType::F32, {9, 7}, 1)},
                  {"mean", random_array(DType::F32, {7}, 2)},
                  {"std", random_array(DType::F32, {7}, 3, 0.5, 2)},
                  {"w", random_array(DType::F32, {7, 5}, 4)},
                  {"b", random_array(DType::F32, {5}, 5)}};
  HostArray y = run1(g, in);
  HostArray want(DType::F32, {9, 5});
  auto at = [&](const char* name, int64_t i) { return in.at(name).as<float>()[i]; };
  for (int r = 0; r < 9; ++r)
    for (int j = 0; j < 5; ++j) {
      double acc = 0;
      for (int k = 0; k < 7; ++k) acc += double((at("x", r * 7 + k) - at("mean", k)) / at("std", k)) * at("w", k * 5 + j);
      want.as<float>()[r * 5 + j] = std::max(round_f32(acc) + at("b", j), 0.0f);
    }
  check_same(y, want);
}

TEST_CASE("softmax and layernorm over rows", "[interpreter][workload]") {
  for (int64_t cols : {1, 7, 1023}) {
    Graph g;
    NodeId x = add_input(g, "x", DType::F32, {Dim::symbol("R"), Dim::symbol("C")});
    NodeId shifted = add_scalar_op(g, ScalarOp::Sub, {x, add_reduce(g, x, ReduceKind::Max, {1}, true)});
    NodeId e = add_scalar_op(g, ScalarOp::Exp, {shifted});
    add_output(g, "softmax", add_scalar_op(g, ScalarOp::Div, {e, add_reduce(g, e, ReduceKind::Sum, {-1}, true)}));
    NodeId centered = add_scalar_op(g, ScalarOp::Sub, {x, add_reduce(g, x, ReduceKind::Mean, {1}, true)});
    NodeId var = add_reduce(g, add_scalar_op(g, ScalarOp::Mul, {centered, centered}), ReduceKind::Mean, {1}, true);
    ScalarFn scale = make_fn({DType::F32, DType::F32}, [](ScalarBuilder& b, const std::vector<ScalarId>& p) {
      return b.binary(ScalarOp::Mul, p[0], b.unary(ScalarOp::Rsqrt, b.binary(ScalarOp::Add, p[1], b.literal(1e-5))));
    });
    add_output(g, "layernorm", add_elementwise(g, {centered, var}, scale));
    HostArray xv = random_array(DType::F32, {3, cols}, 7, -5, 5);
    TensorMap out = interpret(g, {{"x", xv}});
    const float* xs = xv.as<float>();
    for (int r = 0; r < 3; ++r) {
      const float* row = xs + r * cols;
      double mx = *std::max_element(row, row + cols), sum = 0, mean = 0, var = 0;
      for (int c = 0; c < cols; ++c) sum += std::exp(row[c] - mx), mean += row[c];
      mean /= cols;
      for (int c = 0; c < cols; ++c) var += (row[c] - mean) * (row[c] - mean);
      var /= cols;
      for (int c = 0; c < cols; ++c) {
        CHECK(out.at("softmax").as<float>()[r * cols + c] == Approx(std::exp(row[c] - mx) / sum).margin(1e-6));
        CHECK(out.at("layernorm").as<float>()[r * cols + c] ==
              Approx((row[c] - mean) / std::sqrt(var + 1e-5)).margin(2e-4));
      }
    }
  }
}

// ------------------------------------------------------------------------------------ matmul

namespace {

// np.matmul by definition: every output element computed from its own index.
HostArray reference_matmul(const HostArray& a, const HostArray& b, DType t) {
  ConcreteShape as = a.rank() == 1 ? ConcreteShape{1, a.shape[0]} : a.shape;
  ConcreteShape bs = b.rank() == 1 ? ConcreteShape{b.shape[0], 1} : b.shape;
  int64_t m = as[as.size() - 2], k_size = as.back(), n = bs.back();
  size_t batch_rank = std::max(as.size(), bs.size()) - 2;
  ConcreteShape batch(batch_rank);
  for (size_t i = 0; i < batch_rank; ++i) {
    auto dim = [&](const ConcreteShape& s) {
      size_t lead = batch_rank - (s.size() - 2);
      return i < lead ? int64_t{1} : s[i - lead];
    };
    batch[i] = std::max(dim(as), dim(bs));
  }
  ConcreteShape full = batch;
  full.push_back(m);
  full.push_back(n);
  HostArray out(t, full);
  auto offset = [&](const ConcreteShape& s, const std::vector<int64_t>& idx, int64_t r, int64_t c) {
    int64_t off = 0;
    size_t lead = batch_rank - (s.size() - 2);
    for (size_t i = 0; i + 2 < s.size(); ++i) off = off * s[i] + (s[i] == 1 ? 0 : idx[lead + i]);
    return (off * s[s.size() - 2] + r) * s.back() + c;
  };
  HostArray ac = a.cast(t), bc = b.cast(t);
  for (int64_t flat = 0; flat < out.size(); ++flat) {
    std::vector<int64_t> idx(full.size());
    for (int64_t rest = flat, k = static_cast<int64_t>(full.size()) - 1; k >= 0; --k) {
      idx[k] = rest % full[k];
      rest /= full[k];
    }
    int64_t i = idx[batch_rank], j = idx[batch_rank + 1];
    double f = 0;
    uint64_t u = 0;
    for (int64_t k = 0; k < k_size; ++k) {
      f += ac.get_f64(offset(as, idx, i, k)) * bc.get_f64(offset(bs, idx, k, j));
      u += static_cast<uint64_t>(ac.get_i64(offset(as, idx, i, k))) * static_cast<uint64_t>(bc.get_i64(offset(bs, idx, k, j)));
    }
    if (is_float(t)) out.set_f64(flat, f);
    else out.set_i64(flat, static_cast<int64_t>(u));
  }
  ConcreteShape shape = batch;
  if (a.rank() > 1) shape.push_back(m);
  if (b.rank() > 1) shape.push_back(n);
  out.shape = shape;
  return out;
}

}  // namespace

TEST_CASE("matmul: np.matmul shapes, batch broadcasting, 1-D operands, every dtype", "[interpreter][matmul]") {
  std::vector<std::pair<ConcreteShape, ConcreteShape>> cases = {
      {{3, 4}, {4, 5}},       {{2, 3, 4}, {4, 5}},    {{2, 1, 3, 4}, {5, 4, 2}}, {{4}, {4, 5}},
      {{3, 4}, {4}},          {{4}, {4}},             {{2, 3, 4}, {4}},          {{4}, {2, 4, 5}},
      {{3, 0}, {0, 2}},       {{0, 3}, {3, 2}},       {{1, 1}, {1, 1}},          {{7, 1023}, {1023, 1}},
      {{2, 1, 7, 3}, {1, 4, 3, 2}}};
  std::vector<std::pair<DType, DType>> dtypes = {{DType::F32, DType::F32}, {DType::F64, DType::F64},
                                                 {DType::I32, DType::I32}, {DType::I64, DType::I64},
                                                 {DType::Bool, DType::Bool}, {DType::I32, DType::F32},
                                                 {DType::Bool, DType::F64}, {DType::I32, DType::I64}};
  for (auto [sa, sb] : cases)
    for (auto [ta, tb] : dtypes) {
      INFO(shape_str(sa) << " @ " << shape_str(sb) << ", " << dtype_name(ta) << " @ " << dtype_name(tb));
      Graph g;
      NodeId mm = add_matmul(g, add_input(g, "a", ta, to_shape(sa)), add_input(g, "b", tb, to_shape(sb)));
      add_output(g, "y", mm);
      HostArray av = random_array(ta, sa, 1), bv = random_array(tb, sb, 2);
      HostArray y = run1(g, {{"a", av}, {"b", bv}});
      check_same(y, reference_matmul(av, bv, g.node(mm).dtype));
    }
}

TEST_CASE("matmul: integers wrap, bool counts, f32 sums in f64", "[interpreter][matmul]") {
  Graph g;
  add_output(g, "y", add_matmul(g, add_input(g, "a", DType::I32, {2}), add_input(g, "b", DType::I32, {2})));
  HostArray y = run1(g, {{"a", HostArray::from<int32_t>({2}, {65536, 1})}, {"b", HostArray::from<int32_t>({2}, {65536, 5})}});
  CHECK(y.as<int32_t>()[0] == 5);  // 2^32 + 5 wraps

  Graph gb;
  add_output(gb, "y", add_matmul(gb, add_input(gb, "a", DType::Bool, {1, 3}), add_input(gb, "b", DType::Bool, {3, 1})));
  y = run1(gb, {{"a", HostArray::from<bool>({1, 3}, {true, true, true})}, {"b", HostArray::from<bool>({3, 1}, {true, false, true})}});
  REQUIRE(y.dtype == DType::I32);
  CHECK(y.as<int32_t>()[0] == 2);

  Graph gf;
  add_output(gf, "y", add_matmul(gf, add_input(gf, "a", DType::F32, {3}), add_input(gf, "b", DType::F32, {3})));
  y = run1(gf, {{"a", HostArray::from<float>({3}, {1e8f, 1.0f, -1e8f})}, {"b", HostArray::from<float>({3}, {1, 1, 1})}});
  CHECK(y.as<float>()[0] == 1.0f);  // f32 accumulation would lose the 1
}

// ------------------------------------------------------------------------------------- views

TEST_CASE("views: permute, transpose, reshape, expand_dims, squeeze, broadcast_to", "[interpreter][views]") {
  Graph g;
  NodeId x = add_input(g, "x", DType::I32, {2, 3, 4});
  add_output(g, "permute", add_permute(g, x, {2, 0, 1}));
  add_output(g, "transpose", add_transpose(g, x));
  add_output(g, "reshape", add_reshape(g, x, {4, -1}));
  add_output(g, "squeeze", add_squeeze(g, add_expand_dims(g, x, -1), {}));
  add_output(g, "expand", add_expand_dims(g, x, 1));
  NodeId row = add_input(g, "row", DType::F64, {3, 1});
  add_output(g, "broadcast", add_broadcast_to(g, row, {2, 3, 5}));
  HostArray xv = random_array(DType::I32, {2, 3, 4}, 1), rv = random_array(DType::F64, {3, 1}, 2);
  TensorMap out = interpret(g, {{"x", xv}, {"row", rv}});
  const int32_t* xs = xv.as<int32_t>();
  HostArray permute(DType::I32, {4, 2, 3}), transpose(DType::I32, {4, 3, 2}), broadcast(DType::F64, {2, 3, 5});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        permute.as<int32_t>()[(k * 2 + i) * 3 + j] = xs[(i * 3 + j) * 4 + k];
        transpose.as<int32_t>()[(k * 3 + j) * 2 + i] = xs[(i * 3 + j) * 4 + k];
      }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 5; ++k) broadcast.as<double>()[(i * 3 + j) * 5 + k] = rv.as<double>()[j];
  check_same(out.at("permute"), permute);
  check_same(out.at("transpose"), transpose);
  check_same(out.at("broadcast"), broadcast);
  HostArray same = xv;
  same.shape = {4, 6};
  check_same(out.at("reshape"), same);
  same.shape = {2, 3, 4};
  check_same(out.at("squeeze"), same);
  same.shape = {2, 1, 3, 4};
  check_same(out.at("expand"), same);
}

// -------------------------------------------------------------------------------- reductions

namespace {

// The combiner of the custom reduction under test: acc * 0.5 + x (floats), acc * 3 + x
// (integers, wrapping), acc != x (bool): none commutes, so the fold order shows.
ScalarFn custom_combiner(DType t) {
  return make_fn({t, t}, [t](ScalarBuilder& b, const std::vector<ScalarId>& p) {
    if (t == DType::Bool) return b.binary(ScalarOp::Ne, p[0], p[1]);
    ScalarId scale = is_float(t) ? b.literal(0.5) : b.literal_int(3);
    return b.binary(ScalarOp::Add, b.binary(ScalarOp::Mul, p[0], scale), p[1]);
  });
}

// A rank-3 reduction by hand: walks the input in row-major order and folds each element into
// its output element.
HostArray reference_reduce(const HostArray& in, ReduceKind kind, const std::vector<int>& axes, bool keepdims) {
  bool reduced[3] = {false, false, false};
  for (int a : axes) reduced[a] = true;
  ConcreteShape shape;
  for (int k = 0; k < 3; ++k)
    if (!reduced[k]) shape.push_back(in.shape[k]);
    else if (keepdims) shape.push_back(1);
  DType t = in.dtype;
  DType out_t = kind == ReduceKind::Sum || kind == ReduceKind::Prod ? (t == DType::Bool ? DType::I32 : t)
                : kind == ReduceKind::Mean ? (is_float(t) ? t : DType::F32)
                : kind == ReduceKind::Any || kind == ReduceKind::All ? DType::Bool
                                                                      : t;
  HostArray out(out_t, shape);
  int64_t n = out.size();
  int64_t int_min = t == DType::Bool ? 0 : t == DType::I32 ? INT32_MIN : INT64_MIN;
  int64_t int_max = t == DType::Bool ? 1 : t == DType::I32 ? INT32_MAX : INT64_MAX;
  std::vector<double> f(n, kind == ReduceKind::Prod ? 1.0 : kind == ReduceKind::Max ? -kInf
                           : kind == ReduceKind::Min ? kInf : kind == ReduceKind::Custom ? 1.0 : 0.0);
  std::vector<int64_t> i64(n, kind == ReduceKind::Prod || kind == ReduceKind::Custom || kind == ReduceKind::All ? 1
                              : kind == ReduceKind::Max ? int_min : kind == ReduceKind::Min ? int_max : 0);
  std::vector<int64_t> count(n, 0);
  int64_t s1 = in.shape[1], s2 = in.shape[2];
  for (int64_t flat = 0; flat < in.size(); ++flat) {
    int64_t idx[3] = {flat / (s1 * s2), flat / s2 % s1, flat % s2};
    int64_t o = 0;
    for (int k = 0; k < 3; ++k)
      if (!reduced[k]) o = o * in.shape[k] + idx[k];
    double x = in.get_f64(flat);
    int64_t xi = in.get_i64(flat);
    ++count[o];
    switch (kind) {
      case ReduceKind::Sum: case ReduceKind::Mean: f[o] += x; i64[o] = int64_t(uint64_t(i64[o]) + uint64_t(xi)); break;
      case ReduceKind::Prod: f[o] *= x; i64[o] = int64_t(uint64_t(i64[o]) * uint64_t(xi)); break;
      case ReduceKind::Max: f[o] = std::max(f[o], x); i64[o] = std::max(i64[o], xi); break;
      case ReduceKind::Min: f[o] = std::min(f[o], x); i64[o] = std::min(i64[o], xi); break;
      case ReduceKind::Any: i64[o] = i64[o] || x != 0; break;
      case ReduceKind::All: i64[o] = i64[o] && x != 0; break;
      case ReduceKind::Custom:
        if (t == DType::F32) f[o] = round_f32(double(round_f32(f[o] * 0.5)) + x);
        else if (t == DType::F64) f[o] = f[o] * 0.5 + x;
        else if (t == DType::I32) i64[o] = int32_t(uint32_t(i64[o]) * 3u + uint32_t(xi));
        else if (t == DType::I64) i64[o] = int64_t(uint64_t(i64[o]) * 3u + uint64_t(xi));
        else i64[o] = i64[o] != xi;
        break;
      case ReduceKind::ArgMax:
      case ReduceKind::ArgMin: break;  // not this reference's (tests/test_np_reduce.cpp)
    }
  }
  for (int64_t o = 0; o < n; ++o) {
    if (kind == ReduceKind::Mean) out.set_f64(o, f[o] / count[o]);
    else if (is_float(t) && kind != ReduceKind::Any && kind != ReduceKind::All) out.set_f64(o, f[o]);
    else out.set_i64(o, i64[o]);
  }
  return out;
}

}  // namespace

TEST_CASE("reductions: every kind, axis set, keepdims and dtype of rank-3 tensors", "[interpreter][reduce]") {
  const std::vector<std::vector<int64_t>> axis_sets = {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}};
  const ReduceKind kinds[] = {ReduceKind::Sum, ReduceKind::Prod, ReduceKind::Max, ReduceKind::Min,
                              ReduceKind::Mean, ReduceKind::Any, ReduceKind::All, ReduceKind::Custom};
  const ConcreteShape shapes[] = {{2, 3, 4}, {3, 0, 2}, {1, 1, 1}, {7, 1, 3}, {2, 1023, 3}};
  for (const ConcreteShape& shape : shapes)
    for (DType t : kAllDTypes) {
      HostArray x = random_array(t, shape, 5);
      for (ReduceKind kind : kinds)
        for (const std::vector<int64_t>& axes : axis_sets)
          for (bool keepdims : {false, true}) {
            INFO(reduce_kind_name(kind) << " of " << dtype_name(t) << shape_str(shape) << " over "
                                        << shape_str(ConcreteShape(axes)) << (keepdims ? " keepdims" : ""));
            Graph g;
            NodeId in = add_input(g, "x", t, to_shape(shape));
            NodeId r = kind == ReduceKind::Custom
                           ? add_custom_reduce(g, in, custom_combiner(t), ScalarValue::of_int(1, t), axes, keepdims)
                           : add_reduce(g, in, kind, axes, keepdims);
            add_output(g, "y", r);
            std::vector<int> normalized(axes.begin(), axes.end());
            check_same(run1(g, {{"x", x}}), reference_reduce(x, kind, normalized, keepdims));
          }
    }
}

TEST_CASE("reductions of empty axes give the documented identities", "[interpreter][reduce]") {
  auto reduce_empty = [](DType t, ReduceKind kind) {
    Graph g;
    add_output(g, "y", add_reduce(g, add_input(g, "x", t, {2, 0}), kind, {1}, false));
    HostArray y = run1(g, {{"x", HostArray(t, {2, 0})}});
    REQUIRE(y.shape == ConcreteShape{2});
    return y;
  };
  CHECK(reduce_empty(DType::F32, ReduceKind::Sum).get_f64(1) == 0.0);
  CHECK(reduce_empty(DType::I64, ReduceKind::Prod).get_i64(0) == 1);
  CHECK(reduce_empty(DType::F32, ReduceKind::Max).get_f64(0) == -kInf);
  CHECK(reduce_empty(DType::F64, ReduceKind::Min).get_f64(0) == kInf);
  CHECK(reduce_empty(DType::I32, ReduceKind::Max).get_i64(0) == INT32_MIN);
  CHECK(reduce_empty(DType::I64, ReduceKind::Min).get_i64(0) == INT64_MAX);
  CHECK(std::isnan(reduce_empty(DType::F32, ReduceKind::Mean).get_f64(0)));
  CHECK(std::isnan(reduce_empty(DType::I32, ReduceKind::Mean).get_f64(0)));
  CHECK(reduce_empty(DType::Bool, ReduceKind::Any).get_i64(0) == 0);
  CHECK(reduce_empty(DType::Bool, ReduceKind::All).get_i64(0) == 1);
}

TEST_CASE("NaN propagates through max, min, maximum and minimum", "[interpreter][nan]") {
  Graph g;
  NodeId x = add_input(g, "x", DType::F32, {2, 3});
  NodeId z = add_input(g, "z", DType::F32, {2, 3});
  add_output(g, "max", add_reduce(g, x, ReduceKind::Max, {1}, false));
  add_output(g, "min", add_reduce(g, x, ReduceKind::Min, {1}, false));
  add_output(g, "maximum", add_scalar_op(g, ScalarOp::Maximum, {x, z}));
  add_output(g, "minimum", add_scalar_op(g, ScalarOp::Minimum, {z, x}));
  add_output(g, "any", add_reduce(g, x, ReduceKind::Any, {1}, false));
  float nan = std::numeric_limits<float>::quiet_NaN();
  TensorMap out = interpret(g, {{"x", HostArray::from<float>({2, 3}, {1, nan, 3, -1, -2, -3})},
                                {"z", HostArray::from<float>({2, 3}, {0, 0, 0, 0, 0, nan})}});
  CHECK(std::isnan(out.at("max").as<float>()[0]));
  CHECK(out.at("max").as<float>()[1] == -1.0f);
  CHECK(std::isnan(out.at("min").as<float>()[0]));
  CHECK(out.at("min").as<float>()[1] == -3.0f);
  std::vector<float> maximum = floats(out.at("maximum")), minimum = floats(out.at("minimum"));
  for (int i : {1, 5}) CHECK((std::isnan(maximum[i]) && std::isnan(minimum[i])));
  CHECK(maximum[0] == 1.0f);
  CHECK(minimum[4] == -2.0f);
  CHECK(out.at("any").get_i64(0) == 1);  // NaN counts as true
}

TEST_CASE("log1p expm1 erf asin acos atan sinh cosh atan2 sign isnan isinf isfinite: NumPy's values", "[interpreter][math]") {
  const std::vector<double> xs = {0.0, -0.0, 1e-20, -1.0, 0.5, -0.75, 2.0, 30.0, -kInf, kInf, kNaN};
  const std::vector<double> ys = {1.0, -1.0, -1.0, 0.0, -0.0, -kInf, kInf, 2.0, -3.0, kInf, 1.0};
  const int64_t n = static_cast<int64_t>(xs.size());
  Graph g;
  NodeId x = add_input(g, "x", DType::F64, {n});
  NodeId y = add_input(g, "y", DType::F64, {n});
  struct Unary {
    ScalarOp op;
    double (*f)(double);
  };
  const Unary unary[] = {{ScalarOp::Log1p, [](double v) { return std::log1p(v); }},
                         {ScalarOp::Expm1, [](double v) { return std::expm1(v); }},
                         {ScalarOp::Erf, [](double v) { return std::erf(v); }},
                         {ScalarOp::Asin, [](double v) { return std::asin(v); }},
                         {ScalarOp::Acos, [](double v) { return std::acos(v); }},
                         {ScalarOp::Atan, [](double v) { return std::atan(v); }},
                         // Long double's, rounded: glibc's sinh(2) is 3.626860407847019, one ulp
                         // above the exact 3.62686040784701876...
                         {ScalarOp::Sinh, [](double v) { return static_cast<double>(std::sinh(static_cast<long double>(v))); }},
                         {ScalarOp::Cosh, [](double v) { return std::cosh(v); }}};
  for (auto [op, f] : unary) add_output(g, std::string(scalar_op_name(op)), add_scalar_op(g, op, {x}));
  add_output(g, "atan2", add_scalar_op(g, ScalarOp::Atan2, {y, x}));
  add_output(g, "sign", add_scalar_op(g, ScalarOp::Sign, {x}));
  for (ScalarOp op : {ScalarOp::IsNan, ScalarOp::IsInf, ScalarOp::IsFinite})
    add_output(g, std::string(scalar_op_name(op)), add_scalar_op(g, op, {x}));
  TensorMap out = interpret(g, {{"x", HostArray::from<double>({n}, xs)}, {"y", HostArray::from<double>({n}, ys)}});
  auto column = [&](auto f) {
    HostArray a(DType::F64, {n});
    for (int64_t i = 0; i < n; ++i) a.set_f64(i, f(i));
    return a;
  };
  for (auto [op, f] : unary) {
    INFO(scalar_op_name(op));
    check_same(out.at(std::string(scalar_op_name(op))), column([&](int64_t i) { return f(xs[i]); }));
  }
  check_same(out.at("atan2"), column([&](int64_t i) { return std::atan2(ys[i], xs[i]); }));
  // sign: -1, 0 or 1; +0 for both zeros (NumPy), NaN for NaN.
  check_same(out.at("sign"), column([&](int64_t i) { return std::isnan(xs[i]) ? kNaN : (xs[i] > 0) - (xs[i] < 0) + 0.0; }));
  CHECK_FALSE(std::signbit(out.at("sign").get_f64(1)));
  for (int64_t i = 0; i < n; ++i) {
    INFO("x = " << xs[i]);
    CHECK(out.at("isnan").get_i64(i) == std::isnan(xs[i]));
    CHECK(out.at("isinf").get_i64(i) == std::isinf(xs[i]));
    CHECK(out.at("isfinite").get_i64(i) == std::isfinite(xs[i]));
  }
  CHECK(out.at("isnan").dtype == DType::Bool);
}

TEST_CASE("the new math ops' dtypes: f32 rounds the f64 result once, integers compute as floats, sign keeps ints", "[interpreter][math]") {
  Graph g;
  NodeId f = add_input(g, "f", DType::F32, {3});
  NodeId i = add_input(g, "i", DType::I32, {3});
  NodeId b = add_input(g, "b", DType::Bool, {3});
  add_output(g, "erf", add_scalar_op(g, ScalarOp::Erf, {f}));
  add_output(g, "atan2", add_scalar_op(g, ScalarOp::Atan2, {i, i}));
  add_output(g, "sign_i", add_scalar_op(g, ScalarOp::Sign, {i}));
  add_output(g, "sign_b", add_scalar_op(g, ScalarOp::Sign, {b}));
  add_output(g, "isnan_i", add_scalar_op(g, ScalarOp::IsNan, {i}));
  add_output(g, "isinf_f", add_scalar_op(g, ScalarOp::IsInf, {f}));
  TensorMap out = interpret(g, {{"f", HostArray::from<float>({3}, {0.3f, -2.0f, std::numeric_limits<float>::infinity()})},
                                {"i", HostArray::from<int32_t>({3}, {-5, 0, 7})},
                                {"b", HostArray::from<bool>({3}, {true, false, true})}});
  CHECK(floats(out.at("erf")) == std::vector<float>{round_f32(std::erf(double{0.3f})), round_f32(std::erf(-2.0)), 1.0f});
  CHECK(floats(out.at("atan2")) == std::vector<float>{round_f32(std::atan2(-5.0, -5.0)), 0.0f, round_f32(std::atan2(7.0, 7.0))});
  check_same(out.at("sign_i"), HostArray::from<int32_t>({3}, {-1, 0, 1}));
  check_same(out.at("sign_b"), HostArray::from<int32_t>({3}, {1, 0, 1}));
  check_same(out.at("isnan_i"), HostArray::from<bool>({3}, {false, false, false}));
  check_same(out.at("isinf_f"), HostArray::from<bool>({3}, {false, false, true}));
}

// ------------------------------------------------------------------ integer and dtype rules

TEST_CASE("integer arithmetic wraps; // and % are Python's, and 0 for a zero divisor", "[interpreter][int]") {
  Graph g;
  NodeId a = add_input(g, "a", DType::I32, {Dim::symbol("N")});
  NodeId b = add_input(g, "b", DType::I32, {Dim::symbol("N")});
  for (ScalarOp op : {ScalarOp::Add, ScalarOp::Sub, ScalarOp::Mul, ScalarOp::FloorDiv, ScalarOp::Mod})
    add_output(g, std::string(scalar_op_name(op)), add_scalar_op(g, op, {a, b}));
  std::vector<int32_t> av = {7, -7, 7, -7, 7, 0, INT32_MAX, INT32_MIN, INT32_MIN, 65536};
  std::vector<int32_t> bv = {2, 2, -2, -2, 0, 0, 1, 1, -1, 65536};
  TensorMap out = interpret(g, {{"a", HostArray::from<int32_t>({10}, av)}, {"b", HostArray::from<int32_t>({10}, bv)}});
  auto col = [&](const char* name) {
    const HostArray& h = out.at(name);
    REQUIRE(h.dtype == DType::I32);
    return std::vector<int32_t>(h.as<int32_t>(), h.as<int32_t>() + h.size());
  };
  CHECK(col("floordiv") == std::vector<int32_t>{3, -4, -4, 3, 0, 0, INT32_MAX, INT32_MIN, INT32_MIN, 1});
  CHECK(col("mod") == std::vector<int32_t>{1, 1, -1, -1, 0, 0, 0, 0, 0, 0});
  CHECK(col("add")[6] == INT32_MIN);
  CHECK(col("sub")[7] == INT32_MAX);
  CHECK(col("mul")[9] == 0);

  Graph g64;
  NodeId x = add_input(g64, "x", DType::I64, {2});
  add_output(g64, "y", add_scalar_op(g64, ScalarOp::Mul, {x, x}));
  HostArray y = run1(g64, {{"x", HostArray::from<int64_t>({2}, {int64_t{1} << 32, -(int64_t{1} << 31)})}});
  CHECK(y.as<int64_t>()[0] == 0);
  CHECK(y.as<int64_t>()[1] == int64_t{1} << 62);

  Graph gf;
  NodeId p = add_input(gf, "p", DType::F64, {2});
  NodeId q = add_input(gf, "q", DType::F64, {2});
  add_output(gf, "div", add_scalar_op(gf, ScalarOp::FloorDiv, {p, q}));
  add_output(gf, "mod", add_scalar_op(gf, ScalarOp::Mod, {p, q}));
  out = interpret(gf, {{"p", HostArray::from<double>({2}, {-7.5, 7.5})}, {"q", HostArray::from<double>({2}, {2, -2})}});
  CHECK(out.at("div").to_doubles() == std::vector<double>{-4, -4});
  CHECK(out.at("mod").to_doubles() == std::vector<double>{0.5, -0.5});
}

TEST_CASE("weak literals keep the tensor's dtype; true division of integers gives f32", "[interpreter][dtype]") {
  Graph g;
  NodeId i = add_input(g, "i", DType::I32, {2});
  NodeId f = add_input(g, "f", DType::F32, {2});
  NodeId flag = add_input(g, "flag", DType::Bool, {2});
  auto with_literal = [&](NodeId x, ScalarOp op, bool float_literal, double v) {
    DType t = g.node(x).dtype;
    return add_elementwise(g, {x}, make_fn({t}, [&](ScalarBuilder& b, const std::vector<ScalarId>& p) {
      return b.binary(op, p[0], float_literal ? b.literal(v) : b.literal_int(static_cast<int64_t>(v)));
    }));
  };
  add_output(g, "i_plus_1", with_literal(i, ScalarOp::Add, false, 1));
  add_output(g, "f_times_2", with_literal(f, ScalarOp::Mul, true, 2.0));
  add_output(g, "f_times_third", with_literal(f, ScalarOp::Mul, true, 1.0 / 3.0));
  add_output(g, "i_plus_half", with_literal(i, ScalarOp::Add, true, 0.5));
  add_output(g, "flag_plus_1", with_literal(flag, ScalarOp::Add, false, 1));
  add_output(g, "i_div_i", add_scalar_op(g, ScalarOp::Div, {i, i}));
  TensorMap out = interpret(g, {{"i", HostArray::from<int32_t>({2}, {INT32_MAX, 3})},
                                {"f", HostArray::from<float>({2}, {1.5f, 0.1f})},
                                {"flag", HostArray::from<bool>({2}, {true, false})}});
  REQUIRE(out.at("i_plus_1").dtype == DType::I32);
  CHECK(out.at("i_plus_1").as<int32_t>()[0] == INT32_MIN);  // i32 arithmetic: wraps
  REQUIRE(out.at("f_times_2").dtype == DType::F32);
  CHECK(floats(out.at("f_times_2")) == std::vector<float>{3.0f, 0.2f});
  CHECK(out.at("f_times_third").as<float>()[1] == round_f32(double(0.1f) * double(round_f32(1.0 / 3.0))));
  REQUIRE(out.at("i_plus_half").dtype == DType::F32);
  CHECK(out.at("i_plus_half").as<float>()[1] == 3.5f);
  REQUIRE(out.at("flag_plus_1").dtype == DType::I32);
  CHECK(out.at("flag_plus_1").to_doubles() == std::vector<double>{2, 1});
  REQUIRE(out.at("i_div_i").dtype == DType::F32);
  CHECK(floats(out.at("i_div_i")) == std::vector<float>{1.0f, 1.0f});
}

TEST_CASE("casts: float to int truncates and saturates, NaN gives 0; ints wrap; to bool is x != 0", "[interpreter][dtype]") {
  Graph g;
  NodeId x = add_input(g, "x", DType::F32, {8});
  add_output(g, "i32", add_cast(g, x, DType::I32));
  add_output(g, "i64", add_cast(g, x, DType::I64));
  add_output(g, "bool", add_cast(g, x, DType::Bool));
  NodeId big = add_input(g, "big", DType::I64, {3});
  add_output(g, "narrow", add_cast(g, big, DType::I32));
  add_output(g, "to_f32", add_cast(g, big, DType::F32));
  float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  TensorMap out = interpret(g, {{"x", HostArray::from<float>({8}, {3e9f, -3e9f, nan, inf, -inf, 2.7f, -2.7f, 0.0f})},
                                {"big", HostArray::from<int64_t>({3}, {(int64_t{1} << 32) + 5, -1, 16777217})}});
  CHECK(out.at("i32").to_doubles() == std::vector<double>{INT32_MAX, INT32_MIN, 0, INT32_MAX, INT32_MIN, 2, -2, 0});
  const int64_t* i64 = out.at("i64").as<int64_t>();
  CHECK(std::vector<int64_t>(i64, i64 + 8) ==
        std::vector<int64_t>{3000000000, -3000000000, 0, INT64_MAX, INT64_MIN, 2, -2, 0});
  CHECK(out.at("bool").to_doubles() == std::vector<double>{1, 1, 1, 1, 1, 1, 1, 0});
  CHECK(out.at("narrow").to_doubles() == std::vector<double>{5, -1, 16777217});
  CHECK(floats(out.at("to_f32"))[2] == 16777216.0f);
}

// --------------------------------------------------------------------- graphs and bindings

TEST_CASE("rank-0 and empty tensors, constants, arange, shared and dead nodes", "[interpreter]") {
  Graph g;
  NodeId s = add_input(g, "s", DType::F64, {});
  NodeId e = add_input(g, "e", DType::I32, {Dim::symbol("N"), 3});
  NodeId c = add_constant(g, HostArray::from<double>({2}, {1.5, -2}));
  add_output(g, "scalar", add_scalar_op(g, ScalarOp::Neg, {s}));
  add_output(g, "broadcast", add_scalar_op(g, ScalarOp::Add, {s, c}));
  add_output(g, "empty", add_scalar_op(g, ScalarOp::Add, {e, e}));
  add_output(g, "empty_sum", add_reduce(g, e, ReduceKind::Sum, {0}, false));
  add_output(g, "arange", add_arange(g, Dim::symbol("N") * Dim(2)));
  add_output(g, "arange4", add_arange(g, 4));
  add_output(g, "input", s);
  add_output(g, "input_again", s);
  add_rand(g, {Dim::symbol("Unbound")}, 1);  // dead: never evaluated
  TensorMap out = interpret(g, {{"s", HostArray::scalar<double>(2.5)}, {"e", HostArray(DType::I32, {0, 3})}});
  CHECK(out.size() == 8);
  CHECK(out.at("scalar").shape.empty());
  CHECK(out.at("scalar").to_doubles() == std::vector<double>{-2.5});
  CHECK(out.at("broadcast").to_doubles() == std::vector<double>{4.0, 0.5});
  CHECK(out.at("empty").shape == ConcreteShape{0, 3});
  CHECK(out.at("empty_sum").to_doubles() == std::vector<double>{0, 0, 0});
  CHECK(out.at("arange").shape == ConcreteShape{0});
  REQUIRE(out.at("arange4").dtype == DType::I64);
  CHECK(out.at("arange4").to_doubles() == std::vector<double>{0, 1, 2, 3});
  CHECK(out.at("input_again").to_doubles() == std::vector<double>{2.5});
}

TEST_CASE("input binding errors name the input, the expectation and what was given", "[interpreter][errors]") {
  Graph g;
  Dim n = Dim::symbol("N");
  NodeId a = add_input(g, "a", DType::F32, {n, 3});
  NodeId b = add_input(g, "b", DType::F32, {n});
  add_output(g, "y", add_reduce(g, a, ReduceKind::Sum, {1}, false));
  add_output(g, "z", b);
  HostArray a4(DType::F32, {4, 3}), b4(DType::F32, {4});
  CHECK_NOTHROW(interpret(g, {{"a", a4}, {"b", b4}}));
  CHECK_THROWS_WITH(interpret(g, {{"a", a4}}), Contains("missing input 'b'"));
  CHECK_THROWS_WITH(interpret(g, {{"a", a4}, {"b", b4}, {"c", b4}}),
                    Contains("unexpected input 'c'") && Contains("'a', 'b'"));
  CHECK_THROWS_WITH(interpret(g, {{"a", HostArray(DType::F64, {4, 3})}, {"b", b4}}),
                    Contains("input 'a' has dtype f64 but f32 was declared"));
  CHECK_THROWS_WITH(interpret(g, {{"a", HostArray(DType::F32, {12})}, {"b", b4}}),
                    Contains("input 'a'") && Contains("[12]") && Contains("[N, 3]"));
  CHECK_THROWS_WITH(interpret(g, {{"a", HostArray(DType::F32, {4, 2})}, {"b", b4}}),
                    Contains("input 'a'") && Contains("[4, 2]") && Contains("[N, 3]"));
  CHECK_THROWS_WITH(interpret(g, {{"a", a4}, {"b", HostArray(DType::F32, {5})}}),
                    Contains("symbol 'N'") && Contains("4") && Contains("5") && Contains("input 'b'"));
  HostArray truncated = a4;
  truncated.bytes.resize(8);
  CHECK_THROWS_WITH(interpret(g, {{"a", truncated}, {"b", b4}}), Contains("input 'a' holds 8 bytes"));

  // A compound dim is checked once the symbols are bound, whatever the input order.
  Graph gc;
  add_output(gc, "y", add_input(gc, "twice", DType::I32, {n * Dim(2)}));
  add_input(gc, "once", DType::I32, {n});
  CHECK_THROWS_WITH(interpret(gc, {{"twice", HostArray(DType::I32, {5})}, {"once", HostArray(DType::I32, {3})}}),
                    Contains("input 'twice' has shape [5] but [2*N] was declared"));
  CHECK_NOTHROW(interpret(gc, {{"twice", HostArray(DType::I32, {6})}, {"once", HostArray(DType::I32, {3})}}));
}

TEST_CASE("evaluate_node evaluates one node from operand values", "[interpreter]") {
  Graph g;
  NodeId x = add_input(g, "x", DType::F32, {Dim::symbol("N")});
  NodeId y = add_scalar_op(g, ScalarOp::Mul, {x, x});
  HostArray xv = HostArray::from<float>({3}, {1, 2, 3});
  SymbolBindings symbols = bind_inputs(g, {{"x", xv}});
  CHECK(symbols.at("N") == 3);
  CHECK(floats(evaluate_node(g.node(y), {&xv, &xv}, symbols)) == std::vector<float>{1, 4, 9});
  CHECK_THROWS_AS(evaluate_node(g.node(x), {}, symbols), Error);
  CHECK_THROWS_AS(evaluate_node(g.node(y), {}, symbols), Error);
  HostArray wrong = HostArray::from<float>({4}, {1, 2, 3, 4});
  CHECK_THROWS_WITH(evaluate_node(g.node(y), {&wrong, &wrong}, symbols), Contains("[4]") && Contains("[3]"));
}
