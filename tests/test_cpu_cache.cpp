// The compile cache: in memory within a process, on disk across processes; stale or corrupt
// entries are rebuilt, never loaded; both are bounded, least recently used out.
#include <catch2/catch.hpp>

#include <malloc.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "codegen/cpu_codegen.h"
#include "frontends/compile.h"
#include "random_graph.h"

using namespace fuse;
namespace fs = std::filesystem;

namespace {

// Each test gets its own empty cache directory (FUSE_CACHE_DIR) and an empty memory cache, both
// with their default limits, and leaves the memory cache's limit as it found it.
struct FreshCache {
  fs::path dir;
  int64_t memory_limit = codegen::memory_cache_limit();
  FreshCache() {
    dir = fs::temp_directory_path() / ("fuse-cache-test-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    ::setenv("FUSE_CACHE_DIR", dir.c_str(), 1);
    ::unsetenv("FUSE_CACHE_MAX_BYTES");
    codegen::clear_memory_cache();
    codegen::set_memory_cache_limit(64 << 20);
  }
  ~FreshCache() {
    fs::remove_all(dir);
    ::unsetenv("FUSE_CACHE_DIR");
    ::unsetenv("FUSE_CACHE_MAX_BYTES");
    codegen::set_memory_cache_limit(memory_limit);
  }
  std::vector<fs::path> files() const {
    std::vector<fs::path> files;
    if (fs::exists(dir))
      for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
    return files;
  }
  std::vector<fs::path> entries() const {
    std::vector<fs::path> entries;
    for (const fs::path& p : files())
      if (p.extension() == ".fuseobj") entries.push_back(p);
    return entries;
  }
};

// (Graph is neither copyable nor movable: it is built in place.)
void gaussian(Graph& g, float scale) {
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor m = g.input("mean", DType::F32);
  Tensor s = g.input("sigma", DType::F32);
  Tensor z = (x - m) / s;
  g.output("pdf", exp(-0.5 * z * z) / (s * scale));
}

void check_runs(runtime::Executable& exe, const Graph& g, int64_t n) {
  ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"N", n}}, 3);
  CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe.run(inputs), 2e-6, 1e-6) == "");
}

// Distinct graphs of one shape: each scale is its own cache entry, of about the same size.
std::vector<std::unique_ptr<Graph>> gaussians(int count, float first_scale) {
  std::vector<std::unique_ptr<Graph>> graphs;
  for (int i = 0; i < count; ++i) {
    graphs.push_back(std::make_unique<Graph>());
    gaussian(*graphs.back(), first_scale + 0.125f * static_cast<float>(i));
  }
  return graphs;
}

// The entry a compilation of `g` adds to the disk cache.
fs::path stored_entry(const FreshCache& cache, const Graph& g) {
  std::vector<fs::path> before = cache.entries();
  { runtime::Executable exe = compile(g); }
  for (const fs::path& p : cache.entries())
    if (std::find(before.begin(), before.end(), p) == before.end()) return p;
  FAIL("compiling added no entry to the disk cache");
  return {};
}

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

}  // namespace

TEST_CASE("a second compilation of the same graph is a memory-cache hit that serves every size", "[cpu][cache]") {
  FreshCache cache;
  Graph g;
  gaussian(g, 2.5066282746f);
  codegen::CacheStats before = codegen::cache_stats();
  runtime::Executable first = compile(g);
  check_runs(first, g, 1000);
  codegen::CacheStats after_first = codegen::cache_stats();
  CHECK(after_first.compilations == before.compilations + 1);

  runtime::Executable second = compile(g);
  check_runs(second, g, 4099);  // another size, the same machine code
  codegen::CacheStats after_second = codegen::cache_stats();
  CHECK(after_second.memory_hits == after_first.memory_hits + 1);
  CHECK(after_second.compilations == after_first.compilations);
}

TEST_CASE("a different literal or fast math is a different cache entry", "[cpu][cache]") {
  FreshCache cache;
  // The printed Program rounds literals: these two differ only past the 7th digit.
  Graph a, b;
  gaussian(a, 2.5066282f);
  gaussian(b, std::nextafter(2.5066282f, 3.0f));  // the next float up
  codegen::CacheStats before = codegen::cache_stats();
  runtime::Executable ea = compile(a);
  runtime::Executable eb = compile(b);
  CompileOptions fast;
  fast.pipeline.simplify.fast_math = true;
  runtime::Executable ef = compile(a, fast);
  CHECK(codegen::cache_stats().compilations == before.compilations + 3);
  CHECK(cache.entries().size() == 3);
  check_runs(ea, a, 17);
  check_runs(eb, b, 17);
}

