// The driver (frontends/compile.h) stage by stage, for both targets, without a GPU: the CPU
// stages down to a JIT-loaded Executable checked against the interpreter; the CUDA stages down
// to PTX that ptxas accepts, and loading onto a device through the fake driver
// (tests/fake_cuda/), which records launches instead of running them.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "frontends/compile.h"
#include "ir/rounding_model.h"
#include "tests/examples.h"
#include "tests/fake_cuda/fake_cuda.h"
#include "tests/ptxas.h"
#include "tests/random_graph.h"

using namespace fuse;
using Catch::Matchers::Contains;

namespace {

/// The fake driver's settings hook, from the library the runtime loads.
decltype(&fake_cuda_set) fake_set() {
  static decltype(&fake_cuda_set) set = [] {
    void* lib = dlopen(FUSE_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
    return lib ? reinterpret_cast<decltype(&fake_cuda_set)>(dlsym(lib, "fake_cuda_set")) : nullptr;
  }();
  return set;
}

// Every test in this file that loads the CUDA driver gets the fake one, with two GPUs (the
// device count is read once, when the driver is loaded).
const bool kFakeDriver = [] {
  if (setenv("FUSE_LIBCUDA", FUSE_FAKE_CUDA, 1) != 0 || !fake_set()) return false;
  fake_set()("devices", 2);
  return true;
}();

ir::Graph example(const std::string& name) {
  return testing::compile_example(std::filesystem::path(FUSE_SOURCE_DIR) / "examples" / (name + ".expr"));
}

}  // namespace

TEST_CASE("Target::cpu reads a CPU description and Target::cuda names a device and an sm", "[driver][target]") {
  Target host = Target::host();
  CHECK(host.kind == TargetKind::Cpu);
  CHECK(host.cores >= 1);
  Target same = Target::cpu();
  CHECK(same.vector_bits == host.vector_bits);
  CHECK(same.l2_bytes == host.l2_bytes);

  Target xeon = Target::cpu("avx2,l1=48K,l2=2M,l3=480M,cores=2");
  CHECK(xeon.kind == TargetKind::Cpu);
  CHECK(xeon.vector_bits == 256);
  CHECK(xeon.l1_bytes == 48 << 10);
  CHECK(xeon.l2_bytes == 2 << 20);
  CHECK(xeon.l3_bytes == int64_t{480} << 20);
  CHECK(xeon.cores == 2);
  CHECK(Target::cpu("vector=128").vector_bits == 128);
  CHECK(Target::cpu("stream=64K").streaming_bytes == 64 << 10);
  CHECK(Target::cpu("stream=64K").result_streaming_bytes == 64 << 10);  // stream= sets both
  CHECK(Target::cpu("").streaming_bytes == int64_t{32} << 20);
  CHECK(Target::cpu("").result_streaming_bytes == int64_t{8} << 20);
  CHECK(Target::cpu("stream_results=1M").result_streaming_bytes == 1 << 20);
  CHECK(Target::cpu("stream_results=1M").streaming_bytes == int64_t{32} << 20);
  CHECK_THROWS_WITH(Target::cpu("avx3"), Contains("CPU description: 'avx3' is not a property"));
  CHECK_THROWS_WITH(Target::cpu("l2=lots"), Contains("needs a positive size such as 48K"));

  Target gpu = Target::cuda(1, 86);
  CHECK(gpu.kind == TargetKind::Cuda);
  CHECK(gpu.device == 1);
  CHECK(gpu.sm == 86);
  CHECK(Target::cuda().device == 0);
  CHECK(Target::cuda().sm == 0);  // left to the driver
}

TEST_CASE("each target lists its stages in the order they are made", "[driver]") {
  CHECK(stages(TargetKind::Cpu) == std::vector<Stage>{Stage::Graph, Stage::Program, Stage::Mlir, Stage::Llvm,
                                                      Stage::Asm, Stage::Object, Stage::Plan});
  CHECK(stages(TargetKind::Cuda) ==
        std::vector<Stage>{Stage::Graph, Stage::Program, Stage::Mlir, Stage::Llvm, Stage::Ptx, Stage::Plan});
  std::vector<std::string> names;
  for (Stage s : stages(TargetKind::Cpu)) names.emplace_back(stage_name(s));
  CHECK(names == std::vector<std::string>{"graph", "fused", "mlir", "llvm", "asm", "obj", "plan"});
  CHECK(stage_name(Stage::Ptx) == "ptx");
  CHECK(has_stage(TargetKind::Cuda, Stage::Ptx));
  CHECK_FALSE(has_stage(TargetKind::Cpu, Stage::Ptx));
  CHECK_FALSE(has_stage(TargetKind::Cuda, Stage::Object));
}

TEST_CASE("every CPU stage of the driver: graph to a JIT-loaded executable", "[driver][cpu]") {
  ir::Graph g = example("softmax");
  Compilation c = run_passes(g, Target::cpu("avx2"));
  CHECK(c.target.vector_bits == 256);
  CHECK(c.options.pipeline.target.vector_bits == 256);
  REQUIRE(c.result.program.kernels.size() == 1);
  CHECK(c.result.program.kernels[0].schedule.target == TargetKind::Cpu);
  CHECK(c.result.program.kernels[0].schedule.cpu.vector_width == 8);  // the described CPU's, not the host's

  CHECK_THAT(emit(c, Stage::Graph), Contains("input \"x\""));
  CHECK_THAT(emit(c, Stage::Program), Contains("kernel k0_rowwise rowwise over [N, M]"));
  CHECK_THAT(emit(c, Stage::Mlir), Contains("func.func @k0_rowwise"));
  CHECK_THAT(emit(c, Stage::Llvm), Contains("define void @k0_rowwise"));
  CHECK_THAT(emit(c, Stage::Asm), Contains("k0_rowwise:"));
  CHECK(emit(c, Stage::Object).substr(0, 4) == "\x7f" "ELF");
  CHECK_THAT(emit(c, Stage::Plan), Contains("\"kind\": \"rowwise\""));

  runtime::Executable exe = load_cpu(c);
  ir::TensorMap inputs = testing::random_inputs(g, {{"N", 5}, {"M", 33}}, 7, /*special_values=*/false);
  CHECK(testing::compare_outputs(ir::interpret_with_bounds(g, inputs), exe.run(inputs)) == "");
}

TEST_CASE("every CUDA stage of the driver without a GPU: PTX that ptxas accepts and a bundle", "[driver][cuda]") {
  ir::Graph g = example("softmax");
  Compilation c = run_passes(g, Target::cuda(0, 80));
  CHECK(c.target.sm == 80);
  REQUIRE(c.result.program.kernels.size() == 1);
  CHECK(c.result.program.kernels[0].schedule.target == TargetKind::Cuda);

  CHECK_THAT(emit(c, Stage::Graph), Contains("input \"x\""));
  CHECK_THAT(emit(c, Stage::Program), Contains("target=cuda"));
  CHECK_THAT(emit(c, Stage::Mlir), Contains("gpu.module @fuse_kernels"));
  CHECK_THAT(emit(c, Stage::Llvm), Contains("define void @k0_rowwise(ptr"));
  std::string ptx = emit(c, Stage::Ptx);
  CHECK_THAT(ptx, Contains(".target sm_80"));
  CHECK_THAT(ptx, Contains(".entry k0_rowwise"));
  CHECK(testing::ptxas_errors(ptx, "sm_80") == "");
  CHECK_THAT(emit(c, Stage::Plan), Contains("cuda plan for sm_80"));

  runtime::CudaProgram bundle = cuda_program(c);
  CHECK(bundle.ptx == ptx);
  CHECK(bundle.plan.sm == "sm_80");
  CHECK_NOTHROW(runtime::validate(bundle, "softmax"));
  runtime::CudaProgram direct = compile_cuda_program(g, Target::cuda(0, 90));
  CHECK(direct.plan.sm == "sm_90");
  CHECK(testing::ptxas_errors(direct.ptx, "sm_90") == "");
}

TEST_CASE("the options reach every stage", "[driver]") {
  CompileOptions options;
  options.pipeline.simplify.fast_math = true;
  options.pipeline.fusion.enabled = false;
  ir::Graph hypot = example("hypot");
  CHECK_THAT(emit(run_passes(hypot, Target::host(), options), Stage::Llvm), Contains("fmul fast"));
  CHECK_THAT(emit(run_passes(hypot, Target::host()), Stage::Llvm), !Contains(" fast "));
  ir::Graph softmax = example("softmax");
  for (Target target : {Target::host(), Target::cuda(0, 80)}) {
    INFO(ir::target_kind_name(target.kind));
    Compilation c = run_passes(softmax, target, options);
    CHECK(c.result.program.kernels.size() > 1);
    CHECK(c.options.pipeline.simplify.fast_math);
    CHECK_FALSE(c.options.pipeline.fusion.enabled);
    CHECK(c.options.pipeline.target.kind == target.kind);
  }
}

TEST_CASE("compile schedules for its Target argument or else for the options' target", "[driver][cpu]") {
  Graph g;
  Tensor a = g.input("a", DType::F32, {sym("M"), sym("K")});
  Tensor b = g.input("b", DType::F32, {sym("K"), sym("N")});
  g.output("c", matmul(a, b));
  auto width = [](const runtime::Executable& exe) { return exe.program().kernels.at(0).schedule.cpu.vector_width; };
  CompileOptions avx2;
  avx2.pipeline.target = Target::cpu("avx2");
  CHECK(width(compile(g, avx2)) == 8);
  CHECK(width(compile(g, Target::cpu("avx2"))) == 8);
  CHECK(width(compile(g, Target::cpu("avx512"), avx2)) == 16);  // the argument replaces the options' target
}

TEST_CASE("a stage or an executable the target does not have is an error", "[driver][errors]") {
  ir::Graph g = example("hypot");
  Compilation cpu = run_passes(g, Target::host());
  Compilation cuda = run_passes(g, Target::cuda(0, 80));
  CHECK_THROWS_WITH(emit(cpu, Stage::Ptx), Contains("a cpu target has no ptx stage"));
  CHECK_THROWS_WITH(emit(cuda, Stage::Asm), Contains("a cuda target has no asm stage"));
  CHECK_THROWS_WITH(emit(cuda, Stage::Object), Contains("a cuda target has no obj stage"));
  CHECK_THROWS_WITH(load_cpu(cuda), Contains("load_cpu needs a cpu target, not cuda"));
  CHECK_THROWS_WITH(cuda_program(cpu), Contains("cuda_program needs a cuda target, not cpu"));
  CHECK_THROWS_WITH(compile(g, Target::cuda()), Contains("compile for a GPU with fuse::compile_cuda"));
  CHECK_THROWS_WITH(compile_cuda(g, Target::host()), Contains("needs a CUDA target"));
  CHECK_THROWS_WITH(compile_cuda_program(g, Target::host()), Contains("needs a CUDA target"));
}

TEST_CASE("a CUDA target without an sm takes its device's up to 90", "[driver][cuda]") {
  REQUIRE(kFakeDriver);
  ir::Graph g = example("hypot");
  for (auto [cc, sm] : {std::pair{75, 75}, {86, 86}, {90, 90}, {120, 90}}) {
    INFO("compute capability " << cc);
    fake_set()("cc", cc);
    CHECK(cuda_sm_for_device(0) == sm);
    CHECK(run_passes(g, Target::cuda()).target.sm == sm);
    CHECK(run_passes(g, Target::cuda(0, 80)).target.sm == 80);  // given: kept
  }
  fake_set()("cc", 80);
  CHECK_THROWS_WITH(run_passes(g, Target::cuda(7)), Contains("no CUDA device cuda:7"));
}

TEST_CASE("compile_cuda loads onto the device its target names", "[driver][cuda]") {
  REQUIRE(kFakeDriver);
  fake_set()("cc", 86);
  ir::Graph g = example("hypot");
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda(1));
  CHECK(exe->device() == 1);
  CHECK(exe->program().plan.sm == "sm_86");
  CHECK_THAT(exe->program().ptx, Contains(".entry k0_elementwise"));
  ir::TensorMap inputs = testing::random_inputs(g, {{"N", 8}}, 1, /*special_values=*/false);
  ir::TensorMap outputs = exe->run_host(inputs);  // the fake launches nothing it does not know
  CHECK(outputs.at("r").shape == ir::ConcreteShape{8});
  std::unique_ptr<runtime::CudaExecutable> own = load_cuda(run_passes(g, Target::cuda(0, 80)));
  CHECK(own->device() == 0);
  CHECK(own->program().plan.sm == "sm_80");
  fake_set()("cc", 80);
}
