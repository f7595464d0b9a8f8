#include "bench/stream.h"

#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdlib>
#include <new>

#include "ir/error.h"
#include "ir/host_array.h"
#include "runtime/thread_pool.h"

namespace fuse::bench {

namespace {

constexpr int64_t kLine = 16;  // floats per 64-byte cache line; every chunk starts on a line
constexpr float kScalar = 3.0f;

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

// Intrinsics rather than plain loops: the compiler must not pick the stores (or call memcpy).
// The sfence orders the weakly-ordered streaming stores before the chunk counts as done.

__attribute__((target("avx512f"))) void copy_avx512(float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) _mm512_stream_ps(a + i, _mm512_load_ps(b + i));
  _mm_sfence();
}

__attribute__((target("avx512f"))) void triad_avx512(float* a, const float* b, const float* c, int64_t n) {
  const __m512 s = _mm512_set1_ps(kScalar);
  for (int64_t i = 0; i < n; i += 16)
    _mm512_stream_ps(a + i, _mm512_fmadd_ps(s, _mm512_load_ps(c + i), _mm512_load_ps(b + i)));
  _mm_sfence();
}

__attribute__((target("avx512f"))) void triad_avx512_cached(float* a, const float* b, const float* c, int64_t n) {
  const __m512 s = _mm512_set1_ps(kScalar);
  for (int64_t i = 0; i < n; i += 16)
    _mm512_store_ps(a + i, _mm512_fmadd_ps(s, _mm512_load_ps(c + i), _mm512_load_ps(b + i)));
}

__attribute__((target("avx512f"))) float sum_avx512(const float* b, int64_t n) {
  // Four accumulators: one would make the adds' latency, not memory, the limit.
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_load_ps(b + i));
    s1 = _mm512_add_ps(s1, _mm512_load_ps(b + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_load_ps(b + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_load_ps(b + i + 48));
  }
  for (; i < n; i += 16) s0 = _mm512_add_ps(s0, _mm512_load_ps(b + i));
  alignas(64) float lanes[16];  // not _mm512_reduce_add_ps: GCC 12 warns inside it
  _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

// SSE is part of x86-64 itself, so this path needs no check.
void copy_sse(float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; i += 4) _mm_stream_ps(a + i, _mm_load_ps(b + i));
  _mm_sfence();
}

void triad_sse(float* a, const float* b, const float* c, int64_t n) {
  const __m128 s = _mm_set1_ps(kScalar);
  for (int64_t i = 0; i < n; i += 4) _mm_stream_ps(a + i, _mm_add_ps(_mm_load_ps(b + i), _mm_mul_ps(s, _mm_load_ps(c + i))));
  _mm_sfence();
}

void triad_sse_cached(float* a, const float* b, const float* c, int64_t n) {
  const __m128 s = _mm_set1_ps(kScalar);
  for (int64_t i = 0; i < n; i += 4) _mm_store_ps(a + i, _mm_add_ps(_mm_load_ps(b + i), _mm_mul_ps(s, _mm_load_ps(c + i))));
}

float sum_sse(const float* b, int64_t n) {
  __m128 s0 = _mm_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i < n; i += 16) {
    s0 = _mm_add_ps(s0, _mm_load_ps(b + i));
    s1 = _mm_add_ps(s1, _mm_load_ps(b + i + 4));
    s2 = _mm_add_ps(s2, _mm_load_ps(b + i + 8));
    s3 = _mm_add_ps(s3, _mm_load_ps(b + i + 12));
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_add_ps(_mm_add_ps(s0, s1), _mm_add_ps(s2, s3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// As fuse's HostArrays (and so the peers' arrays, which are HostArrays too): 2 MiB pages from
// 2 MiB on, so that the limit and the rows measured against it stand on the same pages.
float* allocate(int64_t n) { return static_cast<float*>(ir::allocate_host_array_bytes(static_cast<size_t>(n) * sizeof(float))); }

/// body(first, count) over cache-line-aligned slices of [0, n), one per pool thread.
template <class Body>
void split(int64_t n, Body body) {
  runtime::ThreadPool::global().parallel_for(0, n / kLine, 1, [&](int64_t lo, int64_t hi) {
    body(lo * kLine, (hi - lo) * kLine);
  });
}

}  // namespace

Stream::Stream(int64_t floats_per_array) : n_(floats_per_array) {
  if (n_ <= 0 || n_ % kLine) throw ir::Error("STREAM arrays need a positive multiple of 16 floats");
  a_ = allocate(n_);
  b_ = allocate(n_);
  c_ = allocate(n_);
  // First touch from the threads that later stream the same slices.
  split(n_, [&](int64_t i0, int64_t count) {
    for (int64_t i = i0; i < i0 + count; ++i) a_[i] = 0.0f, b_[i] = 1.0f, c_[i] = 2.0f;
  });
}

Stream::~Stream() {
  size_t bytes = static_cast<size_t>(n_) * sizeof(float);
  ir::free_host_array_bytes(a_, bytes);
  ir::free_host_array_bytes(b_, bytes);
  ir::free_host_array_bytes(c_, bytes);
}

double Stream::copy() {
  split(n_, [&](int64_t i, int64_t count) {
    (has_avx512() ? copy_avx512 : copy_sse)(a_ + i, b_ + i, count);
  });
  return 2.0 * sizeof(float) * static_cast<double>(n_);
}

double Stream::triad() {
  split(n_, [&](int64_t i, int64_t count) {
    (has_avx512() ? triad_avx512 : triad_sse)(a_ + i, b_ + i, c_ + i, count);
  });
  return 3.0 * sizeof(float) * static_cast<double>(n_);
}

double Stream::triad_cached_stores() {
  split(n_, [&](int64_t i, int64_t count) {
    (has_avx512() ? triad_avx512_cached : triad_sse_cached)(a_ + i, b_ + i, c_ + i, count);
  });
  return 3.0 * sizeof(float) * static_cast<double>(n_);
}

double Stream::read() {
  split(n_, [&](int64_t i, int64_t count) {
    benchmark::DoNotOptimize((has_avx512() ? sum_avx512 : sum_sse)(b_ + i, count));
  });
  return sizeof(float) * static_cast<double>(n_);
}

const char* Stream::isa() const { return has_avx512() ? "avx512" : "sse"; }

}  // namespace fuse::bench
