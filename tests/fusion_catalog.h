// The fusion catalog, tinygrad-style: graphs with the number (and kinds) of kernels each must
// become after fusion, positive and negative cases. tests/test_fusion.cpp checks the counts and
// kinds; tests/test_cpu_examples.cpp runs every case through the CPU backend.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "frontends/api.h"
#include "ir/program.h"

namespace fuse::testing {

inline const Dim N = sym("N"), M = sym("M"), K = sym("K");

struct Case {
  std::string name;
  std::function<void(Graph&)> build;
  size_t kernels;
  std::vector<ir::KernelKind> kinds = {};  // when given, the kinds in launch order
};

inline const std::vector<Case>& catalog() {
  static const std::vector<Case> cases = {
      {"gaussian_pdf",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N});
         Tensor m = g.input("mean", DType::F32);
         Tensor s = g.input("sigma", DType::F32);
         Tensor z = (x - m) / s;
         g.output("y", exp(-0.5 * z * z) / (s * 2.5066282746));
       },
       1, {ir::KernelKind::Elementwise}},
      {"hypot",
       [](Graph& g) {
         Tensor a = g.input("a", DType::F32, {N});
         Tensor b = g.input("b", DType::F32, {N});
         g.output("h", sqrt(a * a + b * b));
       },
       1},
      {"polar_distance",
       [](Graph& g) {
         Tensor r1 = g.input("r1", DType::F32, {N});
         Tensor t1 = g.input("t1", DType::F32, {N});
         Tensor r2 = g.input("r2", DType::F32, {N});
         Tensor t2 = g.input("t2", DType::F32, {N});
         auto polar = vectorize([](Scalar r, Scalar t) { return std::make_tuple(r * cos(t), r * sin(t)); });
         auto [x1, y1] = polar(r1, t1);
         auto [x2, y2] = polar(r2, t2);
         g.output("d", sqrt((x1 - x2) * (x1 - x2) + (y1 - y2) * (y1 - y2)));
       },
       1},
      {"hidden_layer",
       [](Graph& g) {
         Tensor grey = g.input("greyscales", DType::F32, {N});
         Tensor w = g.input("weights", DType::F32, {N});
         Tensor normalized = grey / 255.0;
         Tensor weighed = normalized * w;
         g.output("activated", exp(-weighed));
       },
       1},
      {"softmax_rows",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
         Tensor e = exp(x - max(x, -1, true));
         g.output("y", e / sum(e, -1, true));
       },
       1, {ir::KernelKind::RowWise}},
      {"layernorm_rows",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
         Tensor gamma = g.input("gamma", DType::F32, {sym("C")});
         Tensor beta = g.input("beta", DType::F32, {sym("C")});
         Tensor xc = x - mean(x, -1, true);
         Tensor var = mean(xc * xc, -1, true);
         g.output("y", xc * rsqrt(var + 1e-5) * gamma + beta);
       },
       1, {ir::KernelKind::RowWise}},
      {"logsumexp_rows",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
         Tensor m = max(x, -1, true);
         g.output("y", log(sum(exp(x - m), -1, true)) + m);
       },
       1, {ir::KernelKind::RowWise}},
      // Cross-entropy's shape: the rows' max read by their sum of exps and by the per-row loss
      // that a mean over the rows reads. The max is computed with the sum and stored for the
      // mean's kernel (3 kernels before: the max on its own, reading the rows once more).
      {"logsumexp_then_mean_over_rows",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
         Tensor m = max(x, -1, true);
         g.output("loss", mean(m + log(sum(exp(x - m), -1, true))));
       },
       2, {ir::KernelKind::RowWise, ir::KernelKind::Reduction}},
      {"softmax_without_keepdims",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {sym("R"), sym("C")});
         Tensor e = exp(x - expand_dims(max(x, 1), 1));
         g.output("y", e / expand_dims(sum(e, 1), 1));
       },
       1, {ir::KernelKind::RowWise}},
      {"mlp_layer",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, K});
         Tensor w = g.input("w", DType::F32, {K, M});
         Tensor b = g.input("b", DType::F32, {M});
         g.output("y", relu(matmul(x, w) + b));
       },
       1, {ir::KernelKind::Matmul}},
      {"two_matmuls_never_fuse",
       [](Graph& g) {
         Tensor a = g.input("a", DType::F32, {N, K});
         Tensor b = g.input("b", DType::F32, {K, M});
         Tensor c = g.input("c", DType::F32, {M, K});
         g.output("y", matmul(matmul(a, b), c));
       },
       2, {ir::KernelKind::Matmul, ir::KernelKind::Matmul}},
      {"sum_and_max_read_x_once",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         g.output("s", sum(x));
         g.output("m", max(x));
       },
       1, {ir::KernelKind::Reduction}},
      {"diamond",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N});
         Tensor y = exp(x);
         g.output("out", y * sin(y));
       },
       1},
      {"prologue_into_reduction",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         g.output("s", sum(x * x + 1.0, 1));
       },
       1, {ir::KernelKind::Reduction}},
      {"reduction_epilogue",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         g.output("norm", sqrt(sum(x * x, 1)) * 2.0);
       },
       1, {ir::KernelKind::Reduction}},
      {"mean_of_everything",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F64, {N, M, K});
         g.output("m", mean(abs(x)));
       },
       1},
      {"broadcast_elementwise_across_views",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         Tensor v = g.input("v", DType::F32, {N});
         g.output("y", transpose(x) * v + reshape(x, {M, N}));
       },
       1, {ir::KernelKind::Elementwise}},
      {"transpose_alone",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         g.output("t", transpose(x));
       },
       1, {ir::KernelKind::Transpose}},
      {"input_as_output_is_copied",
       [](Graph& g) {
         Tensor x = g.input("x", DType::I32, {N});
         g.output("same", x);
       },
       1, {ir::KernelKind::Copy}},
      {"matmul_with_prologue",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, K});
         Tensor w = g.input("w", DType::F32, {K, M});
         g.output("y", matmul(x * 0.5, w));
       },
       1, {ir::KernelKind::Matmul}},
      {"expensive_prologue_is_not_recomputed_per_tile",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, K});
         Tensor w = g.input("w", DType::F32, {K, M});
         g.output("y", matmul(exp(x) * sin(x), w));
       },
       2, {ir::KernelKind::Elementwise, ir::KernelKind::Matmul}},
      {"residual_add_epilogue",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, K});
         Tensor w = g.input("w", DType::F32, {K, K});
         g.output("y", matmul(x, w) * 0.5 + x);
       },
       1, {ir::KernelKind::Matmul}},
      {"batched_matmul_with_bias",
       [](Graph& g) {
         Tensor a = g.input("a", DType::F32, {2, N, K});
         Tensor b = g.input("b", DType::F32, {K, M});
         g.output("y", matmul(a, b) + 1.0);
       },
       1, {ir::KernelKind::Matmul}},
      {"reduction_over_leading_axis_broadcast_back_is_not_rowwise",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         g.output("y", x - mean(x, 0, true));
       },
       2, {ir::KernelKind::Reduction, ir::KernelKind::Elementwise}},
      {"reduce_of_reduce_is_two_kernels",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         g.output("y", max(sum(x, 1)));
       },
       2, {ir::KernelKind::Reduction, ir::KernelKind::Reduction}},
      {"expensive_shared_producer_is_materialized",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         Tensor e = exp(x) * tanh(x);
         g.output("a", sum(e, 1));
         g.output("b", max(e, 0));
       },
       3},
      {"cheap_shared_producer_is_recomputed",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, M});
         Tensor y = x * 2.0;
         g.output("a", sum(y, 1));
         g.output("b", max(y, 0));
       },
       2},
      {"expensive_producer_not_recomputed_across_broadcast",
       [](Graph& g) {
         Tensor v = g.input("v", DType::F32, {N});
         Tensor x = g.input("x", DType::F32, {M, N});
         g.output("y", x * (exp(v) * sin(v)));
       },
       2},
      {"intermediate_also_an_output",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N});
         Tensor y = exp(x);
         g.output("y", y);
         g.output("z", y + 1.0);
       },
       1},
      {"independent_outputs_different_spaces",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N});
         Tensor z = g.input("z", DType::F32, {M});
         g.output("a", x + 1.0);
         g.output("b", z + 1.0);
       },
       2},
      {"rand_monte_carlo_pi",
       [](Graph& g) {
         Tensor x = g.rand({1000}, 1);
         Tensor y = g.rand({1000}, 2);
         g.output("pi", 4.0 * mean(cast(x * x + y * y <= 1.0, DType::F32)));
       },
       1},
      {"two_layer_mlp_epilogues_stay_with_their_matmuls",
       [](Graph& g) {
         Tensor x = g.input("x", DType::F32, {N, K});
         Tensor w1 = g.input("w1", DType::F32, {K, M});
         Tensor b1 = g.input("b1", DType::F32, {M});
         Tensor w2 = g.input("w2", DType::F32, {M, K});
         g.output("y", matmul(relu(matmul(x, w1) + b1), w2));
       },
       2, {ir::KernelKind::Matmul, ir::KernelKind::Matmul}},
      {"matmul_result_reduced_is_two_kernels",
       [](Graph& g) {
         Tensor a = g.input("a", DType::F32, {N, K});
         Tensor b = g.input("b", DType::F32, {K, M});
         g.output("s", sum(matmul(a, b), 1));
       },
       2, {ir::KernelKind::Matmul, ir::KernelKind::Reduction}},
      // Views between matmuls (issue 15): attention's q @ k.T with k itself a product. The
      // transpose computes nothing, so the second matmul's packing reads k through it: no
      // kernel copies k.T.
      {"matmul_reads_a_transposed_matmul_result_through_the_view",
       [](Graph& g) {
         Tensor h = g.input("h", DType::F32, {N, K});
         Tensor wq = g.input("wq", DType::F32, {K, K});
         Tensor wk = g.input("wk", DType::F32, {K, K});
         g.output("scores", matmul(matmul(h, wq), transpose(matmul(h, wk) * 0.5)) * 0.25);
       },
       3, {ir::KernelKind::Matmul, ir::KernelKind::Matmul, ir::KernelKind::Matmul}},
      // A view of a matmul result as the left operand, and one chained after an elementwise
      // epilogue (the epilogue stays with its own matmul; only the view moves).
      {"matmul_reads_a_transposed_product_as_its_left_operand",
       [](Graph& g) {
         Tensor a = g.input("a", DType::F32, {K, N});
         Tensor b = g.input("b", DType::F32, {K, K});
         Tensor c = g.input("c", DType::F32, {K, M});
         g.output("y", matmul(transpose(relu(matmul(b, a))), c));
       },
       2, {ir::KernelKind::Matmul, ir::KernelKind::Matmul}},
  };
  return cases;
}

}  // namespace fuse::testing
