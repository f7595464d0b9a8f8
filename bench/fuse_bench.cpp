// fuse_bench: fuse's CPU backend, fused and unfused, against the machine's memory bandwidth, in
// one run (bench/README.md). Google Benchmark times every row; a summary table of the medians
// follows.
//
//   fuse_bench [--benchmark_filter=REGEX] [--benchmark_repetitions=N] [--benchmark_*...]
//   fuse_bench --compile-once=WORKLOAD   (used by the cold-process rows) compile in this fresh
//                                        process and print the seconds it took
#include <benchmark/benchmark.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/stream.h"
#include "frontends/compile.h"
#include "frontends/expr/compile.h"
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
  double target_percent;  // the goal for the fused run, in % of the bandwidth limit
  // Input values where uniform [-1, 1) would be unrealistic (a sigma near 0 makes the PDF
  // underflow); the others are uniform in [-1, 1).
  std::map<std::string, Range> ranges;
};

constexpr int64_t k10M = 10'000'000, k100M = 100'000'000;
constexpr float kPi = std::numbers::pi_v<float>;

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all = {
      {"add_10M", "examples/add.expr", {{"N", 1000}, {"M", 10'000}}, 85, {}},
      {"add_vectors_10M", "bench/add_vectors.expr", {{"N", k10M}}, 85, {}},
      {"hypot_10M", "examples/hypot.expr", {{"N", k10M}}, 85, {}},
      {"gaussian_pdf_10M", "examples/gaussian_pdf.expr", {{"N", k10M}}, 85, {{"sigma", {0.5f, 1.5f}}}},
      {"polar_distance_10M", "examples/polar_distance.expr", {{"N", k10M}}, 60,
       {{"r1", {0, 1}}, {"r2", {0, 1}}, {"theta1", {-kPi, kPi}}, {"theta2", {-kPi, kPi}}}},
      {"hidden_layer_10M", "examples/hidden_layer.expr", {{"N", k10M}}, 85, {{"greyscales", {0, 255}}}},
      {"sum_10M", "bench/sum.expr", {{"N", k10M}}, 90, {}},
      {"sum_100M", "bench/sum.expr", {{"N", k100M}}, 90, {}},
      {"max_10M", "bench/max.expr", {{"N", k10M}}, 90, {}},
      {"max_100M", "bench/max.expr", {{"N", k100M}}, 90, {}},
      {"softmax_4096x4096", "examples/softmax.expr", {{"N", 4096}, {"M", 4096}}, 75, {}},
      {"layernorm_4096x4096", "examples/layernorm.expr", {{"N", 4096}, {"D", 4096}}, 75, {{"gamma", {0.5f, 1.5f}}}},
      {"transpose_4096x4096", "bench/transpose.expr", {{"N", 4096}, {"M", 4096}}, 50, {}},
  };
  return all;
}

const Workload& find_workload(const std::string& name) {
  for (const Workload& w : workloads())
    if (w.name == name) return w;
  throw ir::Error("no workload named '" + name + "'");
}

ir::Graph load_graph(const Workload& w) {
  std::string path = std::string(FUSE_SOURCE_DIR) + "/" + w.file;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ir::Error("cannot read '" + path + "'");
  std::ostringstream source;
  source << in.rdbuf();
  expr::CompileResult result = expr::compile_expr(source.str(), path);
  if (!result.graph) throw ir::Error(expr::format_diagnostics(result.errors, source.str()));
  return std::move(*result.graph);
}

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

// Much larger than any last-level cache: 3 arrays of 256 MB.
constexpr int64_t kStreamFloats = int64_t{64} << 20;

/// A STREAM kernel's GB/s over the start-up trials.
struct Rate {
  double best = 0, median = 0;
};

/// The limit is STREAM's own figure, the best rate: other processes on the machine can only slow
/// a trial down, so the best one is the closest to what the memory system can do.
struct Limit {
  Rate copy, triad;
  Rate triad_cached, read;  // for comparison only
  double gbs() const { return std::max(copy.best, triad.best); }
};
Limit g_limit;  // measured at start-up, before any row runs: every row shows % of it

Stream& stream() {
  static Stream s(kStreamFloats);
  return s;
}

Limit measure_limit() {
  constexpr int kTrials = 21;
  double (Stream::*const kernels[])() = {&Stream::copy, &Stream::triad, &Stream::triad_cached_stores, &Stream::read};
  constexpr int kKernels = std::size(kernels);
  std::vector<double> rates[kKernels];
  for (auto kernel : kernels) (stream().*kernel)();  // warm-up
  // Interleaved, so that a burst of load from other processes slows every kernel alike.
  for (int t = 0; t < kTrials; ++t) {
    for (int k = 0; k < kKernels; ++k) {
      Clock::time_point start = Clock::now();
      double bytes = (stream().*kernels[k])();
      rates[k].push_back(bytes / since(start) / 1e9);
    }
  }
  Rate r[kKernels];
  for (int k = 0; k < kKernels; ++k) {
    std::sort(rates[k].begin(), rates[k].end());
    r[k] = {rates[k].back(), rates[k][kTrials / 2]};
  }
  return {r[0], r[1], r[2], r[3]};
}

/// Bytes, GB/s and % of the limit for `bytes` moved per iteration in `seconds` (the timed loop;
/// plain counters, since Google Benchmark's rate counters print as "x/s").
void report_bytes(benchmark::State& state, double bytes, double seconds) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["MB"] = bytes / 1e6;
  double gbs = bytes * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.counters["GB/s"] = gbs;
  state.counters["%limit"] = 100 * gbs / g_limit.gbs();
}

void run_stream(benchmark::State& state, double (Stream::*kernel)()) {
  double bytes = 0;
  Clock::time_point start = Clock::now();
  for (auto _ : state) bytes = (stream().*kernel)();
  report_bytes(state, bytes, since(start));
}

// ---- Running compiled workloads ----

struct Variant {
  runtime::Executable exe;
  ir::TensorMap outputs;  // preallocated by the warm-up run, reused by every timed run
};

/// One workload's inputs and its compiled variants, made on first use and kept for the whole run:
/// the repetitions of all rows are interleaved (see main), so any row may come next.
struct Prepared {
  ir::TensorMap inputs;
  std::optional<Variant> variants[2];  // [fused]
};

// Not a function-local static: main() releases it before exit, because a JIT destroyed by the
// exit handlers outlives LLVM's own statics and crashes.
std::map<const Workload*, Prepared> g_prepared;

Prepared& prepared(const Workload& w) {
  auto it = g_prepared.find(&w);
  if (it == g_prepared.end()) it = g_prepared.emplace(&w, Prepared{make_inputs(load_graph(w), w), {}}).first;
  return it->second;
}

void run_workload(benchmark::State& state, const Workload& w, bool fused) {
  Prepared* p;
  Variant* v;
  try {
    p = &prepared(w);
    std::optional<Variant>& slot = p->variants[fused];
    if (!slot) {
      slot.emplace(Variant{compile(load_graph(w), options(fused)), {}});
      slot->exe.run(p->inputs, slot->outputs);  // warm-up: first touches of the outputs, caches
    }
    v = &*slot;
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

// ---- Compile latency ----

int count_ops(const ir::Graph& g) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(),
                                        [](const ir::Node& n) { return n.kind != ir::OpKind::Input; }));
}

