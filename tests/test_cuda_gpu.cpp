// The CUDA runtime on a real GPU, through the real driver: hand-written PTX for sm_80
// (tests/cuda_test_programs.h) loaded, launched and checked element by element. On a machine
// without a driver or a GPU every test passes after a warning saying why it was skipped.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "ir/error.h"
#include "runtime/bundle.h"
#include "runtime/cuda_driver.h"
#include "runtime/cuda_executable.h"
#include "runtime/device_buffer.h"
#include "tests/cuda_test_programs.h"

namespace cuda = fuse::runtime::cuda;
using fuse::ir::HostArray;
using fuse::runtime::CudaExecutable;
using fuse::runtime::DeviceBuffer;
using fuse::runtime::DeviceTensorMap;
using Catch::Matchers::Contains;

namespace {

/// False, after a warning, when there is no GPU to test on.
bool have_gpu() {
  if (cuda::cuda_available()) return true;
  WARN("skipped: " << cuda::cuda_unavailable_reason());
  return false;
}

HostArray ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i % 1000);
  return HostArray::from<float>({n}, v);
}

void check_result(const HostArray& y, const HostArray& a, const HostArray& b, float s) {
  REQUIRE(y.size() == a.size());
  for (int64_t i = 0; i < y.size(); ++i) REQUIRE(y.as<float>()[i] == (a.as<float>()[i] + b.as<float>()[i]) * s);
}

}  // namespace

TEST_CASE("GPU: hand-written PTX runs through CudaExecutable, twice, with timing", "[cuda][gpu]") {
  if (!have_gpu()) return;
  cuda::DeviceInfo info = cuda::device_info(0);
  INFO(info.name << " " << info.sm());
  CudaExecutable exe(fuse_test::vadd_scale_program(0.5f));
  const int64_t n = (int64_t{1} << 20) + 3;  // not a multiple of the block: the tail is guarded
  HostArray a = ramp(n, 1.0f), b = ramp(n, 0.25f);
  DeviceTensorMap inputs;
  inputs["a"] = DeviceBuffer::to_device(a);
  inputs["b"] = DeviceBuffer::to_device(b);
  DeviceTensorMap outputs;
  exe.run(inputs, outputs);
  check_result(outputs.at("y").to_host(), a, b, 0.5f);
  CHECK(exe.last_run_ms() > 0);

  cuda::CUdeviceptr y = outputs.at("y").data();
  exe.run(inputs, outputs);
  exe.synchronize();
  CHECK(outputs.at("y").data() == y);
  check_result(outputs.at("y").to_host(), a, b, 0.5f);

  // A smaller size on the same executable: no recompilation, only other launch sizes.
  fuse::ir::TensorMap small = exe.run_host({{"a", ramp(7, 1.0f)}, {"b", ramp(7, 2.0f)}});
  check_result(small.at("y"), ramp(7, 1.0f), ramp(7, 2.0f), 0.5f);
}

TEST_CASE("GPU: a bundle written and read back runs", "[cuda][gpu]") {
  if (!have_gpu()) return;
  std::filesystem::path dir = std::filesystem::path(FUSE_BINARY_DIR) / "tests" / "bundles" / "gpu";
  fuse::runtime::write_bundle(dir.string(), fuse_test::vadd_scale_program(3.0f));
  CudaExecutable exe(fuse::runtime::read_bundle(dir.string()));
  HostArray a = ramp(4099, 1.0f), b = ramp(4099, -1.5f);
  check_result(exe.run_host({{"a", a}, {"b", b}}).at("y"), a, b, 3.0f);
}

TEST_CASE("GPU: the driver's errors reach the user", "[cuda][gpu]") {
  if (!have_gpu()) return;
  fuse::runtime::CudaProgram p = fuse_test::vadd_scale_program(1.0f);
  p.ptx = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry vadd_f32() { bogus; }\n";
  try {
    CudaExecutable exe(p);
    FAIL("invalid PTX was loaded");
  } catch (const fuse::ir::Error& e) {
    CHECK_THAT(e.message(), Contains("cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX"));
    CHECK_THAT(e.message(), Contains("JIT log:"));
  }
  CHECK_THROWS_WITH(DeviceBuffer::empty(fuse::ir::DType::F32, {int64_t{1} << 48}),
                    Contains("cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY"));
}
