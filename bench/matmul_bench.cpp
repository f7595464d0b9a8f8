// matmul_bench: fuse's f32 matmul against OpenBLAS (cblas_sgemm), oneDNN's matmul primitive
// (where oneDNN is installed) and the machine's FMA peak, measured in the same run
// (bench/README.md, "Matmul"). Every row runs in each round, rounds
// interleave the rows in a shuffled order (so that load from other processes hits all rows
// alike), and the tables report medians.
//
//   matmul_bench [--rounds=N] [--max=SIZE] [--shapes=MxKxN,...] [--targets=DESC;DESC...]
//
// --shapes replaces the default rows (squares up to --max, three odd shapes, two of few rows, two
// MLP layers) with plain matmuls of the shapes given, e.g. --shapes=1024x1024x1023,1024x1024x1024.
// --targets compiles fuse's matmul once per CPU description (ir::Target::cpu: "l1=24K",
// "l2=1M,cores=4", "" for the host) and runs them all in the same rounds: blockings compared in
// one process, where this machine's drift between runs hides differences of 10%.
#include <cblas.h>
#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#ifdef FUSE_MATMUL_BENCH_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

#include "bench/openblas_core.h"
#include "bench/peer_threads.h"
#include "frontends/compile.h"
#include "runtime/thread_pool.h"

namespace fuse::bench {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// ---- FMA peak: independent FMA chains per thread, enough of them to hide the latency ----

constexpr int kChains = 12;
constexpr int64_t kPeakSteps = 1 << 22;

// Twelve named accumulators (an array would live on the stack and chain through memory).
#define FUSE_FMA_CHAINS(VEC, SET1, FMA, ADD, STORE, LANES)                                   \
  VEC x = SET1(0.999999f), y = SET1(1e-7f);                                                  \
  VEC a0 = SET1(0.f), a1 = SET1(1e-3f), a2 = SET1(2e-3f), a3 = SET1(3e-3f), a4 = SET1(4e-3f); \
  VEC a5 = SET1(5e-3f), a6 = SET1(6e-3f), a7 = SET1(7e-3f), a8 = SET1(8e-3f), a9 = SET1(9e-3f); \
  VEC a10 = SET1(1e-2f), a11 = SET1(1.1e-2f);                                                \
  for (int64_t s = 0; s < steps; ++s) {                                                      \
    a0 = FMA(a0, x, y); a1 = FMA(a1, x, y); a2 = FMA(a2, x, y); a3 = FMA(a3, x, y);           \
    a4 = FMA(a4, x, y); a5 = FMA(a5, x, y); a6 = FMA(a6, x, y); a7 = FMA(a7, x, y);           \
    a8 = FMA(a8, x, y); a9 = FMA(a9, x, y); a10 = FMA(a10, x, y); a11 = FMA(a11, x, y);       \
  }                                                                                          \
  VEC sum = ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))),           \
                ADD(ADD(a8, a9), ADD(a10, a11)));                                            \
  float lanes[LANES];                                                                        \
  STORE(lanes, sum);                                                                         \
  double total = 0;                                                                          \
  for (float l : lanes) total += l;                                                          \
  return total;

__attribute__((target("avx512f"))) double fma_chains_avx512(int64_t steps) {
  FUSE_FMA_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps, 16)
}

__attribute__((target("avx2,fma"))) double fma_chains_avx2(int64_t steps) {
  FUSE_FMA_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps, 8)
}

struct Peak {
  int lanes = 0;
  const char* isa = "none";
};

Peak peak_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {16, "AVX-512"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {8, "AVX2+FMA"};
  return {};
}

// One measurement of f32 GFLOP/s with every thread of the pool running FMA chains.
double peak_gflops_trial() {
  Peak isa = peak_isa();
  if (!isa.lanes) return 0;
  runtime::ThreadPool& pool = runtime::ThreadPool::global();
  int threads = pool.num_threads();
  volatile double sink = 0;
  Clock::time_point start = Clock::now();
  pool.parallel_for(0, threads, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t)
      sink = sink + (isa.lanes == 16 ? fma_chains_avx512(kPeakSteps) : fma_chains_avx2(kPeakSteps));
  });
  double seconds = since(start);
  return 2.0 * isa.lanes * kChains * static_cast<double>(kPeakSteps) * threads / seconds / 1e9;
}

// ---- The rows ----

struct Shape {
  int64_t m, k, n;
  std::string name() const {
    if (m == k && k == n) return std::to_string(m) + "^3";
    return std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
  }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n); }
};

