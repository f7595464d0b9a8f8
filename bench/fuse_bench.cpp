// fuse_bench: fuse's CPU backend, fused and unfused, against its peers (Eigen, plain C++ loops,
// oneDNN, OpenBLAS) and the machine's memory bandwidth, in one run (bench/README.md). Google
// Benchmark times every row; summary tables of the medians follow.
//
//   fuse_bench [--benchmark_filter=REGEX] [--benchmark_repetitions=N] [--benchmark_*...]
// The cold-compile and disk-cache rows spawn fuse_compile_once (bench/compile_once.cpp).
#include <benchmark/benchmark.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <cblas.h>

#include "bench/openblas_core.h"
#include "bench/peer_threads.h"
#include "bench/peers.h"
#include "bench/stream.h"
#include "frontends/api.h"
#include "frontends/compile.h"
#include "frontends/expr/compile.h"
#include "ir/target.h"
#include "runtime/thread_pool.h"

extern char** environ;

namespace fuse::bench {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// ---- Workloads ----

struct Range {
  float lo, hi;
};

struct Workload {
  std::string name;
  std::string file;  // .expr, relative to the source tree
  ir::SymbolBindings dims;
  // The goal for the fused run, in % of the bandwidth limit; 0 for the matmuls, which
  // are bound by arithmetic (matmul_bench compares them with the FMA peak).
  double target_percent;
  // Input values where uniform [-1, 1) would be unrealistic (a sigma near 0 makes the PDF
  // underflow); the others are uniform in [-1, 1).
  std::map<std::string, Range> ranges;

  /// The .expr file's stem ("softmax", "matmul"): what the peers implement.
  std::string kind() const { return std::filesystem::path(file).stem().string(); }
  bool is_matmul() const { return kind() == "matmul" || kind() == "mlp_layer"; }
  /// The products' floating-point operations: 0 for the workloads bound by memory.
  double flops() const {
    if (is_matmul()) return 2.0 * dims.at("M") * dims.at("K") * dims.at("N");
    if (kind() != "transformer_block") return 0;
    // q, k, v and the output projection (4 T D^2), scores and attention (2 T^2 D), the MLP (2 T D F).
    double t = dims.at("T"), d = dims.at("D"), f = dims.at("F");
    return 2.0 * (4 * t * d * d + 2 * t * t * d + 2 * t * d * f);
  }
};

constexpr int64_t k10M = 10'000'000, k100M = 100'000'000;
constexpr float kPi = std::numbers::pi_v<float>;

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all = {
      {"add_10M", "examples/add.expr", {{"N", 1000}, {"M", 10'000}}, 85, {}},
      {"add_vectors_10M", "bench/add_vectors.expr", {{"N", k10M}}, 85, {}},
      {"normalize_rgb_10M", "bench/normalize_rgb.expr", {{"P", k10M / 3}}, 85, {{"std", {0.5f, 1.5f}}}},
      {"hypot_10M", "examples/hypot.expr", {{"N", k10M}}, 85, {}},
      {"gaussian_pdf_10M", "examples/gaussian_pdf.expr", {{"N", k10M}}, 85, {{"sigma", {0.5f, 1.5f}}}},
      {"polar_distance_10M", "examples/polar_distance.expr", {{"N", k10M}}, 60,
       {{"r1", {0, 1}}, {"r2", {0, 1}}, {"theta1", {-kPi, kPi}}, {"theta2", {-kPi, kPi}}}},
      {"hidden_layer_10M", "examples/hidden_layer.expr", {{"N", k10M}}, 85, {{"greyscales", {0, 255}}}},
      {"sum_10M", "bench/sum.expr", {{"N", k10M}}, 90, {}},
      {"sum_100M", "bench/sum.expr", {{"N", k100M}}, 90, {}},
      {"max_10M", "bench/max.expr", {{"N", k10M}}, 90, {}},
      {"max_100M", "bench/max.expr", {{"N", k100M}}, 90, {}},
      {"softmax_4096x4096", "examples/softmax.expr", {{"N", 4096}, {"M", 4096}}, 70, {}},
      {"softmax_512x32768", "examples/softmax.expr", {{"N", 512}, {"M", 32768}}, 70, {}},
      {"softmax_65536x64", "examples/softmax.expr", {{"N", 65536}, {"M", 64}}, 70, {}},
      // Ten classes a row (logits): rows shorter than a vector, which run across lanes.
      {"softmax_1Mx10", "examples/softmax.expr", {{"N", 1 << 20}, {"M", 10}}, 70, {}},
      {"layernorm_4096x4096", "examples/layernorm.expr", {{"N", 4096}, {"D", 4096}}, 70, {{"gamma", {0.5f, 1.5f}}}},
      {"layernorm_512x32768", "examples/layernorm.expr", {{"N", 512}, {"D", 32768}}, 70, {{"gamma", {0.5f, 1.5f}}}},
      {"layernorm_65536x64", "examples/layernorm.expr", {{"N", 65536}, {"D", 64}}, 70, {{"gamma", {0.5f, 1.5f}}}},
      {"transpose_4096x4096", "bench/transpose.expr", {{"N", 4096}, {"M", 4096}}, 50, {}},
      {"matmul_1024", "examples/matmul.expr", {{"M", 1024}, {"K", 1024}, {"N", 1024}}, 0, {}},
      {"mlp_layer_1024", "bench/mlp_layer.expr", {{"M", 1024}, {"K", 1024}, {"N", 1024}}, 0, {}},
      {"mlp_layer_2048", "bench/mlp_layer.expr", {{"M", 2048}, {"K", 2048}, {"N", 2048}}, 0, {}},
      // Bound by its products (about 1.07 GFLOP), not by memory: no bandwidth target.
      {"transformer_block_512", "bench/transformer_block.expr", {{"T", 512}, {"D", 256}, {"F", 1024}}, 0,
       {{"ln1_gain", {0.5f, 1.5f}}, {"ln2_gain", {0.5f, 1.5f}}}},
  };
  return all;
}

/// The graph of a .expr file of the source tree.
ir::Graph load_expr(const std::string& file) {
  std::string path = std::string(FUSE_SOURCE_DIR) + "/" + file;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ir::Error("cannot read '" + path + "'");
  std::ostringstream source;
  source << in.rdbuf();
  expr::CompileResult result = expr::compile_expr(source.str(), path);
  if (!result.graph) throw ir::Error(expr::format_diagnostics(result.errors, source.str()));
  return std::move(*result.graph);
}

ir::Graph load_graph(const Workload& w) { return load_expr(w.file); }

CompileOptions options(bool fused) {
  CompileOptions o;
  o.pipeline.fusion.enabled = fused;
  return o;
}

/// `o` with the compile cache bypassed, so that a latency row times compiling, not a lookup.
/// CompileOptions::use_cache comes with the compile cache; until then every compile compiles.
template <class Options>
Options without_cache(Options o) {
  if constexpr (requires { o.use_cache = false; }) o.use_cache = false;
  return o;
}

uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Uniform values in [r.lo, r.hi) from a counter-based hash, so threads can fill slices alone.
void fill_uniform(ir::HostArray& a, Range r, uint64_t seed) {
  float* p = a.as<float>();
  runtime::ThreadPool::global().parallel_for(0, a.size(), 1 << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float u = static_cast<float>(splitmix64(seed * 0x9E3779B97F4A7C15ull + i) >> 40) * 0x1p-24f;
      p[i] = r.lo + (r.hi - r.lo) * u;
    }
  });
}

ir::TensorMap make_inputs(const ir::Graph& g, const Workload& w) {
  ir::TensorMap inputs;
  uint64_t seed = 1;
  for (ir::NodeId id : g.input_nodes()) {
    const ir::Node& n = g.node(id);
    const std::string& name = n.as<ir::InputAttrs>().name;
    if (n.dtype != ir::DType::F32) throw ir::Error(w.name + ": input '" + name + "' is not f32");
    ir::HostArray a(n.dtype, ir::evaluate(n.shape, w.dims));
    auto range = w.ranges.find(name);
    fill_uniform(a, range == w.ranges.end() ? Range{-1, 1} : range->second, seed++);
    inputs[name] = std::move(a);
  }
  return inputs;
}

double total_bytes(const ir::TensorMap& arrays) {
  double bytes = 0;
  for (const auto& [name, a] : arrays) bytes += static_cast<double>(a.bytes.size());
  return bytes;
}

// ---- The bandwidth limit ----

// STREAM's rule: each of the 3 arrays at least 4x the last-level cache, so that no trial reads
// from cache, and at least 128 MB (4x a 32 MB L3). Not larger than the rule asks: on a shared
// machine a long trial is more likely to share the cores or the memory with someone than a
// short one, and its best rate is lower. On the Intel Xeon VM (480 MiB L3, of which 128-256 MB
// serve one process) arrays of 128 MB were read from cache in part: a read of 128 MB ran at
// 51 GB/s, of 512 MB or more at 29-33; triad's best 45.8 GB/s over 128 MB, 40.6-41.0 over 512
// MB to 1 GB (2026-11-30). FUSE_BENCH_STREAM_MB sets the size of an array (to compare).
int64_t stream_floats() {
  int64_t bytes = std::max<int64_t>(int64_t{128} << 20, 4 * ir::Target::host().l3_bytes);
  if (const char* env = std::getenv("FUSE_BENCH_STREAM_MB")) {
    char* end = nullptr;
    long long mb = std::strtoll(env, &end, 10);
    if (end == env || *end || mb < 1) throw ir::Error(std::string("FUSE_BENCH_STREAM_MB must be a positive integer, got '") + env + "'");
    bytes = static_cast<int64_t>(mb) << 20;
  } else if (long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE); pages > 0 && page > 0) {
    bytes = std::min(bytes, static_cast<int64_t>(pages) * page / 16);  // 3 arrays: 3/16 of the memory at most
  }
  return std::max<int64_t>(16, bytes / 4 / 16 * 16);  // (whole 64-byte lines)
}

