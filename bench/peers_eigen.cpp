// The Eigen peer: array expressions, row-wise reductions, a blocked transpose and Eigen's own
// matrix product (bench/README.md, "Peers").
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "bench/peers.h"

namespace fuse::bench {
namespace {

using Eigen::Dynamic;
using Eigen::Map;
using Eigen::RowMajor;
using Vector = Eigen::ArrayXf;
using RowVector = Eigen::Array<float, 1, Dynamic>;
using Rows = Eigen::Array<float, Dynamic, Dynamic, RowMajor>;
using Matrix = Eigen::Matrix<float, Dynamic, Dynamic, RowMajor>;

constexpr float kSqrt2Pi = 2.5066282746f;  // examples/gaussian_pdf.expr's SQRT_2PI, in f32
constexpr float kLayerNormEps = 1e-5f;      // examples/layernorm.expr's EPS

/// Eigen parallelizes its matrix products with OpenMP, not array expressions or reductions: each
/// OpenMP thread evaluates the expression on its own contiguous share of [0, n) (a multiple of
/// 16 items, so that element shares start on cache lines), as a multithreaded Eigen user would.
template <class Body>
void split(int64_t n, Body body) {
#pragma omp parallel
  {
    int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
    int64_t share = ((n + threads - 1) / threads + 15) / 16 * 16;
    int64_t lo = std::min(n, t * share), hi = std::min(n, lo + share);
    if (lo < hi) body(lo, hi - lo);
  }
}

/// A full reduction: each thread reduces its share, then `combine` folds the partial results.
template <class Reduce, class Combine>
float reduce(int64_t n, float identity, Reduce reduce_share, Combine combine) {
  std::vector<float> partial(omp_get_max_threads(), identity);
  split(n, [&](int64_t lo, int64_t len) { partial[omp_get_thread_num()] = reduce_share(lo, len); });
  float total = identity;
  for (float p : partial) total = combine(total, p);
  return total;
}

/// Layer normalization of n rows of d, row by row (each row stays in cache between its passes).
void layernorm_rows(const float* x, const float* gamma, const float* beta, float* y, int64_t n, int64_t d) {
  split(n, [&](int64_t r0, int64_t rows) {
    Map<const Rows> X(x + r0 * d, rows, d);
    Map<Rows> Y(y + r0 * d, rows, d);
    Map<const RowVector> G(gamma, d), B(beta, d);
    for (int64_t r = 0; r < rows; ++r) {
      float mu = X.row(r).mean();
      float variance = (X.row(r) - mu).square().mean();
      Y.row(r) = (X.row(r) - mu) * (1.f / std::sqrt(variance + kLayerNormEps)) * G + B;
    }
  });
}

}  // namespace

std::function<void()> eigen_peer(const std::string& kind, const ir::TensorMap& i, ir::TensorMap& o) {
  if (kind == "add") {
    int64_t n = dim(i, "a", 0), m = dim(i, "a", 1);
    const float *a = in(i, "a"), *b = in(i, "b");
    float* c = out(o, "c");
    return [=] {
      split(n, [&](int64_t r, int64_t rows) {
        Map<Rows>(c + r * m, rows, m) = Map<const Rows>(a + r * m, rows, m).rowwise() + Map<const RowVector>(b, m);
      });
    };
  }
  if (kind == "normalize_rgb") {
    using Pixels = Eigen::Array<float, Dynamic, 3, RowMajor>;
    using Channels = Eigen::Array<float, 1, 3>;
    int64_t p = dim(i, "img", 0);
    const float *img = in(i, "img"), *mean = in(i, "mean"), *std_dev = in(i, "std");
    float* y = out(o, "y");
    return [=] {
      split(p, [&](int64_t r, int64_t rows) {
        Map<Pixels>(y + 3 * r, rows, 3) =
            (Map<const Pixels>(img + 3 * r, rows, 3).rowwise() - Map<const Channels>(mean)).rowwise() /
            Map<const Channels>(std_dev);
      });
    };
  }
  if (kind == "add_vectors") {
    const float *a = in(i, "a"), *b = in(i, "b");
    float* c = out(o, "c");
    return [=, n = count(i, "a")] {
      split(n, [&](int64_t lo, int64_t len) {
        Map<Vector>(c + lo, len) = Map<const Vector>(a + lo, len) + Map<const Vector>(b + lo, len);
      });
    };
  }
  if (kind == "hypot") {
    const float *x = in(i, "x"), *y = in(i, "y");
    float* r = out(o, "r");
    return [=, n = count(i, "x")] {
      split(n, [&](int64_t lo, int64_t len) {
        Map<const Vector> X(x + lo, len), Y(y + lo, len);
        Map<Vector>(r + lo, len) = (X.square() + Y.square()).sqrt();
      });
    };
  }
  if (kind == "gaussian_pdf") {
    const float *x = in(i, "x"), *mu = in(i, "mu"), *sigma = in(i, "sigma");
    float* y = out(o, "y");
    return [=, n = count(i, "x")] {
      float m = *mu, s = *sigma;
      split(n, [&](int64_t lo, int64_t len) {
        Map<const Vector> X(x + lo, len);
        Map<Vector>(y + lo, len) = (-0.5f * ((X - m) / s).square()).exp() / (s * kSqrt2Pi);
      });
    };
  }
  if (kind == "polar_distance") {
    const float *r1 = in(i, "r1"), *t1 = in(i, "theta1"), *r2 = in(i, "r2"), *t2 = in(i, "theta2");
    float* d = out(o, "distance");
    return [=, n = count(i, "r1")] {
      split(n, [&](int64_t lo, int64_t len) {
        Map<const Vector> R1(r1 + lo, len), T1(t1 + lo, len), R2(r2 + lo, len), T2(t2 + lo, len);
        Map<Vector>(d + lo, len) =
            ((R1 * T1.cos() - R2 * T2.cos()).square() + (R1 * T1.sin() - R2 * T2.sin()).square()).sqrt();
      });
    };
  }
  if (kind == "hidden_layer") {
    // The .expr file spells tanh out as (exp(v) - exp(-v)) / (exp(v) + exp(-v)); Eigen has tanh.
    const float *g = in(i, "greyscales"), *w = in(i, "weights");
    float* a = out(o, "activations");
    return [=, n = count(i, "greyscales")] {
      split(n, [&](int64_t lo, int64_t len) {
        Map<Vector>(a + lo, len) = (Map<const Vector>(g + lo, len) / 255.f * Map<const Vector>(w + lo, len)).tanh();
      });
    };
  }
  if (kind == "sum" || kind == "max") {
    const float* x = in(i, "x");
    float* total = out(o, kind == "sum" ? "total" : "largest");
    if (kind == "sum")
      return [=, n = count(i, "x")] {
        *total = reduce(n, 0.f, [&](int64_t lo, int64_t len) { return Map<const Vector>(x + lo, len).sum(); },
                        [](float a, float b) { return a + b; });
      };
    return [=, n = count(i, "x")] {
      *total = reduce(n, -INFINITY, [&](int64_t lo, int64_t len) { return Map<const Vector>(x + lo, len).maxCoeff(); },
                      [](float a, float b) { return std::max(a, b); });
    };
  }
  if (kind == "softmax") {
    int64_t n = dim(i, "x", 0), m = dim(i, "x", 1);
    const float* x = in(i, "x");
    float* y = out(o, "y");
    // Row by row, so that each row stays in cache between its passes.
    return [=] {
      split(n, [&](int64_t r0, int64_t rows) {
        Map<const Rows> X(x + r0 * m, rows, m);
        Map<Rows> Y(y + r0 * m, rows, m);
        for (int64_t r = 0; r < rows; ++r) {
          Y.row(r) = (X.row(r) - X.row(r).maxCoeff()).exp();
          Y.row(r) *= 1.f / Y.row(r).sum();
        }
      });
    };
  }
  if (kind == "layernorm") {
    int64_t n = dim(i, "x", 0), d = dim(i, "x", 1);
    const float *x = in(i, "x"), *gamma = in(i, "gamma"), *beta = in(i, "beta");
    float* y = out(o, "y");
    return [=] { layernorm_rows(x, gamma, beta, y, n, d); };
  }
  if (kind == "transpose") {
    // Cache-blocked: 16 x 16 fixed-size blocks (one cache line per row of a block), with
    // dynamic blocks at the edges.
    int64_t n = dim(i, "x", 0), m = dim(i, "x", 1);
    const float* x = in(i, "x");
    float* xt = out(o, "xt");
    return [=] {
      constexpr int64_t B = 16;
      Map<const Rows> X(x, n, m);
      Map<Rows> XT(xt, m, n);
      split((n + B - 1) / B, [&](int64_t b0, int64_t blocks) {
        for (int64_t r = b0 * B; r < std::min(n, (b0 + blocks) * B); r += B)
          for (int64_t c = 0; c < m; c += B) {
            if (r + B <= n && c + B <= m) XT.block<B, B>(c, r) = X.block<B, B>(r, c).transpose();
            else {
              int64_t h = std::min(B, n - r), w = std::min(B, m - c);
              XT.block(c, r, w, h) = X.block(r, c, h, w).transpose();
            }
          }
      });
    };
  }
  if (kind == "matmul" || kind == "mlp_layer") {
    bool mlp = kind == "mlp_layer";
    const char* a_name = mlp ? "x" : "a";
    const char* b_name = mlp ? "w" : "b";
    int64_t m = dim(i, a_name, 0), k = dim(i, a_name, 1), n = dim(i, b_name, 1);
    const float *a = in(i, a_name), *b = in(i, b_name), *bias = mlp ? in(i, "b") : nullptr;
    float* c = out(o, mlp ? "y" : "c");
    return [=] {
      Map<Matrix> C(c, m, n);
      C.noalias() = Map<const Matrix>(a, m, k) * Map<const Matrix>(b, k, n);  // OpenMP inside
      if (!mlp) return;
      // Eigen has no epilogue for its product: bias and relu are a second pass over C.
      split(m, [&](int64_t r, int64_t rows) {
        Map<Rows> Y(c + r * n, rows, n);
        Y = (Y.rowwise() + Map<const RowVector>(bias, n)).max(0.f);
      });
    };
  }
  if (kind == "transformer_block") {
    // Eigen's products (OpenMP inside) with the 1/sqrt(fan-in) scales as their alpha (powers of
    // two: exact), and array expressions row by row for layernorm, softmax and GELU.
    int64_t t = dim(i, "x", 0), d = dim(i, "x", 1), f = dim(i, "w1", 1);
    const float *x = in(i, "x"), *ln1_gain = in(i, "ln1_gain"), *ln1_bias = in(i, "ln1_bias"), *wq = in(i, "wq"),
                *wk = in(i, "wk"), *wv = in(i, "wv"), *wo = in(i, "wo"), *ln2_gain = in(i, "ln2_gain"),
                *ln2_bias = in(i, "ln2_bias"), *w1 = in(i, "w1"), *b1 = in(i, "b1"), *w2 = in(i, "w2"),
                *b2 = in(i, "b2");
    float* y = out(o, "y");
    struct Scratch {
      Matrix h1, q, k, v, scores, attention, r, h2, u;
    };
    auto s = std::make_shared<Scratch>();
    for (Matrix* m : {&s->h1, &s->q, &s->k, &s->v, &s->attention, &s->r, &s->h2}) m->resize(t, d);
    s->scores.resize(t, t);
    s->u.resize(t, f);
    return [=] {
      constexpr float kInvSqrtD = 0.0625f, kInvSqrtF = 0.03125f;
      Map<const Matrix> X(x, t, d), Wq(wq, d, d), Wk(wk, d, d), Wv(wv, d, d), Wo(wo, d, d), W1(w1, d, f),
          W2(w2, f, d);
      layernorm_rows(x, ln1_gain, ln1_bias, s->h1.data(), t, d);
      s->q.noalias() = kInvSqrtD * s->h1 * Wq;
      s->k.noalias() = kInvSqrtD * s->h1 * Wk;
      s->v.noalias() = kInvSqrtD * s->h1 * Wv;
      s->scores.noalias() = kInvSqrtD * s->q * s->k.transpose();
      split(t, [&](int64_t r0, int64_t rows) {
        for (int64_t r = r0; r < r0 + rows; ++r) {
          auto row = s->scores.row(r).array();
          row = (row - row.maxCoeff()).exp();
          row *= 1.f / row.sum();
        }
      });
      s->attention.noalias() = s->scores * s->v;
      s->r = X;
      s->r.noalias() += kInvSqrtD * s->attention * Wo;
      layernorm_rows(s->r.data(), ln2_gain, ln2_bias, s->h2.data(), t, d);
      s->u.noalias() = kInvSqrtD * s->h2 * W1;
      split(t, [&](int64_t r0, int64_t rows) {
        Map<Rows> U(s->u.data() + r0 * f, rows, f);
        U = U.rowwise() + Map<const RowVector>(b1, f);
        U = 0.5f * U * (1.f + (0.7978845608f * (U + 0.044715f * U * U * U)).tanh());
      });
      Map<Matrix> Y(y, t, d);
      Y = (s->r.array().rowwise() + Map<const RowVector>(b2, d)).matrix();
      Y.noalias() += kInvSqrtF * s->u * W2;
    };
  }
  return nullptr;
}

}  // namespace fuse::bench
