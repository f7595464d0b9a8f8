// fuse-run, the bundle runner: argument and input errors, the no-GPU message and exit status,
// a run through the fake driver (outputs written as .npy, --bench), and that the binary does
// not depend on LLVM or MLIR.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "runtime/bundle.h"
#include "runtime/npy.h"
#include "tests/cuda_test_programs.h"

namespace fs = std::filesystem;
using fuse::ir::HostArray;
using Catch::Matchers::Contains;

namespace {

struct Result {
  int status = -1;
  std::string output;  // stdout and stderr
};

/// Runs a shell command line, capturing its output and exit status.
Result shell(const std::string& command) {
  Result r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// fuse-run with `args`, on the fake driver, or on `libcuda` when given.
Result fuse_run(const std::string& args, const std::string& libcuda = FUSE_FAKE_CUDA) {
  return shell("FUSE_LIBCUDA='" + libcuda + "' '" FUSE_RUN "' " + args);
}

/// A directory with the test bundle and inputs a.npy, b.npy (f32[n]) and a wrong-shaped c.npy.
fs::path setup(const std::string& name, int64_t n = 5) {
  fs::path dir = fs::path(FUSE_BINARY_DIR) / "tests" / "fuse_run" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  fuse::runtime::write_bundle((dir / "bundle").string(), fuse_test::vadd_scale_program(10.0f));
  std::vector<float> a, b;
  for (int64_t i = 0; i < n; ++i) a.push_back(static_cast<float>(i)), b.push_back(0.5f);
  fuse::runtime::write_npy((dir / "a.npy").string(), HostArray::from<float>({n}, a));
  fuse::runtime::write_npy((dir / "b.npy").string(), HostArray::from<float>({n}, b));
  fuse::runtime::write_npy((dir / "c.npy").string(), HostArray::from<float>({n, 2}, {}));
  fuse::runtime::write_npy((dir / "d.npy").string(), HostArray::from<double>({n}, {}));
  return dir;
}

std::string inputs(const fs::path& dir) {
  return " --input a=" + (dir / "a.npy").string() + " --input b=" + (dir / "b.npy").string();
}

}  // namespace

TEST_CASE("fuse-run --help says what it runs and where", "[fuse-run]") {
  Result r = fuse_run("--help");
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Contains("Runs a bundle on an NVIDIA GPU through the CUDA driver (libcuda.so.1)"));
  CHECK_THAT(r.output, Contains("DIR            a bundle written by fusec --target=cuda --emit=bundle"));
  CHECK_THAT(r.output, Contains("--device N     the GPU to run on (default 0)"));
  CHECK_THAT(r.output, Contains("floats within T relative + T absolute (default 1e-5)"));
}

TEST_CASE("fuse-run: usage and argument errors", "[fuse-run]") {
  fs::path dir = setup("args");
  Result r = fuse_run("");
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("usage: fuse-run DIR --input NAME=FILE.npy"));
  CHECK(fuse_run("--help").status == 0);

  r = fuse_run((dir / "bundle").string() + " --input a");
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("--input wants NAME=FILE.npy, not 'a'"));
  r = fuse_run((dir / "bundle").string() + " --frobnicate");
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("unknown option '--frobnicate'"));
  r = fuse_run((dir / "bundle").string() + inputs(dir) + " --bench zero");
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("--bench wants an integer >= 1, not 'zero'"));
  r = fuse_run((dir / "bundle").string() + " --out");
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("--out needs a value"));
  r = fuse_run((dir / "nowhere").string());
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("bundle '" + (dir / "nowhere").string() + "' is not a directory"));
}

