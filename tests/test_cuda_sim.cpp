// The generated CUDA kernels on the simulated device (runtime/sim/, codegen/cuda_sim.h): every
// example, every fusion-catalog graph and a batch of random graphs against the reference
// interpreter under the rounding model, with the simulator's sync, race and memory checks on; and
// deliberately broken hand-written kernels that each check must report with kernel and site.
// FUSE_SIM_RANDOM_GRAPHS sets how many random graphs run (default 300).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <set>

#include "codegen/cuda_sim.h"
#include "frontends/compile.h"
#include "ir/printer.h"
#include "runtime/cuda_driver.h"
#include "tests/cuda_test_programs.h"
#include "tests/examples.h"
#include "tests/fusion_catalog.h"
#include "tests/random_graph.h"

using namespace fuse;
namespace cuda = fuse::runtime::cuda;
using Catch::Matchers::Contains;

namespace {

// Every test in this file runs on the simulator with every check on: set before the driver loads.
const bool kSimulator = [] {
  setenv("FUSE_CUDA_SIM", "1", 1);
  return setenv("FUSE_CUDA_SIM_CHECKS", "all", 1) == 0;
}();

/// Small odd sizes, 1, and each symbol in turn at 1023 (long rows, many rows, long reductions).
std::vector<ir::SymbolBindings> size_sets(const ir::Graph& g) {
  static const int64_t small[] = {7, 17, 5, 11, 3, 13, 9, 15};
  std::vector<std::string> symbols = testing::input_symbols(g);
  ir::SymbolBindings base, ones;
  for (size_t i = 0; i < symbols.size(); ++i) base[symbols[i]] = small[i % std::size(small)], ones[symbols[i]] = 1;
  std::vector<ir::SymbolBindings> sets = {base};
  if (!symbols.empty()) sets.push_back(ones);
  for (const std::string& s : symbols) {
    ir::SymbolBindings large = base;
    large[s] = 1023;
    sets.push_back(large);
  }
  return sets;
}

using testing::sizes_str;

/// Runs `g` on the simulator at every size set and compares with the interpreter.
void check_graph(const ir::Graph& g, const std::string& what, bool every_size = true) {
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  uint64_t seed = 1;
  std::vector<ir::SymbolBindings> sets = size_sets(g);
  if (!every_size) sets.resize(1);
  for (const ir::SymbolBindings& sizes : sets) {
    INFO(what << " at " << sizes_str(sizes));
    ir::TensorMap inputs = testing::random_inputs(g, sizes, seed);
    testing::make_indices_valid(g, inputs, sizes, seed++);  // take's indices in range
    ir::ValuesAndBounds expected;
    try {
      expected = ir::interpret_with_bounds(g, inputs);
    } catch (const ir::Error&) {
      continue;  // sizes this graph does not accept (reshapes needing a multiple)
    }
    CHECK(testing::compare_outputs(expected, exe->run_host(inputs)) == "");
  }
}

/// The simulator's counters (libfuse_cuda_sim.so's fuse_cuda_sim_totals).
void sim_totals(long long& threads, double& seconds) {
  cuda::driver();
  void* lib = dlopen(cuda::simulator_library_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib);
  auto totals = reinterpret_cast<void (*)(long long*, double*)>(dlsym(lib, "fuse_cuda_sim_totals"));
  REQUIRE(totals);
  totals(&threads, &seconds);
}

}  // namespace

TEST_CASE("the simulator is the driver of this process", "[cuda][sim]") {
  REQUIRE(cuda::simulator_selected());
  CHECK(cuda::driver().path == cuda::simulator_library_path());
  CHECK(cuda::device_info(0).name == "fuse CUDA simulator");
}

TEST_CASE("softmax with rows longer than a block runs on the simulator", "[cuda][sim]") {
  ir::Graph g = testing::compile_example(std::filesystem::path(FUSE_SOURCE_DIR) / "examples" / "softmax.expr");
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  for (int64_t m : {5000, 1, 4097}) {
    INFO("M = " << m);
    ir::TensorMap inputs = testing::random_inputs(g, {{"N", 64}, {"M", m}}, 7, false);
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g, inputs), exe->run_host(inputs)) == "");
  }
}

TEST_CASE("a two-stage reduction over more tiles than partial blocks runs on the simulator", "[cuda][sim]") {
  // The partials' grid is capped at 1,024 blocks: 2,000,003 elements are 1,954 tiles of 1,024, so
  // the blocks stride over the tiles.
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  g.output("s", sum(x));
  g.output("m", max(x));
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  REQUIRE(exe->program().plan.launches.size() == 2);
  CHECK(exe->program().plan.launches[0].max_grid[0] == 1024);
  for (int64_t n : {2000003, 1024 * 1024 + 1, 1}) {
    INFO("N = " << n);
    ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"N", n}}, 5);
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe->run_host(inputs)) == "");
  }
}

TEST_CASE("every example runs on the simulator and matches the interpreter", "[cuda][sim][examples]") {
  std::vector<std::filesystem::path> files = testing::example_files();
  REQUIRE(files.size() >= 14);
  for (const std::filesystem::path& file : files) {
    SECTION(file.filename().string()) { check_graph(testing::compile_example(file), file.filename().string()); }
  }
}