Stream& stream() {
  static Stream s(stream_floats());
  return s;
}

struct StreamKernel {
  const char* name;
  double (Stream::*run)();  // returns the bytes it counts
};
const StreamKernel kStreamKernels[] = {
    {"copy_nt", &Stream::copy},
    {"triad_nt", &Stream::triad},
    {"triad_stores", &Stream::triad_cached_stores},  // for comparison, not part of the limit
    {"read", &Stream::read},                         // for comparison, not part of the limit
};
constexpr int kCopy = 0, kTriad = 1, kNumStreamKernels = std::size(kStreamKernels);

// The GB/s of every trial of each kernel: the start-up trials, then one per repetition of its
// stream/* row (interleaved with all other rows, so spread over the whole run).
std::vector<double> g_stream_gbs[kNumStreamKernels];

/// Runs kernel k once and records its rate. Returns the bytes it counted.
double stream_trial(int k) {
  Clock::time_point start = Clock::now();
  double bytes = (stream().*kStreamKernels[k].run)();
  g_stream_gbs[k].push_back(bytes / since(start) / 1e9);
  return bytes;
}

/// Start-up trials, so that there is a limit even when a filter leaves out the stream/* rows.
void measure_stream() {
  constexpr int kTrials = 21;
  for (const StreamKernel& k : kStreamKernels) (stream().*k.run)();  // warm-up
  // Interleaved, so that a burst of load from other processes slows every kernel alike.
  for (int t = 0; t < kTrials; ++t)
    for (int k = 0; k < kNumStreamKernels; ++k) stream_trial(k);
}

double best_gbs(int k) { return *std::max_element(g_stream_gbs[k].begin(), g_stream_gbs[k].end()); }

double median_gbs(int k) {
  std::vector<double> v = g_stream_gbs[k];
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

/// The bandwidth limit: STREAM's own figure, the best rate (other processes on the machine can
/// only slow a trial down), of copy or triad, over every trial of the run.
double limit_gbs() { return std::max(best_gbs(kCopy), best_gbs(kTriad)); }

/// MB and GB/s for `bytes` moved per iteration in `seconds` (the timed loop; plain counters, since
/// Google Benchmark's rate counters print as "x/s"). % of the limit is in the summary: the limit
/// is known only at the end.
void report_bytes(benchmark::State& state, double bytes, double seconds) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["MB"] = bytes / 1e6;
  state.counters["GB/s"] = bytes * static_cast<double>(state.iterations()) / seconds / 1e9;
}

