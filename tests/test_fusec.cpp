// fusec end to end: every example run on .npy inputs and checked against hand-written loops;
// the error cases and exit codes; graph pictures (dot, SVG, PNG).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "frontends/expr/compile.h"
#include "frontends/render.h"
#include "ir/dot.h"
#include "ir/error.h"
#include "ir/philox.h"
#include "runtime/bundle.h"
#include "runtime/npy.h"

namespace fs = std::filesystem;
using fuse::ir::HostArray;

namespace {

const std::string kFusec = FUSE_BINARY_DIR "/frontends/fusec/fusec";
const std::string kExamples = FUSE_SOURCE_DIR "/examples/";

fs::path scratch(const std::string& name) {
  fs::path dir = fs::path(FUSE_BINARY_DIR) / "tests" / "fusec_scratch" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Result {
  int status = -1;
  std::string out, err;
};

/// Runs fusec with `args` (already shell-quoted where needed) and captures everything.
Result fusec_env(const std::string& env, const std::string& args);
Result fusec(const std::string& args) { return fusec_env("", args); }
Result fusec_env(const std::string& env, const std::string& args) {
  fs::path dir = fs::path(FUSE_BINARY_DIR) / "tests" / "fusec_scratch";
  fs::create_directories(dir);
  // CTest runs test cases as parallel processes: capture files are per process.
  std::string tag = std::to_string(getpid());
  std::string out = (dir / ("stdout." + tag)).string(), err = (dir / ("stderr." + tag)).string();
  int raw = std::system((env + kFusec + " " + args + " > " + out + " 2> " + err).c_str());
  Result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

/// Deterministic test data in [lo, hi).
std::vector<float> data(size_t n, unsigned seed, float lo = -1, float hi = 1) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 12345;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = lo + (hi - lo) * static_cast<float>(s >> 8) * 0x1p-24f;
  }
  return v;
}

using Inputs = std::map<std::string, HostArray>;
using Outputs = std::map<std::string, HostArray>;

/// `fusec run EXAMPLE --input ... --out DIR`, then the outputs read back.
Outputs run_example(const std::string& example, const Inputs& inputs,
                    const std::vector<std::string>& output_names) {
  fs::path dir = scratch(example);
  std::string args = "run " + kExamples + example + ".expr --out " + (dir / "out").string();
  for (const auto& [name, array] : inputs) {
    std::string path = (dir / (name + ".npy")).string();
    fuse::runtime::write_npy(path, array);
    args += " --input " + name + "=" + path;
  }
  Result r = fusec(args);
  INFO(r.err);
  REQUIRE(r.status == 0);
  Outputs outputs;
  for (const std::string& name : output_names)
    outputs[name] = fuse::runtime::read_npy((dir / "out" / (name + ".npy")).string());
  return outputs;
}

void check_close(const HostArray& actual, const std::vector<double>& expected,
                 const fuse::ir::ConcreteShape& shape, double tolerance = 2e-5) {
  REQUIRE(actual.shape == shape);
  REQUIRE(actual.size() == static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("element " << i);
    CHECK(actual.get_f64(i) ==
          Approx(expected[i]).epsilon(tolerance).margin(tolerance));
  }
}

/// out[i, j] = sum_k a[i, k] * b[k, j] for row-major [m, k] and [k, n].
std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b, int m,
                           int k, int n) {
  std::vector<double> c(m * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

std::vector<double> doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("hypot", "[fusec][examples]") {
  auto x = data(5, 1), y = data(5, 2);
  Outputs out = run_example("hypot", {{"x", HostArray::from({5}, x)}, {"y", HostArray::from({5}, y)}}, {"r"});
  std::vector<double> r(5);
  for (int i = 0; i < 5; ++i) r[i] = std::sqrt(double(x[i]) * x[i] + double(y[i]) * y[i]);
  check_close(out["r"], r, {5});
}

TEST_CASE("gaussian_pdf", "[fusec][examples]") {
  auto x = data(7, 3, -3, 3);
  float mu = 0.3f, sigma = 0.8f;
  Outputs out = run_example("gaussian_pdf",
                            {{"x", HostArray::from({7}, x)},
                             {"mu", HostArray::scalar(mu)},
                             {"sigma", HostArray::scalar(sigma)}},
                            {"y"});
  std::vector<double> y(7);
  for (int i = 0; i < 7; ++i) {
    double z = (x[i] - mu) / sigma;
    y[i] = std::exp(-0.5 * z * z) / (sigma * std::sqrt(2 * M_PI));
  }
  check_close(out["y"], y, {7});
}

TEST_CASE("polar_distance", "[fusec][examples]") {
  auto r1 = data(6, 4, 0, 2), t1 = data(6, 5, -3, 3), r2 = data(6, 6, 0, 2), t2 = data(6, 7, -3, 3);
  Outputs out = run_example("polar_distance",
                            {{"r1", HostArray::from({6}, r1)},
                             {"theta1", HostArray::from({6}, t1)},
                             {"r2", HostArray::from({6}, r2)},
                             {"theta2", HostArray::from({6}, t2)}},
                            {"distance"});
  std::vector<double> d(6);
  for (int i = 0; i < 6; ++i) {
    double dx = r1[i] * std::cos(t1[i]) - r2[i] * std::cos(t2[i]);
    double dy = r1[i] * std::sin(t1[i]) - r2[i] * std::sin(t2[i]);
    d[i] = std::sqrt(dx * dx + dy * dy);
  }
  check_close(out["distance"], d, {6});
}

TEST_CASE("hidden_layer", "[fusec][examples]") {
  auto grey = data(8, 8, 0, 255), w = data(8, 9, 0.3f, 0.7f);
  for (float& g : grey) g = std::floor(g);
  Outputs out = run_example("hidden_layer",
                            {{"greyscales", HostArray::from({8}, grey)}, {"weights", HostArray::from({8}, w)}},
                            {"activations"});
  std::vector<double> a(8);
  for (int i = 0; i < 8; ++i) a[i] = std::tanh(grey[i] / 255.0 * w[i]);
  check_close(out["activations"], a, {8});
}

TEST_CASE("monte_carlo_pi", "[fusec][examples]") {
  Outputs out = run_example("monte_carlo_pi", {}, {"pi"});
  int64_t inside = 0, n = 100000;
  for (int64_t i = 0; i < n; ++i) {
    float x = fuse::ir::rand_uniform(1, i), y = fuse::ir::rand_uniform(2, i);
    inside += x * x + y * y <= 1.0f;
  }
  check_close(out["pi"], {4.0 * inside / n}, {}, 1e-6);
  CHECK(std::abs(out["pi"].get_f64(0) - M_PI) < 0.03);
}

TEST_CASE("add", "[fusec][examples]") {
  auto a = data(12, 10), b = data(4, 11);
  Outputs out = run_example("add", {{"a", HostArray::from({3, 4}, a)}, {"b", HostArray::from({4}, b)}}, {"c"});
  std::vector<double> c(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) c[i * 4 + j] = double(a[i * 4 + j]) + b[j];
  check_close(out["c"], c, {3, 4});
}

TEST_CASE("softmax", "[fusec][examples]") {
  auto x = data(15, 12, -4, 4);
  Outputs out = run_example("softmax", {{"x", HostArray::from({3, 5}, x)}}, {"y"});
  std::vector<double> y(15);
  for (int i = 0; i < 3; ++i) {
    double m = -INFINITY, sum = 0;
    for (int j = 0; j < 5; ++j) m = std::max(m, double(x[i * 5 + j]));
    for (int j = 0; j < 5; ++j) sum += std::exp(x[i * 5 + j] - m);
    for (int j = 0; j < 5; ++j) y[i * 5 + j] = std::exp(x[i * 5 + j] - m) / sum;
  }
  check_close(out["y"], y, {3, 5});
}

TEST_CASE("layernorm", "[fusec][examples]") {
  auto x = data(12, 13, -2, 2), gamma = data(6, 14), beta = data(6, 15);
  Outputs out = run_example("layernorm",
                            {{"x", HostArray::from({2, 6}, x)},
                             {"gamma", HostArray::from({6}, gamma)},
                             {"beta", HostArray::from({6}, beta)}},
                            {"y"});
  std::vector<double> y(12);
  for (int i = 0; i < 2; ++i) {
    double mu = 0, var = 0;
    for (int j = 0; j < 6; ++j) mu += x[i * 6 + j] / 6.0;
    for (int j = 0; j < 6; ++j) var += (x[i * 6 + j] - mu) * (x[i * 6 + j] - mu) / 6.0;
    for (int j = 0; j < 6; ++j)
      y[i * 6 + j] = (x[i * 6 + j] - mu) / std::sqrt(var + 1e-5) * gamma[j] + beta[j];
  }
  check_close(out["y"], y, {2, 6}, 1e-4);
}

TEST_CASE("logsumexp", "[fusec][examples]") {
  auto x = data(12, 16, -5, 5);
  Outputs out = run_example("logsumexp", {{"x", HostArray::from({4, 3}, x)}}, {"y"});
  std::vector<double> y(4);
  for (int i = 0; i < 4; ++i) {
    double sum = 0;
    for (int j = 0; j < 3; ++j) sum += std::exp(double(x[i * 3 + j]));
    y[i] = std::log(sum);
  }
  check_close(out["y"], y, {4});
}

TEST_CASE("mlp", "[fusec][examples]") {
  const int B = 2, K = 3, H = 4, N = 2;
  auto x = data(B * K, 17), w1 = data(K * H, 18), b1 = data(H, 19), w2 = data(H * N, 20), b2 = data(N, 21);
  Outputs out = run_example("mlp",
                            {{"x", HostArray::from({B, K}, x)},
                             {"w1", HostArray::from({K, H}, w1)},
                             {"b1", HostArray::from({H}, b1)},
                             {"w2", HostArray::from({H, N}, w2)},
                             {"b2", HostArray::from({N}, b2)}},
                            {"y"});
  std::vector<double> hidden = matmul(doubles(x), doubles(w1), B, K, H);
  for (int i = 0; i < B * H; ++i) hidden[i] = std::max(0.0, hidden[i] + b1[i % H]);
  std::vector<double> y = matmul(hidden, doubles(w2), B, H, N);
  for (int i = 0; i < B * N; ++i) y[i] += b2[i % N];
  check_close(out["y"], y, {B, N});
}

TEST_CASE("matmul", "[fusec][examples]") {
  auto a = data(3 * 4, 22), b = data(4 * 5, 23);
  Outputs out = run_example("matmul", {{"a", HostArray::from({3, 4}, a)}, {"b", HostArray::from({4, 5}, b)}}, {"c"});
  check_close(out["c"], matmul(doubles(a), doubles(b), 3, 4, 5), {3, 5});
}

TEST_CASE("batched_matmul", "[fusec][examples]") {
  auto a = data(2 * 3 * 4, 24), b = data(4 * 2, 25);
  Outputs out = run_example("batched_matmul",
                            {{"a", HostArray::from({2, 3, 4}, a)}, {"b", HostArray::from({4, 2}, b)}}, {"c"});
  std::vector<double> c;
  for (int batch = 0; batch < 2; ++batch) {
    std::vector<double> slice(a.begin() + batch * 12, a.begin() + (batch + 1) * 12);
    std::vector<double> part = matmul(slice, doubles(b), 3, 4, 2);
    c.insert(c.end(), part.begin(), part.end());
  }
  check_close(out["c"], c, {2, 3, 2});
}

TEST_CASE("transpose", "[fusec][examples]") {
  auto x = data(2 * 3, 26), t = data(2 * 3 * 4, 27);
  Outputs out = run_example("transpose", {{"x", HostArray::from({2, 3}, x)}, {"t", HostArray::from({2, 3, 4}, t)}},
                            {"xt", "permuted", "flat"});
  std::vector<double> xt(6), permuted(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) xt[j * 2 + i] = x[i * 3 + j];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) permuted[(j * 2 + i) * 4 + k] = t[(i * 3 + j) * 4 + k];
  check_close(out["xt"], xt, {3, 2});
  check_close(out["permuted"], permuted, {3, 2, 4});
  check_close(out["flat"], xt, {6});
}

TEST_CASE("reductions", "[fusec][examples]") {
  const int N = 3, M = 4;
  auto x = data(N * M, 28);
  Outputs out = run_example("reductions", {{"x", HostArray::from({N, M}, x)}},
                            {"total", "row_sums", "col_max", "row_min", "average", "row_prod",
                             "any_positive", "all_above", "row_absmax"});
  auto at = [&](int i, int j) { return double(x[i * M + j]); };
  double total = 0;
  std::vector<double> row_sums(N, 0), col_max(M, -INFINITY), row_min(N, INFINITY), row_prod(N, 1),
      any_positive(N, 0), all_above(M, 1), row_absmax(N, 0);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < M; ++j) {
      total += at(i, j);
      row_sums[i] += at(i, j);
      col_max[j] = std::max(col_max[j], at(i, j));
      row_min[i] = std::min(row_min[i], at(i, j));
      row_prod[i] *= at(i, j);
      any_positive[i] = any_positive[i] || at(i, j) > 0;
      all_above[j] = all_above[j] && at(i, j) > -0.5;
      row_absmax[i] = std::max(row_absmax[i], std::abs(at(i, j)));
    }
  check_close(out["total"], {total}, {});
  check_close(out["row_sums"], row_sums, {N});
  check_close(out["col_max"], col_max, {1, M});
  check_close(out["row_min"], row_min, {N});
  check_close(out["average"], {total / (N * M)}, {});
  check_close(out["row_prod"], row_prod, {N});
  check_close(out["any_positive"], any_positive, {N});
  check_close(out["all_above"], all_above, {M});
  check_close(out["row_absmax"], row_absmax, {N});
  CHECK(out["any_positive"].dtype == fuse::ir::DType::Bool);
}