TEST_CASE("the disk cache serves a new process (memory cache cleared)", "[cpu][cache]") {
  FreshCache cache;
  Graph g;
  gaussian(g, 2.5066282746f);
  { runtime::Executable exe = compile(g); }
  REQUIRE(cache.entries().size() == 1);
  codegen::clear_memory_cache();
  codegen::CacheStats before = codegen::cache_stats();
  runtime::Executable exe = compile(g);
  codegen::CacheStats after = codegen::cache_stats();
  CHECK(after.disk_hits == before.disk_hits + 1);
  CHECK(after.compilations == before.compilations);
  CHECK(exe.compiled_kernel_count() == 1);
  check_runs(exe, g, 1023);
}

// A program of several kernels is compiled in parts on threads of their own (one object per
// part; CTest runs this under FUSE_NUM_THREADS=7 too, for more parts than a 2-core machine makes).
TEST_CASE("a program compiled in parts runs and round-trips through the disk cache", "[cpu][cache][parts]") {
  FreshCache cache;
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), sym("M")});
  Tensor w = g.input("w", DType::F32, {sym("M"), sym("M")});
  Tensor e = exp(x - max(x, 1, true));
  Tensor softmax = e / sum(e, 1, true);
  Tensor h = tanh(matmul(softmax, w));
  g.output("y", matmul(h, transpose(matmul(h, w))) + 1.0);
  g.output("total", sum(h * h));
  g.output("scan", cumsum(x, 1));
  int specializations = 0;  // the softmax rows of 33 run three times: their own code from the second
  for (bool from_disk : {false, true}) {
    INFO((from_disk ? "from the disk cache" : "compiled"));
    if (from_disk) codegen::clear_memory_cache();
    codegen::CacheStats before = codegen::cache_stats();
    runtime::Executable exe = compile(g);
    codegen::CacheStats after = codegen::cache_stats();
    CHECK(after.disk_hits == before.disk_hits + (from_disk ? 1 : 0));
    CHECK(exe.program().kernels.size() >= 6);
    CHECK(exe.compiled_kernel_count() == static_cast<int>(exe.program().kernels.size()));
    for (int64_t n : {1, 7, 130}) {
      ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"N", n}, {"M", 33}}, 5, /*special_values=*/false);
      CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe.run(inputs), 1e-4, 1e-4) == "");
    }
    specializations = exe.specialization_count();
    CHECK(specializations == 1);
  }
  CHECK(cache.entries().size() == 1 + static_cast<size_t>(specializations));  // each from disk the second time
}

TEST_CASE("corrupt, truncated or stale disk entries are rebuilt, not loaded", "[cpu][cache]") {
  FreshCache cache;
  Graph g;
  gaussian(g, 2.5066282746f);
  Graph other;
  gaussian(other, 3.0f);
  { runtime::Executable exe = compile(other); }
  REQUIRE(cache.entries().size() == 1);
  fs::path other_entry = cache.entries()[0];
  { runtime::Executable exe = compile(g); }
  REQUIRE(cache.entries().size() == 2);
  fs::path entry = cache.entries()[0] == other_entry ? cache.entries()[1] : cache.entries()[0];
  auto original_size = fs::file_size(entry);

  auto damage = [&](const std::string& how) {
    if (how == "flip") {
      std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(original_size / 2));
      char c;
      f.read(&c, 1);
      c ^= 0x10;
      f.seekp(static_cast<std::streamoff>(original_size / 2));
      f.write(&c, 1);
    } else if (how == "truncate") {
      fs::resize_file(entry, original_size / 3);
    } else if (how == "empty") {
      std::ofstream(entry, std::ios::trunc);
    } else if (how == "stale") {
      // Another program's entry under this one's name (what a hash collision or an older
      // fuse would leave): its stored key does not match.
      fs::copy_file(other_entry, entry, fs::copy_options::overwrite_existing);
    }
  };
  for (std::string how : {"flip", "truncate", "empty", "stale"}) {
    INFO(how);
    damage(how);
    codegen::clear_memory_cache();
    codegen::CacheStats before = codegen::cache_stats();
    runtime::Executable exe = compile(g);
    codegen::CacheStats after = codegen::cache_stats();
    CHECK(after.rejected_entries == before.rejected_entries + 1);
    CHECK(after.compilations == before.compilations + 1);
    CHECK(after.disk_hits == before.disk_hits);
    check_runs(exe, g, 77);
    CHECK(fs::file_size(entry) == original_size);  // rewritten whole
  }
}

