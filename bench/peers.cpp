#include "bench/peers.h"

#include <cblas.h>
#include <omp.h>

#include <set>

namespace fuse::bench {

const char* peer_name(Peer peer) {
  switch (peer) {
    case Peer::Eigen: return "eigen";
    case Peer::Loop: return "loop";
    case Peer::OneDnn: return "onednn";
    case Peer::OpenBlas: return "openblas";
  }
  return "?";
}

const char* peer_title(Peer peer) {
  switch (peer) {
    case Peer::Eigen: return "Eigen";
    case Peer::Loop: return "loop";
    case Peer::OneDnn: return "oneDNN";
    case Peer::OpenBlas: return "OpenBLAS";
  }
  return "?";
}

bool peer_supports(Peer peer, const std::string& kind) {
  // hypot and polar_distance have no oneDNN primitive (no sqrt of a sum, no sin/cos eltwise).
  static const std::set<std::string> onednn = {"add",       "add_vectors", "normalize_rgb", "gaussian_pdf",
                                               "hidden_layer", "sum",      "max",           "softmax",
                                               "layernorm", "transpose",   "matmul",        "mlp_layer"};
  static const std::set<std::string> openblas = {"matmul", "mlp_layer", "transformer_block"};
  switch (peer) {
    case Peer::Eigen:
    case Peer::Loop: return true;
    case Peer::OneDnn: return onednn.count(kind) > 0;
    case Peer::OpenBlas: return openblas.count(kind) > 0;
  }
  return false;
}

std::function<void()> make_peer(Peer peer, const std::string& kind, const ir::TensorMap& inputs,
                                ir::TensorMap& outputs) {
  if (!peer_supports(peer, kind)) return nullptr;
  switch (peer) {
    case Peer::Eigen: return eigen_peer(kind, inputs, outputs);
    case Peer::Loop: return loop_peer(kind, inputs, outputs);
    case Peer::OneDnn: return onednn_peer(kind, inputs, outputs);
    case Peer::OpenBlas: return openblas_peer(kind, inputs, outputs);
  }
  return nullptr;
}

void set_peer_threads(int threads) {
  omp_set_num_threads(threads);  // Eigen's products, the loops, oneDNN (Debian's is built on OpenMP)
  openblas_set_num_threads(threads);
}

}  // namespace fuse::bench
