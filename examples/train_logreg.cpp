// Logistic regression trained by gradient descent, with the gradient built by fuse's autodiff
// (fuse::vjp) inside the graph of one training step: a synthetic, linearly separable data set
// made here, the step compiled once for the CPU and run repeatedly. The weights stay in the
// runtime's buffers: each step's updated weights are swapped (not copied) into the next step's
// inputs. Exits non-zero below 95% training accuracy (a test runs it: examples:train_logreg).
#include <cmath>
#include <cstdio>
#include <random>
#include <utility>

#include "frontends/api.h"
#include "frontends/compile.h"

int main() {
  using namespace fuse;
  const int n = 512, d = 4, steps = 300;
  const float learning_rate = 0.5f;

  // One training step: loss and accuracy of the current weights, and the updated weights.
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), d});
  Tensor t = g.input("t", DType::F32, {sym("N")});  // labels, 0 or 1
  Tensor w = g.input("w", DType::F32, {d});
  Tensor b = g.input("b", DType::F32);
  Tensor z = matmul(x, w) + b;
  // Binary cross-entropy of sigmoid(z), written stably: softplus(z) - t * z.
  Tensor loss = mean(log1p(exp(-abs(z))) + relu(z) - t * z);
  std::vector<Tensor> grads = vjp(loss, {w, b});
  g.output("loss", loss);
  g.output("accuracy", mean(cast(equal(z > 0.0, t > 0.5), DType::F32)));
  g.output("w_next", w - learning_rate * grads[0]);
  g.output("b_next", b - learning_rate * grads[1]);
  runtime::Executable step = compile(g);

  // Points around the origin labelled by a hidden hyperplane: separable.
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float true_w[d] = {1.5f, -2.0f, 0.5f, 1.0f}, true_b = 0.25f;
  std::vector<float> xs(n * d), ts(n);
  for (int i = 0; i < n; ++i) {
    float s = true_b;
    for (int j = 0; j < d; ++j) s += (xs[i * d + j] = normal(rng)) * true_w[j];
    ts[i] = s > 0 ? 1.0f : 0.0f;
  }
  ir::TensorMap inputs{{"x", HostArray::from<float>({n, d}, xs)},
                       {"t", HostArray::from<float>({n}, ts)},
                       {"w", HostArray(DType::F32, {d})},
                       {"b", HostArray(DType::F32, {})}};
  ir::TensorMap outputs;
  double accuracy = 0, loss_value = 0;
  for (int i = 0; i < steps; ++i) {
    step.run(inputs, outputs);  // outputs' arrays are reused from the second step on
    loss_value = outputs.at("loss").get_f64(0);
    accuracy = outputs.at("accuracy").get_f64(0);
    if (i % 50 == 0 || i == steps - 1) std::printf("step %3d  loss %.4f  accuracy %.3f\n", i, loss_value, accuracy);
    std::swap(inputs.at("w"), outputs.at("w_next"));
    std::swap(inputs.at("b"), outputs.at("b_next"));
  }
  std::printf("trained: loss %.4f, training accuracy %.1f%%\n", loss_value, 100 * accuracy);
  return accuracy >= 0.95 ? 0 : 1;
}