TEST_CASE("run --print prints outputs as NumPy does", "[fusec]") {
  fs::path dir = scratch("print");
  fuse::runtime::write_npy((dir / "a.npy").string(), HostArray::from<float>({2, 2}, {1, 2.5f, -3, 4}));
  fuse::runtime::write_npy((dir / "b.npy").string(), HostArray::from<float>({2}, {0.5f, 0.25f}));
  Result r = fusec("run " + kExamples + "add.expr --input a=" + (dir / "a.npy").string() +
                   " --input b=" + (dir / "b.npy").string() + " --print");
  CHECK(r.status == 0);
  CHECK(r.out == "c = array([[ 1.5 ,  2.75],\n"
                 "           [-2.5 ,  4.25]], dtype=float32)\n");
}

TEST_CASE("run --random is deterministic in the seed and binds sizes from --dim", "[fusec]") {
  std::string base = "run " + kExamples + "add.expr --random --dim N=3 --dim M=4";
  Result a = fusec(base + " --seed 5"), b = fusec(base + " --seed 5"), c = fusec(base + " --seed 6");
  REQUIRE(a.status == 0);
  CHECK(a.out == b.out);
  CHECK(a.out != c.out);
  CHECK(a.out.find("c = array([[") == 0);

  // A size taken from a given input, the rest generated.
  fs::path dir = scratch("random");
  fuse::runtime::write_npy((dir / "b.npy").string(), HostArray::from<float>({2}, {0, 0}));
  Result d = fusec("run " + kExamples + "add.expr --random --dim N=1 --input b=" + (dir / "b.npy").string());
  CHECK(d.status == 0);
  Result e = fusec("run " + kExamples + "add.expr --random --dim N=1");
  CHECK(e.status == 1);
  CHECK(e.err.find("give the size of M with --dim M=SIZE") != std::string::npos);
}

