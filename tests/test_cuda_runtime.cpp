// The CUDA runtime against a fake driver (tests/fake_cuda): driver loading and its errors, device
// buffers and the caching allocator, and CudaExecutable's module loading, argument marshalling,
// grid rules, symbol binding, slot reuse and error messages. No GPU needed.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ir/error.h"
#include "runtime/cuda_driver.h"
#include "runtime/cuda_executable.h"
#include "runtime/device_buffer.h"
#include "tests/cuda_test_programs.h"
#include "tests/fake_cuda/fake_cuda.h"

using fuse::ir::DType;
using fuse::ir::Error;
using fuse::ir::HostArray;
using fuse::runtime::CudaExecutable;
using fuse::runtime::CudaProgram;
using fuse::runtime::DeviceAllocator;
using fuse::runtime::DeviceBuffer;
using fuse::runtime::DeviceTensorMap;
namespace cuda = fuse::runtime::cuda;
using Catch::Matchers::Contains;

namespace {

// Every test in this file runs on the fake driver: set before anything loads the driver.
const bool kFakeDriver = [] { return setenv("FUSE_LIBCUDA", FUSE_FAKE_CUDA, 1) == 0; }();

/// The fake driver's test hooks, from the same library the runtime loads.
struct Fake {
  decltype(&fake_cuda_set) set;
  decltype(&fake_cuda_stat) stat;
  decltype(&fake_cuda_reset) reset;
  decltype(&fake_cuda_launch_count) launch_count;
  decltype(&fake_cuda_launch) launch;
};

Fake& fake() {
  static Fake f = [] {
    void* lib = dlopen(FUSE_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib);
    Fake h;
    h.set = reinterpret_cast<decltype(h.set)>(dlsym(lib, "fake_cuda_set"));
    h.stat = reinterpret_cast<decltype(h.stat)>(dlsym(lib, "fake_cuda_stat"));
    h.reset = reinterpret_cast<decltype(h.reset)>(dlsym(lib, "fake_cuda_reset"));
    h.launch_count = reinterpret_cast<decltype(h.launch_count)>(dlsym(lib, "fake_cuda_launch_count"));
    h.launch = reinterpret_cast<decltype(h.launch)>(dlsym(lib, "fake_cuda_launch"));
    REQUIRE((h.set && h.stat && h.reset && h.launch_count && h.launch));
    return h;
  }();
  return f;
}

/// A fresh start: no cached blocks, no recorded launches, counters at zero.
Fake& fresh() {
  REQUIRE(kFakeDriver);
  Fake& f = fake();
  f.set("alloc_limit", 0);
  f.set("cc", 80);
  DeviceAllocator::of(0).empty_cache();
  f.reset();
  return f;
}

HostArray iota_f32(int64_t n, float start, float step) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return HostArray::from<float>({n}, v);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a missing or wrong driver library gives a clear reason", "[cuda]") {
  CHECK_THROWS_WITH(cuda::load_driver("/nonexistent/libcuda.so.1"),
                    "error: CUDA unavailable: /nonexistent/libcuda.so.1 not found (no NVIDIA driver on this machine)");
  CHECK_THROWS_WITH(cuda::load_driver("libm.so.6"), Contains("CUDA unavailable: libm.so.6 has no cuInit"));
  CHECK_THROWS_AS(cuda::load_driver("/nonexistent/libcuda.so.1"), cuda::Unavailable);
  // Unavailable is an ir::Error: tools report it like any other user-facing error.
  CHECK_THROWS_AS(cuda::load_driver("/nonexistent/libcuda.so.1"), Error);
}

TEST_CASE("a driver that sees no GPU is unavailable", "[cuda]") {
  Fake& f = fresh();
  f.set("devices", 0);
  CHECK_THROWS_WITH(cuda::load_driver(FUSE_FAKE_CUDA), "error: CUDA unavailable: the NVIDIA driver sees no GPU");
  f.set("devices", 1);
  CHECK(cuda::load_driver(FUSE_FAKE_CUDA).device_count == 1);
}