TEST_CASE("every fusion catalog graph runs on the simulator and matches the interpreter", "[cuda][sim][examples]") {
  REQUIRE(testing::catalog().size() >= 25);
  for (const testing::Case& c : testing::catalog()) {
    SECTION(c.name) {
      Graph g;
      c.build(g);
      check_graph(g.ir(), c.name);
    }
  }
}

TEST_CASE("every example and catalog graph covers its work with a grid of 2 blocks per axis", "[cuda][sim][examples]") {
  // Grid-stride loops, as more than 65,535 tiles on a grid axis need: the simulator launches at
  // most 2 blocks along each axis (FUSE_CUDA_SIM_MAX_GRID).
  setenv("FUSE_CUDA_SIM_MAX_GRID", "2", 1);
  for (const std::filesystem::path& file : testing::example_files())
    check_graph(testing::compile_example(file), file.filename().string(), false);
  for (const testing::Case& c : testing::catalog()) {
    Graph g;
    c.build(g);
    check_graph(g.ir(), c.name, false);
  }
  unsetenv("FUSE_CUDA_SIM_MAX_GRID");
}

TEST_CASE("random graphs run on the simulator and match the interpreter", "[cuda][sim][random]") {
  const char* env = std::getenv("FUSE_SIM_RANDOM_GRAPHS");
  // Under the sanitizers (Debug, several times slower) a tenth: the long run is the Release build's.
  const int count = env ? std::atoi(env) : FUSE_SANITIZED ? 30 : 300;
  auto start = std::chrono::steady_clock::now();
  long long threads_before = 0, threads_after = 0;
  double seconds_before = 0, seconds_after = 0;
  sim_totals(threads_before, seconds_before);
  int failures = 0;
  for (int i = 0; i < count; ++i) {
    uint64_t seed = 1000 + static_cast<uint64_t>(i);
    // User combiners fold in parallel chunks on the GPU when they regroup (associative ones),
    // else in order on one thread (ir::combiner_regroups): odd seeds draw associative ones.
    testing::RandomGraphOptions options;
    options.associative_combiners = seed % 2 == 1;
    testing::RandomCase c = testing::random_case(seed, options);
    INFO(c.description << "\n" << ir::print_graph(c.graph));
    ir::ValuesAndBounds expected = ir::interpret_with_bounds(c.graph, c.inputs);
    std::string mismatch;
    try {
      mismatch = testing::compare_outputs(expected, compile_cuda(c.graph, Target::cuda_sim())->run_host(c.inputs));
    } catch (const ir::Error& e) {
      mismatch = e.what();
    }
    CHECK(mismatch == "");
    failures += !mismatch.empty();
  }
  sim_totals(threads_after, seconds_after);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN(count << " random graphs on the simulator, " << failures << " mismatches, " << wall << " s; "
             << (threads_after - threads_before) << " simulated CUDA threads in "
             << (seconds_after - seconds_before) << " s of launches ("
             << (threads_after - threads_before) / std::max(1e-9, seconds_after - seconds_before) << " threads/s)");
}

// ---- deliberately broken kernels ----

namespace {

/// A hand-written NVVM-level kernel `entry(ptr out, ptr in)` run once on the simulator with
/// `threads` threads in one block, on two 64-float buffers (in[i] = i). Returns "" or the
/// launch's error as the runtime reports it.
std::string run_kernel(const std::string& ir, const std::string& entry, unsigned threads, unsigned blocks = 1) {
  std::string image = codegen::compile_cuda_sim_ir(ir, {entry});
  const cuda::DriverApi& api = cuda::api(0);
  cuda::CUmodule module = nullptr;
  cuda::check(api.cuModuleLoadDataEx(&module, image.c_str(), 0, nullptr, nullptr), "cuModuleLoadDataEx");
  cuda::CUfunction f = nullptr;
  cuda::check(api.cuModuleGetFunction(&f, module, entry.c_str()), "cuModuleGetFunction");
  cuda::CUdeviceptr out = 0, in = 0;
  cuda::check(api.cuMemAlloc_v2(&out, 64 * sizeof(float)), "cuMemAlloc");
  cuda::check(api.cuMemAlloc_v2(&in, 64 * sizeof(float)), "cuMemAlloc");
  float values[64];
  for (int i = 0; i < 64; ++i) values[i] = static_cast<float>(i);
  cuda::check(api.cuMemcpyHtoDAsync_v2(in, values, sizeof values, nullptr), "cuMemcpyHtoDAsync");
  void* params[] = {&out, &in};
  cuda::CUresult r = api.cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, nullptr, params, nullptr);
  std::string error = r == cuda::CUDA_SUCCESS ? "" : cuda::error_text(api, r);
  api.cuMemFree_v2(out);
  api.cuMemFree_v2(in);
  api.cuModuleUnload(module);
  return error;
}