void run_stream(benchmark::State& state, int k) {
  double bytes = 0;
  Clock::time_point start = Clock::now();
  for (auto _ : state) bytes = stream_trial(k);
  report_bytes(state, bytes, since(start));
}

// ---- Running compiled workloads ----

struct Variant {
  runtime::Executable exe;
  ir::TensorMap outputs;  // preallocated by the warm-up run, reused by every timed run
};

struct PeerRun {
  std::function<void()> run;
  ir::TensorMap outputs;  // fuse's output names and shapes, preallocated
  double ulps = 0;        // its largest difference from fuse, in ulps of the check's scale
};

/// One workload's inputs, its compiled variants and its peers, made on first use and kept for
/// the whole run: the repetitions of all rows are interleaved (see main), so any row may come next.
struct Prepared {
  ir::TensorMap inputs;
  std::optional<Variant> variants[2];  // [fused]
  std::optional<PeerRun> peers[kNumPeers];
  std::string peer_errors[kNumPeers];  // why a peer has no run: its check failed
};

// Not a function-local static: main() releases it before exit, because a JIT destroyed by the
// exit handlers outlives LLVM's own statics and crashes.
std::map<const Workload*, Prepared> g_prepared;

// Every disagreement between a peer and fuse, printed again at the end; fuse_bench then fails.
std::vector<std::string> g_disagreements;

Prepared& prepared(const Workload& w) {
  auto it = g_prepared.find(&w);
  if (it == g_prepared.end()) it = g_prepared.emplace(&w, Prepared{make_inputs(load_graph(w), w), {}, {}, {}}).first;
  return it->second;
}

/// `w` compiled (fused or not), after one untimed warm-up run.
Variant& variant(const Workload& w, bool fused) {
  Prepared& p = prepared(w);
  std::optional<Variant>& slot = p.variants[fused];
  if (!slot) {
    slot.emplace(Variant{compile(load_graph(w), options(fused)), {}});
    slot->exe.run(p.inputs, slot->outputs);  // warm-up: first touches of the outputs, caches
  }
  return *slot;
}

void run_workload(benchmark::State& state, const Workload& w, bool fused) {
  Prepared* p;
  Variant* v;
  try {
    p = &prepared(w);
    v = &variant(w, fused);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  Clock::time_point start = Clock::now();
  for (auto _ : state) v->exe.run(p->inputs, v->outputs);
  report_bytes(state, total_bytes(p->inputs) + total_bytes(v->outputs), since(start));
  int kernels = static_cast<int>(v->exe.program().kernels.size());
  state.counters["kernels"] = kernels;
  state.counters["interp"] = kernels - v->exe.compiled_kernel_count();
}

// ---- Checking the peers ----

/// How closely a peer must agree with fuse, element by element: |peer - fuse| <= ulps * 2^-23 *
/// scale, where the scale is the largest |fuse| element of the output or, for a sum, the sum of
/// the |x| (what the rounding error of any summation order is proportional to).
struct Tolerance {
  double ulps;
  bool sum_of_abs;
};

Tolerance tolerance(const Workload& w) {
  std::string k = w.kind();
  // The same IEEE operations, or moves and comparisons, which do not round: exact.
  if (k == "add" || k == "add_vectors" || k == "normalize_rgb" || k == "max" || k == "transpose") return {0, false};
  if (k == "hypot") return {2, false};  // an FMA either side; the sqrt rounds correctly
  // exp, sin, cos, tanh from libm, Eigen, oneDNN and fuse: each within a few ulps.
  if (k == "gaussian_pdf" || k == "polar_distance" || k == "hidden_layer") return {8, false};
  if (k == "sum") return {4, true};
  // Sums along rows of length L (and the K of a matmul) in f32, in different orders: their
  // rounding grows like sqrt(L) ulps, and the loops sum exp() one by one.
  // The transformer block's longest sums are its MLP's, of length F.
  double length = static_cast<double>(w.is_matmul()            ? w.dims.at("K")
                                      : k == "transformer_block" ? w.dims.at("F")
                                                                 : w.dims.at(k == "softmax" ? "M" : "D"));
  return {4 + 2 * std::sqrt(length), false};
}

/// The largest difference between `peer` and fuse's outputs, in ulps of the check's scale.
/// Returns an explanation in `where` for the worst element.
double difference_ulps(const Workload& w, const ir::TensorMap& inputs, const ir::TensorMap& fuse_outputs,
                       const ir::TensorMap& peer_outputs, std::string& where) {
  constexpr double kUlp = 0x1p-23;  // f32's machine epsilon
  double worst = 0;
  for (const auto& [name, f] : fuse_outputs) {
    const ir::HostArray& p = peer_outputs.at(name);
    const float* fv = f.as<float>();
    const float* pv = p.as<float>();
    double scale = 0;
    if (tolerance(w).sum_of_abs) {
      for (const auto& [input, a] : inputs)
        for (int64_t i = 0; i < a.size(); ++i) scale += std::abs(a.as<float>()[i]);
    } else {
      for (int64_t i = 0; i < f.size(); ++i) scale = std::max(scale, static_cast<double>(std::abs(fv[i])));
    }
    scale = std::max(scale, 1e-30);
    for (int64_t i = 0; i < f.size(); ++i) {
      double diff = std::abs(static_cast<double>(pv[i]) - fv[i]);
      double ulps = std::isnan(diff) ? (std::isnan(pv[i]) && std::isnan(fv[i]) ? 0 : INFINITY) : diff / (kUlp * scale);
      if (where.empty() || ulps > worst) {
        worst = ulps;
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s[%lld] = %.9g, fuse %.9g", name.c_str(), static_cast<long long>(i),
                      static_cast<double>(pv[i]), static_cast<double>(fv[i]));
        where = buf;
      }
    }
  }
  return worst;
}

