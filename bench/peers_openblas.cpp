// The OpenBLAS peer: cblas_sgemm, with the MLP layer's bias and relu as a separate pass over C
// (BLAS has no epilogue) on OpenMP threads (bench/README.md, "Peers").
#include <cblas.h>

#include <algorithm>

#include "bench/peers.h"

namespace fuse::bench {

std::function<void()> openblas_peer(const std::string& kind, const ir::TensorMap& i, ir::TensorMap& o) {
  if (kind == "transformer_block") return transformer_block_peer(Peer::OpenBlas, i, o);
  if (kind != "matmul" && kind != "mlp_layer") return nullptr;
  bool mlp = kind == "mlp_layer";
  const char* a_name = mlp ? "x" : "a";
  const char* b_name = mlp ? "w" : "b";
  int m = static_cast<int>(dim(i, a_name, 0)), k = static_cast<int>(dim(i, a_name, 1)),
      n = static_cast<int>(dim(i, b_name, 1));
  const float *a = in(i, a_name), *b = in(i, b_name), *bias = mlp ? in(i, "b") : nullptr;
  float* c = out(o, mlp ? "y" : "c");
  return [=] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a, k, b, n, 0.f, c, n);
    if (!mlp) return;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < m; ++r)
      for (int j = 0; j < n; ++j) c[int64_t{r} * n + j] = std::max(c[int64_t{r} * n + j] + bias[j], 0.f);
  };
}

}  // namespace fuse::bench