const char* kDeclarations = R"(
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare void @llvm.nvvm.barrier0()
declare i32 @llvm.nvvm.shfl.sync.bfly.i32(i32, i32, i32, i32)
declare i32 @llvm.nvvm.shfl.sync.idx.i32(i32, i32, i32, i32)
declare i32 @llvm.nvvm.shfl.sync.up.i32(i32, i32, i32, i32)
declare i32 @llvm.nvvm.shfl.sync.down.i32(i32, i32, i32, i32)
)";

/// tile[t] = t; [barrier]; out[t] = tile[63 - t]: reversal through shared memory.
std::string reverse_kernel(bool barrier) {
  return std::string(kDeclarations) + R"(
@tile = internal addrspace(3) global [64 x float] undef, align 16
define void @reverse(ptr %out, ptr %in) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %p = getelementptr float, ptr addrspace(3) @tile, i32 %t
  %f = sitofp i32 %t to float
  store float %f, ptr addrspace(3) %p, align 4
)" + (barrier ? "  call void @llvm.nvvm.barrier0()\n" : "") + R"(
  %n = sub i32 63, %t
  %q = getelementptr float, ptr addrspace(3) @tile, i32 %n
  %v = load float, ptr addrspace(3) %q, align 4
  %o = getelementptr float, ptr %out, i32 %t
  store float %v, ptr %o, align 4
  ret void
}
)";
}

}  // namespace

TEST_CASE("the simulator reports a missing barrier as a shared-memory race", "[cuda][sim][checks]") {
  CHECK(run_kernel(reverse_kernel(true), "reverse", 64) == "");
  // With every check on, thread 0 already reads a byte no thread has written yet.
  CHECK_THAT(run_kernel(reverse_kernel(false), "reverse", 64),
             Contains("memcheck: uninitialized shared memory read at reverse: load #1"));
  setenv("FUSE_CUDA_SIM_CHECKS", "race", 1);
  std::string error = run_kernel(reverse_kernel(false), "reverse", 64);
  setenv("FUSE_CUDA_SIM_CHECKS", "all", 1);
  CHECK_THAT(error, Contains("CUDA_ERROR_LAUNCH_FAILED"));
  CHECK_THAT(error, Contains("race (write after read) at reverse: store #0 (float, shared, align 4)"));
  CHECK_THAT(error, Contains("read by thread (31, 0, 0) with no barrier in between"));
  CHECK_THAT(error, Contains("block (0, 0, 0) thread ("));
}

TEST_CASE("the simulator reports a barrier in a thread-dependent branch", "[cuda][sim][checks]") {
  std::string ir = std::string(kDeclarations) + R"(
define void @divergent(ptr %out, ptr %in) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %low = icmp ult i32 %t, 16
  br i1 %low, label %wait, label %done
wait:
  call void @llvm.nvvm.barrier0()
  br label %done
done:
  %o = getelementptr float, ptr %out, i32 %t
  store float 1.0, ptr %o, align 4
  ret void
}
)";
  std::string error = run_kernel(ir, "divergent", 64);
  CHECK_THAT(error, Contains("sync error (barrier not reached by every thread of the block) at divergent: barrier #0"));
  CHECK_THAT(error, Contains("thread (16, 0, 0)"));
  // Two barriers, one per branch: threads wait at different barriers.
  std::string two = std::string(kDeclarations) + R"(
define void @two_barriers(ptr %out, ptr %in) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %low = icmp ult i32 %t, 16
  br i1 %low, label %a, label %b
a:
  call void @llvm.nvvm.barrier0()
  br label %done
b:
  call void @llvm.nvvm.barrier0()
  br label %done
done:
  ret void
}
)";
  CHECK_THAT(run_kernel(two, "two_barriers", 64), Contains("sync error (threads wait at different barriers) at two_barriers: barrier #"));
}

TEST_CASE("the simulator reports an out-of-bounds index with kernel and site", "[cuda][sim][checks]") {
  auto kernel = [](int offset) {
    return std::string(kDeclarations) + R"(
define void @shifted_copy(ptr %out, ptr %in) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %s = add i32 %t, )" + std::to_string(offset) + R"(
  %p = getelementptr float, ptr %in, i32 %s
  %v = load float, ptr %p, align 4
  %o = getelementptr float, ptr %out, i32 %t
  store float %v, ptr %o, align 4
  ret void
}
)";
  };
  CHECK(run_kernel(kernel(0), "shifted_copy", 64) == "");
  std::string error = run_kernel(kernel(1), "shifted_copy", 64);
  CHECK_THAT(error, Contains("CUDA_ERROR_ILLEGAL_ADDRESS"));
  CHECK_THAT(error, Contains("memcheck: out-of-bounds global access at shifted_copy: load #0 (float, align 4)"));
  CHECK_THAT(error, Contains("thread (63, 0, 0)"));
  CHECK_THAT(error, Contains("bytes [256, 260) of a 256-byte allocation"));
}