TEST_CASE("use_cache = false compiles afresh and writes nothing", "[cpu][cache]") {
  FreshCache cache;
  Graph g;
  gaussian(g, 2.5066282746f);
  CompileOptions options;
  options.use_cache = false;
  codegen::CacheStats before = codegen::cache_stats();
  runtime::Executable a = compile(g, options);
  runtime::Executable b = compile(g, options);
  codegen::CacheStats after = codegen::cache_stats();
  CHECK(after.compilations == before.compilations + 2);
  CHECK(after.memory_hits == before.memory_hits);
  CHECK(cache.entries().empty());
  check_runs(b, g, 15);
}

TEST_CASE("an unwritable cache directory only costs time", "[cpu][cache]") {
  FreshCache cache;
  fs::create_directories(cache.dir.parent_path());
  std::ofstream(cache.dir) << "a file where the directory should be";
  Graph g;
  gaussian(g, 2.5066282746f);
  runtime::Executable exe = compile(g);
  check_runs(exe, g, 33);
  fs::remove(cache.dir);
}

TEST_CASE("compile names its target", "[cpu][api]") {
  Graph g;
  gaussian(g, 2.5066282746f);
  CompileOptions options;
  options.pipeline.fusion.enabled = false;
  runtime::Executable exe = compile(g, Target::cpu(), options);
  CHECK(exe.program().kernels.size() > 1);  // the options reached the passes
  check_runs(exe, g, 100);
}

TEST_CASE("the memory cache keeps the most recently used modules within its limit", "[cpu][cache]") {
  FreshCache cache;
  auto graphs = gaussians(3, 1.5f);
  Graph &a = *graphs[0], &b = *graphs[1], &c = *graphs[2];
  auto exe_a = std::make_unique<runtime::Executable>(compile(a));
  int64_t entry_bytes = codegen::memory_cache_usage().bytes;
  REQUIRE(entry_bytes > 0);
  codegen::set_memory_cache_limit(entry_bytes * 5 / 2);  // room for two such modules
  { runtime::Executable exe_b = compile(b); }
  { runtime::Executable again = compile(a); }  // a is now the most recently used
  codegen::CacheStats before = codegen::cache_stats();
  { runtime::Executable exe_c = compile(c); }  // evicts b, the least recently used
  codegen::CacheStats after = codegen::cache_stats();
  CHECK(after.memory_evictions == before.memory_evictions + 1);
  CHECK(codegen::memory_cache_usage().entries == 2);
  CHECK(codegen::memory_cache_usage().bytes <= codegen::memory_cache_limit());
  { runtime::Executable again = compile(a); }
  CHECK(codegen::cache_stats().memory_hits == after.memory_hits + 1);
  { runtime::Executable again = compile(b); }  // gone from memory: from the disk
  CHECK(codegen::cache_stats().disk_hits == after.disk_hits + 1);

  // An evicted module stays valid while an Executable holds it.
  codegen::set_memory_cache_limit(0);
  CHECK(codegen::memory_cache_usage().entries == 0);
  check_runs(*exe_a, a, 1000);
  runtime::Executable exe_c = compile(c);  // a limit of 0 keeps nothing, and still compiles
  CHECK(codegen::memory_cache_usage().entries == 0);
  check_runs(exe_c, c, 100);
}

TEST_CASE("the disk cache stays within FUSE_CACHE_MAX_BYTES, least recently used out", "[cpu][cache]") {
  FreshCache cache;
  auto graphs = gaussians(10, 1.5f);
  int64_t entry_bytes = static_cast<int64_t>(fs::file_size(stored_entry(cache, *graphs[0])));
  int64_t limit = entry_bytes * 7 / 2;  // room for three entries
  ::setenv("FUSE_CACHE_MAX_BYTES", std::to_string(limit).c_str(), 1);
  CHECK(codegen::disk_cache_limit() == limit);
  codegen::CacheStats before = codegen::cache_stats();
  for (auto& g : graphs) {
    { runtime::Executable exe = compile(*g); }
    codegen::DiskCacheUsage usage = codegen::disk_cache_usage();
    CHECK(usage.bytes <= limit);
    CHECK(usage.entries <= 3);
  }
  CHECK(codegen::cache_stats().disk_evictions > before.disk_evictions);

  // Least recently used: the oldest modification time, which a hit refreshes.
  REQUIRE(codegen::clear_disk_cache() > 0);
  codegen::clear_memory_cache();
  ::unsetenv("FUSE_CACHE_MAX_BYTES");
  std::vector<fs::path> entries;
  for (int i = 0; i < 3; ++i) entries.push_back(stored_entry(cache, *graphs[i]));
  auto now = fs::file_time_type::clock::now();
  for (int i = 0; i < 3; ++i) fs::last_write_time(entries[i], now - std::chrono::minutes(10 - i));
  codegen::clear_memory_cache();
  codegen::CacheStats touch = codegen::cache_stats();
  { runtime::Executable exe = compile(*graphs[0]); }  // a disk hit: entries[0] is the newest again
  REQUIRE(codegen::cache_stats().disk_hits == touch.disk_hits + 1);
  ::setenv("FUSE_CACHE_MAX_BYTES", std::to_string(limit).c_str(), 1);
  fs::path newest = stored_entry(cache, *graphs[3]);  // four entries: one must go
  CHECK(fs::exists(entries[0]));
  CHECK(!fs::exists(entries[1]));
  CHECK(fs::exists(newest));

  // A limit of 0 stores nothing; anything else in the directory is never removed.
  std::ofstream(cache.dir / "notes.txt") << "not a cache entry";
  ::setenv("FUSE_CACHE_MAX_BYTES", "0", 1);
  std::vector<fs::path> kept = cache.entries();
  { runtime::Executable exe = compile(*graphs[4]); }
  CHECK(cache.entries().size() == kept.size());
  CHECK(codegen::clear_disk_cache() == 3);
  CHECK(fs::exists(cache.dir / "notes.txt"));
  CHECK(codegen::disk_cache_usage().entries == 0);

  ::setenv("FUSE_CACHE_MAX_BYTES", "a lot", 1);
  CHECK_THROWS_WITH(compile(*graphs[5]), Catch::Contains("FUSE_CACHE_MAX_BYTES='a lot' is not a size"));
  ::setenv("FUSE_CACHE_MAX_BYTES", "2M", 1);
  CHECK(codegen::disk_cache_limit() == 2 << 20);
}