TEST_CASE("bad inputs are user errors naming the input and the shapes", "[fusec][errors]") {
  fs::path dir = scratch("bad_inputs");
  auto save = [&](const std::string& name, const HostArray& a) {
    std::string path = (dir / (name + ".npy")).string();
    fuse::runtime::write_npy(path, a);
    return path;
  };
  std::string x5 = save("x5", HostArray::from<float>({5}, data(5, 1)));
  std::string y4 = save("y4", HostArray::from<float>({4}, data(4, 2)));
  std::string y5_f64 = save("y5_f64", HostArray::from<double>({5}, {1, 2, 3, 4, 5}));
  std::string hypot = "run " + kExamples + "hypot.expr --input x=" + x5;

  Result missing = fusec(hypot);
  CHECK(missing.status == 1);
  CHECK(missing.err.find("missing input 'y'") != std::string::npos);

  Result misshaped = fusec(hypot + " --input y=" + y4);
  CHECK(misshaped.status == 1);
  CHECK(misshaped.err.find("input 'y'") != std::string::npos);
  CHECK(misshaped.err.find("[4]") != std::string::npos);
  CHECK(misshaped.err.find("5") != std::string::npos);

  Result wrong_dtype = fusec(hypot + " --input y=" + y5_f64);
  CHECK(wrong_dtype.status == 1);
  CHECK(wrong_dtype.err.find("input 'y' has dtype f64") != std::string::npos);

  Result extra = fusec(hypot + " --input y=" + x5 + " --input z=" + x5);
  CHECK(extra.status == 1);
  CHECK(extra.err.find("unexpected input 'z'") != std::string::npos);

  Result no_file = fusec(hypot + " --input y=" + (dir / "nope.npy").string());
  CHECK(no_file.status == 1);
  CHECK(no_file.err.find("nope.npy") != std::string::npos);

  std::ofstream((dir / "garbage.npy").string()) << "not an array";
  Result garbage = fusec(hypot + " --input y=" + (dir / "garbage.npy").string());
  CHECK(garbage.status == 1);
  CHECK(garbage.err.find("garbage.npy: not a .npy file") != std::string::npos);

  Result bad_spec = fusec(hypot + " --input y");
  CHECK(bad_spec.status == 1);
  CHECK(bad_spec.err.find("--input expects NAME=VALUE") != std::string::npos);
}

TEST_CASE("flag mistakes are user errors with suggestions", "[fusec][errors]") {
  std::string hypot = kExamples + "hypot.expr";
  struct Case {
    std::string args, message;
  };
  std::vector<Case> cases = {
      {hypot + " --emt=graph", "unknown flag '--emt'; did you mean '--emit'?"},
      {"run " + hypot + " --prnt", "unknown flag '--prnt'; did you mean '--print'?"},
      {hypot + " --emit=grph", "unknown --emit kind 'grph'; did you mean 'graph'?"},
      {"run " + hypot + " --target=interpreter --random --dim N=2", "unknown target 'interpreter'"},
      {hypot + " --print", "--print is an option of `fusec run` only"},
      {"run " + hypot + " --emit=graph", "--emit is not an option of `fusec run`"},
      {hypot, "nothing to do: pass --emit=KIND"},
      {hypot + " --emit", "--emit needs a value"},
      {hypot + " --emit=graph --emit=dot", "--emit is given more than once"},
      {"run " + hypot + " --random --dim X=3", "no shape symbol 'X'"},
      {"run " + hypot + " --random --dim N=many", "--dim N must be an integer"},
      {"run " + hypot + " --seed 3", "--seed applies only with --random"},
      {hypot + " --emit=graph -o x.svg", "only dot output can be drawn"},
      {kExamples + "nope.expr --emit=graph", "cannot read"},
      {"", "usage: fusec"},
      {hypot + " --emit=fused --cpu=avx3", "CPU description: 'avx3' is not a property"},
      {hypot + " --emit=fused --cpu=l1=big", "CPU description: 'l1=big' needs a positive size such as 48K"},
      {hypot + " --emit=fused --cpu=vector=384", "CPU description: 'vector=384' must be 128, 256 or 512"},
      {hypot + " --emit=ptx --target=cuda --cpu=avx2", "--cpu applies only to CPU targets"},
  };
  for (const Case& c : cases) {
    INFO("fusec " << c.args);
    Result r = fusec(c.args);
    CHECK(r.status == 1);
    CHECK(r.err.find(c.message) != std::string::npos);
  }
}