/// Seconds of one fused, uncached compile of `w`'s graph (the graph is parsed beforehand).
double time_compile(const Workload& w) {
  ir::Graph g = load_graph(w);
  Clock::time_point start = Clock::now();
  runtime::Executable exe = compile(g, without_cache(options(true)));
  return since(start);
}

struct ChildResult {
  double compile_seconds;  // as the child timed its compile
  double process_seconds;  // spawn to exit, as this process saw it
};

/// Runs `fuse_bench --compile-once=NAME` in a fresh process.
ChildResult compile_in_child(const Workload& w) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw ir::Error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::string flag = "--compile-once=" + w.name;
  char exe[] = "/proc/self/exe";
  char* argv[] = {exe, flag.data(), nullptr};
  Clock::time_point start = Clock::now();
  pid_t pid;
  int spawn_error = posix_spawn(&pid, exe, &actions, nullptr, argv, environ);
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
    throw ir::Error("the --compile-once child for " + w.name + " failed");
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

void register_benchmarks() {
  auto row = [](benchmark::internal::Benchmark* b) {
    return b->Iterations(1)->Unit(benchmark::kMillisecond);
  };
  row(benchmark::RegisterBenchmark("stream/copy_nt", run_stream, &Stream::copy))->UseRealTime();
  row(benchmark::RegisterBenchmark("stream/triad_nt", run_stream, &Stream::triad))->UseRealTime();
  row(benchmark::RegisterBenchmark("stream/triad_stores", run_stream, &Stream::triad_cached_stores))->UseRealTime();
  row(benchmark::RegisterBenchmark("stream/read", run_stream, &Stream::read))->UseRealTime();
  for (const Workload& w : workloads()) {
    row(benchmark::RegisterBenchmark((w.name + "/fused").c_str(), run_workload, w, true))->UseRealTime();
    row(benchmark::RegisterBenchmark((w.name + "/unfused").c_str(), run_workload, w, false))->UseRealTime();
  }
  for (const Workload& w : workloads()) {
    row(benchmark::RegisterBenchmark(("compile/" + w.name + "/cold").c_str(), compile_cold, w))
        ->UseManualTime()
        ->Repetitions(kColdRepetitions);
  }
  for (const Workload& w : workloads())
    row(benchmark::RegisterBenchmark(("compile/" + w.name + "/warm").c_str(), compile_warm, w))->UseRealTime();
  // Disk-cache hit: register "compile/NAME/disk" rows here when codegen has a disk cache (a child
  // compiling with use_cache = true after an earlier child filled the cache); the summary prints
  // n/a until such rows exist.
}

