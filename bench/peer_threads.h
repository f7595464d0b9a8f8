// How long the peers' idle threads spin: as long as fuse's pool, in both benchmarks.
#pragma once

#include <cstdlib>
#include <string_view>
#include <utility>

namespace fuse::bench {

/// Sets the environment so that every peer library's idle threads spin about as long as fuse's
/// pool (runtime::ThreadPool::kDefaultSpin, 100 us) before they sleep; whether anything was set
/// (the libraries read it when they are loaded, so the caller starts again). A setting given by
/// the user stays, and OMP_WAIT_POLICY, when given, wins over GOMP_SPINCOUNT.
///
/// Why: by default OpenMP's threads (Eigen, the loops, oneDNN) spin for milliseconds after each
/// parallel region, and OpenBLAS's own pool for 2^28 cycles (about 0.1 s) after each call, taking
/// a core from whichever row runs next: on the 2-vCPU EPYC VM (2026-11-25) the transformer
/// block's fused row took 7.02 ms after OpenBLAS rows and 4.29 ms with OPENBLAS_THREAD_TIMEOUT=4
/// (2^4 cycles). Sleeping at once instead costs each parallel region a wake-up, ~100 us for a
/// halted virtual CPU on the Intel Xeon VM (the plain loop's max over 4 MB: 0.16 ms sleeping at
/// once, 0.07 spinning). GOMP_SPINCOUNT counts tries of a load and a `pause` (about 10 ns on the
/// Intel Xeon VM); OPENBLAS_THREAD_TIMEOUT is 2^N cycles (2^18: 0.1 ms at 2.6 GHz).
inline bool set_peer_thread_environment() {
  bool set = false;
  for (auto [name, value] : {std::pair{"GOMP_SPINCOUNT", "10000"}, std::pair{"OPENBLAS_THREAD_TIMEOUT", "18"}}) {
    if (std::getenv(name)) continue;
    // libgomp takes GOMP_SPINCOUNT over OMP_WAIT_POLICY (measured: passive and 10000, the loop's
    // max over 4 MB 0.06 ms; passive alone 0.16), so a policy the user gives means no count.
    if (std::string_view(name) == "GOMP_SPINCOUNT" && std::getenv("OMP_WAIT_POLICY")) continue;
    setenv(name, value, 1);
    set = true;
  }
  return set;
}

}  // namespace fuse::bench