TEST_CASE("the thread pool's environment variables are checked", "[fusec][errors]") {
  std::string run = "run " + kExamples + "hypot.expr --random --dim N=100";
  struct Case {
    std::string env, message;
  };
  std::vector<Case> cases = {
      {"FUSE_NUM_THREADS=0", "FUSE_NUM_THREADS must be an integer from 1 to 4096, got '0'"},
      {"FUSE_NUM_THREADS=two", "FUSE_NUM_THREADS must be an integer from 1 to 4096, got 'two'"},
      {"FUSE_SPIN_US=-5", "FUSE_SPIN_US must be an integer from 0 to 1000000, got '-5'"},
      {"FUSE_SPIN_US=100us", "FUSE_SPIN_US must be an integer from 0 to 1000000, got '100us'"},
      {"FUSE_SPIN_US=2000000", "FUSE_SPIN_US must be an integer from 0 to 1000000, got '2000000'"},
  };
  for (const Case& c : cases) {
    INFO(c.env);
    Result r = fusec_env(c.env + " ", run);
    CHECK(r.status == 1);
    CHECK(r.err.find(c.message) != std::string::npos);
  }
  for (const char* env : {"FUSE_SPIN_US=0 ", "FUSE_SPIN_US=1000000 "}) {
    INFO(env);
    Result r = fusec_env(env, run + " --check");
    CHECK(r.status == 0);
  }
}

TEST_CASE("compile errors print diagnostics and exit 1", "[fusec][errors]") {
  fs::path dir = scratch("diagnostics");
  std::ofstream((dir / "bad.expr").string()) << "input x: f32[N]\noutput y = x +* 2\n";
  Result r = fusec((dir / "bad.expr").string() + " --emit=graph");
  CHECK(r.status == 1);
  CHECK(r.err.find("bad.expr:2:") != std::string::npos);
  CHECK(r.err.find("error:") != std::string::npos);
  CHECK(r.out.empty());
}

TEST_CASE("help, version and emit=graph succeed", "[fusec]") {
  Result help = fusec("--help");
  CHECK(help.status == 0);
  for (const char* flag : {"--emit", "-o", "--target", "--input", "--dim", "--random", "--seed",
                           "--out", "--print", "--version", "e.g. fusec"})
    CHECK(help.out.find(flag) != std::string::npos);
  Result version = fusec("--version");
  CHECK(version.status == 0);
  CHECK(version.out == "fusec " FUSE_VERSION "\n");
  Result graph = fusec(kExamples + "hypot.expr --emit=graph");
  CHECK(graph.status == 0);
  CHECK(graph.out.find("input \"x\"") != std::string::npos);
}

namespace {

/// The text of an XML document, checking on the way that it is well formed: tags nest and
/// close in order, and the root element is <svg>. Entities in text are decoded.
std::string svg_text(const std::string& xml) {
  std::vector<std::string> open;
  std::string text, root;
  size_t i = 0;
  auto decode = [](std::string s) {
    for (auto [entity, c] : {std::pair{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""},
                             {"&apos;", "'"}, {"&#45;", "-"}, {"&#160;", " "}, {"&amp;", "&"}}) {
      for (size_t p; (p = s.find(entity)) != std::string::npos;) s.replace(p, std::strlen(entity), c);
    }
    return s;
  };
  while (i < xml.size()) {
    size_t lt = xml.find('<', i);
    text += decode(xml.substr(i, lt == std::string::npos ? std::string::npos : lt - i)) + "\n";
    if (lt == std::string::npos) break;
    if (xml.compare(lt, 4, "<!--") == 0) {
      i = xml.find("-->", lt);
      REQUIRE(i != std::string::npos);
      i += 3;
      continue;
    }
    size_t gt = xml.find('>', lt);
    REQUIRE(gt != std::string::npos);
    std::string tag = xml.substr(lt + 1, gt - lt - 1);
    i = gt + 1;
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      REQUIRE(!open.empty());
      CHECK(tag.substr(1) == open.back());
      open.pop_back();
      continue;
    }
    std::string name = tag.substr(0, tag.find_first_of(" \n\t/"));
    if (root.empty()) root = name;
    else REQUIRE(!open.empty());  // a single root element
    if (tag.back() != '/') open.push_back(name);
  }
  CHECK(open.empty());
  CHECK(root == "svg");
  return text;
}

}  // namespace

TEST_CASE("emit=dot draws every example as SVG holding every node's label", "[fusec][dot]") {
  fs::path dir = scratch("svg");
  for (const auto& entry : fs::directory_iterator(kExamples)) {
    if (entry.path().extension() != ".expr") continue;
    std::string name = entry.path().stem().string();
    INFO(name);
    std::string svg_path = (dir / (name + ".svg")).string();
    Result r = fusec(entry.path().string() + " --emit=dot -o " + svg_path);
    REQUIRE(r.status == 0);
    std::string text = svg_text(read_file(svg_path));

    std::string source = read_file(entry.path());
    fuse::expr::CompileResult compiled = fuse::expr::compile_expr(source, entry.path().string());
    REQUIRE(compiled.graph);
    for (fuse::ir::NodeId id = 0; id < static_cast<fuse::ir::NodeId>(compiled.graph->nodes.size()); ++id)
      for (const std::string& line : fuse::ir::dot_node_label(*compiled.graph, id)) {
        INFO("node " << id << " label line: " << line);
        CHECK(text.find(line) != std::string::npos);
      }
  }
}