TEST_CASE("the simulator reports a misaligned vector access and an uninitialized shared read", "[cuda][sim][checks]") {
  std::string misaligned = std::string(kDeclarations) + R"(
define void @misaligned(ptr %out, ptr %in) {
  %p = getelementptr i8, ptr %in, i64 4
  %v = load <4 x float>, ptr %p, align 16
  store <4 x float> %v, ptr %out, align 16
  ret void
}
)";
  CHECK_THAT(run_kernel(misaligned, "misaligned", 1),
             Contains("memcheck: misaligned global access at misaligned: load #0 (<4 x float>, align 16)"));
  std::string uninitialized = std::string(kDeclarations) + R"(
@tile = internal addrspace(3) global [64 x float] undef, align 16
define void @uninitialized(ptr %out, ptr %in) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %q = getelementptr float, ptr addrspace(3) @tile, i32 %t
  %v = load float, ptr addrspace(3) %q, align 4
  %o = getelementptr float, ptr %out, i32 %t
  store float %v, ptr %o, align 4
  ret void
}
)";
  CHECK_THAT(run_kernel(uninitialized, "uninitialized", 32),
             Contains("memcheck: uninitialized shared memory read at uninitialized: load #0"));
}

TEST_CASE("the simulator's shuffles follow PTX for mode and clamp and segment and out-of-range lanes", "[cuda][sim][shuffle]") {
  // out[t] = shfl(in[t]) for each mode with a 16-lane segment (c = (32 - 16) << 8 | clamp).
  auto kernel = [](const std::string& mode, int b, int c) {
    return std::string(kDeclarations) + R"(
define void @shuffle(ptr %out, ptr %in) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %v = sitofp i32 %t to float
  %i = fptosi float %v to i32
  %r = call i32 @llvm.nvvm.shfl.sync.)" + mode + R"(.i32(i32 -1, i32 %i, i32 )" + std::to_string(b) + ", i32 " +
           std::to_string(c) + R"()
  %f = sitofp i32 %r to float
  %o = getelementptr float, ptr %out, i32 %t
  store float %f, ptr %o, align 4
  ret void
}
)";
  };
  auto lanes = [&](const std::string& mode, int b, int c) {
    std::string image = codegen::compile_cuda_sim_ir(kernel(mode, b, c), {"shuffle"});
    const cuda::DriverApi& api = cuda::api(0);
    cuda::CUmodule module = nullptr;
    cuda::check(api.cuModuleLoadDataEx(&module, image.c_str(), 0, nullptr, nullptr), "cuModuleLoadDataEx");
    cuda::CUfunction f = nullptr;
    cuda::check(api.cuModuleGetFunction(&f, module, "shuffle"), "cuModuleGetFunction");
    cuda::CUdeviceptr out = 0;
    cuda::check(api.cuMemAlloc_v2(&out, 32 * sizeof(float)), "cuMemAlloc");
    void* params[] = {&out, &out};
    cuda::check(api.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel");
    float values[32];
    cuda::check(api.cuMemcpyDtoHAsync_v2(values, out, sizeof values, nullptr), "cuMemcpyDtoHAsync");
    api.cuMemFree_v2(out);
    api.cuModuleUnload(module);
    std::vector<int> result;
    for (float v : values) result.push_back(static_cast<int>(v));
    return result;
  };
  const int segment16 = (32 - 16) << 8;
  std::vector<int> down = lanes("down", 3, segment16 | 31), up = lanes("up", 3, segment16),
                   bfly = lanes("bfly", 5, segment16 | 31), idx = lanes("idx", 2, segment16 | 31);
  for (int lane = 0; lane < 32; ++lane) {
    INFO("lane " << lane);
    int base = lane & ~15, in_segment = lane & 15;
    CHECK(down[lane] == (in_segment + 3 <= 15 ? lane + 3 : lane));  // past the segment: own value
    CHECK(up[lane] == (in_segment >= 3 ? lane - 3 : lane));
    CHECK(bfly[lane] == (lane ^ 5));
    CHECK(idx[lane] == base + 2);
  }
}

TEST_CASE("the simulator reports a shuffle whose mask does not match the lanes that arrive", "[cuda][sim][checks]") {
  // Only the first 16 lanes shuffle, but they name the whole warp.
  std::string ir = std::string(kDeclarations) + R"(
define void @partial_shuffle(ptr %out, ptr %in) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %low = icmp ult i32 %t, 16
  br i1 %low, label %shuffle, label %done
shuffle:
  %r = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %t, i32 1, i32 31)
  br label %done
done:
  ret void
}
)";
  CHECK_THAT(run_kernel(ir, "partial_shuffle", 32),
             Contains("sync error (shuffle mask names a lane that has exited) at partial_shuffle: shfl.sync.bfly #0"));
}

TEST_CASE("an unknown NVVM operation is a compile error naming it", "[cuda][sim][checks]") {
  std::string ir = R"(
declare i32 @llvm.nvvm.read.ptx.sreg.clock()
define void @clock(ptr %out, ptr %in) {
  %c = call i32 @llvm.nvvm.read.ptx.sreg.clock()
  store i32 %c, ptr %out, align 4
  ret void
}
)";
  CHECK_THROWS_WITH(codegen::compile_cuda_sim_ir(ir, {"clock"}),
                    Contains("the CUDA simulator does not implement the NVVM operation llvm.nvvm.read.ptx.sreg.clock"));
}