std::vector<float> random_floats(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(count);
  for (float& x : v) x = u(rng);
  return v;
}

// One benchmark row: prepare once, then run() once per round.
struct Row {
  std::string group, label;
  double flops = 0;
  std::function<void()> run;
  std::vector<double> seconds;
};

struct MatmulCase {
  Shape s;
  bool mlp = false;  // relu(x @ w + b)
  ir::TensorMap inputs;
  std::vector<std::unique_ptr<runtime::Executable>> exes;  // one per target
  std::vector<ir::TensorMap> outputs;                      // each one's
  // The peers' results, allocated as fuse's outputs are (64-byte aligned, 2 MiB pages from
  // 2 MiB on): in std::vectors (4 KiB pages here) OpenBLAS and oneDNN ran 1024^3 10-15% slower
  // than in fuse_bench, where they write into HostArrays.
  ir::HostArray c;  // OpenBLAS's result
  ir::HostArray c_onednn;
};

#ifdef FUSE_MATMUL_BENCH_ONEDNN
// oneDNN's matmul primitive on plain row-major arrays (weights not in a blocked layout prepared
// ahead: fuse packs at run time too), the MLP layer's bias and relu as its bias and an eltwise
// post-op: the same primitive as fuse_bench's oneDNN peer (bench/peers_onednn.cpp).
std::function<void()> onednn_matmul(MatmulCase& p) {
  using dnnl::memory;
  using Tag = memory::format_tag;
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  static dnnl::stream stream(engine);
  auto desc = [](memory::dims dims) { return memory::desc(dims, memory::data_type::f32, Tag::ab); };
  auto wrap = [&](const memory::desc& d, const float* data) { return memory(d, engine, const_cast<float*>(data)); };
  memory::desc a = desc({p.s.m, p.s.k}), b = desc({p.s.k, p.s.n}), c = desc({p.s.m, p.s.n}), bias = desc({1, p.s.n});
  p.c_onednn = ir::HostArray(ir::DType::F32, {p.s.m, p.s.n});
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wrap(a, p.inputs.at("x").as<float>())},
                                          {DNNL_ARG_WEIGHTS, wrap(b, p.inputs.at("w").as<float>())},
                                          {DNNL_ARG_DST, wrap(c, p.c_onednn.as<float>())}};
  dnnl::primitive primitive;
  if (p.mlp) {
    args[DNNL_ARG_BIAS] = wrap(bias, p.inputs.at("b").as<float>());
    dnnl::post_ops relu;
    relu.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(relu);
    primitive = dnnl::matmul(dnnl::matmul::primitive_desc({a, b, bias, c}, attr, engine));
  } else {
    primitive = dnnl::matmul(dnnl::matmul::primitive_desc({a, b, c}, engine));
  }
  return [primitive, args] {
    primitive.execute(stream, args);
    stream.wait();
  };
}
#endif

void add_rows(std::vector<Row>& rows, std::vector<std::unique_ptr<MatmulCase>>& cases, Shape s, bool mlp,
              const std::vector<std::string>& targets) {
  auto mc = std::make_unique<MatmulCase>();
  MatmulCase* p = mc.get();
  p->s = s;
  p->mlp = mlp;
  Graph g;
  Tensor x = g.input("x", DType::F32, {s.m, s.k});
  Tensor w = g.input("w", DType::F32, {s.k, s.n});
  if (mlp) {
    Tensor b = g.input("b", DType::F32, {s.n});
    g.output("y", relu(matmul(x, w) + b));
  } else {
    g.output("y", matmul(x, w));
  }
  for (const std::string& t : targets) p->exes.push_back(std::make_unique<runtime::Executable>(compile(g, Target::cpu(t))));
  p->inputs["x"] = ir::HostArray::from({s.m, s.k}, random_floats(s.m * s.k, 1));
  p->inputs["w"] = ir::HostArray::from({s.k, s.n}, random_floats(s.k * s.n, 2));
  if (mlp) p->inputs["b"] = ir::HostArray::from({s.n}, random_floats(s.n, 3));
  p->c = ir::HostArray(ir::DType::F32, {s.m, s.n});
  std::string group = (mlp ? "mlp " : "") + s.name();
  for (size_t t = 0; t < targets.size(); ++t) {
    p->exes[t]->run(p->inputs, p->outputs.emplace_back());  // warm-up and first touch of the outputs
    rows.push_back({group, targets[t], s.flops(), [p, t] { p->exes[t]->run(p->inputs, p->outputs[t]); }, {}});
  }
  rows.push_back({group, "openblas", s.flops(), [p] {
                    const float* x = p->inputs.at("x").as<float>();
                    const float* w = p->inputs.at("w").as<float>();
                    float* c = p->c.as<float>();
                    int64_t m = p->s.m, k = p->s.k, n = p->s.n;
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                                static_cast<int>(k), 1.f, x, static_cast<int>(k), w, static_cast<int>(n), 0.f, c,
                                static_cast<int>(n));
                    if (!p->mlp) return;
                    // The epilogue as a separate pass over C, on the same threads as fuse uses.
                    const float* b = p->inputs.at("b").as<float>();
                    runtime::ThreadPool::global().parallel_for(0, m, 16, [&](int64_t lo, int64_t hi) {
                      for (int64_t i = lo; i < hi; ++i)
                        for (int64_t j = 0; j < n; ++j) c[i * n + j] = std::max(c[i * n + j] + b[j], 0.f);
                    });
                  },
                  {}});