TEST_CASE("dot text, PNG pictures and clusters", "[fusec][dot]") {
  fs::path dir = scratch("dot");
  std::string softmax = kExamples + "softmax.expr";
  Result stdout_dot = fusec(softmax + " --emit=dot");
  REQUIRE(stdout_dot.status == 0);
  CHECK(stdout_dot.out.starts_with("digraph \"softmax\" {"));
  Result file_dot = fusec(softmax + " --emit=dot -o " + (dir / "s.dot").string());
  CHECK(file_dot.status == 0);
  CHECK(read_file(dir / "s.dot") == stdout_dot.out);
  Result png = fusec(softmax + " --emit=dot -o " + (dir / "s.png").string());
  CHECK(png.status == 0);
  CHECK(read_file(dir / "s.png").starts_with("\x89PNG"));

  fuse::expr::CompileResult compiled = fuse::expr::compile_expr(read_file(softmax), softmax);
  REQUIRE(compiled.graph);
  const fuse::ir::Graph& g = *compiled.graph;
  std::vector<fuse::ir::NodeId> rest;
  for (fuse::ir::NodeId id = 1; id < static_cast<fuse::ir::NodeId>(g.nodes.size()); ++id) rest.push_back(id);
  std::string dot = fuse::ir::graph_to_dot(g, "fused \"softmax\"", {{"kernel 0", rest}});
  CHECK(dot.find("subgraph cluster_0 {") != std::string::npos);
  CHECK(dot.find("label=\"fused \\\"softmax\\\"\"") != std::string::npos);
  CHECK(dot == fuse::ir::graph_to_dot(g, "fused \"softmax\"", {{"kernel 0", rest}}));
  std::string text = svg_text(fuse::render_dot(dot, "svg"));
  CHECK(text.find("kernel 0") != std::string::npos);
  CHECK(text.find("fused \"softmax\"") != std::string::npos);
  CHECK_THROWS_WITH(fuse::ir::graph_to_dot(g, "", {{"a", {0}}, {"b", {0}}}),
                    Catch::Contains("already in a cluster"));
  CHECK_THROWS_WITH(fuse::render_dot(dot, "pdf"), Catch::Contains("formats are svg and png"));
  CHECK_THROWS_WITH(fuse::render_dot("digraph { a -> ", "svg"), Catch::Contains("graphviz"));
}