TEST_CASE("FUSE_LIBCUDA chooses the driver; device facts come from it", "[cuda]") {
  fresh();
  CHECK(cuda::driver_library_path() == FUSE_FAKE_CUDA);
  REQUIRE(cuda::cuda_available());
  CHECK(cuda::cuda_unavailable_reason().empty());
  cuda::DeviceInfo info = cuda::device_info(0);
  CHECK(info.name == "Fake GPU 0");
  CHECK(info.sm() == "sm_80");
  CHECK_THROWS_WITH(cuda::api(1), "error: no CUDA device cuda:1 (this machine has 1)");
}

TEST_CASE("driver errors name the call and the driver's error", "[cuda]") {
  fresh();
  CHECK_THROWS_WITH(cuda::check(2, "cuMemAlloc_v2"), "error: cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  CHECK_THROWS_WITH(cuda::check(12345, "cuFoo"), "error: cuFoo failed: CUDA error 12345");
  CHECK_NOTHROW(cuda::check(0, "cuFoo"));
}

TEST_CASE("device buffers: to_device, to_host, copy_to, empty", "[cuda]") {
  fresh();
  HostArray a = iota_f32(1000, 0.5f, 2.0f);
  DeviceBuffer d = DeviceBuffer::to_device(a);
  CHECK(d.dtype() == DType::F32);
  CHECK(d.shape() == fuse::ir::ConcreteShape{1000});
  CHECK(d.size_bytes() == 4000);
  CHECK(d.str() == "f32[1000] on cuda:0");
  CHECK(d.to_host().bytes == a.bytes);

  DeviceBuffer e = DeviceBuffer::empty(DType::F32, {1000});
  d.copy_to(e);
  CHECK(e.to_host().bytes == a.bytes);
  DeviceBuffer wrong = DeviceBuffer::empty(DType::F32, {999});
  CHECK_THROWS_WITH(d.copy_to(wrong), "error: cannot copy f32[1000] on cuda:0 into f32[999] on cuda:0: dtypes and shapes must match");

  DeviceBuffer zero = DeviceBuffer::empty(DType::I64, {0, 3});
  CHECK(zero.data() == 0);
  CHECK(zero.to_host().shape == fuse::ir::ConcreteShape{0, 3});
  CHECK_THROWS_WITH(DeviceBuffer::empty(DType::F32, {-1}), "error: a buffer's shape has a negative dim: [-1]");

  DeviceBuffer moved = std::move(d);
  CHECK(d.data() == 0);
  CHECK(moved.to_host().bytes == a.bytes);
}

TEST_CASE("the caching allocator reuses freed blocks by size class", "[cuda]") {
  Fake& f = fresh();
  CHECK(DeviceAllocator::size_class(1) == 512);
  CHECK(DeviceAllocator::size_class(512) == 512);
  CHECK(DeviceAllocator::size_class(513) == 1024);
  CHECK(DeviceAllocator::size_class(1 << 20) == 1 << 20);
  CHECK(DeviceAllocator::size_class((1 << 20) + 1) == 2 << 20);
  CHECK(DeviceAllocator::size_class((5 << 20) - 7) == 5 << 20);

  DeviceAllocator& alloc = DeviceAllocator::of(0);
  DeviceAllocator::Stats before = alloc.stats();
  cuda::CUdeviceptr first = 0;
  {
    DeviceBuffer b = DeviceBuffer::empty(DType::F32, {1000});  // 4000 bytes: class 4096
    first = b.data();
    CHECK(alloc.stats().bytes_in_use - before.bytes_in_use == 4096);
  }
  CHECK(alloc.stats().bytes_cached - before.bytes_cached == 4096);
  DeviceBuffer again = DeviceBuffer::empty(DType::I32, {1024});  // 4096 bytes: the same class
  CHECK(again.data() == first);
  DeviceAllocator::Stats after = alloc.stats();
  CHECK(after.driver_allocations - before.driver_allocations == 1);
  CHECK(after.reuses - before.reuses == 1);
  CHECK(f.stat("allocs") == 1);

  DeviceBuffer other = DeviceBuffer::empty(DType::F32, {2000});  // another class: a new block
  CHECK(f.stat("allocs") == 2);
  other = DeviceBuffer();
  alloc.empty_cache();
  CHECK(f.stat("frees") == 1);
  CHECK(alloc.stats().bytes_cached == 0);
}

TEST_CASE("out of device memory: the cache is emptied and the allocation retried, then a clear error", "[cuda]") {
  Fake& f = fresh();
  f.set("alloc_limit", 8192);
  { DeviceBuffer cached = DeviceBuffer::empty(DType::F32, {1500}); }  // 8192 bytes, now cached
  DeviceBuffer b = DeviceBuffer::empty(DType::F32, {300});           // 2048: must free the cached block
  CHECK(f.stat("frees") == 1);
  CHECK_THROWS_WITH(DeviceBuffer::empty(DType::F32, {4000}),
                    "error: cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory) allocating 16000 bytes on cuda:0");
}

TEST_CASE("grid size: clamp(ceil(work / work_per_block), 1, max_grid)", "[cuda]") {
  CHECK(fuse::runtime::grid_size(1000, 256, 2147483647) == 4);
  CHECK(fuse::runtime::grid_size(1024, 256, 2147483647) == 4);
  CHECK(fuse::runtime::grid_size(1025, 256, 2147483647) == 5);
  CHECK(fuse::runtime::grid_size(0, 256, 65535) == 1);
  CHECK(fuse::runtime::grid_size(int64_t{1} << 40, 256, 65535) == 65535);
  CHECK(fuse::runtime::grid_size(7, 1, 4) == 4);
}

TEST_CASE("CudaExecutable runs a program end to end and marshals the plan's arguments", "[cuda]") {
  Fake& f = fresh();
  CudaExecutable exe(fuse_test::vadd_scale_program(2.5f));
  CHECK(f.stat("module_loads") == 1);
  CHECK(f.stat("htod") == 1);  // the constant, uploaded once

  DeviceTensorMap inputs;
  inputs["a"] = DeviceBuffer::to_device(iota_f32(1000, 0, 1));
  inputs["b"] = DeviceBuffer::to_device(iota_f32(1000, 1, 2));
  DeviceTensorMap outputs = exe.run(inputs);
  REQUIRE(outputs.size() == 1);
  HostArray y = outputs.at("y").to_host();
  REQUIRE(y.shape == fuse::ir::ConcreteShape{1000});
  for (int i = 0; i < 1000; ++i) REQUIRE(y.as<float>()[i] == (i + (1 + 2.0f * i)) * 2.5f);

  REQUIRE(f.launch_count() == 2);
  const FakeLaunch& add = *f.launch(0);
  const FakeLaunch& mul = *f.launch(1);
  CHECK(std::string(add.entry) == "vadd_f32");
  CHECK(std::string(mul.entry) == "scale_f32");
  for (const FakeLaunch* l : {&add, &mul}) {
    CHECK(l->grid[0] == 4);  // ceil(1000 / 256)
    CHECK(l->grid[1] == 1);
    CHECK(l->grid[2] == 1);
    CHECK(l->block[0] == 256);
    CHECK(l->shared_bytes == 0);
    CHECK(l->stream == exe.stream());
    CHECK(l->num_params == 4);
    CHECK(l->params[3] == 1000);  // the symbol N
  }
  CHECK(add.params[0] == inputs.at("a").data());
  CHECK(add.params[1] == inputs.at("b").data());
  CHECK(mul.params[0] == add.params[2]);  // the intermediate t
  CHECK(mul.params[2] == outputs.at("y").data());
  CHECK(mul.params[1] != 0);  // the constant
  CHECK(exe.last_run_ms() == 0.5f);  // the fake counts a quarter millisecond per launch
}

TEST_CASE("runs reuse intermediates, outputs and constants; a larger size grows the slot", "[cuda]") {
  Fake& f = fresh();
  CudaExecutable exe(fuse_test::vadd_scale_program(1.0f));
  DeviceTensorMap inputs;
  inputs["a"] = DeviceBuffer::to_device(iota_f32(100, 0, 1));
  inputs["b"] = DeviceBuffer::to_device(iota_f32(100, 0, 1));
  DeviceTensorMap outputs;
  exe.run(inputs, outputs);
  cuda::CUdeviceptr y = outputs.at("y").data();
  cuda::CUdeviceptr t = f.launch(0)->params[2];
  long long allocs = f.stat("allocs");
  long long htod = f.stat("htod");

  exe.run(inputs, outputs);
  CHECK(f.stat("allocs") == allocs);  // nothing allocated on the second run
  CHECK(f.stat("htod") == htod);      // constants are not uploaded again
  CHECK(outputs.at("y").data() == y);
  CHECK(f.launch(2)->params[2] == t);

  // N = 5000 needs a bigger slot and output; the results are still right.
  inputs["a"] = DeviceBuffer::to_device(iota_f32(5000, 0, 1));
  inputs["b"] = DeviceBuffer::to_device(iota_f32(5000, 3, 0));
  exe.run(inputs, outputs);
  CHECK(f.launch(4)->grid[0] == 20);
  CHECK(f.launch(4)->params[3] == 5000);
  HostArray out = outputs.at("y").to_host();
  REQUIRE(out.size() == 5000);
  CHECK(out.as<float>()[4999] == 5002.0f);
}

TEST_CASE("the host convenience run uploads, runs and downloads", "[cuda]") {
  fresh();
  CudaExecutable exe(fuse_test::vadd_scale_program(-1.0f));
  fuse::ir::TensorMap out = exe.run_host({{"a", iota_f32(3, 1, 1)}, {"b", iota_f32(3, 10, 10)}});
  CHECK(out.at("y").to_doubles() == std::vector<double>{-11, -22, -33});
}

TEST_CASE("inputs are checked against the program", "[cuda]") {
  fresh();
  CudaExecutable exe(fuse_test::vadd_scale_program(1.0f));
  auto run = [&](std::vector<std::pair<std::string, HostArray>> arrays) {
    return error_of([&] {
      DeviceTensorMap inputs;
      for (auto& [name, a] : arrays) inputs[name] = DeviceBuffer::to_device(a);
      exe.run(inputs);
    });
  };
  CHECK(run({{"a", iota_f32(4, 0, 1)}}) == "missing input 'b' (f32[N])");
  CHECK(run({{"a", iota_f32(4, 0, 1)}, {"b", HostArray(DType::F64, {4})}}) ==
        "input 'b' has dtype f64 but f32 was declared");
  CHECK_THAT(run({{"a", iota_f32(4, 0, 1)}, {"b", iota_f32(5, 0, 1)}}), Contains("input 'b'"));
  CHECK_THAT(run({{"a", iota_f32(4, 0, 1)}, {"b", HostArray(DType::F32, {4, 1})}}),
             Contains("input 'b' has shape [4, 1]"));
  CHECK(run({{"a", iota_f32(4, 0, 1)}, {"b", iota_f32(4, 0, 1)}, {"c", iota_f32(4, 0, 1)}}) ==
        "'c' is not an input of the program");
}

TEST_CASE("a PTX JIT failure reports the driver's error and the JIT log", "[cuda]") {
  fresh();
  CudaProgram p = fuse_test::vadd_scale_program(1.0f);
  p.ptx = ".version 7.0\n.target sm_80\nFAKE_JIT_ERROR\n";
  std::string e = error_of([&] { CudaExecutable exe(p); });
  CHECK_THAT(e, Contains("cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)"));
  CHECK_THAT(e, Contains("JIT log:\nptxas application ptx input, line 3; error   : Unknown symbol 'FAKE_JIT_ERROR'"));
}

TEST_CASE("a missing entry and a device too old for the PTX are named", "[cuda]") {
  Fake& f = fresh();
  CudaProgram p = fuse_test::vadd_scale_program(1.0f);
  p.plan.launches[1].entry = "softmax_rows";
  CHECK(error_of([&] { CudaExecutable exe(p); }) ==
        "cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND (named symbol not found): the PTX has no entry 'softmax_rows'");
  CudaProgram q = fuse_test::vadd_scale_program(1.0f);
  q.plan.sm = "sm_90";
  CHECK(error_of([&] { CudaExecutable exe(q); }) ==
        "the PTX targets sm_90 but cuda:0 (Fake GPU 0) is sm_80: compile for --sm=80");
  f.set("cc", 90);
  CHECK_NOTHROW(CudaExecutable(q));
}

TEST_CASE("inconsistent plans are refused before anything runs", "[cuda]") {
  fresh();
  auto error = [](const std::function<void(CudaProgram&)>& spoil) {
    CudaProgram p = fuse_test::vadd_scale_program(1.0f);
    spoil(p);
    return error_of([&] { fuse::runtime::validate(p, "test"); });
  };
  CHECK(error([](CudaProgram&) {}) == "(no error)");
  CHECK(error([](CudaProgram& p) { p.plan.launches[0].args[1].index = 9; }) ==
        "test: launch 'vadd_f32' passes buffer 9 but there are 4");
  CHECK(error([](CudaProgram& p) { p.plan.launches[1].args[1].index = 1; }) ==
        "test: launch 'scale_f32' passes constant 1 but there are 1");
  CHECK(error([](CudaProgram& p) { p.plan.launches[0].args[3] = {fuse::ir::CudaArg::Kind::Symbol, 1}; }) ==
        "test: launch 'vadd_f32' passes symbol 1 but there are 1");
  CHECK(error([](CudaProgram& p) { p.plan.launches[0].work_per_block[0] = 0; }) ==
        "test: launch 'vadd_f32' has work_per_block 0");
  CHECK(error([](CudaProgram& p) { p.buffers[2].slot = 3; }) == "test: intermediate buffer 't' has slot 3 of 1");
  CHECK(error([](CudaProgram& p) { p.inputs[0].buffer = 3; }) ==
        "test: input 'a' names buffer 'y', which is output");
  CHECK(error([](CudaProgram& p) { p.outputs[0].buffer = 7; }) == "test: output 'y' names buffer 7 of 4");
}

TEST_CASE("outputs that share a buffer or pass an input through are copies", "[cuda]") {
  fresh();
  CudaProgram p = fuse_test::vadd_scale_program(3.0f);
  p.outputs.push_back({"y_again", 3});
  p.outputs.push_back({"a_copy", 0});
  CudaExecutable exe(p);
  fuse::ir::TensorMap out = exe.run_host({{"a", iota_f32(3, 1, 1)}, {"b", iota_f32(3, 0, 0)}});
  CHECK(out.at("y").to_doubles() == std::vector<double>{3, 6, 9});
  CHECK(out.at("y_again").to_doubles() == std::vector<double>{3, 6, 9});
  CHECK(out.at("a_copy").to_doubles() == std::vector<double>{1, 2, 3});
}

TEST_CASE("scratch is allocated once per executable, zero-filled, and passed to its launches", "[cuda]") {
  Fake& f = fresh();
  CudaProgram p = fuse_test::vadd_scale_program(1.0f);
  p.plan.scratch_bytes = {100};
  p.plan.launches[0].args.push_back({fuse::ir::CudaArg::Kind::Scratch, 0});
  // The fake counts parameters from the PTX: declare the extra one.
  size_t at = p.ptx.find("\t.param .u64 vadd_f32_param_3");
  p.ptx.insert(at, "\t.param .u64 vadd_f32_param_4,\n");
  CudaExecutable exe(p);
  fuse::ir::TensorMap inputs = {{"a", iota_f32(10, 0, 1)}, {"b", iota_f32(10, 0, 1)}};
  exe.run_host(inputs);
  exe.run_host(inputs);
  REQUIRE(f.launch_count() == 4);
  REQUIRE(f.launch(0)->num_params == 5);
  cuda::CUdeviceptr scratch = f.launch(0)->params[4];
  CHECK(scratch != 0);
  CHECK(f.launch(2)->params[4] == scratch);
  std::vector<unsigned char> bytes(100, 1);
  std::memcpy(bytes.data(), reinterpret_cast<const void*>(scratch), 100);  // fake device memory is host memory
  CHECK(bytes == std::vector<unsigned char>(100, 0));
}

TEST_CASE("timing needs a run first", "[cuda]") {
  fresh();
  CudaExecutable exe(fuse_test::vadd_scale_program(1.0f));
  CHECK_THROWS_WITH(exe.last_run_ms(), "error: no run to time yet");
}