#ifdef FUSE_MATMUL_BENCH_ONEDNN
  rows.push_back({group, "onednn", s.flops(), onednn_matmul(*p), {}});
  rows.back().run();  // warm-up (oneDNN's JIT kernels), and the result max_difference checks
#endif
  cases.push_back(std::move(mc));
}

#ifdef FUSE_MATMUL_BENCH_ONEDNN
constexpr bool kOneDnn = true;
#else
constexpr bool kOneDnn = false;
#endif

// Largest |fuse (compiled for targets[target]; oneDNN for target -1) - OpenBLAS| relative to the
// largest |OpenBLAS| element, after a run of each.
double max_difference(const MatmulCase& p, int target) {
  const float* y = target < 0 ? p.c_onednn.as<float>() : p.outputs[target].at("y").as<float>();
  const float* c = p.c.as<float>();
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < p.c.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(y[i] - c[i])));
    scale = std::max(scale, static_cast<double>(std::abs(c[i])));
  }
  return diff / scale;
}

// "MxKxN,MxKxN,...": appends each shape to `shapes`; false on anything else.
bool parse_shapes(const std::string& list, std::vector<Shape>& shapes) {
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    Shape s{};
    char x1 = 0, x2 = 0;
    std::stringstream in(item);
    if (!(in >> s.m >> x1 >> s.k >> x2 >> s.n) || x1 != 'x' || x2 != 'x' || !in.eof() || s.m < 1 || s.k < 1 || s.n < 1)
      return false;
    shapes.push_back(s);
  }
  return !shapes.empty();
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

}  // namespace
}  // namespace fuse::bench

int main(int argc, char** argv) {
  using namespace fuse::bench;
  bool restart = set_peer_thread_environment();  // (bench/peer_threads.h), as fuse_bench does
  if (const char* core = openblas_core_override()) {  // (bench/openblas_core.h)
    setenv("OPENBLAS_CORETYPE", core, 1);
    restart = true;
  }
  if (restart) execv("/proc/self/exe", argv);
  int rounds = 11;
  int64_t max_size = 4096;
  std::vector<Shape> given;
  std::vector<std::string> targets{""};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool ok = true;
    if (a.starts_with("--rounds=")) rounds = std::max(1, std::atoi(a.c_str() + 9));
    else if (a.starts_with("--max=")) max_size = std::atoll(a.c_str() + 6);
    else if (a.starts_with("--shapes=")) ok = parse_shapes(a.substr(9), given);
    else if (a.starts_with("--targets=")) {
      targets.clear();
      std::stringstream items(a.substr(10));
      for (std::string item; std::getline(items, item, ';');) targets.push_back(item);
      ok = !targets.empty();
    } else ok = false;
    if (!ok) {
      std::fprintf(stderr, "usage: matmul_bench [--rounds=N] [--max=SIZE] [--shapes=MxKxN,...] [--targets=DESC;DESC...]\n");
      return 2;
    }
  }
  // OpenBLAS would take every CPU whatever FUSE_NUM_THREADS says: the same threads for both.
  openblas_set_num_threads(fuse::runtime::ThreadPool::global().num_threads());
#ifdef FUSE_MATMUL_BENCH_ONEDNN
  omp_set_num_threads(fuse::runtime::ThreadPool::global().num_threads());