TEST_CASE("render_dot from several threads at once: every picture whole and errors to their caller", "[fusec][render]") {
  // Graphviz keeps global state; render_dot serializes the calls (frontends/render.h).
  const std::string good = "digraph { a -> b; b -> c; }";
  std::vector<std::string> images(8);
  std::vector<std::string> errors(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        try {
          if (t % 2) images[t] = fuse::render_dot(good, "svg");
          else fuse::render_dot("digraph { a -> ", "svg");
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 8; ++t) {
    INFO("thread " << t);
    if (t % 2) {
      CHECK(images[t].find("</svg>") != std::string::npos);
      CHECK(errors[t].empty());
    } else {
      CHECK_THAT(errors[t], Catch::Contains("graphviz"));
    }
  }
}

TEST_CASE("fusion stages: fused, plan, explain-fusion, dump-after, no-fusion", "[fusec][fusion]") {
  Result fused = fusec(kExamples + "softmax.expr --emit=fused");
  REQUIRE(fused.status == 0);
  CHECK(fused.out.find("kernel k0_rowwise rowwise over [N, M] axes=[1] (x) -> (y)") != std::string::npos);
  CHECK(fused.out.find("kernel k1") == std::string::npos);

  Result unfused = fusec(kExamples + "softmax.expr --emit=fused --no-fusion");
  REQUIRE(unfused.status == 0);
  CHECK(unfused.out.find("kernel k5_") != std::string::npos);

  Result plan = fusec(kExamples + "mlp.expr --emit=plan");
  REQUIRE(plan.status == 0);
  for (const char* key : {"\"kernels\": [", "\"buffers\": [", "\"launch_order\": [", "\"schedule\": {",
                          "\"kind\": \"matmul\"", "\"mc\": "})
    CHECK(plan.out.find(key) != std::string::npos);

  // The tiling pass's matmul choices: cache blocks (mc, kc, nc) and the register tile (mr, nr),
  // from this machine's caches and vector width.
  Result mlp = fusec(kExamples + "mlp.expr --emit=fused");
  REQUIRE(mlp.status == 0);
  std::smatch tiles;
  REQUIRE(std::regex_search(mlp.out, tiles, std::regex(R"(mc=(\d+) kc=(\d+) nc=(\d+) mr=(\d+) nr=(\d+))")));
  CHECK(std::stoi(tiles[1]) % std::stoi(tiles[4]) == 0);  // mc whole register tiles
  CHECK(std::stoi(tiles[3]) % std::stoi(tiles[5]) == 0);  // nc too
  CHECK(std::stoi(tiles[2]) >= 16);

  Result cuda = fusec(kExamples + "transpose.expr --emit=fused --target=cuda");
  REQUIRE(cuda.status == 0);
  CHECK(cuda.out.find("target=cuda") != std::string::npos);
  CHECK(cuda.out.find("shared_cols=33") != std::string::npos);

  Result explain = fusec(kExamples + "mlp.expr --explain-fusion");
  REQUIRE(explain.status == 0);
  CHECK(explain.out.find("it follows a reduction or matmul") != std::string::npos);

  Result dump = fusec(kExamples + "add.expr --dump-after=broadcast");
  REQUIRE(dump.status == 0);
  CHECK(dump.out.find("// after broadcast") != std::string::npos);
  CHECK(dump.out.find("broadcast_to") != std::string::npos);

  Result bad_pass = fusec(kExamples + "add.expr --dump-after=simplfy");
  CHECK(bad_pass.status == 1);
  CHECK(bad_pass.err.find("did you mean 'simplify'?") != std::string::npos);
}

TEST_CASE("emit=dot --fused draws kernels as clusters", "[fusec][fusion][dot]") {
  fs::path dir = scratch("fused_svg");
  std::string svg_path = (dir / "layernorm.svg").string();
  Result r = fusec(kExamples + "layernorm.expr --emit=dot --fused -o " + svg_path);
  REQUIRE(r.status == 0);
  std::string text = svg_text(read_file(svg_path));
  CHECK(text.find("k0_rowwise (rowwise)") != std::string::npos);
  Result dot = fusec(kExamples + "mlp.expr --emit=dot --fused");
  REQUIRE(dot.status == 0);
  CHECK(dot.out.find("subgraph cluster_k1") != std::string::npos);
  CHECK(fusec(kExamples + "mlp.expr --emit=graph --fused").status == 1);
}

TEST_CASE("run executes the fused and the unfused Program alike", "[fusec][fusion]") {
  const std::pair<const char*, const char*> cases[] = {
      {"softmax.expr", "--dim N=5 --dim M=7"},
      {"layernorm.expr", "--dim N=5 --dim D=9"},
      {"mlp.expr", "--dim B=2 --dim H=4 --dim K=3 --dim N=5"},
      {"reductions.expr", "--dim N=5 --dim M=7"}};
  for (auto [example, dims] : cases) {
    INFO(example);
    std::string common = kExamples + example + " --random --seed 3 " + dims + " --print";
    Result fused = fusec("run " + common);
    Result unfused = fusec("run " + common + " --no-fusion");
    INFO(fused.err << unfused.err);
    REQUIRE(fused.status == 0);
    REQUIRE(unfused.status == 0);
    if (std::string(example) == "layernorm.expr") {
      // The fused row kernel takes mean and variance from one pass (codegen's row_moments), which
      // rounds differently from the unfused two passes (an ulp or two): both are held to the
      // interpreter instead of to each other's printed digits.
      for (const char* fusion : {"", " --no-fusion"}) {
        Result checked = fusec("run " + kExamples + example + " --random --seed 3 " + dims + " --check" + fusion);
        CHECK(checked.status == 0);
        CHECK(checked.out.find(": ok") != std::string::npos);
      }
      continue;
    }
    CHECK(fused.out == unfused.out);
  }
}

TEST_CASE("run --check compares with the interpreter and --bench reports a median", "[fusec][cpu]") {
  Result check = fusec("run " + kExamples + "softmax.expr --random --dim N=8 --dim M=33 --check");
  CHECK(check.status == 0);
  CHECK(check.out.find("check y: max abs error") != std::string::npos);
  CHECK(check.out.find(": ok") != std::string::npos);
  Result bench = fusec("run " + kExamples + "add.expr --random --dim N=64 --dim M=64 --bench 3");
  CHECK(bench.status == 0);
  CHECK(bench.out.find("bench: median") != std::string::npos);
  CHECK(bench.out.find("GB/s") != std::string::npos);
  // --versus: two programs on the same inputs in one process, their outputs compared.
  Result versus = fusec("run " + kExamples + "add.expr --random --dim N=64 --dim M=64 --bench 3 --versus-cpu=avx2");
  CHECK(versus.status == 0);
  CHECK(versus.out.find("(--cpu=avx2): median") != std::string::npos);
  CHECK(versus.out.find("the first's speed") != std::string::npos);
  CHECK(versus.out.find("versus: output 'c' max |difference| 0 ") != std::string::npos);
  Result other = fusec("run " + kExamples + "hypot.expr --random --dim N=64 --bench 2 --versus " + kExamples +
                       "hypot.expr --fast-math");
  CHECK(other.status == 0);
  CHECK(other.out.find("versus: output 'r' max |difference|") != std::string::npos);
  Result cold = fusec("run " + kExamples + "add.expr --random --dim N=64 --dim M=64 --bench 2 --cold");
  CHECK(cold.status == 0);
  CHECK(cold.out.find("bench: median") != std::string::npos);
  Result cold_alone = fusec("run " + kExamples + "add.expr --random --dim N=4 --dim M=4 --cold");
  CHECK(cold_alone.status == 1);
  CHECK(cold_alone.err.find("--cold applies only with --bench") != std::string::npos);
  Result alone = fusec("run " + kExamples + "add.expr --random --dim N=4 --dim M=4 --versus " + kExamples + "add.expr");
  CHECK(alone.status == 1);
  CHECK(alone.err.find("--versus and --versus-cpu apply only with --bench") != std::string::npos);
  Result interp = fusec("run " + kExamples + "hypot.expr --target=interp --random --dim N=5 --check");
  CHECK(interp.status == 0);
  // f32 matmuls accumulated in f32, judged by the rounding model rather than a fixed tolerance.
  Result transformer = fusec("run " + kExamples + "transformer_block.expr --random --check");
  INFO(transformer.out << transformer.err);
  CHECK(transformer.status == 0);
  CHECK(transformer.out.find("of the allowed error: ok") != std::string::npos);
}

TEST_CASE("the disk cache survives a process restart", "[fusec][cache]") {
  fs::path dir = scratch("cache");
  std::string env = "FUSE_CACHE_DIR=" + (dir / "entries").string() + " ";
  std::string run = "run " + kExamples + "gaussian_pdf.expr --random --dim N=1000 --cache-stats --check";
  // `env` goes before the binary: fusec() prefixes the binary path, so use the shell's env.
  Result first = fusec_env(env, run);
  CHECK(first.status == 0);
  CHECK(first.err.find("0 disk hits, 1 compilations") != std::string::npos);
  Result second = fusec_env(env, run);
  CHECK(second.status == 0);
  CHECK(second.err.find("1 disk hits, 0 compilations") != std::string::npos);
  Result uncached = fusec_env(env, run + " --no-cache");
  CHECK(uncached.err.find("0 disk hits, 1 compilations") != std::string::npos);
  INFO(first.err << second.err << uncached.err);
}

TEST_CASE("fusec cache stats and clear", "[fusec][cache]") {
  fs::path dir = scratch("cache_command") / "entries";
  std::string env = "FUSE_CACHE_DIR=" + dir.string() + " ";
  CHECK(fusec_env(env, "run " + kExamples + "hypot.expr --random --dim N=10 --check").status == 0);
  std::ofstream(dir / "notes.txt") << "not a cache entry";
  Result stats = fusec_env(env + "FUSE_CACHE_MAX_BYTES=2M ", "cache stats");
  CHECK(stats.status == 0);
  CHECK(stats.out.find("directory  " + dir.string() + "\n") != std::string::npos);
  CHECK(stats.out.find("entries    1\n") != std::string::npos);
  CHECK(stats.out.find("limit      2.0 MiB (2097152 bytes)") != std::string::npos);
  Result cleared = fusec_env(env, "cache clear");
  CHECK(cleared.status == 0);
  CHECK(cleared.out == "removed 1 entry from " + dir.string() + "\n");
  CHECK(fs::exists(dir / "notes.txt"));
  CHECK(fusec_env(env, "cache stats").out.find("entries    0\n") != std::string::npos);
  Result unknown = fusec("cache stat");
  CHECK(unknown.status == 1);
  CHECK(unknown.err.find("unknown cache action 'stat'; did you mean 'stats'?") != std::string::npos);
  CHECK(fusec("cache").status == 1);
  CHECK(fusec("cache clear now").status == 1);
  Result bad_limit = fusec_env(env + "FUSE_CACHE_MAX_BYTES=lots ", "cache stats");
  CHECK(bad_limit.status == 1);
  CHECK(bad_limit.err.find("FUSE_CACHE_MAX_BYTES='lots' is not a size") != std::string::npos);
  CHECK(fusec("--help").out.find("fusec cache ACTION") != std::string::npos);
  INFO(stats.out << cleared.out << unknown.err << bad_limit.err);
}

TEST_CASE("emit mlir, llvm, asm and obj: each stage of the CPU backend", "[fusec][codegen]") {
  std::string file = kExamples + "hypot.expr";
  Result mlir = fusec(file + " --emit=mlir");
  CHECK(mlir.status == 0);
  CHECK(mlir.out.find("func.func @k0_elementwise") != std::string::npos);
  Result llvm = fusec(file + " --emit=llvm");
  CHECK(llvm.out.find("define void @k0_elementwise") != std::string::npos);
  Result assembly = fusec(file + " --emit=asm");
  CHECK(assembly.status == 0);
  CHECK(assembly.out.find("k0_elementwise:") != std::string::npos);
  Result to_stdout = fusec(file + " --emit=obj");
  CHECK(to_stdout.status == 1);
  CHECK(to_stdout.err.find("--emit=obj is binary: write it to a file with -o FILE") != std::string::npos);
  fs::path object = scratch("emit_obj") / "hypot.o";
  CHECK(fusec(file + " --emit=obj -o " + object.string()).status == 0);
  CHECK(read_file(object).substr(0, 4) == "\x7f" "ELF");
}

TEST_CASE("fast math compiles with LLVM fast flags and stays within tolerance", "[fusec][codegen]") {
  Result llvm = fusec(kExamples + "hypot.expr --emit=llvm --fast-math");
  CHECK(llvm.out.find("fmul fast") != std::string::npos);
  CHECK(fusec(kExamples + "hypot.expr --emit=llvm").out.find(" fast ") == std::string::npos);
  Result run = fusec("run " + kExamples + "polar_distance.expr --random --dim N=100003 --fast-math --check");
  INFO(run.out << run.err);
  CHECK(run.status == 0);
}

TEST_CASE("fusec --target=cuda emits PTX, the launch plan, the gpu.module and NVVM IR", "[fusec][codegen][cuda]") {
  std::string file = kExamples + "softmax.expr";
  fs::path ptx = scratch("emit_ptx") / "softmax.ptx";
  Result written = fusec(file + " --target=cuda --sm=80 --emit=ptx -o " + ptx.string());
  INFO(written.err);
  REQUIRE(written.status == 0);
  std::string text = read_file(ptx);
  CHECK(text.find(".target sm_80") != std::string::npos);
  CHECK(text.find(".entry k0_rowwise") != std::string::npos);
  CHECK(text.find('\0') == std::string::npos);
  CHECK(fusec(file + " --target=cuda --sm=90 --emit=ptx").out.find(".target sm_90") != std::string::npos);
  Result plan = fusec(file + " --target=cuda --sm=80 --emit=plan");
  CHECK(plan.status == 0);
  CHECK(plan.out.find("cuda plan for sm_80") != std::string::npos);
  CHECK(plan.out.find("launch k0_rowwise (kernel 0) block [256, 1, 1]") != std::string::npos);
  CHECK(fusec(file + " --target=cuda --emit=mlir").out.find("gpu.module @fuse_kernels") != std::string::npos);
  CHECK(fusec(file + " --target=cuda --emit=llvm").out.find("define void @k0_rowwise(ptr") != std::string::npos);
}

TEST_CASE("fusec --target=cuda --emit=bundle writes an AOT bundle fuse-run reads", "[fusec][cuda][bundle]") {
  fs::path dir = scratch("emit_bundle") / "mlp";
  fs::remove_all(dir);
  Result written = fusec(kExamples + "mlp.expr --target=cuda --sm=80 --emit=bundle -o " + dir.string());
  INFO(written.err);
  REQUIRE(written.status == 0);
  fuse::runtime::CudaProgram bundle = fuse::runtime::read_bundle(dir.string());
  CHECK(bundle.plan.sm == "sm_80");
  CHECK(bundle.plan.launches.size() == 2);  // two matmul kernels, their bias and relu fused
  CHECK(bundle.ptx.find(".entry k0_matmul") != std::string::npos);
  CHECK(bundle.inputs.size() == 5);
  CHECK(fusec(kExamples + "mlp.expr --target=cuda --emit=bundle").err.find("-o DIR") != std::string::npos);
}

TEST_CASE("fusec run --target=cuda without a driver says why and exits 1", "[fusec][errors][cuda]") {
  Result r = fusec_env("FUSE_LIBCUDA=/nonexistent/libcuda.so.1 ",
                       "run " + kExamples + "hypot.expr --target=cuda --random --dim N=8");
  INFO(r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("CUDA unavailable: /nonexistent/libcuda.so.1") != std::string::npos);
}

TEST_CASE("CUDA options that do not apply are clear user errors", "[fusec][errors][cuda]") {
  std::string hypot = kExamples + "hypot.expr";
  struct Case {
    std::string args, message;
  };
  std::vector<Case> cases = {
      {hypot + " --target=cuda --emit=asm", "--emit=asm is for the CPU"},
      {hypot + " --target=cuda --emit=obj -o x.o", "--emit=obj is for the CPU"},
      {hypot + " --emit=bundle -o x", "--emit=bundle needs --target=cuda"},
      {hypot + " --emit=ptx", "--emit=ptx needs --target=cuda"},
      {hypot + " --emit=ptx --sm=90", "--sm applies only with --target=cuda"},
      {hypot + " --target=cuda --emit=ptx --sm=sm80", "expected a compute capability such as 80"},
      {hypot + " --target=cuda --emit=ptx --sm=50", "CUDA 13 needs 75 or more"},
  };
  for (const Case& c : cases) {
    INFO("fusec " << c.args);
    Result r = fusec(c.args);
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find(c.message) != std::string::npos);
  }
}

