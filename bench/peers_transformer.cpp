// The transformer block (bench/transformer_block.expr) as its operations run one at a time, the
// way PyTorch eager or NumPy run it: a matrix product per matmul (OpenBLAS sgemm, or the loop
// peer's i-k-j loops) and an OpenMP loop per row-wise step (layernorm and softmax are the loop
// peer's own; bias + GELU, residuals), each reading and writing whole arrays (bench/README.md,
// "Peers").
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "bench/peers.h"
#include "ir/host_array.h"

namespace fuse::bench {
namespace {

constexpr float kInvSqrtD = 0.0625f;     // INV_SQRT_D: a power of two, folded into products exactly
constexpr float kInvSqrtF = 0.03125f;    // INV_SQRT_F

/// C[m x n] = alpha * A[m x k] @ B (B[k x n], or B[n x k] transposed) + beta * C, row-major.
using Gemm = void (*)(int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b, bool b_transposed,
                      float beta, float* c);

void blas_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b, bool b_transposed,
               float beta, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(k), b,
              static_cast<int>(b_transposed ? k : n), beta, c, static_cast<int>(n));
}

// i-k-j order (the innermost loop along rows of B and C vectorizes), or dot products along rows
// of both operands when B is transposed; no blocking, as in loop_peer's matmul.
void loop_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b, bool b_transposed,
               float beta, float* c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < m; ++r) {
    const float* ar = a + r * k;
    float* cr = c + r * n;
    if (b_transposed) {
      for (int64_t j = 0; j < n; ++j) {
        const float* br = b + j * k;
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t p = 0; p < k; ++p) s += ar[p] * br[p];
        cr[j] = alpha * s + (beta == 0 ? 0.f : beta * cr[j]);
      }
      continue;
    }
    std::vector<float> acc(n, 0.f);
    for (int64_t p = 0; p < k; ++p) {
      float av = ar[p];
      const float* br = b + p * n;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) acc[j] += av * br[j];
    }
    for (int64_t j = 0; j < n; ++j) cr[j] = alpha * acc[j] + (beta == 0 ? 0.f : beta * cr[j]);
  }
}

float gelu(float x) { return 0.5f * x * (1 + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x))); }

// Allocated as fuse's arrays are (64-byte aligned, 2 MiB pages from 2 MiB on: ir/host_array.h).
using Array = std::vector<float, ir::CacheLineAllocator<float>>;

struct Scratch {
  Array h1, q, k, v, scores, attention, r, h2, u;
};

std::function<void()> transformer_block(const ir::TensorMap& i, ir::TensorMap& o, Gemm gemm) {
  int64_t t = dim(i, "x", 0), d = dim(i, "x", 1), f = dim(i, "w1", 1);
  const float *x = in(i, "x"), *ln1_gain = in(i, "ln1_gain"), *ln1_bias = in(i, "ln1_bias"), *wq = in(i, "wq"),
              *wk = in(i, "wk"), *wv = in(i, "wv"), *wo = in(i, "wo"), *ln2_gain = in(i, "ln2_gain"),
              *ln2_bias = in(i, "ln2_bias"), *w1 = in(i, "w1"), *b1 = in(i, "b1"), *w2 = in(i, "w2"),
              *b2 = in(i, "b2");
  float* y = out(o, "y");
  // Intermediates allocated once, like fuse's outputs (its intermediates live in its arena).
  auto s = std::make_shared<Scratch>();
  for (auto* v : {&s->h1, &s->q, &s->k, &s->v, &s->attention, &s->r, &s->h2}) v->resize(t * d);
  s->scores.resize(t * t);
  s->u.resize(t * f);
  return [=] {
    loop_layernorm_rows(x, ln1_gain, ln1_bias, s->h1.data(), t, d);
    gemm(t, d, d, kInvSqrtD, s->h1.data(), wq, false, 0, s->q.data());
    gemm(t, d, d, kInvSqrtD, s->h1.data(), wk, false, 0, s->k.data());
    gemm(t, d, d, kInvSqrtD, s->h1.data(), wv, false, 0, s->v.data());
    gemm(t, t, d, kInvSqrtD, s->q.data(), s->k.data(), true, 0, s->scores.data());
    loop_softmax_rows(s->scores.data(), s->scores.data(), t, t);
    gemm(t, d, t, 1, s->scores.data(), s->v.data(), false, 0, s->attention.data());
    std::copy(x, x + t * d, s->r.data());
    gemm(t, d, d, kInvSqrtD, s->attention.data(), wo, false, 1, s->r.data());
    loop_layernorm_rows(s->r.data(), ln2_gain, ln2_bias, s->h2.data(), t, d);
    gemm(t, f, d, kInvSqrtD, s->h2.data(), w1, false, 0, s->u.data());
    float* u = s->u.data();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < t; ++r)
      for (int64_t j = 0; j < f; ++j) u[r * f + j] = gelu(u[r * f + j] + b1[j]);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < t; ++r)
      for (int64_t j = 0; j < d; ++j) y[r * d + j] = s->r[r * d + j] + b2[j];
    gemm(t, d, f, kInvSqrtF, u, w2, false, 1, y);
  };
}

}  // namespace

std::function<void()> transformer_block_peer(Peer peer, const ir::TensorMap& inputs, ir::TensorMap& outputs) {
  if (peer == Peer::OpenBlas) return transformer_block(inputs, outputs, blas_gemm);
  if (peer == Peer::Loop) return transformer_block(inputs, outputs, loop_gemm);
  return nullptr;
}

}  // namespace fuse::bench