// ---- Reporting ----

using Run = benchmark::BenchmarkReporter::Run;

/// The console reporter, showing one row per benchmark (the median over the repetitions, with
/// their spread as cv%) in the order they were registered, and keeping those rows for the summary.
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
      for (const Run& cv : runs)
        if (cv.run_type == Run::RT_Aggregate && cv.aggregate_name == "cv")
          row.counters["cv%"] = 100 * cv.real_accumulated_time;
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
  double seconds(const Run& r) const { return r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit); }
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

void print_run_table(const MedianReporter& rep) {
  std::vector<std::vector<std::string>> rows = {{"workload", "MB", "fused ms", "GB/s", "% limit", "unfused ms",
                                                 "GB/s", "% limit", "speedup", "target", "kernels", "interp"}};
  for (const Workload& w : workloads()) {
    const std::string names[2] = {w.name + "/fused", w.name + "/unfused"};
    const Run* f = rep.find(names[0]);
    const Run* u = rep.find(names[1]);
    if (!f && !u) continue;
    double mb = rep.counter(f ? *f : *u, "MB");
    std::vector<std::string> row = {w.name, format("%.1f", mb)};
    // GB/s from the median time, so that each row's three numbers agree.
    auto gbs = [&](const Run& r) { return mb / 1e3 / rep.seconds(r); };
    for (int i = 0; i < 2; ++i) {
      if (const Run* r = i == 0 ? f : u) {
        row.insert(row.end(), {format("%.2f", rep.seconds(*r) * 1e3), format("%.1f", gbs(*r)),
                               format("%.0f%%", 100 * gbs(*r) / g_limit.gbs())});
      } else {
        row.insert(row.end(), {rep.missing(names[i]), "", ""});
      }
    }
    row.push_back(f && u ? format("%.2fx", rep.seconds(*u) / rep.seconds(*f)) : "");
    std::string met = f ? (100 * gbs(*f) / g_limit.gbs() >= w.target_percent ? " met" : " missed") : "";
    row.push_back(format(">= %.0f%%", w.target_percent) + met);
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

void print_latency_table(const MedianReporter& rep) {
  std::vector<std::vector<std::string>> rows = {
      {"workload", "graph ops", "kernels", "cold ms", "cold process ms", "warm ms", "disk-cache hit ms"}};
  for (const Workload& w : workloads()) {
    const Run* cold = rep.find("compile/" + w.name + "/cold");
    const Run* warm = rep.find("compile/" + w.name + "/warm");
    if (!cold && !warm) continue;
    const Run* any = cold ? cold : warm;
    rows.push_back({w.name, format("%.0f", rep.counter(*any, "ops")),
                    warm ? format("%.0f", rep.counter(*warm, "kernels")) : "",
                    cold ? format("%.1f", rep.seconds(*cold) * 1e3) : rep.missing("compile/" + w.name + "/cold"),
                    cold ? format("%.0f", rep.counter(*cold, "process_ms")) : "",
                    warm ? format("%.1f", rep.seconds(*warm) * 1e3) : rep.missing("compile/" + w.name + "/warm"),
                    // Filled from "compile/NAME/disk" once codegen has a disk cache.
                    "n/a"});
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
  std::printf("\nCPU: %s, %d threads; load average %s before the run, %s after\n", cpu_model().c_str(),
              runtime::ThreadPool::global().num_threads(), load_before.c_str(), load_average().c_str());
  const Limit& l = g_limit;
  std::printf("bandwidth limit: %.1f GB/s, the best rate of STREAM copy (best %.1f, median %.1f GB/s) and "
              "triad (best %.1f, median %.1f GB/s), non-temporal %s stores\n",
              l.gbs(), l.copy.best, l.copy.median, l.triad.best, l.triad.median, stream().isa());
  std::printf("for comparison: triad with ordinary stores (best %.1f, median %.1f GB/s), read alone, a sum "
              "(best %.1f, median %.1f GB/s)\n\n",
              l.triad_cached.best, l.triad_cached.median, l.read.best, l.read.median);
  print_run_table(rep);
  std::printf("\ncompile latency, fused, uncached (medians):\n\n");
  print_latency_table(rep);
}

}  // namespace

int compile_once(const std::string& name) {
  std::printf("%.9f\n", time_compile(find_workload(name)));
  return 0;
}

}  // namespace fuse::bench

int main(int argc, char** argv) {
  using namespace fuse::bench;
  try {
    if (argc == 2 && std::string_view(argv[1]).starts_with("--compile-once="))
      return compile_once(std::string(argv[1]).substr(std::strlen("--compile-once=")));

    // Defaults the command line can override (a later flag wins). Interleaving the repetitions
    // of all rows in random order spreads the load of other processes over every row alike, so
    // that fused and unfused are compared under the same conditions.
    std::string defaults[] = {"--benchmark_repetitions=21", "--benchmark_report_aggregates_only=true",
                              "--benchmark_enable_random_interleaving=true"};
    std::vector<char*> args = {argv[0]};
    for (std::string& flag : defaults) args.push_back(flag.data());
    args.insert(args.end(), argv + 1, argv + argc);
    int count = static_cast<int>(args.size());
    benchmark::Initialize(&count, args.data());
    if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;

    std::string load_before = load_average();
    g_limit = measure_limit();
    register_benchmarks();
    MedianReporter reporter(isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_Defaults
                                                  : benchmark::ConsoleReporter::OO_Tabular);
    benchmark::RunSpecifiedBenchmarks(&reporter);
    g_prepared.clear();
    print_summary(reporter, load_before);
    benchmark::Shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuse_bench: %s\n", e.what());
    return 1;
  }
}