#endif
  try {
    std::string load_before = load_average();
    std::vector<Row> rows;
    std::vector<std::unique_ptr<MatmulCase>> cases;
    std::vector<Shape> shapes = given;
    if (given.empty()) {
      for (int64_t n : {256, 512, 1024, 2048, 4096})
        if (n <= max_size) shapes.push_back({n, n, n});
      // Odd shapes; a small batch through a large layer (few rows: tasks split the columns).
      for (Shape s : {Shape{1000, 1000, 1000}, Shape{1023, 1023, 1023}, Shape{2047, 513, 1001}, Shape{16, 2048, 2048},
                      Shape{64, 2048, 2048}})
        if (std::max({s.m, s.k, s.n}) <= max_size) shapes.push_back(s);
    }
    for (Shape s : shapes) add_rows(rows, cases, s, false, targets);
    if (given.empty())
      for (Shape s : {Shape{2048, 1024, 1024}, Shape{256, 1024, 1024}})
        if (std::max({s.m, s.k, s.n}) <= max_size) add_rows(rows, cases, s, true, targets);
    Row peak{"peak", "fma", 0, nullptr, {}};
    std::vector<double> peak_gflops;

    // Rounds: every row once, in a fresh shuffled order, with a peak trial among them. Large
    // rows run fewer rounds (a 4096^3 takes a second or more).
    std::mt19937 rng(42);
    for (int r = 0; r < rounds; ++r) {
      std::vector<size_t> order(rows.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      peak_gflops.push_back(peak_gflops_trial());
      for (size_t i : order) {
        if (rows[i].flops > 5e10 && r >= std::max(3, rounds / 3)) continue;
        Clock::time_point start = Clock::now();
        rows[i].run();
        rows[i].seconds.push_back(since(start));
      }
      std::fprintf(stderr, "round %d/%d\r", r + 1, rounds);
    }
    double peak_median = median(peak_gflops);
    std::printf("CPU: %s, %d threads (fuse and OpenBLAS alike); load average %s before, %s after; OpenBLAS core %s\n",
                cpu_model().c_str(), fuse::runtime::ThreadPool::global().num_threads(), load_before.c_str(),
                load_average().c_str(), openblas_get_corename());
    std::printf("f32 FMA peak: %.1f GFLOP/s (%s, %d chains per thread, median of %zu trials; best %.1f)\n\n",
                peak_median, peak_isa().isa, kChains, peak_gflops.size(),
                *std::max_element(peak_gflops.begin(), peak_gflops.end()));
    bool several = targets.size() > 1;
    std::string onednn_header = kOneDnn ? " oneDNN ms | fuse / oneDNN | oneDNN rel diff |" : "";
    std::printf("| shape |%s fuse ms | fuse GFLOP/s | %% peak | OpenBLAS ms | OpenBLAS GFLOP/s | %% peak | fuse / OpenBLAS | max rel diff |%s\n",
                several ? " target |" : "", onednn_header.c_str());
    std::printf("| :--- |%s ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |%s\n", several ? " :--- |" : "",
                kOneDnn ? " ---: | ---: | ---: |" : "");
    size_t per_case = targets.size() + 1 + (kOneDnn ? 1 : 0);  // the fuse rows, OpenBLAS's, oneDNN's
    for (size_t i = 0; i + per_case <= rows.size(); i += per_case) {
      const MatmulCase& mc = *cases[i / per_case];
      const Row& o = rows[i + targets.size()];
      double to = median(o.seconds);
      for (size_t t = 0; t < targets.size(); ++t) {
        const Row& f = rows[i + t];
        double tf = median(f.seconds);
        std::string target = several ? " " + (targets[t].empty() ? std::string("host") : targets[t]) + " |" : "";
        char onednn[96] = "";
        if (kOneDnn) {
          double td = median(rows[i + targets.size() + 1].seconds);
          std::snprintf(onednn, sizeof onednn, " %.2f | %.2f | %.1e |", td * 1e3, td / tf, max_difference(mc, -1));
        }
        std::printf("| %s%s |%s %.2f | %.1f | %.0f%% | %.2f | %.1f | %.0f%% | %.2f | %.1e |%s\n", f.group.c_str(),
                    f.group.starts_with("mlp") ? " (OpenBLAS + separate bias+relu)" : "", target.c_str(), tf * 1e3,
                    f.flops / tf / 1e9, 100 * f.flops / tf / 1e9 / peak_median, to * 1e3, o.flops / to / 1e9,
                    100 * o.flops / to / 1e9 / peak_median, to / tf, max_difference(mc, static_cast<int>(t)), onednn);
      }
    }
    std::printf("\n(fuse / OpenBLAS, fuse / oneDNN > 1: fuse is faster. %d rounds; rows above 50 GFLOP run %d.)\n", rounds,
                std::min(rounds, std::max(3, rounds / 3)));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "matmul_bench: %s\n", e.what());
    return 1;
  }
}