/// `peer`'s implementation of `w`, run once and checked against fuse's fused outputs. Throws
/// when it disagrees (and records it for the end of the run).
PeerRun& peer_run(const Workload& w, Peer peer) {
  Prepared& p = prepared(w);
  std::optional<PeerRun>& slot = p.peers[static_cast<int>(peer)];
  std::string& error = p.peer_errors[static_cast<int>(peer)];
  if (slot) return *slot;
  if (!error.empty()) throw ir::Error(error);
  const ir::TensorMap& fuse_outputs = variant(w, true).outputs;
  PeerRun r;
  for (const auto& [name, a] : fuse_outputs) r.outputs[name] = ir::HostArray(a.dtype, a.shape);
  r.run = make_peer(peer, w.kind(), p.inputs, r.outputs);
  if (!r.run) throw ir::Error(std::string(peer_name(peer)) + " has no " + w.kind());
  r.run();  // warm-up, and the result to check
  std::string where;
  r.ulps = difference_ulps(w, p.inputs, fuse_outputs, r.outputs, where);
  Tolerance t = tolerance(w);
  if (!(r.ulps <= t.ulps)) {
    char buf[400];
    std::snprintf(buf, sizeof buf, "%s disagrees with fuse on %s: %s (%.3g ulps of the scale, tolerance %.3g)",
                  peer_title(peer), w.name.c_str(), where.c_str(), r.ulps, t.ulps);
    error = buf;
    g_disagreements.push_back(error);
    std::fflush(stdout);
    std::fprintf(stderr, "fuse_bench: PEER CHECK FAILED: %s\n", buf);
    throw ir::Error(error);
  }
  slot.emplace(std::move(r));
  return *slot;
}

void run_peer(benchmark::State& state, const Workload& w, Peer peer) {
  Prepared* p;
  PeerRun* r;
  try {
    p = &prepared(w);
    r = &peer_run(w, peer);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  Clock::time_point start = Clock::now();
  for (auto _ : state) r->run();
  report_bytes(state, total_bytes(p->inputs) + total_bytes(r->outputs), since(start));
  state.counters["ulps"] = r->ulps;
}

// ---- Forward+backward of the MLP layer (issue 17) ----

// relu(x @ w + b) with a squared-error loss (bench/mlp_loss.expr), differentiated by fuse::grad
// with respect to x, w and b, compiled fused, against the least work any implementation must
// do: three sgemm calls of the same shapes (forward x @ w, grad_w = x^T @ dz, grad_x = dz @ w^T).
// The bias, relu, loss and bias gradient are O(n^2) next to the O(n^3) products, so the issue's
// target is fuse within 1.15x of those three calls.
struct TrainingWorkload {
  std::string name;
  int64_t n;  // M = K = N
};
constexpr double kTrainingTarget = 1.15;  // fuse / minimum, at most

const std::vector<TrainingWorkload>& training_workloads() {
  static const std::vector<TrainingWorkload> all = {{"mlp_fwd_bwd_1024", 1024}, {"mlp_fwd_bwd_2048", 2048}};
  return all;
}

struct PreparedTraining {
  ir::TensorMap inputs;
  std::optional<runtime::Executable> exe;
  ir::TensorMap outputs;                       // preallocated by the warm-up run
  std::vector<float> dz, z, grad_w, grad_x;    // the three sgemm calls' operands and results
  std::string error;                           // why the rows cannot run (a failed check)
  std::string check;                           // each output's difference from the reference
};
// Released in main() before exit, like g_prepared.
std::map<std::string, PreparedTraining> g_training;
// PreparedTraining::check of each workload, kept for the summary (printed after g_training is released).
std::map<std::string, std::string> g_training_checks;

/// The three sgemm calls: forward z = x @ w, then grad_w = x^T @ dz and grad_x = dz @ w^T.
void three_sgemms(const ir::TensorMap& in, PreparedTraining& p, int n) {
  const float *x = in.at("x").as<float>(), *w = in.at("w").as<float>();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, x, n, w, n, 0.f, p.z.data(), n);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, n, n, 1.f, x, n, p.dz.data(), n, 0.f, p.grad_w.data(), n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.f, p.dz.data(), n, w, n, 0.f, p.grad_x.data(), n);
}

double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

/// The largest |fuse - reference| of `name`, in f32 ulps of `scale`.
double ulps_from(const ir::TensorMap& fuse_outputs, const std::string& name, const float* reference, double scale) {
  const ir::HostArray& a = fuse_outputs.at(name);
  double worst = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    double diff = std::abs(static_cast<double>(a.as<float>()[i]) - reference[i]);
    worst = std::max(worst, std::isnan(diff) ? INFINITY : diff / (0x1p-23 * std::max(scale, 1e-30)));
  }
  return worst;
}

double max_abs(const float* v, int64_t count) {
  double m = 0;
  for (int64_t i = 0; i < count; ++i) m = std::max(m, static_cast<double>(std::abs(v[i])));
  return m;
}