TEST_CASE("fuse-run: missing, extra and ill-shaped inputs are reported before CUDA is needed", "[fuse-run]") {
  fs::path dir = setup("inputs");
  std::string bundle = (dir / "bundle").string();
  const std::string no_driver = "/nonexistent/libcuda.so.1";
  Result r = fuse_run(bundle + " --input a=" + (dir / "a.npy").string(), no_driver);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("missing input 'b' (f32[N])"));
  r = fuse_run(bundle + " --input a=" + (dir / "a.npy").string() + " --input b=" + (dir / "c.npy").string(), no_driver);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("input 'b' has shape [5, 2]"));
  r = fuse_run(bundle + " --input a=" + (dir / "a.npy").string() + " --input b=" + (dir / "d.npy").string(), no_driver);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("input 'b' has dtype f64 but f32 was declared"));
  r = fuse_run(bundle + inputs(dir) + " --input z=" + (dir / "a.npy").string(), no_driver);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("'z' is not an input of the program"));
  r = fuse_run(bundle + " --input a=" + (dir / "missing.npy").string() + " --input b=" + (dir / "b.npy").string(),
               no_driver);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("missing.npy"));
}

TEST_CASE("fuse-run: without a driver it exits 1 saying why CUDA is unavailable", "[fuse-run]") {
  fs::path dir = setup("no_gpu");
  Result r = fuse_run((dir / "bundle").string() + inputs(dir), "/nonexistent/libcuda.so.1");
  CHECK(r.status == 1);
  CHECK(r.output == "error: CUDA unavailable: /nonexistent/libcuda.so.1 not found (no NVIDIA driver on this machine)\n");
}

TEST_CASE("fuse-run: runs a bundle through the fake driver and writes the outputs", "[fuse-run]") {
  fs::path dir = setup("run", 1000);
  Result r = fuse_run((dir / "bundle").string() + inputs(dir) + " --out " + (dir / "out").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  HostArray y = fuse::runtime::read_npy((dir / "out" / "y.npy").string());
  REQUIRE(y.shape == fuse::ir::ConcreteShape{1000});
  for (int i = 0; i < 1000; ++i) REQUIRE(y.as<float>()[i] == (static_cast<float>(i) + 0.5f) * 10.0f);

  r = fuse_run((dir / "bundle").string() + inputs(dir) + " --bench 3");
  CHECK(r.status == 0);
  // The fake driver times each launch at a quarter millisecond; the program has two.
  CHECK_THAT(r.output, Contains("median kernel time over 3 runs: 0.5 ms"));

  setup("print", 3);
  r = fuse_run((dir.parent_path() / "print" / "bundle").string() + inputs(dir.parent_path() / "print"));
  CHECK(r.status == 0);
  CHECK(r.output == "y = array([ 5., 15., 25.], dtype=float32)\n");
}

TEST_CASE("fuse-run --expect compares every output with expected .npy files", "[fuse-run]") {
  fs::path dir = setup("expect", 100);
  std::string run = (dir / "bundle").string() + inputs(dir);
  REQUIRE(fuse_run(run + " --out " + (dir / "expected").string()).status == 0);
  Result same = fuse_run(run + " --expect " + (dir / "expected").string());
  INFO(same.output);
  CHECK(same.status == 0);
  CHECK_THAT(same.output, Contains("output 'y': matches (max abs difference 0)"));

  // One element off by 1e-3 of its value: a mismatch at 1e-5, a match at 1e-2.
  HostArray y = fuse::runtime::read_npy((dir / "expected" / "y.npy").string());
  y.as<float>()[42] *= 1.001f;
  fuse::runtime::write_npy((dir / "expected" / "y.npy").string(), y);
  Result off = fuse_run(run + " --expect " + (dir / "expected").string());
  INFO(off.output);
  CHECK(off.status == 1);
  CHECK_THAT(off.output, Contains("MISMATCH: output 'y' (f32[100]) differs at flat index 42"));
  CHECK(fuse_run(run + " --expect " + (dir / "expected").string() + " --tolerance 1e-2").status == 0);

  Result missing = fuse_run(run + " --expect " + (dir / "nowhere").string());
  CHECK(missing.status == 1);
  CHECK_THAT(missing.output, Contains("nowhere"));
  CHECK(fuse_run(run + " --tolerance 1e-2").status == 1);  // --tolerance without --expect
}

TEST_CASE("fuse-run links neither LLVM nor MLIR", "[fuse-run]") {
  Result r = shell("ldd '" FUSE_RUN "'");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Contains("libc.so"));
  CHECK_THAT(r.output, !Contains("LLVM") && !Contains("MLIR") && !Contains("libcuda"));
}