TEST_CASE("threads compiling and evicting at once leave only whole entries", "[cpu][cache]") {
  FreshCache cache;
  // Eight graphs, each compiled by two of the four threads, in a disk cache of room for four.
  auto graphs = gaussians(8, 1.5f);
  int64_t entry_bytes = static_cast<int64_t>(fs::file_size(stored_entry(cache, *graphs[0])));
  codegen::set_memory_cache_limit(codegen::memory_cache_usage().bytes * 3);  // three modules
  codegen::clear_disk_cache();
  codegen::clear_memory_cache();
  ::setenv("FUSE_CACHE_MAX_BYTES", std::to_string(entry_bytes * 9 / 2).c_str(), 1);
  codegen::CacheStats before = codegen::cache_stats();
  constexpr int kThreads = 4;
  std::vector<std::vector<runtime::Executable>> compiled(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        for (size_t i = static_cast<size_t>(t) % 2; i < graphs.size(); i += 2) compiled[t].push_back(compile(*graphs[i]));
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t);
    CHECK(errors[t] == "");
    for (size_t k = 0; k < compiled[t].size(); ++k) check_runs(compiled[t][k], *graphs[(t % 2) + 2 * k], 257);
  }
  CHECK(codegen::disk_cache_usage().bytes <= entry_bytes * 9 / 2);
  for (const fs::path& p : cache.files()) CHECK((p.extension() == ".fuseobj" || p.filename() == ".lock"));

  // Every entry left is whole: loading them all rejects none.
  codegen::clear_memory_cache();
  for (auto& g : graphs) {
    runtime::Executable exe = compile(*g);
    check_runs(exe, *g, 33);
  }
  CHECK(codegen::cache_stats().rejected_entries == before.rejected_entries);
}

// Not run by default (`test_cpu_cache "[.memory]"`): the resident set after compiling 300
// distinct graphs, under the memory cache's limit ($FUSE_MEMORY_CACHE_MAX_BYTES). How kJitBytes
// in codegen/cpu_jit.cpp was measured.
TEST_CASE("memory: 300 distinct graphs", "[.memory]") {
  FreshCache cache;
  codegen::set_memory_cache_limit(cache.memory_limit);  // as $FUSE_MEMORY_CACHE_MAX_BYTES set it
  auto graphs = gaussians(300, 1.5f);
  { runtime::Executable warm_up = compile(*gaussians(1, 0.5f)[0]); }
  ::malloc_trim(0);
  int64_t before = resident_bytes();
  for (auto& g : graphs) {
    runtime::Executable exe = compile(*g);
  }
  int64_t after = resident_bytes();
  ::malloc_trim(0);
  int64_t trimmed = resident_bytes();
  codegen::MemoryCacheUsage usage = codegen::memory_cache_usage();
  WARN("memory cache limit " << codegen::memory_cache_limit() << " bytes: " << usage.entries << " modules, "
       << usage.bytes << " bytes counted; resident " << before / 1024 << " KiB before, " << after / 1024
       << " KiB after (" << (after - before) / 1024 / 300 << " KiB per graph), " << trimmed / 1024
       << " KiB after malloc_trim");
}