// ---- CUDA bugs found by reading the code, verified on the simulator ----

TEST_CASE("f32 floor division agrees with the interpreter on the simulator and the CPU", "[cuda][sim][regression]") {
  // 1.0f / 0.1f rounds to 10.0f, but the exact quotient is 9.99999985: 1.0 // 0.1 is 9 (NumPy too).
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor d = g.input("d", DType::F32, {sym("N")});
  g.output("y", floordiv(x, d));
  ir::HostArray xs(DType::F32, {5}), ds(DType::F32, {5});
  const float xv[] = {1.0f, 1.0f, -1.0f, 0.3f, 7.0f}, dv[] = {0.1f, 0.2f, 0.1f, 0.1f, 0.7f};
  for (int i = 0; i < 5; ++i) xs.set_f64(i, xv[i]), ds.set_f64(i, dv[i]);
  ir::TensorMap inputs = {{"x", xs}, {"d", ds}};
  ir::TensorMap expected = ir::interpret(g.ir(), inputs);
  CHECK(expected.at("y").get_f64(0) == 9.0);
  CHECK(testing::compare_outputs(expected, compile_cuda(g, Target::cuda_sim())->run_host(inputs), 0, 0) == "");
  CHECK(testing::compare_outputs(expected, compile(g).run(inputs), 0, 0) == "");
}

// ---- the CUDA runtime on the simulated device ----

TEST_CASE("dim expressions as shapes run on the simulator", "[cuda][sim][shape]") {
  Graph g;
  Dim n = sym("N");
  Tensor x = g.input("x", ir::DType::F32, {n});
  g.output("x2", x * 2.0);
  g.output("clamped", cast(g.arange(ir::dim_max(n - 2, 0)), ir::DType::F32) + 1.0);
  g.output("half", g.arange(ir::floor_div(n, 2)));
  g.output("third_up", g.arange(ir::ceil_div(n, 3)) * 2);
  g.output("at_most_5", cast(g.arange(ir::dim_min(n, 5)), ir::DType::I32));
  // A 3 x d grid of 10*row + col: the kernel delinearizes with d, so a wrong d moves values.
  auto grid = [&](Dim d) {
    return cast(broadcast_to(expand_dims(g.arange(d), 0), {3, d}) + broadcast_to(expand_dims(g.arange(3) * 10, 1), {3, d}),
                ir::DType::F64);
  };
  Dim half = ir::floor_div(n + 1, 2);
  g.output("grid", grid(half));
  // floor(min(N - 5, 0) / 2) + 3 rounds towards -infinity: 1 at N = 2 where truncation gives 2.
  g.output("floor_of_negative", grid(ir::floor_div(ir::dim_min(n - 5, 0), 2) + 3));
  check_graph(g.ir(), "dim expressions");
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g.ir(), Target::cuda_sim());
  ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"N", 2}}, 1);
  ir::TensorMap out = exe->run_host(inputs);
  CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), out) == "");
  CHECK(out.at("floor_of_negative").shape == (ir::ConcreteShape{3, 1}));
  CHECK(out.at("clamped").shape == ir::ConcreteShape{0});
  CHECK(out.at("grid").shape == (ir::ConcreteShape{3, 1}));
}

TEST_CASE("device buffers and preallocated outputs work on the simulator", "[cuda][sim][runtime]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  g.output("y", exp(x) * 2 + 1);
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  ir::TensorMap host = testing::random_inputs(g.ir(), {{"N", 10007}}, 1, false);
  runtime::DeviceTensorMap inputs;
  inputs.emplace("x", runtime::DeviceBuffer::to_device(host.at("x")));
  runtime::DeviceTensorMap outputs = exe->run(inputs);
  cuda::CUdeviceptr first = outputs.at("y").data();
  // A preallocated output of the right type is reused.
  exe->run(inputs, outputs);
  CHECK(outputs.at("y").data() == first);
  CHECK(testing::compare_outputs(ir::interpret(g.ir(), host), {{"y", outputs.at("y").to_host()}}, 0, 0) == "");
  // Outputs fed back as inputs without a host copy: y2 = f(f(x)).
  runtime::DeviceTensorMap second;
  second.emplace("x", std::move(outputs.at("y")));
  runtime::DeviceTensorMap again = exe->run(second);
  ir::TensorMap once = ir::interpret(g.ir(), host);
  ir::TensorMap twice = ir::interpret(g.ir(), {{"x", once.at("y")}});
  CHECK(testing::compare_outputs(twice, {{"y", again.at("y").to_host()}}, 0, 0) == "");
  CHECK(exe->last_run_ms() >= 0);
}