/// Inputs, fuse's executable and the reference: the gradients computed by OpenBLAS and plain
/// loops, checked once against fuse's, so that neither side is timed doing less work.
PreparedTraining& prepared_training(const TrainingWorkload& tw) {
  auto it = g_training.find(tw.name);
  if (it != g_training.end()) {
    if (!it->second.error.empty()) throw ir::Error(it->second.error);
    return it->second;
  }
  PreparedTraining& p = g_training[tw.name];
  const int n = static_cast<int>(tw.n);
  const int64_t nn = tw.n * tw.n;
  ir::Graph forward = load_expr("bench/mlp_loss.expr");
  ir::Graph training = fuse::grad(forward, "loss", {"x", "w", "b"});
  Workload shapes{tw.name, "bench/mlp_loss.expr", {{"M", tw.n}, {"K", tw.n}, {"N", tw.n}}, 0, {}};
  p.inputs = make_inputs(training, shapes);
  p.z.resize(nn);
  p.dz.resize(nn);
  p.grad_w.resize(nn);
  p.grad_x.resize(nn);

  // Reference forward: z = x @ w + b.
  const float *x = p.inputs.at("x").as<float>(), *w = p.inputs.at("w").as<float>(),
              *b = p.inputs.at("b").as<float>();
  float* t = p.inputs.at("t").as<float>();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, x, n, w, n, 0.f, p.z.data(), n);
  for (int64_t r = 0; r < tw.n; ++r)
    for (int64_t c = 0; c < tw.n; ++c) p.z[r * n + c] += b[c];
  // Where z is within rounding of 0, fuse and OpenBLAS may disagree on the sign and so on relu's
  // gradient (dz = 2 (y - t) or 0): a difference of 2|t| that is not an error. A target of 0
  // there makes both choices give dz = 2 relu(z), about 0 (a few of n^2 elements).
  const double dot_ulps = 4 + 2 * std::sqrt(static_cast<double>(n));
  const double near_zero = dot_ulps * 0x1p-23 * max_abs(p.z.data(), nn);
  for (int64_t i = 0; i < nn; ++i)
    if (std::abs(p.z[i]) <= near_zero) t[i] = 0;
  double loss = 0, sum_sq = 0;
  std::vector<double> grad_b(tw.n, 0), grad_b_scale(tw.n, 0);
  for (int64_t r = 0; r < tw.n; ++r) {
    for (int64_t c = 0; c < tw.n; ++c) {
      int64_t i = r * n + c;
      float y = std::max(p.z[i], 0.f);
      double e = static_cast<double>(y) - t[i];
      loss += e * e;
      sum_sq += e * e;
      p.dz[i] = p.z[i] > 0 ? static_cast<float>(2 * e) : 0.f;
      grad_b[c] += p.dz[i];
      grad_b_scale[c] += std::abs(p.dz[i]);
    }
  }
  three_sgemms(p.inputs, p, n);  // grad_w and grad_x from the reference dz

  // fuse: compiled fused, outputs preallocated by a warm-up run, then checked.
  p.exe.emplace(compile(training, options(true)));
  p.exe->run(p.inputs, p.outputs);
  std::vector<std::string> problems;
  auto check = [&](const std::string& name, double ulps, double tolerance) {
    char buf[120];
    std::snprintf(buf, sizeof buf, "%s %.2g / %.3g", name.c_str(), ulps, tolerance);
    p.check += (p.check.empty() ? "" : ", ") + std::string(buf);
    if (!(ulps <= tolerance)) problems.push_back(std::string(buf) + " ulps");
  };
  float loss_f = static_cast<float>(loss);
  // The loss sums n^2 squares in f32 (fuse) or f64 (here): sqrt(n^2) ulps of the sum.
  check("loss", ulps_from(p.outputs, "loss", &loss_f, sum_sq), 4 + 2 * static_cast<double>(n));
  check("grad_w", ulps_from(p.outputs, "grad_w", p.grad_w.data(), max_abs(p.grad_w.data(), nn)), dot_ulps);
  check("grad_x", ulps_from(p.outputs, "grad_x", p.grad_x.data(), max_abs(p.grad_x.data(), nn)), dot_ulps);
  double grad_b_ulps = 0;
  for (int64_t c = 0; c < tw.n; ++c) {
    double diff = std::abs(static_cast<double>(p.outputs.at("grad_b").as<float>()[c]) - grad_b[c]);
    grad_b_ulps = std::max(grad_b_ulps, std::isnan(diff) ? INFINITY : diff / (0x1p-23 * std::max(grad_b_scale[c], 1e-30)));
  }
  check("grad_b", grad_b_ulps, dot_ulps);
  g_training_checks[tw.name] = p.check;
  if (!problems.empty()) {
    std::string message = "fuse's gradients disagree with OpenBLAS on " + tw.name + ":";
    for (const std::string& s : problems) message += " " + s;
    p.error = message;
    g_disagreements.push_back(message);
    std::fflush(stdout);
    std::fprintf(stderr, "fuse_bench: CHECK FAILED: %s\n", message.c_str());
    throw ir::Error(message);
  }
  return p;
}

void run_training(benchmark::State& state, const TrainingWorkload& tw, bool fuse) {
  PreparedTraining* p;
  try {
    p = &prepared_training(tw);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  // The CPU time of every thread of the process: with one thread (FUSE_NUM_THREADS=1) it is the
  // work itself, which other processes' load changes less than the wall time.
  double cpu_start = process_cpu_seconds();
  if (fuse) {
    for (auto _ : state) p->exe->run(p->inputs, p->outputs);
    state.counters["kernels"] = static_cast<double>(p->exe->program().kernels.size());
  } else {
    for (auto _ : state) three_sgemms(p->inputs, *p, static_cast<int>(tw.n));
  }
  state.counters["process_cpu_ms"] =
      benchmark::Counter(1e3 * (process_cpu_seconds() - cpu_start), benchmark::Counter::kAvgIterations);
}

// ---- Compile latency ----

int count_ops(const ir::Graph& g) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(),
                                        [](const ir::Node& n) { return n.kind != ir::OpKind::Input; }));
}

/// The disk-cache rows use a cache directory of their own, filled before they run.
std::string bench_cache_directory() {
  return (std::filesystem::temp_directory_path() / ("fuse-bench-cache-" + std::to_string(getpid()))).string();
}

struct ChildResult {
  double compile_seconds;  // as the child timed its compile
  double process_seconds;  // spawn to exit, as this process saw it
};

/// Runs `fuse_compile_once FILE [--cached]` (bench/compile_once.cpp) in a fresh process.
ChildResult compile_in_child(const Workload& w, bool cached = false) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw ir::Error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::string exe = FUSE_COMPILE_ONCE, file = std::string(FUSE_SOURCE_DIR) + "/" + w.file, flag = "--cached";
  char* argv[] = {exe.data(), file.data(), cached ? flag.data() : nullptr, nullptr};
  Clock::time_point start = Clock::now();
  pid_t pid;
  int spawn_error = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawn_error != 0) {
    close(pipe_fds[0]);
    throw ir::Error(std::string("posix_spawn failed: ") + std::strerror(spawn_error));
  }
  std::string out;
  char buf[256];
  for (ssize_t got; (got = read(pipe_fds[0], buf, sizeof buf)) > 0;) out.append(buf, got);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  double process_seconds = since(start);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || out.empty())
    throw ir::Error("fuse_compile_once for " + w.name + " failed");
  return {std::stod(out), process_seconds};
}

