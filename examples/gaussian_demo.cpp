// The Gaussian PDF of the Numba @vectorize tutorial, built with the C++ API and run by the
// reference interpreter: what `make demo` shows.
#include <cmath>
#include <cstdio>

#include "frontends/api.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "passes/pipeline.h"

int main() {
  using namespace fuse;
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor mean = g.input("mean", DType::F32);
  Tensor sigma = g.input("sigma", DType::F32);

  constexpr double kSqrt2Pi = 2.5066282746310002;
  auto gaussian_pdf = vectorize([&](Scalar v, Scalar m, Scalar s) {
    Scalar z = (v - m) / s;
    return exp(-0.5 * z * z) / (s * kSqrt2Pi);
  });
  g.output("y", gaussian_pdf(x, mean, sigma));

  std::printf("%s\n", ir::print_graph(g.ir()).c_str());
  ir::Graph lowered = passes::run_pipeline(g.ir()).graph;
  std::printf("after the passes:\n%s\n", ir::print_graph(lowered).c_str());

  const int n = 8;
  std::vector<float> xs(n);
  for (int i = 0; i < n; ++i) xs[i] = -2.0f + 0.5f * i;
  ir::TensorMap inputs{{"x", HostArray::from<float>({n}, xs)},
                       {"mean", HostArray::scalar<float>(0.0f)},
                       {"sigma", HostArray::scalar<float>(1.0f)}};
  ir::TensorMap outputs = ir::interpret(lowered, inputs);
  const float* y = outputs.at("y").as<float>();
  std::printf("%8s %12s %12s\n", "x", "y (fuse)", "y (libm)");
  for (int i = 0; i < n; ++i) {
    double expected = std::exp(-0.5 * xs[i] * xs[i]) / kSqrt2Pi;
    std::printf("%8.3f %12.8f %12.8f\n", xs[i], y[i], expected);
  }
  return 0;
}
