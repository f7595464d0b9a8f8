// Peers: fuse_bench's workloads written with other libraries and as plain C++ loops, run and timed
// in the same process as fuse (bench/README.md, "Peers"). Each peer reads fuse's input arrays and
// writes into outputs preallocated with fuse's output names and shapes, so that its result can be
// checked against fuse's before it is timed.
#pragma once

#include <functional>
#include <string>

#include "ir/interpreter.h"

namespace fuse::bench {

enum class Peer { Eigen, Loop, OneDnn, OpenBlas };
inline constexpr Peer kPeers[] = {Peer::Eigen, Peer::Loop, Peer::OneDnn, Peer::OpenBlas};
inline constexpr int kNumPeers = static_cast<int>(std::size(kPeers));

/// "eigen", "loop", "onednn", "openblas": the rows' names.
const char* peer_name(Peer peer);
/// How the summary names it: "Eigen", "loop", "oneDNN", "OpenBLAS".
const char* peer_title(Peer peer);

/// Whether `peer` has an implementation of workload `kind` (the stem of its .expr file: "add",
/// "softmax", "matmul", ...). Eigen and the loop have one for every workload; oneDNN and OpenBLAS
/// only where they have a primitive.
bool peer_supports(Peer peer, const std::string& kind);

/// One run of `peer` computing `kind` from `inputs` into `outputs` (preallocated, fuse's names
/// and shapes). Set-up work (oneDNN primitive creation) happens here, not in the run.
std::function<void()> make_peer(Peer peer, const std::string& kind, const ir::TensorMap& inputs,
                                ir::TensorMap& outputs);

/// Every peer on `threads` threads: OpenMP (Eigen, the loops, oneDNN) and OpenBLAS's own pool.
void set_peer_threads(int threads);

// One per library, in peers_LIBRARY.cpp; make_peer dispatches. Null when not supported.
std::function<void()> eigen_peer(const std::string& kind, const ir::TensorMap& inputs, ir::TensorMap& outputs);
std::function<void()> loop_peer(const std::string& kind, const ir::TensorMap& inputs, ir::TensorMap& outputs);
std::function<void()> onednn_peer(const std::string& kind, const ir::TensorMap& inputs, ir::TensorMap& outputs);
std::function<void()> openblas_peer(const std::string& kind, const ir::TensorMap& inputs, ir::TensorMap& outputs);
/// The loop peer's row kernels (peers_loop.cpp), shared with the transformer block: softmax of n
/// rows of m (in place when x == y), layer normalization of n rows of d (EPS 1e-5).
void loop_softmax_rows(const float* x, float* y, int64_t n, int64_t m);
void loop_layernorm_rows(const float* x, const float* gamma, const float* beta, float* y, int64_t n, int64_t d);
/// bench/transformer_block.expr op by op (peers_transformer.cpp): its products by sgemm
/// (OpenBlas) or by i-k-j loops (Loop), its row-wise steps by OpenMP loops.
std::function<void()> transformer_block_peer(Peer peer, const ir::TensorMap& inputs, ir::TensorMap& outputs);

// Shared by the peers: raw views of fuse's arrays.
inline const float* in(const ir::TensorMap& m, const std::string& name) { return m.at(name).as<float>(); }
inline float* out(ir::TensorMap& m, const std::string& name) { return m.at(name).as<float>(); }
inline int64_t dim(const ir::TensorMap& m, const std::string& name, int axis) { return m.at(name).shape.at(axis); }
inline int64_t count(const ir::TensorMap& m, const std::string& name) { return m.at(name).size(); }

}  // namespace fuse::bench