void compile_cold(benchmark::State& state, const Workload& w) {
  double process_seconds = 0;
  for (auto _ : state) {
    try {
      ChildResult r = compile_in_child(w);
      state.SetIterationTime(r.compile_seconds);
      process_seconds += r.process_seconds;
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
  state.counters["process_ms"] = benchmark::Counter(1e3 * process_seconds, benchmark::Counter::kAvgIterations);
  state.counters["ops"] = count_ops(load_graph(w));
}

// A fresh process whose compile finds the object in the disk cache (filled by this process).
void compile_disk(benchmark::State& state, const Workload& w) {
  try {
    compile(load_graph(w), options(true));  // fills the disk cache (and this process's memory cache)
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    try {
      state.SetIterationTime(compile_in_child(w, true).compile_seconds);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
}

void compile_warm(benchmark::State& state, const Workload& w) {
  ir::Graph g = load_graph(w);
  std::optional<runtime::Executable> exe;
  try {
    exe.emplace(compile(g, without_cache(options(true))));  // warm-up: the first compile sets up LLVM
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  exe.reset();  // the JIT's teardown stays out of the timing (rows run one iteration)
  for (auto _ : state) exe.emplace(compile(g, without_cache(options(true))));
  state.counters["ops"] = count_ops(g);
  state.counters["kernels"] = static_cast<double>(exe->program().kernels.size());
}

// ---- Registration ----

constexpr int kColdRepetitions = 5;  // each spawns a process that loads LLVM: keep it short
constexpr int kSlowLoopRepetitions = 11;

void register_benchmarks() {
  auto row = [](benchmark::internal::Benchmark* b) {
    // "min" besides the default mean, median, stddev and cv: the best repetition.
    return b->Iterations(1)->Unit(benchmark::kMillisecond)->ComputeStatistics("min", [](const std::vector<double>& v) {
      return *std::min_element(v.begin(), v.end());
    });
  };
  for (int k = 0; k < kNumStreamKernels; ++k)
    row(benchmark::RegisterBenchmark((std::string("stream/") + kStreamKernels[k].name).c_str(), run_stream, k))
        ->UseRealTime();
  for (const Workload& w : workloads()) {
    // The loop peer's matmuls run fewer repetitions: its 2048^3 takes seconds, and it is never
    // the best peer there. The other matmul rows keep the default: with 11, a row's median moved
    // by 10% from run to run on the 2-vCPU Xeon (fuse 1024^3: 6.8-10.1 ms within one run).
    auto timed = [&](benchmark::internal::Benchmark* b, bool slow_loop = false) {
      row(b)->UseRealTime();
      if (slow_loop && w.flops() > 0) b->Repetitions(kSlowLoopRepetitions);
    };
    timed(benchmark::RegisterBenchmark((w.name + "/fused").c_str(), run_workload, w, true));
    timed(benchmark::RegisterBenchmark((w.name + "/unfused").c_str(), run_workload, w, false));
    for (Peer peer : kPeers)
      if (peer_supports(peer, w.kind()))
        timed(benchmark::RegisterBenchmark((w.name + "/" + peer_name(peer)).c_str(), run_peer, w, peer),
              peer == Peer::Loop);
  }
  // Forward+backward: the repetitions follow --benchmark_repetitions (5 are enough at 2048: each
  // run does 3 x 17 GFLOP).
  for (const TrainingWorkload& tw : training_workloads()) {
    row(benchmark::RegisterBenchmark((tw.name + "/fused").c_str(), run_training, tw, true))->UseRealTime();
    row(benchmark::RegisterBenchmark((tw.name + "/3_sgemm").c_str(), run_training, tw, false))->UseRealTime();
  }
  // Compile latency once per program: a workload's sizes are bound at run time, so every size of
  // one .expr file compiles the same kernels.
  std::vector<const Workload*> programs;
  for (const Workload& w : workloads())
    if (std::none_of(programs.begin(), programs.end(), [&](const Workload* p) { return p->file == w.file; }))
      programs.push_back(&w);
  for (const Workload* w : programs) {
    row(benchmark::RegisterBenchmark(("compile/" + w->name + "/cold").c_str(), compile_cold, *w))
        ->UseManualTime()
        ->Repetitions(kColdRepetitions);
  }
  for (const Workload* w : programs)
    row(benchmark::RegisterBenchmark(("compile/" + w->name + "/warm").c_str(), compile_warm, *w))->UseRealTime();
  for (const Workload* w : programs) {
    row(benchmark::RegisterBenchmark(("compile/" + w->name + "/disk").c_str(), compile_disk, *w))
        ->UseManualTime()
        ->Repetitions(kColdRepetitions);
  }
}

// ---- Reporting ----

using Run = benchmark::BenchmarkReporter::Run;

/// The console reporter, showing one row per benchmark (the median over the repetitions, with
/// their spread as cv% and the best as best_ms) in the order they were registered, and keeping
/// those rows for the summary.
/// Rows are held back until the end: with interleaved repetitions they all finish near the end
/// anyway, in random order.
class MedianReporter : public benchmark::ConsoleReporter {
 public:
  explicit MedianReporter(OutputOptions o) : ConsoleReporter(o) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (!median && !(r.run_type == Run::RT_Iteration && r.repetitions <= 1) && !r.error_occurred) continue;
      Run row = r;
      for (const Run& a : runs) {
        if (a.run_type != Run::RT_Aggregate) continue;
        if (a.aggregate_name == "cv") row.counters["cv%"] = 100 * a.real_accumulated_time;
        if (a.aggregate_name == "min") row.counters["best_ms"] = 1e3 * seconds(a);
      }
      medians_[r.run_name.function_name] = row;
    }
  }

  void Finalize() override {
    std::vector<Run> rows;
    for (const auto& [name, row] : medians_) rows.push_back(row);
    std::sort(rows.begin(), rows.end(), [](const Run& a, const Run& b) { return a.family_index < b.family_index; });
    if (!rows.empty()) ConsoleReporter::ReportRuns(rows);
    ConsoleReporter::Finalize();
  }

  /// The median row of `name`; null when it did not run or failed.
  const Run* find(const std::string& name) const {
    auto it = medians_.find(name);
    return it == medians_.end() || it->second.error_occurred ? nullptr : &it->second;
  }
  /// What the summary shows in place of a missing row: "failed", or "-" when it was filtered out.
  std::string missing(const std::string& name) const { return medians_.count(name) ? "failed" : "-"; }
  static double seconds(const Run& r) {
    return r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
  }
  /// The best repetition's seconds (the run itself when there was one repetition).
  double best_seconds(const Run& r) const {
    auto it = r.counters.find("best_ms");
    return it == r.counters.end() ? seconds(r) : it->second.value / 1e3;
  }
  double counter(const Run& r, const std::string& name) const {
    auto it = r.counters.find(name);
    return it == r.counters.end() ? 0 : it->second.value;
  }

 private:
  std::map<std::string, Run> medians_;
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

/// Prints a Markdown table with aligned columns: readable here, and pasted as is into
/// bench/README.md.
void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string line = "|";
    for (size_t c = 0; c < rows[r].size(); ++c) {
      std::string pad(width[c] - rows[r][c].size(), ' ');
      line += " " + (c == 0 ? rows[r][c] + pad : pad + rows[r][c]) + " |";
    }
    std::printf("%s\n", line.c_str());
    if (r == 0) {
      line = "|";
      for (size_t c = 0; c < width.size(); ++c) line += (c == 0 ? " :" : " ") + std::string(width[c] - 1, '-') + (c == 0 ? " |" : ": |");
      std::printf("%s\n", line.c_str());
    }
  }
}

struct BestPeer {
  const char* title;
  double seconds;
};

/// The fastest peer of `w` by median time; nullopt when no peer row ran.
std::optional<BestPeer> best_peer(const MedianReporter& rep, const Workload& w) {
  std::optional<BestPeer> best;
  for (Peer peer : kPeers)
    if (const Run* r = rep.find(w.name + "/" + peer_name(peer)))
      if (!best || rep.seconds(*r) < best->seconds) best = BestPeer{peer_title(peer), rep.seconds(*r)};
  return best;
}

void print_run_table(const MedianReporter& rep) {
  std::vector<std::vector<std::string>> rows = {{"workload", "MB", "fused ms", "GB/s", "% limit", "best %",
                                                 "unfused ms", "GB/s", "% limit", "speedup", "target", "best peer",
                                                 "best peer / fuse", "kernels", "interp"}};
  for (const Workload& w : workloads()) {
    const std::string names[2] = {w.name + "/fused", w.name + "/unfused"};
    const Run* f = rep.find(names[0]);
    const Run* u = rep.find(names[1]);
    if (!f && !u) continue;
    double mb = rep.counter(f ? *f : *u, "MB");
    // From the median time, so that each row's numbers agree. The matmuls are bound by
    // arithmetic, not bandwidth: no rates for them (the peer table has their GFLOP/s).
    bool bandwidth = w.target_percent > 0;
    auto gbs = [&](double seconds) { return bandwidth ? format("%.1f", mb / 1e3 / seconds) : "-"; };
    auto percent = [&](double seconds) { return 100 * mb / 1e3 / seconds / limit_gbs(); };
    auto percent_text = [&](double seconds) { return bandwidth ? format("%.0f%%", percent(seconds)) : "-"; };
    std::vector<std::string> row = {w.name, format("%.1f", mb)};
    if (f) {
      row.insert(row.end(), {format("%.2f", rep.seconds(*f) * 1e3), gbs(rep.seconds(*f)), percent_text(rep.seconds(*f)),
                             percent_text(rep.best_seconds(*f))});
    } else {
      row.insert(row.end(), {rep.missing(names[0]), "", "", ""});
    }
    if (u) {
      row.insert(row.end(), {format("%.2f", rep.seconds(*u) * 1e3), gbs(rep.seconds(*u)), percent_text(rep.seconds(*u))});
    } else {
      row.insert(row.end(), {rep.missing(names[1]), "", ""});
    }
    row.push_back(f && u ? format("%.2fx", rep.seconds(*u) / rep.seconds(*f)) : "");
    std::string verdict;
    if (f) {
      verdict = percent(rep.seconds(*f)) >= w.target_percent        ? " met"
                : percent(rep.best_seconds(*f)) >= w.target_percent ? " best only"
                                                                     : " missed";
    }
    row.push_back(bandwidth ? format(">= %.0f%%", w.target_percent) + verdict : "-");
    std::optional<BestPeer> best = best_peer(rep, w);
    row.push_back(best ? best->title : "-");
    row.push_back(best && f ? format("%.2f", best->seconds / rep.seconds(*f)) : "-");
    auto both = [&](const char* counter) {
      return (f ? format("%.0f", rep.counter(*f, counter)) : "-") + " / " +
             (u ? format("%.0f", rep.counter(*u, counter)) : "-");
    };
    row.push_back(both("kernels"));
    row.push_back(both("interp"));
    rows.push_back(row);
  }
  if (rows.size() > 1) print_table(rows);
}

/// fuse fused against each peer: median ms, the ratio, and how far the peers' outputs were from
/// fuse's (the largest difference of any peer, in ulps of the check's scale, and the tolerance).
void print_peer_table(const MedianReporter& rep) {
  std::vector<std::string> header = {"workload", "fuse ms"};
  for (Peer peer : kPeers) header.push_back(std::string(peer_title(peer)) + " ms");
  header.insert(header.end(), {"best peer / fuse", "fuse GFLOP/s", "peer diff (ulps) / tol"});
  std::vector<std::vector<std::string>> rows = {header};
  for (const Workload& w : workloads()) {
    const Run* f = rep.find(w.name + "/fused");
    std::optional<BestPeer> best = best_peer(rep, w);
    if (!f && !best) continue;
    std::vector<std::string> row = {w.name, f ? format("%.2f", rep.seconds(*f) * 1e3) : rep.missing(w.name + "/fused")};
    double worst_ulps = -1;
    for (Peer peer : kPeers) {
      std::string name = w.name + "/" + peer_name(peer);
      const Run* r = rep.find(name);
      if (r) worst_ulps = std::max(worst_ulps, rep.counter(*r, "ulps"));
      row.push_back(r ? format("%.2f", rep.seconds(*r) * 1e3) : peer_supports(peer, w.kind()) ? rep.missing(name) : "");
    }
    row.push_back(best && f ? format("%.2f", best->seconds / rep.seconds(*f)) : "-");
    row.push_back(f && w.flops() > 0 ? format("%.1f", w.flops() / rep.seconds(*f) / 1e9) : "");
    row.push_back(worst_ulps >= 0 ? format("%.2g", worst_ulps) + " / " + format("%.3g", tolerance(w).ulps) : "-");
    rows.push_back(row);
  }
  if (rows.size() > 1) print_table(rows);
}

/// fuse's forward+backward against the minimum, three sgemm calls: the issue asks <= 1.15x.
void print_training_table(const MedianReporter& rep) {
  std::vector<std::vector<std::string>> rows = {
      {"workload", "fuse ms", "best ms", "3 x sgemm ms (minimum)", "fuse / minimum", "target", "kernels",
       "check: ulps / tol"}};
  for (const TrainingWorkload& tw : training_workloads()) {
    const std::string names[2] = {tw.name + "/fused", tw.name + "/3_sgemm"};
    const Run* f = rep.find(names[0]);
    const Run* m = rep.find(names[1]);
    if (rep.missing(names[0]) == "-" && rep.missing(names[1]) == "-") continue;  // filtered out
    std::string verdict = !f || !m ? "" : rep.seconds(*f) / rep.seconds(*m) <= kTrainingTarget ? " met"
                                  : rep.best_seconds(*f) / rep.best_seconds(*m) <= kTrainingTarget ? " best only"
                                                                                                   : " missed";
    rows.push_back({tw.name, f ? format("%.2f", rep.seconds(*f) * 1e3) : rep.missing(names[0]),
                    f ? format("%.2f", rep.best_seconds(*f) * 1e3) : "",
                    m ? format("%.2f", rep.seconds(*m) * 1e3) : rep.missing(names[1]),
                    f && m ? format("%.2fx", rep.seconds(*f) / rep.seconds(*m)) : "",
                    format("<= %.2fx", kTrainingTarget) + verdict, f ? format("%.0f", rep.counter(*f, "kernels")) : "",
                    g_training_checks[tw.name]});
  }
  if (rows.size() > 1) print_table(rows);
}

void print_latency_table(const MedianReporter& rep) {
  std::vector<std::vector<std::string>> rows = {
      {"workload", "graph ops", "kernels", "cold ms", "cold process ms", "warm ms", "disk-cache hit ms"}};
  for (const Workload& w : workloads()) {
    const Run* cold = rep.find("compile/" + w.name + "/cold");
    const Run* warm = rep.find("compile/" + w.name + "/warm");
    const Run* disk = rep.find("compile/" + w.name + "/disk");
    if (!cold && !warm) continue;
    const Run* any = cold ? cold : warm;
    rows.push_back({w.name, format("%.0f", rep.counter(*any, "ops")),
                    warm ? format("%.0f", rep.counter(*warm, "kernels")) : "",
                    cold ? format("%.1f", rep.seconds(*cold) * 1e3) : rep.missing("compile/" + w.name + "/cold"),
                    cold ? format("%.0f", rep.counter(*cold, "process_ms")) : "",
                    warm ? format("%.1f", rep.seconds(*warm) * 1e3) : rep.missing("compile/" + w.name + "/warm"),
                    disk ? format("%.1f", rep.seconds(*disk) * 1e3) : rep.missing("compile/" + w.name + "/disk")});
  }
  if (rows.size() > 1) print_table(rows);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

void print_summary(const MedianReporter& rep, const std::string& load_before) {
  std::printf("\nCPU: %s, %d threads; load average %s before the run, %s after; OpenBLAS core %s\n",
              cpu_model().c_str(), runtime::ThreadPool::global().num_threads(), load_before.c_str(),
              load_average().c_str(), openblas_get_corename());
  std::printf("bandwidth limit: %.1f GB/s, the best rate of STREAM copy or triad (non-temporal %s stores, "
              "%zu trials each over the run, arrays of %lld MB; L3 %lld MB)\n",
              limit_gbs(), stream().isa(), g_stream_gbs[kCopy].size(),
              static_cast<long long>(stream().floats() * 4 >> 20), static_cast<long long>(ir::Target::host().l3_bytes >> 20));
  std::printf("STREAM GB/s, best / median:");
  for (int k = 0; k < kNumStreamKernels; ++k)
    std::printf("%s %s %.1f / %.1f", k ? "," : "", kStreamKernels[k].name, best_gbs(k), median_gbs(k));
  std::printf(" (triad_stores: ordinary stores; read: a sum)\n\n");
  print_run_table(rep);
  std::printf("\nfuse (fused) and its peers, medians (best peer / fuse >= 1: fuse is faster):\n\n");
  print_peer_table(rep);
  std::printf("\nforward+backward of the MLP layer against three sgemm calls, medians (best ms: fuse's best "
              "repetition; best only: met by the best repetitions' ratio):\n\n");
  print_training_table(rep);
  std::printf("\ncompile latency, fused, uncached (medians):\n\n");
  print_latency_table(rep);
}

}  // namespace

}  // namespace fuse::bench

int main(int argc, char** argv) {
  using namespace fuse::bench;
  bool restart = set_peer_thread_environment();  // (bench/peer_threads.h)
  if (const char* core = openblas_core_override()) {  // (bench/openblas_core.h)
    setenv("OPENBLAS_CORETYPE", core, 1);
    restart = true;
  }
  if (restart) execv("/proc/self/exe", argv);
  try {
    // Children inherit the environment: the bench's own cache, not the user's.
    std::string cache_dir = bench_cache_directory();
    setenv("FUSE_CACHE_DIR", cache_dir.c_str(), 1);

    // Defaults the command line can override (a later flag wins). Interleaving the repetitions
    // of all rows in random order spreads the load of other processes over every row alike, so
    // that fused and unfused are compared under the same conditions.
    std::string defaults[] = {"--benchmark_repetitions=31", "--benchmark_report_aggregates_only=true",
                              "--benchmark_enable_random_interleaving=true"};
    std::vector<char*> args = {argv[0]};
    for (std::string& flag : defaults) args.push_back(flag.data());
    args.insert(args.end(), argv + 1, argv + argc);
    int count = static_cast<int>(args.size());
    benchmark::Initialize(&count, args.data());
    if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;

    std::string load_before = load_average();
    set_peer_threads(fuse::runtime::ThreadPool::global().num_threads());
    measure_stream();
    register_benchmarks();
    MedianReporter reporter(isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_Defaults
                                                  : benchmark::ConsoleReporter::OO_Tabular);
    benchmark::RunSpecifiedBenchmarks(&reporter);
    g_prepared.clear();
    g_training.clear();
    print_summary(reporter, load_before);
    benchmark::Shutdown();
    std::error_code ignored;
    std::filesystem::remove_all(cache_dir, ignored);
    if (!g_disagreements.empty()) {
      std::fflush(stdout);
      std::fprintf(stderr, "\nfuse_bench: FAILED: %zu peer(s) disagree with fuse, their rows are not timed:\n",
                   g_disagreements.size());
      for (const std::string& d : g_disagreements) std::fprintf(stderr, "  %s\n", d.c_str());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuse_bench: %s\n", e.what());
    return 1;
  }
}
