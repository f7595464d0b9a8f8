// The plain-loop peer: what a C++ programmer writes by hand, with OpenMP for the threads and
// `omp simd` reductions (which vectorize without fast-math); the math functions are libm's
// (bench/README.md, "Peers").
#include <algorithm>
#include <cmath>

#include "bench/peers.h"

namespace fuse::bench {
namespace {

constexpr float kSqrt2Pi = 2.5066282746f;  // examples/gaussian_pdf.expr's SQRT_2PI, in f32
constexpr float kLayerNormEps = 1e-5f;      // examples/layernorm.expr's EPS

// Functions of plain parameters, not loops inside the closures: GCC 12 does not vectorize these
// `omp simd` reductions when the pointer and the count are members of a closure.
float sum_of(const float* x, int64_t n) {
  float s = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += x[j];
  return s;
}

float max_of(const float* x, int64_t n) {
  float v = -INFINITY;
#pragma omp parallel for simd schedule(static) reduction(max : v)
  for (int64_t j = 0; j < n; ++j) v = x[j] > v ? x[j] : v;
  return v;
}

}  // namespace

void loop_softmax_rows(const float* x, float* y, int64_t n, int64_t m) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * m;
    float* yr = y + r * m;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < m; ++j) mx = std::max(mx, xr[j]);
    float s = 0;
    for (int64_t j = 0; j < m; ++j) s += yr[j] = std::exp(xr[j] - mx);
    float inv = 1.f / s;
    for (int64_t j = 0; j < m; ++j) yr[j] *= inv;
  }
}

void loop_layernorm_rows(const float* x, const float* gamma, const float* beta, float* y, int64_t n, int64_t d) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < d; ++j) s += xr[j];
    float mu = s / static_cast<float>(d), q = 0;
#pragma omp simd reduction(+ : q)
    for (int64_t j = 0; j < d; ++j) q += (xr[j] - mu) * (xr[j] - mu);
    float inv = 1.f / std::sqrt(q / static_cast<float>(d) + kLayerNormEps);
    for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - mu) * inv * gamma[j] + beta[j];
  }
}

std::function<void()> loop_peer(const std::string& kind, const ir::TensorMap& i, ir::TensorMap& o) {
  if (kind == "transformer_block") return transformer_block_peer(Peer::Loop, i, o);
  if (kind == "add") {
    int64_t n = dim(i, "a", 0), m = dim(i, "a", 1);
    const float *a = in(i, "a"), *b = in(i, "b");
    float* c = out(o, "c");
    return [=] {
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < m; ++j) c[r * m + j] = a[r * m + j] + b[j];
    };
  }
  if (kind == "normalize_rgb") {
    int64_t p = dim(i, "img", 0);
    const float *img = in(i, "img"), *mean = in(i, "mean"), *std_dev = in(i, "std");
    float* y = out(o, "y");
    return [=] {
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < p; ++r)
        for (int64_t c = 0; c < 3; ++c) y[3 * r + c] = (img[3 * r + c] - mean[c]) / std_dev[c];
    };
  }
  if (kind == "add_vectors") {
    const float *a = in(i, "a"), *b = in(i, "b");
    float* c = out(o, "c");
    return [=, n = count(i, "a")] {
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < n; ++j) c[j] = a[j] + b[j];
    };
  }
  if (kind == "hypot") {
    const float *x = in(i, "x"), *y = in(i, "y");
    float* r = out(o, "r");
    return [=, n = count(i, "x")] {
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < n; ++j) r[j] = std::sqrt(x[j] * x[j] + y[j] * y[j]);
    };
  }
  if (kind == "gaussian_pdf") {
    const float *x = in(i, "x"), *mu = in(i, "mu"), *sigma = in(i, "sigma");
    float* y = out(o, "y");
    return [=, n = count(i, "x")] {
      float m = *mu, s = *sigma;
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < n; ++j) {
        float z = (x[j] - m) / s;
        y[j] = std::exp(-0.5f * z * z) / (s * kSqrt2Pi);
      }
    };
  }
  if (kind == "polar_distance") {
    const float *r1 = in(i, "r1"), *t1 = in(i, "theta1"), *r2 = in(i, "r2"), *t2 = in(i, "theta2");
    float* d = out(o, "distance");
    return [=, n = count(i, "r1")] {
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < n; ++j) {
        float dx = r1[j] * std::cos(t1[j]) - r2[j] * std::cos(t2[j]);
        float dy = r1[j] * std::sin(t1[j]) - r2[j] * std::sin(t2[j]);
        d[j] = std::sqrt(dx * dx + dy * dy);
      }
    };
  }
  if (kind == "hidden_layer") {
    const float *g = in(i, "greyscales"), *w = in(i, "weights");
    float* a = out(o, "activations");
    return [=, n = count(i, "greyscales")] {
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < n; ++j) a[j] = std::tanh(g[j] / 255.f * w[j]);
    };
  }
  if (kind == "sum") {
    const float* x = in(i, "x");
    float* total = out(o, "total");
    return [=, n = count(i, "x")] { *total = sum_of(x, n); };
  }
  if (kind == "max") {
    const float* x = in(i, "x");
    float* largest = out(o, "largest");
    return [=, n = count(i, "x")] { *largest = max_of(x, n); };
  }
  if (kind == "softmax") {
    int64_t n = dim(i, "x", 0), m = dim(i, "x", 1);
    const float* x = in(i, "x");
    float* y = out(o, "y");
    return [=] { loop_softmax_rows(x, y, n, m); };
  }
  if (kind == "layernorm") {
    int64_t n = dim(i, "x", 0), d = dim(i, "x", 1);
    const float *x = in(i, "x"), *gamma = in(i, "gamma"), *beta = in(i, "beta");
    float* y = out(o, "y");
    return [=] { loop_layernorm_rows(x, gamma, beta, y, n, d); };
  }
  if (kind == "transpose") {
    int64_t n = dim(i, "x", 0), m = dim(i, "x", 1);
    const float* x = in(i, "x");
    float* xt = out(o, "xt");
    return [=] {
      constexpr int64_t B = 32;  // 32 x 32 tiles: 32 source and 32 destination lines per pair
#pragma omp parallel for schedule(static)
      for (int64_t r0 = 0; r0 < n; r0 += B)
        for (int64_t c0 = 0; c0 < m; c0 += B)
          for (int64_t r = r0; r < std::min(n, r0 + B); ++r)
            for (int64_t c = c0; c < std::min(m, c0 + B); ++c) xt[c * n + r] = x[r * m + c];
    };
  }
  if (kind == "matmul" || kind == "mlp_layer") {
    // i-k-j order: the innermost loop runs along rows of B and C and vectorizes; no blocking.
    bool mlp = kind == "mlp_layer";
    const char* a_name = mlp ? "x" : "a";
    const char* b_name = mlp ? "w" : "b";
    int64_t m = dim(i, a_name, 0), k = dim(i, a_name, 1), n = dim(i, b_name, 1);
    const float *a = in(i, a_name), *b = in(i, b_name), *bias = mlp ? in(i, "b") : nullptr;
    float* c = out(o, mlp ? "y" : "c");
    return [=] {
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < m; ++r) {
        float* cr = c + r * n;
        std::fill(cr, cr + n, 0.f);
        for (int64_t p = 0; p < k; ++p) {
          float av = a[r * k + p];
          const float* br = b + p * n;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) cr[j] += av * br[j];
        }
        if (mlp)
          for (int64_t j = 0; j < n; ++j) cr[j] = std::max(cr[j] + bias[j], 0.f);
      }
    };
  }
  return nullptr;
}

}  // namespace fuse::bench
