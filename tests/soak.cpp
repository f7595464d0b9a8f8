// The soak test (make soak; not part of make test: it takes minutes): compiles and runs
// FUSE_SOAK_GRAPHS distinct random graphs (default 10^4, tests/random_graph.h) from
// FUSE_SOAK_THREADS threads (default 4) in one process, with the compile caches bounded, and
// checks each against the interpreter within the rounding model (ir/rounding_model.h). Prints
// the resident memory after warm-up and every 10% so that a plateau (or a leak) shows; exits 1
// on any mismatch.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "codegen/cpu_codegen.h"
#include "frontends/compile.h"
#include "ir/printer.h"
#include "ir/rounding_model.h"
#include "random_graph.h"

using namespace fuse;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  int n = v && *v ? std::atoi(v) : 0;
  return n > 0 ? n : fallback;
}

// Resident set size in MiB (/proc/self/statm: pages).
double rss_mib() {
  std::ifstream f("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  f >> pages_total >> pages_resident;
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

}  // namespace

int main() {
  const int graphs = env_int("FUSE_SOAK_GRAPHS", 10000);
  const int threads = env_int("FUSE_SOAK_THREADS", 4);
  // Past the seeds the other tests use; FUSE_SOAK_FIRST_SEED reruns a reported one.
  const uint64_t first_seed = static_cast<uint64_t>(env_int("FUSE_SOAK_FIRST_SEED", 5'000'000));
  std::atomic<int> next{0}, done{0}, mismatches{0}, errors{0}, specialized{0};
  std::mutex print;
  auto start = std::chrono::steady_clock::now();
  auto report = [&](const char* when) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    codegen::CacheStats c = codegen::cache_stats();
    std::lock_guard lock(print);
    std::printf("soak %-9s %6d graphs  %7.1f s  rss %7.1f MiB  memory cache %6.1f MiB  compilations %lld\n", when,
                done.load(), s, rss_mib(), static_cast<double>(codegen::memory_cache_usage().bytes) / (1 << 20),
                static_cast<long long>(c.compilations));
    std::fflush(stdout);
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i = next++; i < graphs; i = next++) {
        uint64_t seed = first_seed + static_cast<uint64_t>(i);
        testing::RandomCase c = testing::random_case(seed);
        try {
          ir::ValuesAndBounds expected = ir::interpret_with_bounds(c.graph, c.inputs);
          runtime::Executable exe = compile(c.graph);
          // Twice: from the second run on, row kernels over short symbolic rows run code
          // specialized to their length (runtime::CpuCode::specialize).
          std::string mismatch = testing::compare_outputs(expected, exe.run(c.inputs));
          if (mismatch.empty()) mismatch = testing::compare_outputs(expected, exe.run(c.inputs));
          specialized += exe.specialization_count();
          if (!mismatch.empty()) {
            ++mismatches;
            std::lock_guard lock(print);
            std::printf("MISMATCH %s\n  %s\n%s%s", c.description.c_str(), mismatch.c_str(), ir::print_graph(c.graph).c_str(),
                        ir::print_program(exe.program()).c_str());
          }
        } catch (const std::exception& e) {
          ++errors;
          std::lock_guard lock(print);
          std::printf("ERROR %s\n  %s\n", c.description.c_str(), e.what());
        }
        int d = ++done;
        if (d == graphs / 20) report("warm-up");
        else if (d % std::max(1, graphs / 10) == 0) report("progress");
      }
    });
  for (std::thread& th : pool) th.join();
  report("end");
  std::printf("soak: %d graphs, %d threads, %d mismatches, %d errors, %d specializations\n", graphs, threads,
              mismatches.load(), errors.load(), specialized.load());
  return mismatches == 0 && errors == 0 ? 0 : 1;
}
