// One Executable served from many threads: every run computes what it computes alone, whether
// the Executable is shared or each thread has its own, with programs of every kernel form in
// flight at once; compiles run concurrently with the caches on; a run issued from inside a
// thread-pool task neither deadlocks nor differs. `make test-tsan` runs this file under
// ThreadSanitizer with FUSE_CONCURRENCY_RUNS=500.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "frontends/compile.h"
#include "ir/printer.h"
#include "random_graph.h"
#include "runtime/thread_pool.h"

using namespace fuse;

namespace {

// Runs per thread: FUSE_CONCURRENCY_RUNS, default 40 (500 in make test-tsan).
int runs_per_thread() {
  const char* env = std::getenv("FUSE_CONCURRENCY_RUNS");
  int runs = env && *env ? std::atoi(env) : 0;
  return runs > 0 ? runs : 40;
}

constexpr int kThreads = 8;

// A program and inputs at a few sizes; the results of a run alone are what every concurrent run
// must reproduce bit for bit (the kernels do the same arithmetic whichever thread runs them).
struct Workload {
  std::string name;
  ir::Graph graph;
  std::vector<ir::TensorMap> inputs;
  std::vector<ir::TensorMap> expected;  // from a sequential run of the compiled program
};

Workload softmax_and_transpose() {
  Workload w{"softmax + transpose", {}, {}, {}};
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), sym("M")});
  Tensor e = exp(x - max(x, 1, true));
  g.output("softmax", e / sum(e, 1, true));
  g.output("t", transpose(x) * 2.0f);
  w.graph = g.ir();
  for (auto [n, m] : {std::pair<int64_t, int64_t>{3, 1000}, {257, 65}, {64, 64}, {1, 7}})
    w.inputs.push_back(testing::random_inputs(g.ir(), {{"N", n}, {"M", m}}, 17, false));
  return w;
}

Workload elementwise() {
  Workload w{"elementwise", {}, {}, {}};
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor y = g.input("y", DType::F32, {sym("N")});
  g.output("z", sqrt(x * x + y * y) * 0.5f + tanh(x));
  w.graph = g.ir();
  for (int64_t n : {1, 1023, 100003}) w.inputs.push_back(testing::random_inputs(g.ir(), {{"N", n}}, 5, false));
  return w;
}

Workload reductions() {
  Workload w{"reductions", {}, {}, {}};
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), sym("M")});
  g.output("total", sum(x));  // a split reduction over chunks
  g.output("column_max", max(x, 0));
  g.output("row_mean", mean(x, 1));
  w.graph = g.ir();
  for (auto [n, m] : {std::pair<int64_t, int64_t>{300, 301}, {1, 1}, {4096, 33}})
    w.inputs.push_back(testing::random_inputs(g.ir(), {{"N", n}, {"M", m}}, 9, false));
  return w;
}

Workload layernorm() {
  Workload w{"layernorm", {}, {}, {}};
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), sym("D")});
  Tensor centered = x - mean(x, 1, true);
  g.output("y", centered * rsqrt(mean(centered * centered, 1, true) + 1e-5f));
  w.graph = g.ir();
  for (auto [n, d] : {std::pair<int64_t, int64_t>{65, 129}, {2, 4000}})
    w.inputs.push_back(testing::random_inputs(g.ir(), {{"N", n}, {"D", d}}, 3, false));
  return w;
}

Workload mlp_layer() {
  Workload w{"matmul + bias + relu", {}, {}, {}};
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("M"), sym("K")});
  Tensor wt = g.input("w", DType::F32, {sym("K"), sym("N")});
  Tensor b = g.input("b", DType::F32, {sym("N")});
  g.output("y", maximum(matmul(x, wt) + b, 0.0f));
  w.graph = g.ir();
  // 1100 rows: on several threads, tasks of at least mc rows share one packed B (its claim flags).
  for (auto [m, k, n] : {std::array<int64_t, 3>{67, 129, 70}, {2, 1, 1}, {200, 64, 300}, {1100, 64, 300}})
    w.inputs.push_back(testing::random_inputs(g.ir(), {{"M", m}, {"K", k}, {"N", n}}, 13, false));
  return w;
}

std::vector<Workload> workloads() {
  std::vector<Workload> all;
  all.push_back(softmax_and_transpose());
  all.push_back(elementwise());
  all.push_back(reductions());
  all.push_back(layernorm());
  all.push_back(mlp_layer());
  return all;
}