TEST_CASE("two executables chained without synchronize on the simulator", "[cuda][sim][runtime][regression]") {
  // Deferred streams: each stream's work runs only when forced, the newest stream first, so B's
  // kernels run before A's unless B's stream waits for A's run.
  setenv("FUSE_CUDA_SIM_DEFER", "1", 1);
  Graph ga, gb;
  Tensor a = ga.input("x", DType::F32, {sym("N"), sym("M")});
  ga.output("y", transpose(a) * 3);
  Tensor b = gb.input("y", DType::F32, {sym("M"), sym("N")});
  gb.output("z", sum(b, {1}));
  auto exe_a = compile_cuda(ga, Target::cuda_sim());
  auto exe_b = compile_cuda(gb, Target::cuda_sim());
  ir::TensorMap host = testing::random_inputs(ga.ir(), {{"N", 300}, {"M", 70}}, 2, false);
  runtime::DeviceTensorMap in;
  in.emplace("x", runtime::DeviceBuffer::to_device(host.at("x")));
  runtime::DeviceTensorMap mid = exe_a->run(in);
  runtime::DeviceTensorMap out = exe_b->run(mid);
  ir::TensorMap expected = ir::interpret(gb.ir(), ir::interpret(ga.ir(), host));
  CHECK(testing::compare_outputs(expected, {{"z", out.at("z").to_host()}}, 1e-5, 1e-5) == "");
  unsetenv("FUSE_CUDA_SIM_DEFER");
}

TEST_CASE("an output that is also the input of a transpose is not overwritten while read", "[cuda][sim][regression]") {
  Graph g;
  Tensor s = g.input("state", DType::F32, {sym("N"), sym("N")});
  g.output("state", transpose(s) + 1);
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  ir::TensorMap host = testing::random_inputs(g.ir(), {{"N", 100}}, 3, false);
  runtime::DeviceTensorMap state;
  state.emplace("state", runtime::DeviceBuffer::to_device(host.at("state")));
  exe->run(state, state);
  CHECK(testing::compare_outputs(ir::interpret(g.ir(), host), {{"state", state.at("state").to_host()}}, 0, 0) == "");
}

// Found by the simulator's 2,000-graph run: the CUDA code generator itself failed on this graph
// ("lowering to NVVM failed" with no diagnostic), for PTX as for the simulator:
// convert-gpu-to-nvvm's greedy folding did not converge (codegen/cuda/lower.cpp now folds first).
TEST_CASE("random graph 1371 compiles for CUDA and matches the interpreter", "[cuda][sim][regression]") {
  testing::RandomCase c = testing::random_case(1371);
  INFO(c.description << "\n" << ir::print_graph(c.graph));
  CHECK_NOTHROW(compile_cuda_program(c.graph, Target::cuda(0, 80)));
  CHECK(testing::compare_outputs(ir::interpret_with_bounds(c.graph, c.inputs),
                                 compile_cuda(c.graph, Target::cuda_sim())->run_host(c.inputs)) == "");
}

// ---- user-combiner reductions: in parallel, in order ----

namespace {

/// Graph: each user combiner of `t` over the whole of x[N] and over the rows of x[R, N].
void user_combiner_graph(Graph& g, DType t) {
  Tensor x = g.input("x", t, {sym("N")});
  Tensor rows = g.input("rows", t, {sym("R"), sym("N")});
  // "last": associative and not commutative, so any reordering shows; the identity comes first.
  auto last = [](Scalar, Scalar v) { return v; };
  g.output("last", reduce(last, x, 3.0));
  g.output("row_last", reduce(last, rows, 3.0, {1}));
  if (t == DType::Bool) {
    g.output("any", reduce([](Scalar a, Scalar v) { return logical_or(a, v); }, x, 0.0));
  } else {
    // Exact for integers (wrapping) and for floats with NaN, inf and -0.0 (max of |v|).
    g.output("absmax", reduce([](Scalar a, Scalar v) { return maximum(a, abs(v)); }, x, 0.0));
    g.output("row_absmax", reduce([](Scalar a, Scalar v) { return maximum(a, abs(v)); }, rows, 0.0, {1}));
    // Float sums are grouped differently from the interpreter's fold: checked apart.
    if (!ir::is_float(t)) g.output("plus", reduce([](Scalar a, Scalar v) { return a + v; }, x, 0.0));
  }
}

}  // namespace

TEST_CASE("a user-combiner reduction over a whole tensor runs on many threads in order", "[cuda][sim][user-combiner]") {
  for (DType t : ir::kAllDTypes) {
    Graph g;
    user_combiner_graph(g, t);
    runtime::CudaProgram program = compile_cuda_program(g.ir(), Target::cuda(0, 80));
    // Each whole-tensor reduction is two-stage (partials over up to 1,024 blocks of 256 threads),
    // no longer one block with one working thread; the rows' user combiner folds in a tree.
    int partials = 0;
    for (const ir::CudaLaunch& l : program.plan.launches) {
      if (!l.entry.ends_with("_partials")) continue;
      ++partials;
      CHECK(l.block[0] * l.block[1] >= 256);
      CHECK(l.max_grid[0] == 1024);
    }
    CHECK(partials >= 1);
    CHECK_THAT(emit(run_passes(g.ir(), Target::cuda(0, 80)), Stage::Mlir), Contains("_ordered"));
    std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
    // 300,007 elements: 1,172 tiles of 256, more than the 1,024 partial blocks.
    for (int64_t n : {0, 1, 7, 1023, 5000, 300007}) {
      INFO(ir::dtype_name(t) << " N = " << n);
      ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"N", n}, {"R", n > 5000 ? 2 : 3}}, 11 + n);
      CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe->run_host(inputs)) == "");
    }
  }
}