TEST_CASE("fusec --cpu schedules for another CPU's vector width and caches", "[fusec]") {
  std::string matmul = kExamples + "matmul.expr";
  Result xeon = fusec(matmul + " --emit=fused --cpu=avx512,l1=48K,l2=2M,l3=480M,cores=2");
  CHECK(xeon.status == 0);
  CHECK(xeon.out.find("vector_width=16 mc=252 kc=1024 nc=30720 mr=6 nr=64 a_in_place=1") != std::string::npos);
  Result avx2 = fusec(matmul + " --emit=fused --cpu=avx2,l1=32K,l2=1M,l3=32M,cores=2");
  CHECK(avx2.status == 0);
  CHECK(avx2.out.find("vector_width=8 mc=") != std::string::npos);
  CHECK(avx2.out.find("mr=6 nr=16 a_in_place=0") != std::string::npos);
  // What runs is checked against the interpreter, with the schedules of the described machine.
  Result run = fusec("run " + matmul + " --random --dim M=37 --dim K=19 --dim N=41 --check --cpu=avx2,l1=48K,l2=2M,l3=480M");
  CHECK(run.status == 0);
  CHECK(run.out.find("MISMATCH") == std::string::npos);
}

TEST_CASE("every emit kind on both targets walks the driver's stages", "[fusec][driver]") {
  std::string file = kExamples + "softmax.expr";
  fs::path dir = scratch("emit_every_stage");
  struct Case {
    std::string flags, kind, marker;
  };
  // One marker each: the text of the stage, or the start of the file it writes.
  const Case cases[] = {
      {"", "graph", "input \"x\""},
      {"", "dot", "digraph \"softmax\" {"},
      {"", "fused", "kernel k0_rowwise rowwise over [N, M]"},
      {"", "plan", "\"kind\": \"rowwise\""},
      {"", "mlir", "func.func @k0_rowwise"},
      {"", "llvm", "define void @k0_rowwise"},
      {"", "asm", "k0_rowwise:"},
      {"", "obj", "\x7f" "ELF"},
      {"--target=cuda --sm=80", "graph", "input \"x\""},
      {"--target=cuda --sm=80", "dot", "digraph \"softmax\" {"},
      {"--target=cuda --sm=80", "fused", "target=cuda"},
      {"--target=cuda --sm=80", "plan", "cuda plan for sm_80"},
      {"--target=cuda --sm=80", "mlir", "gpu.module @fuse_kernels"},
      {"--target=cuda --sm=80", "llvm", "define void @k0_rowwise(ptr"},
      {"--target=cuda --sm=80", "ptx", ".entry k0_rowwise"},
  };
  for (const Case& c : cases) {
    INFO("fusec softmax.expr " << c.flags << " --emit=" << c.kind);
    fs::path out = dir / ("out." + c.kind);
    Result r = fusec(file + " " + c.flags + " --emit=" + c.kind + (c.kind == "obj" ? " -o " + out.string() : ""));
    INFO(r.err);
    REQUIRE(r.status == 0);
    std::string text = c.kind == "obj" ? read_file(out) : r.out;
    CHECK(text.find(c.marker) != std::string::npos);
  }
  Result bundle = fusec(file + " --target=cuda --sm=80 --emit=bundle -o " + (dir / "bundle").string());
  REQUIRE(bundle.status == 0);
  CHECK(fuse::runtime::read_bundle((dir / "bundle").string()).ptx.find(".entry k0_rowwise") != std::string::npos);
}

