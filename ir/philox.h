// Counter-based random numbers: the definition of `rand`, shared bit for bit by every backend.
//
// Thread safety: pure functions; safe from any thread.
#pragma once

#include <array>
#include <cstdint>

namespace fuse::ir {

/// Philox-4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"), with the
/// constants of Random123, cuRAND and JAX: 10 rounds of the 4x32 Philox S-box on `counter`,
/// bumping `key` by the Weyl constants between rounds. Returns 4 uniformly random 32-bit words.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

/// The value of rand(seed) at flat (row-major) element index i: a uniform f32 in [0, 1).
/// Defined so that every backend computes exactly the same bits:
///   word  = philox4x32_10({lo32(i), hi32(i), 0, 0}, {lo32(seed), hi32(seed)})[0]
///   value = float(word >> 8) * 2^-24   (24 random bits: exact in f32, never 1.0)
float rand_uniform(uint64_t seed, uint64_t i);

}  // namespace fuse::ir