TEST_CASE("user-combiner reductions keep their order on a grid of 2 blocks and with NaN", "[cuda][sim][user-combiner]") {
  setenv("FUSE_CUDA_SIM_MAX_GRID", "2", 1);
  for (DType t : {DType::F32, DType::I64}) {
    Graph g;
    user_combiner_graph(g, t);
    std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
    for (int64_t n : {1, 1023, 4099}) {
      INFO(ir::dtype_name(t) << " N = " << n);
      ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"N", n}, {"R", 5}}, 3 + n);
      if (t == DType::F32) inputs.at("x").set_f64(n / 2, std::nan(""));
      CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe->run_host(inputs)) == "");
    }
  }
  unsetenv("FUSE_CUDA_SIM_MAX_GRID");
}

TEST_CASE("a float user-combiner sum is grouped by chunks and stays close to the interpreter's", "[cuda][sim][user-combiner]") {
  // The interpreter folds left to right; the GPU sums contiguous chunks, then the chunks in a
  // tree: for floats another rounding (associativity is assumed, as NumPy's reduce assumes).
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  g.output("plus", reduce([](Scalar a, Scalar v) { return a + v; }, x, 0.0));
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  for (int64_t n : {0, 1, 7, 1023, 300007}) {
    INFO("N = " << n);
    ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"N", n}}, 5, false);
    CHECK(testing::compare_outputs(ir::interpret(g.ir(), inputs), exe->run_host(inputs), 1e-4, 1e-3) == "");
  }
}

TEST_CASE("a user combiner that does not regroup folds in order on the GPU and matches exactly", "[cuda][sim][user-combiner]") {
  // acc + v*v (a sum of squares written as a fold) and acc*0.5 + v are folds, not associative
  // combiners: chunked partials combined with them would be wrong, so they run on one thread.
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    Graph g;
    Tensor x = g.input("x", t, {sym("N")});
    Tensor rows = g.input("rows", t, {sym("R"), sym("N")});
    auto squares = [](Scalar a, Scalar v) { return a + v * v; };
    auto decay = [](Scalar a, Scalar v) { return a * 2 + v; };
    g.output("squares", reduce(squares, x, 0.0));
    g.output("decay", reduce(decay, x, 1.0));
    g.output("row_squares", reduce(squares, rows, 0.0, {1}));
    std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
    for (int64_t n : {0, 1, 7, 1023, 5000}) {
      INFO(ir::dtype_name(t) << " N = " << n);
      ir::TensorMap inputs = testing::random_inputs(g.ir(), {{"N", n}, {"R", 3}}, 17 + n);
      CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe->run_host(inputs)) == "");
    }
  }
}

// ---- test_cuda_runtime's cases on the simulated device (there: the fake driver) ----
// The same runtime paths with real kernels and checked values: device buffers, the caching
// allocator, runs that reuse slots and grow them, outputs fed back as inputs, preallocated
// outputs, scratch reused across runs, and streams with events under deferred execution.

TEST_CASE("device buffers: to_device, to_host, copy_to, empty on the simulator", "[cuda][sim][runtime]") {
  std::vector<float> values(1000);
  for (int i = 0; i < 1000; ++i) values[i] = 0.5f + 2.0f * static_cast<float>(i);
  ir::HostArray a = ir::HostArray::from<float>({1000}, values);
  runtime::DeviceBuffer d = runtime::DeviceBuffer::to_device(a);
  CHECK(d.str() == "f32[1000] on cuda:0");
  CHECK(d.to_host().bytes == a.bytes);
  runtime::DeviceBuffer e = runtime::DeviceBuffer::empty(DType::F32, {1000});
  d.copy_to(e);
  CHECK(e.to_host().bytes == a.bytes);
  runtime::DeviceBuffer wrong = runtime::DeviceBuffer::empty(DType::F32, {999});
  CHECK_THROWS_WITH(d.copy_to(wrong), Contains("dtypes and shapes must match"));
  runtime::DeviceBuffer zero = runtime::DeviceBuffer::empty(DType::I64, {0, 3});
  CHECK(zero.data() == 0);
  CHECK(zero.to_host().shape == ir::ConcreteShape{0, 3});
}

