// The compile cache: in memory within a process, on disk across processes; stale or corrupt
// entries are rebuilt, never loaded.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "codegen/cpu_codegen.h"
#include "frontends/compile.h"
#include "random_graph.h"

using namespace fuse;
namespace fs = std::filesystem;

namespace {

// Each test gets its own empty cache directory (FUSE_CACHE_DIR) and an empty memory cache.
struct FreshCache {
  fs::path dir;
  FreshCache() {
    dir = fs::temp_directory_path() / ("fuse-cache-test-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    ::setenv("FUSE_CACHE_DIR", dir.c_str(), 1);
    codegen::clear_memory_cache();
  }
  ~FreshCache() {
    fs::remove_all(dir);
    ::unsetenv("FUSE_CACHE_DIR");
  }
  std::vector<fs::path> entries() const {
    std::vector<fs::path> files;
    if (fs::exists(dir))
      for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
    return files;
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