// Each of kThreads threads runs `runs` times, the thread's own order over the (workload, size)
// pairs, through `executable_for(thread, workload)`; returns the mismatches seen.
int run_concurrently(std::vector<Workload>& all, int runs,
                     const std::function<runtime::Executable&(int thread, size_t workload)>& executable_for) {
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      ir::TensorMap outputs;  // reused across this thread's runs, as a server would
      for (int r = 0; r < runs; ++r) {
        size_t wi = static_cast<size_t>(t + r) % all.size();
        Workload& w = all[wi];
        size_t si = static_cast<size_t>(t * 7 + r) % w.inputs.size();
        outputs.clear();
        executable_for(t, wi).run(w.inputs[si], outputs);
        if (!testing::compare_outputs(w.expected[si], outputs, 0, 0).empty()) ++mismatches;
      }
    });
  for (std::thread& th : threads) th.join();
  return mismatches.load();
}

}  // namespace

// Crashed before each run had a workspace of its own (the intermediates lived in storage every
// call shared): two threads on one softmax + transpose Executable at different sizes.
TEST_CASE("two threads run one Executable at different sizes", "[runtime][concurrency]") {
  Workload w = softmax_and_transpose();
  runtime::Executable exe = compile(w.graph);
  for (const ir::TensorMap& in : w.inputs) w.expected.push_back(exe.run(in));
  std::atomic<int> mismatches{0};
  auto worker = [&](size_t first) {
    for (int r = 0; r < 4 * runs_per_thread(); ++r) {
      size_t si = (first + static_cast<size_t>(r)) % w.inputs.size();
      if (!testing::compare_outputs(w.expected[si], exe.run(w.inputs[si]), 0, 0).empty()) ++mismatches;
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  CHECK(mismatches == 0);
  // The interpreter agrees with the sequential runs the concurrent ones were compared with.
  for (size_t i = 0; i < w.inputs.size(); ++i)
    CHECK(testing::compare_outputs(ir::interpret(w.graph, w.inputs[i]), w.expected[i], 1e-5, 1e-6) == "");
  CHECK(exe.workspace_count() <= 2);
}

TEST_CASE("8 threads share Executables of every kernel form", "[runtime][concurrency]") {
  std::vector<Workload> all = workloads();
  std::vector<runtime::Executable> shared;
  for (Workload& w : all) {
    shared.push_back(compile(w.graph));
    for (const ir::TensorMap& in : w.inputs) w.expected.push_back(shared.back().run(in));
  }
  int runs = runs_per_thread();
  CHECK(run_concurrently(all, runs, [&](int, size_t wi) -> runtime::Executable& { return shared[wi]; }) == 0);
  for (const runtime::Executable& exe : shared) CHECK(exe.workspace_count() <= kThreads);
  // The same with one Executable per thread and workload: nothing is shared but the pool.
  std::vector<std::vector<runtime::Executable>> own(kThreads);
  for (auto& mine : own)
    for (Workload& w : all) mine.push_back(compile(w.graph));
  CHECK(run_concurrently(all, runs, [&](int t, size_t wi) -> runtime::Executable& { return own[t][wi]; }) == 0);
}

TEST_CASE("threads compile at once with the caches on", "[runtime][concurrency][cache]") {
  // Every thread compiles the same graph and one of its own; all must run correctly.
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 3; ++r) {
        Graph g;
        Tensor x = g.input("x", DType::F32, {sym("N")});
        g.output("y", exp(x) * static_cast<float>(r + 1) + (r == 0 ? 0.0f : static_cast<float>(t)));
        ir::TensorMap in = testing::random_inputs(g.ir(), {{"N", 1000}}, static_cast<uint64_t>(t), false);
        if (!testing::compare_outputs(ir::interpret(g.ir(), in), compile(g).run(in), 2e-6, 1e-6).empty()) ++failures;
      }
    });
  for (std::thread& th : threads) th.join();
  CHECK(failures == 0);
}

TEST_CASE("a run issued from inside a thread-pool task", "[runtime][concurrency]") {
  // A data loader that calls the compiled function from its own parallel_for: the nested
  // parallel_for runs inline, so this neither deadlocks nor computes anything else.
  Workload w = reductions();
  runtime::Executable exe = compile(w.graph);
  for (const ir::TensorMap& in : w.inputs) w.expected.push_back(exe.run(in));
  std::atomic<int> mismatches{0};
  runtime::ThreadPool::global().parallel_for(0, 16, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      size_t si = static_cast<size_t>(i) % w.inputs.size();
      if (!testing::compare_outputs(w.expected[si], exe.run(w.inputs[si]), 0, 0).empty()) ++mismatches;
    }
  });
  CHECK(mismatches == 0);
}
