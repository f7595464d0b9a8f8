// The machine's memory bandwidth limit, measured STREAM-style in the benchmark binary itself.
#pragma once

#include <cstdint>
#include <memory>

namespace fuse::bench {

/// STREAM kernels over arrays much larger than the last-level cache, split over the fuse thread
/// pool (so over the same cores as fuse's kernels). Bytes are counted as STREAM does: every array
/// element read or written once, with no write-allocate traffic.
class Stream {
 public:
  explicit Stream(int64_t floats_per_array);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /// a[i] = b[i], non-temporal stores. Returns the bytes it counts (2 arrays).
  double copy();
  /// a[i] = b[i] + s * c[i], non-temporal stores. Returns the bytes it counts (3 arrays).
  double triad();
  /// The same triad with ordinary stores: what code without non-temporal stores can reach
  /// (each store first reads its cache line), for comparison.
  double triad_cached_stores();
  /// The sum of b: reading alone, what a full reduction can reach, for comparison. Returns
  /// the bytes it counts (1 array).
  double read();

  /// The floats in each of the 3 arrays.
  int64_t floats() const { return n_; }

  /// Which non-temporal store instructions copy() and triad() use: "avx512" or "sse".
  const char* isa() const;

 private:
  int64_t n_;
  float *a_, *b_, *c_;
};

}  // namespace fuse::bench