TEST_CASE("the caching allocator reuses freed blocks by size class on the simulator", "[cuda][sim][runtime]") {
  runtime::DeviceAllocator& alloc = runtime::DeviceAllocator::of(0);
  alloc.empty_cache();
  runtime::DeviceAllocator::Stats before = alloc.stats();
  cuda::CUdeviceptr first = 0;
  {
    runtime::DeviceBuffer b = runtime::DeviceBuffer::empty(DType::F32, {1000});  // class 4096
    first = b.data();
    CHECK(alloc.stats().bytes_in_use - before.bytes_in_use == 4096);
  }
  CHECK(alloc.stats().bytes_cached - before.bytes_cached == 4096);
  runtime::DeviceBuffer again = runtime::DeviceBuffer::empty(DType::I32, {1024});
  CHECK(again.data() == first);
  CHECK(alloc.stats().reuses - before.reuses == 1);
  CHECK(alloc.stats().driver_allocations - before.driver_allocations == 1);
  // A block handed out again is still live memory to the simulator's memcheck: a kernel writes it.
  Graph g;
  Tensor x = g.input("x", DType::I32, {sym("N")});
  g.output("y", x + 1);
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  ir::TensorMap host = testing::random_inputs(g.ir(), {{"N", 1024}}, 4, false);
  again = runtime::DeviceBuffer();
  runtime::DeviceTensorMap in;
  in.emplace("x", runtime::DeviceBuffer::to_device(host.at("x")));
  CHECK(in.at("x").data() == first);
  CHECK(testing::compare_outputs(ir::interpret(g.ir(), host), {{"y", exe->run(in).at("y").to_host()}}, 0, 0) == "");
}

TEST_CASE("runs reuse slots, grow them for larger sizes and reuse scratch on the simulator", "[cuda][sim][runtime]") {
  // softmax's intermediates live in slots; sum(x) is two-stage with scratch.
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), sym("M")});
  Tensor e = exp(x - max(x, {1}, true));
  g.output("y", e / sum(e, {1}, true));
  g.output("total", sum(x * x));
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  REQUIRE_FALSE(exe->program().plan.scratch_bytes.empty());
  runtime::DeviceTensorMap outputs;
  cuda::CUdeviceptr y = 0;
  for (auto [n, m] : {std::pair<int64_t, int64_t>{7, 33}, {7, 33}, {300, 1023}, {1, 1}}) {
    INFO("N = " << n << ", M = " << m);
    ir::TensorMap host = testing::random_inputs(g.ir(), {{"N", n}, {"M", m}}, 9 + n, false);
    runtime::DeviceTensorMap inputs;
    inputs.emplace("x", runtime::DeviceBuffer::to_device(host.at("x")));
    exe->run(inputs, outputs);
    if (y != 0 && n == 7) CHECK(outputs.at("y").data() == y);  // the same size: the same output
    y = outputs.at("y").data();
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), host),
                                   {{"y", outputs.at("y").to_host()}, {"total", outputs.at("total").to_host()}}) == "");
  }
}

TEST_CASE("test_cuda_runtime's hand-written program runs on the simulator", "[cuda][sim][runtime]") {
  // tests/cuda_test_programs.h: y = (a + b) * s through the intermediate slot t, its PTX
  // replaced by the same kernels at the NVVM level.
  auto program = [](float scale) {
    runtime::CudaProgram p = fuse_test::vadd_scale_program(scale);
    p.ptx = codegen::compile_cuda_sim_ir(fuse_test::kVaddScaleNvvm, {"vadd_f32", "scale_f32"});
    return p;
  };
  auto iota = [](int64_t n, float start, float step) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
    return ir::HostArray::from<float>({n}, v);
  };
  runtime::CudaExecutable exe(program(2.5f));
  runtime::DeviceTensorMap inputs, outputs;
  inputs.emplace("a", runtime::DeviceBuffer::to_device(iota(1000, 0, 1)));
  inputs.emplace("b", runtime::DeviceBuffer::to_device(iota(1000, 1, 2)));
  exe.run(inputs, outputs);
  cuda::CUdeviceptr y = outputs.at("y").data();
  std::vector<double> got = outputs.at("y").to_host().to_doubles();
  for (int i = 0; i < 1000; ++i) REQUIRE(got[i] == (i + (1 + 2.0f * i)) * 2.5f);
  exe.run(inputs, outputs);  // the output is reused
  CHECK(outputs.at("y").data() == y);
  // N = 5000 grows the slot and the output.
  inputs.at("a") = runtime::DeviceBuffer::to_device(iota(5000, 0, 1));
  inputs.at("b") = runtime::DeviceBuffer::to_device(iota(5000, 3, 0));
  exe.run(inputs, outputs);
  CHECK(outputs.at("y").to_host().to_doubles()[4999] == 5002.0 * 2.5);
  // Outputs that share a buffer or pass an input through are copies.
  runtime::CudaProgram p = program(3.0f);
  p.outputs.push_back({"y_again", 3});
  p.outputs.push_back({"a_copy", 0});
  runtime::CudaExecutable copies(p);
  ir::TensorMap out = copies.run_host({{"a", iota(3, 1, 1)}, {"b", iota(3, 0, 0)}});
  CHECK(out.at("y").to_doubles() == std::vector<double>{3, 6, 9});
  CHECK(out.at("y_again").to_doubles() == std::vector<double>{3, 6, 9});
  CHECK(out.at("a_copy").to_doubles() == std::vector<double>{1, 2, 3});
  // Inputs are checked against the program before anything runs.
  runtime::DeviceTensorMap missing;
  missing.emplace("a", runtime::DeviceBuffer::to_device(iota(4, 0, 1)));
  CHECK_THROWS_WITH(exe.run(missing), Contains("missing input 'b' (f32[N])"));
}