TEST_CASE("fusec --help says what each target compiles for and that run runs on the CPU by default", "[fusec]") {
  Result help = fusec("--help");
  REQUIRE(help.status == 0);
  CHECK(help.out.find("where to run (cpu, cuda, interp; default cpu, machine code for this CPU)") != std::string::npos);
  CHECK(help.out.find("default interp") == std::string::npos);
  CHECK(help.out.find("targets (--target=NAME):\n  cpu       this machine's CPU") != std::string::npos);
  CHECK(help.out.find("\n  cuda      NVIDIA GPUs: PTX for --sm=NN") != std::string::npos);
  CHECK(help.out.find("\n  interp    run only: the fused Program") != std::string::npos);
  for (const char* kind : {"graph", "dot", "fused", "plan", "mlir", "llvm", "asm", "obj", "ptx", "bundle"})
    CHECK(help.out.find("\n  " + std::string(kind) + " ") != std::string::npos);

  // What the help says is what runs: without --target, `run` compiles machine code (the cache
  // compiles it once); the interpreter compiles nothing.
  fs::path dir = scratch("run_default_target");
  std::string env = "FUSE_CACHE_DIR=" + (dir / "entries").string() + " ";
  std::string run = "run " + kExamples + "hypot.expr --random --dim N=8 --cache-stats";
  Result cpu = fusec_env(env, run);
  CHECK(cpu.status == 0);
  CHECK(cpu.err.find("0 disk hits, 1 compilations") != std::string::npos);
  Result interp = fusec_env(env, run + " --target=interp");
  CHECK(interp.status == 0);
  CHECK(interp.err.find("0 memory hits, 0 disk hits, 0 compilations") != std::string::npos);
  INFO(cpu.err << interp.err);
  Result compile_interp = fusec(kExamples + "hypot.expr --emit=fused --target=interp");
  CHECK(compile_interp.status == 1);
  CHECK(compile_interp.err.find("--target=interp only runs programs: use `fusec run`") != std::string::npos);
  Result compile_sim = fusec(kExamples + "hypot.expr --emit=ptx --target=cuda-sim");
  CHECK(compile_sim.status == 1);
  CHECK(compile_sim.err.find("--target=cuda-sim only runs programs: use `fusec run`; --target=cuda --emit=... shows the kernels it runs") !=
        std::string::npos);
}

TEST_CASE("fusec run --target=cuda compiles for GPU 0 and --check reports a mismatch with compare_arrays",
          "[fusec][cuda]") {
  // The fake driver (tests/fake_cuda/) loads the PTX and records launches without running them:
  // the outputs are whatever the device memory held, which --check must catch.
  std::string env = "FUSE_LIBCUDA=" FUSE_FAKE_CUDA " ";
  std::string run = "run " + kExamples + "hypot.expr --target=cuda --random --dim N=8";
  Result printed = fusec_env(env, run);
  INFO(printed.err);
  CHECK(printed.status == 0);
  CHECK(printed.out.find("r = array(") == 0);
  Result checked = fusec_env(env, run + " --check");
  INFO(checked.out << checked.err);
  CHECK(checked.status == 1);
  CHECK(checked.out.find(": MISMATCH\n  output 'r' (f32[8]) differs at flat index") != std::string::npos);
}

TEST_CASE("fusec run --target=cuda-sim runs the CUDA kernels on the simulator and checks them", "[fusec][cuda][sim]") {
  // The done-when command of the simulator's issue.
  Result r = fusec("run " + kExamples + "softmax.expr --target=cuda-sim --random --dim N=64 --dim M=5000 --check");
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(r.out.find("check y: ") != std::string::npos);
  CHECK(r.out.find(": ok") != std::string::npos);
  Result bad = fusec("run " + kExamples + "softmax.expr --target=cuda-sim --random --dim N=2 --dim M=5 --sim-checks=race,typo");
  CHECK(bad.status == 1);
  CHECK(bad.err.find("--sim-checks: unknown check 'typo'") != std::string::npos);
  Result wrong = fusec("run " + kExamples + "softmax.expr --target=cpu --random --dim N=2 --dim M=5 --sim-checks=race");
  CHECK(wrong.err.find("--sim-checks applies only with --target=cuda-sim") != std::string::npos);
}
